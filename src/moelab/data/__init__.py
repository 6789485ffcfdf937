"""The TinyStories data pipeline: sources, a trained byte-level BPE, token caches, batches.

    prepared = prepare_data(config.data, config.tokenizer_vocab_size)
    batches = TrainBatches(prepared.train.tokens, seq_len, batch_size, seed, rank, world_size)
    x_BT, y_BT = batches.next()
    windows_NW = validation_windows(prepared.valid.tokens, seq_len, num_windows)
    bpb = nats_to_bits_per_byte(loss, prepared.valid.bytes_per_token)

See docs/data.md.
"""

from moelab.data.batches import TrainBatches, validation_windows
from moelab.data.cache import TokenSplit
from moelab.data.prepare import PreparedData, cache_root, prepare_data
from moelab.data.story_text import EOT_TEXT
from moelab.data.tokenizer import MIN_VOCAB_SIZE, Tokenizer
from moelab.data.units import nats_to_bits_per_byte

__all__ = [
    "EOT_TEXT",
    "MIN_VOCAB_SIZE",
    "PreparedData",
    "TokenSplit",
    "Tokenizer",
    "TrainBatches",
    "cache_root",
    "nats_to_bits_per_byte",
    "prepare_data",
    "validation_windows",
]
