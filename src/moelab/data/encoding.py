"""Fast corpus encoding with a word cache.

Hugging Face ``tokenizers`` spends most of its time in the byte-level pre-tokenizer regex and
in building ``Encoding`` objects (about 1-2 MB/s per core here). A story corpus has few distinct
words, so we split stories into words ourselves with the same GPT-2 pattern written for
Python's ``re`` (several times faster), encode each distinct word once with the real tokenizer,
and assemble the stream with numpy. Byte-level BPE never merges across pre-tokenizer words, so
this gives the tokens ``Tokenizer.encode`` gives wherever the two regex engines agree on what
is a letter, digit or space: on all of TinyStories and the tests' Unicode samples.

Safety: each word is encoded by the real tokenizer, so even where the engines disagree (some
exotic code points) the stream still decodes back to the exact text; a batch whose words do
not cover its stories exactly falls back to plain ``encode_batch``, and so does one with a
literal ``<|endoftext|>`` in a story (the tokenizer turns that into the separator token before
any splitting).

Parallelism: ``encode_batches`` hands batches to one worker process per core (forked after the
first batch, so each inherits its word cache) and yields results in order, keeping only a few
batches in flight.
"""

from __future__ import annotations

import itertools
import multiprocessing
import os
import re
import sys
from collections import deque
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Optional

import numpy as np

from moelab.data.story_text import EOT_TEXT
from moelab.data.tokenizer import Tokenizer

# The GPT-2 / ByteLevel pattern
#     's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
# in stdlib ``re``: [^\W\d_] stands for letters, and "_" (a \w that is neither) joins the
# punctuation class. Letters come first for speed; no letter run can start with an apostrophe,
# so the leftmost-alternative result is unchanged.
WORD_PATTERN = re.compile(
    r""" ?[^\W\d_]+|'(?:[stmd]|re|ve|ll)| ?\d+| ?(?:[^\s\w]|_)+|\s+(?!\S)|\s+"""
)
# The empty string never matches the pattern, so it can stand for the separator in word lists.
SEPARATOR_WORD = ""
# Forget the cache past this many distinct words (bounds memory on unusual corpora).
MAX_CACHED_WORDS = 2_000_000


class WordCacheEncoder:
    """Encodes batches of stories into one token stream, each story followed by <|endoftext|>."""

    def __init__(self, tokenizer: Tokenizer, dtype: np.dtype):
        self.tokenizer = tokenizer
        self.dtype = np.dtype(dtype)
        self._reset()

    def _reset(self) -> None:
        self._word_index = {SEPARATOR_WORD: 0}
        self._word_tokens = [np.array([self.tokenizer.eot_id], dtype=self.dtype)]
        self._flat: Optional[np.ndarray] = None  # all cached token runs concatenated, rebuilt after new words

    def encode_stories(self, stories: list[str]) -> np.ndarray:
        """The token stream of ``stories`` (1-D array of ``dtype``)."""
        if not stories:
            return np.empty(0, dtype=self.dtype)
        if any(EOT_TEXT in story for story in stories):  # the tokenizer matches it before splitting
            return self._encode_directly(stories)
        words = []
        for story in stories:
            words += WORD_PATTERN.findall(story)
            words.append(SEPARATOR_WORD)
        if sum(map(len, words)) != sum(map(len, stories)):  # the split lost characters
            return self._encode_directly(stories)
        return self._assemble(self._word_ids(words))

    def _word_ids(self, words: list[str]) -> np.ndarray:
        """Cache index of every word, encoding the words not seen before."""
        word_ids = np.fromiter(map(self._word_index.get, words, itertools.repeat(-1)),
                               np.int64, len(words))
        unknown = word_ids < 0
        if unknown.any():
            new_words = list(set(itertools.compress(words, unknown)))
            cached = len(self._word_index)
            if cached > 1 and cached + len(new_words) > MAX_CACHED_WORDS:
                self._reset()  # start afresh (once: a fresh cache takes any batch)
                return self._word_ids(words)
            # One call per word: words are short, and the tokenizer's thread pool would spend
            # more CPU than it saves (measured: 4x more).
            for word in new_words:
                self._word_index[word] = len(self._word_tokens)
                self._word_tokens.append(np.array(self.tokenizer.encode(word), dtype=self.dtype))
            self._flat = None
            word_ids[unknown] = [self._word_index[w] for w in itertools.compress(words, unknown)]
        return word_ids

    def _assemble(self, word_ids: np.ndarray) -> np.ndarray:
        """Concatenate the cached token runs of ``word_ids`` with vectorised gathers."""
        if self._flat is None:
            lengths = np.fromiter(map(len, self._word_tokens), np.int64, len(self._word_tokens))
            self._lengths = lengths
            self._starts = np.cumsum(lengths) - lengths
            self._flat = np.concatenate(self._word_tokens)
        lengths = self._lengths[word_ids]
        out_ends = np.cumsum(lengths)
        # Position j of the output copies flat[start of its word + offset within the word].
        shift = np.repeat(self._starts[word_ids] - (out_ends - lengths), lengths)
        return self._flat[np.arange(int(out_ends[-1])) + shift]

    def _encode_directly(self, stories: list[str]) -> np.ndarray:
        eot = [self.tokenizer.eot_id]
        encoded = self.tokenizer.encode_batch(stories)
        return np.concatenate([np.array(ids + eot, dtype=self.dtype) for ids in encoded])


# --------------------------------------------------------------------------------------------
# Worker processes
# --------------------------------------------------------------------------------------------

_worker_encoder: Optional[WordCacheEncoder] = None
# Batches in flight per worker: enough to keep every core busy, few enough to bound memory.
BATCHES_IN_FLIGHT_PER_WORKER = 2


def available_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def encode_batches(tokenizer: Tokenizer, batches: Iterable[list[str]], dtype: np.dtype,
                   workers: Optional[int] = None) -> Iterator[tuple[list[str], np.ndarray]]:
    """Yield ``(stories, tokens)`` for each batch, in order, encoding on ``workers`` processes.

    The first batch is encoded here, which fills the word cache with most of the corpus'
    vocabulary; the workers are forked after it, so each starts with that cache. A single core
    or a platform without ``fork`` encodes everything in this process.
    """
    workers = available_cores() if workers is None else workers
    encoder = WordCacheEncoder(tokenizer, dtype)
    batches = iter(batches)
    for stories in itertools.islice(batches, 1):
        yield stories, encoder.encode_stories(stories)
    head = list(itertools.islice(batches, 1))
    batches = itertools.chain(head, batches)
    if not head or workers < 2 or not _can_fork():
        for stories in batches:
            yield stories, encoder.encode_stories(stories)
        return
    with _serial_tokenizers_in_children():  # Pool forks all its workers right here
        pool = multiprocessing.get_context("fork").Pool(
            workers, initializer=_start_worker, initargs=(encoder,)
        )
    try:
        pending: deque = deque()
        for stories in batches:
            pending.append((stories, pool.apply_async(_encode_in_worker, (stories,))))
            if len(pending) >= BATCHES_IN_FLIGHT_PER_WORKER * workers:
                done_stories, result = pending.popleft()
                yield done_stories, result.get()
        while pending:
            done_stories, result = pending.popleft()
            yield done_stories, result.get()
        pool.close()
    finally:
        pool.terminate()
        pool.join()


def _can_fork() -> bool:
    # fork is cheap and needs no re-import of the caller's script; other start methods would
    # re-run an unguarded user script in every worker. macOS forks badly with threads.
    return sys.platform.startswith("linux") and "fork" in multiprocessing.get_all_start_methods()


@contextmanager
def _serial_tokenizers_in_children():
    """Fork with TOKENIZERS_PARALLELISM=false so the children never touch the parent's thread
    pool (which does not exist in them) and tokenizers prints no fork warning; the parent's
    own setting is restored at once."""
    name = "TOKENIZERS_PARALLELISM"
    saved = os.environ.get(name)
    os.environ[name] = "false"
    try:
        yield
    finally:
        if saved is None:
            del os.environ[name]
        else:
            os.environ[name] = saved


def _start_worker(encoder: WordCacheEncoder) -> None:
    # Under fork the encoder (and its warm cache) is inherited, not pickled.
    global _worker_encoder
    _worker_encoder = encoder


def _encode_in_worker(stories: list[str]) -> np.ndarray:
    assert _worker_encoder is not None, "the pool's initializer sets it"
    return _worker_encoder.encode_stories(stories)
