"""Building a token cache: the vocabulary the data can support, checked before the tokenizer
trains, and one builder at a time, which alone removes a killed build's temporary files.

References: the vocabulary bound counted by hand on a corpus small enough to list its words;
a tokenizer trained directly with Hugging Face ``tokenizers`` never exceeds the bound.
"""

from __future__ import annotations

import lzma
import random
import string
import threading
from pathlib import Path

import numpy as np
from tokenizers import Tokenizer as HFTokenizer
from tokenizers import decoders, models, pre_tokenizers, trainers

from moelab.cli import main
from moelab.config import DataConfig
from moelab.data import prepare_data
from moelab.data import cache as cache_module
from moelab.data.cache import cache_folder_name
from moelab.data.encoding import WordCacheEncoder
from moelab.data.sources import resolve_source
from moelab.data.story_text import split_stories
from moelab.data.text_sources import sample_path
from moelab.data.tokenizer import MAX_PRE_TOKEN_BYTES, supported_vocab_bound
from moelab.fileio import WriterLock

SEPARATOR = "\n<|endoftext|>\n"
CAT_STORIES = [f"Story {i} about a cat." for i in range(40)]
# Its words, as GPT-2's pre-tokenizer splits them: "Story", " 0" .. " 39", " about", " a",
# " cat", ".". A word of n bytes allows n - 1 merges: 4 + (10 x 1 + 30 x 2) + 5 + 1 + 3 + 0
# = 83, on top of 256 bytes and <|endoftext|>.
CAT_BOUND = 257 + 83


def _folder_source(folder: Path, stories: list[str]) -> Path:
    folder.mkdir()
    (folder / "train.txt").write_text("".join(s + SEPARATOR for s in stories))
    (folder / "valid.txt").write_text("A dog ran." + SEPARATOR)
    return folder


def _reached_by_bpe(stories: list[str]) -> int:
    """The vocabulary Hugging Face's BPE trainer reaches when asked for far more."""
    hf = HFTokenizer(models.BPE())
    hf.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    hf.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=100_000, special_tokens=["<|endoftext|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    hf.train_from_iterator([stories], trainer=trainer)
    return hf.get_vocab_size()


def test_the_bound_is_the_hand_count_and_bpe_stays_under_it():
    assert supported_vocab_bound([CAT_STORIES], enough=10**6) == CAT_BOUND
    assert _reached_by_bpe(CAT_STORIES) <= CAT_BOUND


def test_the_bound_holds_on_real_stories():
    stories = split_stories(lzma.decompress(sample_path("valid").read_bytes()).decode())[:60]
    assert _reached_by_bpe(stories) <= supported_vocab_bound([stories], enough=10**6)


def test_counting_stops_once_the_request_is_reachable():
    def batches():
        yield CAT_STORIES
        raise AssertionError("read past the batch that already supports the request")

    assert supported_vocab_bound(batches(), enough=300) >= 300


def test_a_vocab_beyond_the_data_is_refused_before_training(tmp_path, capsys, monkeypatch):
    source = _folder_source(tmp_path / "cats", CAT_STORIES)

    def no_training(*args, **kwargs):
        raise AssertionError("the tokenizer trained")

    monkeypatch.setattr(cache_module, "train_tokenizer", no_training)
    capsys.readouterr()
    assert main(["prepare-data", "--source", str(source), "--out", str(tmp_path / "c"),
                 "--vocab-size", str(CAT_BOUND + 1), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert (f"vocab_size={CAT_BOUND + 1} is too large for data source 'cats'" in err
            and f"allowed 257..{CAT_BOUND}" in err)
    assert not (tmp_path / "c").exists()  # nothing written


def test_a_killed_builds_temporaries_go_on_the_next_build(tmp_path):
    source = _folder_source(tmp_path / "cats", CAT_STORIES)
    config = DataConfig(source=str(source), cache_dir=str(tmp_path / "cache"))
    cache_dir = tmp_path / "cache" / cache_folder_name(resolve_source(config), 300)
    cache_dir.mkdir(parents=True)
    stale = cache_dir / ".train.bin.k1ll3d.tmp"  # what atomic_write leaves when killed
    stale.write_bytes(b"half a token file")
    prepared = prepare_data(config, 300, progress=False)
    assert prepared.cache_dir == cache_dir and not stale.exists()
    assert sorted(p.name for p in cache_dir.iterdir()) == [
        ".moelab.lock", "manifest.json", "tokenizer.json", "train.bin", "valid.bin"]


def test_a_second_builder_waits_and_leaves_the_first_ones_files_alone(tmp_path, monkeypatch):
    """Two studies starting on one fresh cache: the second waits for the first's build."""
    source = _folder_source(tmp_path / "cats", CAT_STORIES)
    config = DataConfig(source=str(source), cache_dir=str(tmp_path / "cache"))
    source_obj = resolve_source(config)
    cache_dir = tmp_path / "cache" / cache_folder_name(source_obj, 300)
    first_builder = WriterLock(cache_dir)  # holds the cache, mid-build
    in_progress = cache_dir / ".train.bin.wr1t1ng.tmp"
    in_progress.write_bytes(b"being written")

    real_lock, real_build = cache_module.writer_lock, cache_module._build
    asked_for_the_lock, second_builds = threading.Event(), []

    def noting_lock(folder, wait=False):
        asked_for_the_lock.set()
        return real_lock(folder, wait=wait)

    monkeypatch.setattr(cache_module, "writer_lock", noting_lock)
    monkeypatch.setattr(cache_module, "_build",
                        lambda *args, **kwargs: second_builds.append(args))
    second: list = []
    thread = threading.Thread(target=lambda: second.append(prepare_data(config, 300,
                                                                        progress=False)))
    thread.start()
    try:
        assert asked_for_the_lock.wait(timeout=60)
        train, valid = source_obj.load()
        real_build(source_obj, train, valid, 300, cache_dir, progress=False)  # the first ends
        assert in_progress.exists() and not second_builds and thread.is_alive()
        in_progress.unlink()
    finally:
        first_builder.release()  # never leave the second one waiting
        thread.join(timeout=60)
    assert not second_builds and second[0].cache_dir == cache_dir
    assert second[0].train.num_tokens > 0


# One unbroken 100 KB "word" (a URL, base64, minified code): the GPT-2 pattern keeps it whole,
# and the BPE trainer's cost grows with the square of a word's length, so the pipeline cuts
# every pre-token into pieces of at most MAX_PRE_TOKEN_BYTES bytes before BPE sees it.
LONG_WORD_BYTES = 100_000


def test_an_unbroken_100kb_word_reaches_bpe_in_short_pieces(tmp_path):
    rng = random.Random(0)
    word = "".join(rng.choice(string.ascii_lowercase) for _ in range(LONG_WORD_BYTES))
    source = _folder_source(tmp_path / "long", CAT_STORIES + [f"see {word} there"])
    prepared = prepare_data(DataConfig(source=str(source), cache_dir=str(tmp_path / "c")), 300,
                            progress=False)
    # The pre-tokenizer stored with the tokenizer is what both the trainer and the encoder ran.
    stored = HFTokenizer.from_file(str(prepared.tokenizer.path))
    pieces = [piece for piece, _ in stored.pre_tokenizer.pre_tokenize_str(word)]
    assert "".join(pieces) == word
    assert max(map(len, pieces)) == MAX_PRE_TOKEN_BYTES
    assert len(pieces) == -(-LONG_WORD_BYTES // MAX_PRE_TOKEN_BYTES)
    story = f"see {word} there"
    assert prepared.tokenizer.decode(prepared.tokenizer.encode(story)) == story


def test_the_vocabulary_bound_counts_the_pieces_bpe_sees():
    # "abab..." of 100,000 bytes in pieces of 256: 390 equal pieces and one of 160 bytes, two
    # distinct words allowing 255 + 159 merges (a whole word would allow 99,999).
    pieces = LONG_WORD_BYTES // MAX_PRE_TOKEN_BYTES
    last = LONG_WORD_BYTES - pieces * MAX_PRE_TOKEN_BYTES
    assert MAX_PRE_TOKEN_BYTES == 256 and (pieces, last) == (390, 160)
    assert supported_vocab_bound([["ab" * (LONG_WORD_BYTES // 2)]], enough=10**6) == 257 + 255 + 159


def test_a_piece_boundary_inside_a_character_still_round_trips(tmp_path):
    # "€" is 3 bytes, so pieces of 256 bytes cut characters in two; byte-level BPE decodes the
    # bytes, not the pieces, so the text comes back exactly, and the word-cache encoder agrees.
    story = "price " + "€" * 1000 + " paid"
    source = _folder_source(tmp_path / "cats", CAT_STORIES)
    tokenizer = prepare_data(DataConfig(source=str(source), cache_dir=str(tmp_path / "c")), 300,
                             progress=False).tokenizer
    assert tokenizer.decode(tokenizer.encode(story)) == story
    encoder = WordCacheEncoder(tokenizer, np.dtype(np.uint16))
    assert encoder.encode_stories([story]).tolist() == tokenizer.encode(story) + [tokenizer.eot_id]
