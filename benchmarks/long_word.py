"""Tokenizer training on a corpus with one long unbroken word, with and without cutting words.

    .venv/bin/python benchmarks/long_word.py [--lengths 12500 25000 50000 100000]

The GPT-2 pre-tokenizer keeps a run without spaces or a change of character class (a URL,
base64, minified code) as one word, and the BPE trainer's cost grows with the square of a
word's length. The pipeline cuts words into pieces of ``MAX_PRE_TOKEN_BYTES``
(``moelab.data.tokenizer.byte_level_pre_tokenizer``); "uncut" trains with the plain byte-level
pre-tokenizer the pipeline used before. Each case trains a 300-token vocabulary on 200 short
stories plus one story holding the word, in one process, one run each (the machine is shared
and noisy: read the growth with length, not the last digit). Raw results go to
benchmarks/results/long_word.json.
"""

from __future__ import annotations

import argparse
import base64
import platform
import random
import tempfile
import time
from pathlib import Path

from tokenizers import pre_tokenizers

from common import add_output_arguments, machine, parse_checked

from moelab.data import tokenizer as tokenizer_module
from moelab.data.tokenizer import MAX_PRE_TOKEN_BYTES, train_tokenizer
from moelab.fileio import atomic_write_json

STORIES = ["Once upon a time there was a little cat named Tom who liked to play. " * 5] * 200
VOCAB = 300


def long_word(shape: str, length: int) -> str:
    """An unbroken word: a repeated pair (minified code, padding), or base64 of random bytes."""
    if shape == "repeated pair":
        return ("ab" * length)[:length]
    data = random.Random(0).randbytes(length)
    return base64.b64encode(data).decode()[:length]


def training_seconds(word: str, cut: bool) -> float:
    original = tokenizer_module.byte_level_pre_tokenizer
    if not cut:
        tokenizer_module.byte_level_pre_tokenizer = lambda: pre_tokenizers.ByteLevel(
            add_prefix_space=False)
    try:
        with tempfile.TemporaryDirectory() as tmp:
            start = time.perf_counter()
            train_tokenizer([STORIES + [f"see {word} there"]], VOCAB, Path(tmp) / "t.json", "bench")
            return time.perf_counter() - start
    finally:
        tokenizer_module.byte_level_pre_tokenizer = original


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--lengths", type=int, nargs="+", default=[12_500, 25_000, 50_000, 100_000])
    add_output_arguments(parser, "long_word")
    args = parse_checked(parser)
    lengths = [2_000] if args.smoke else args.lengths
    rows = []
    for shape in ("repeated pair", "base64"):
        for length in lengths:
            word = long_word(shape, length)
            row = {"shape": shape, "bytes": length,
                   "uncut_s": round(training_seconds(word, cut=False), 3),
                   "cut_s": round(training_seconds(word, cut=True), 3)}
            print(row, flush=True)
            rows.append(row)
    atomic_write_json(args.out, {"machine": machine() if not args.smoke else
                                 platform.processor() or platform.machine(),
                                "max_pre_token_bytes": MAX_PRE_TOKEN_BYTES, "vocab_size": VOCAB,
                                "stories": len(STORIES) + 1, "rows": rows})


if __name__ == "__main__":
    main()
