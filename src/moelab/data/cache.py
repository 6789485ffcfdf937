"""The token cache: one folder per (source fingerprint, vocab size, tokenizer recipe).

A cache folder holds ``tokenizer.json``, ``train.bin`` and ``valid.bin`` (raw little-endian
uint16, or uint32 when the vocabulary needs it: every story's tokens followed by
``<|endoftext|>``) and ``manifest.json``, written last. Every file is written atomically, so a
folder without a manifest is an interrupted build (built again), and a folder whose manifest
does not match its files is corrupt (a ``MoelabError``, never used). Token files are opened as
read-only memmaps, so training never holds a second copy in RAM. A build holds the folder's
writer lock (``.moelab.lock``): a second process needing the same cache waits, then uses it.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn, Optional

import numpy as np
from tqdm import tqdm

from moelab.codec import from_json, to_json
from moelab.data.encoding import encode_batches
from moelab.data.source_record import Source, StorySplit
from moelab.data.story_text import split_bytes
from moelab.data.tokenizer import (
    TOKENIZER_RECIPE_VERSION, Tokenizer, check_data_supports_vocab, file_sha256, train_tokenizer,
)
from moelab.errors import MoelabError, short_repr
from moelab.fileio import (
    atomic_write, atomic_write_json, read_json, remove_stale_temporaries, writer_lock,
)

MANIFEST = "manifest.json"
TOKENIZER_FILE = "tokenizer.json"
SPLITS = ("train", "valid")
MANIFEST_VERSION = 1


@dataclass
class TokenSplit:
    """One split's token stream (a read-only memmap) and what it was made from."""

    name: str
    tokens: np.ndarray
    """1-D memmap, uint16 or uint32: every story's tokens followed by <|endoftext|>."""
    stories: int
    bytes: int
    """UTF-8 bytes of the split in the TinyStories layout (story + separator line each)."""

    @property
    def num_tokens(self) -> int:
        return int(self.tokens.shape[0])

    @property
    def bytes_per_token(self) -> float:
        """Bytes per token over the whole split; turns nats/token into bits/byte."""
        return self.bytes / self.num_tokens


@dataclass
class SplitEntry:
    """One split's token file as manifest.json records it."""

    file: str
    stories: int
    bytes: int
    tokens: int
    file_bytes: int
    sha256: str

    def __post_init__(self) -> None:
        # Whole numbers even in a hand-edited manifest: a string would size the memmap.
        self.stories, self.bytes, self.tokens = int(self.stories), int(self.bytes), int(self.tokens)
        self.file, self.sha256 = str(self.file), str(self.sha256)


@dataclass
class CacheManifest:
    """manifest.json, written last: what the cache was built from and each split's file. Any
    key may be missing from a damaged manifest (None): ``load_cache`` names the one it needs."""

    manifest_version: Optional[int] = None
    source: Optional[str] = None
    source_fingerprint: Optional[str] = None
    tokenizer_recipe_version: Optional[int] = None
    vocab_size: Optional[int] = None
    eot_id: Optional[int] = None
    tokenizer_sha256: Optional[str] = None
    dtype: Optional[str] = None
    splits: dict[str, Any] = field(default_factory=dict)
    """Split name -> its ``SplitEntry``, read as one when the split is opened (a damaged entry
    is named then)."""


def token_dtype(vocab_size: int) -> np.dtype:
    return np.dtype(np.uint16) if vocab_size <= 1 << 16 else np.dtype(np.uint32)


def cache_folder_name(source: Source, vocab_size: int) -> str:
    key = hashlib.sha256(
        f"{source.fingerprint}|{vocab_size}|{TOKENIZER_RECIPE_VERSION}".encode()
    ).hexdigest()
    return f"{source.label}-v{vocab_size}-{key[:16]}"


# --------------------------------------------------------------------------------------------
# Building
# --------------------------------------------------------------------------------------------


def build_cache(source: Source, vocab_size: int, cache_dir: Path, *, progress: bool) -> None:
    """Build the cache folder unless another process has: one builder at a time.

    Studies and runs started together may share a cache, so a builder holds the folder's
    writer lock and the others wait for it, then find its manifest. Only the lock holder
    removes the temporary files a killed build left: no other write can be in progress then.
    A vocabulary the data cannot reach is refused first, before anything is written.
    """
    train, valid = source.load()
    if not (cache_dir / TOKENIZER_FILE).exists():
        check_data_supports_vocab(train.read_batches(), vocab_size, source.label)
    with writer_lock(cache_dir, wait=True):
        if has_manifest(cache_dir):  # built while this process waited
            return
        remove_stale_temporaries(cache_dir)
        # Bars only on a terminal: in a log file their leftovers, which end in no newline,
        # would be glued to the next line (an error's, say).
        _build(source, train, valid, vocab_size, cache_dir,
               progress=progress and sys.stderr.isatty())


def _build(source: Source, train: StorySplit, valid: StorySplit, vocab_size: int,
           cache_dir: Path, *, progress: bool) -> None:
    """Train (or reuse) the tokenizer, encode both splits, write the manifest last."""
    tokenizer_path = cache_dir / TOKENIZER_FILE
    if tokenizer_path.exists():  # an interrupted build already trained it on the same inputs
        tokenizer = Tokenizer(tokenizer_path)
    else:
        tokenizer = train_tokenizer(
            train.read_batches(), vocab_size, tokenizer_path, source.label, progress=progress
        )
    dtype = token_dtype(tokenizer.vocab_size)
    split_entries = {
        split.name: encode_split(tokenizer, split, cache_dir / f"{split.name}.bin", dtype, progress)
        for split in (train, valid)
    }
    atomic_write_json(cache_dir / MANIFEST, to_json(CacheManifest(
        manifest_version=MANIFEST_VERSION, source=source.label,
        source_fingerprint=source.fingerprint, tokenizer_recipe_version=TOKENIZER_RECIPE_VERSION,
        vocab_size=tokenizer.vocab_size, eot_id=tokenizer.eot_id,
        tokenizer_sha256=tokenizer.sha256(), dtype=dtype.name, splits=split_entries)))


def encode_split(tokenizer: Tokenizer, split: StorySplit, path: Path, dtype: np.dtype,
                 progress: bool) -> SplitEntry:
    """Encode ``split`` batch by batch straight into ``path``; return its manifest entry."""
    counts = Counter(stories=0, bytes=0, tokens=0)
    digest = hashlib.sha256()

    def write(tmp: str) -> None:
        with open(tmp, "wb") as f, tqdm(desc=f"encode {split.name}", unit=" stories",
                                        total=split.num_stories, disable=not progress,
                                        leave=False) as bar:
            for stories, ids in encode_batches(tokenizer, split.read_batches(), dtype):
                data = ids.astype(dtype.newbyteorder("<"), copy=False).tobytes()
                f.write(data)
                digest.update(data)
                counts.update(stories=len(stories), bytes=split_bytes(stories), tokens=len(ids))
                bar.update(len(stories))
            f.flush()
            os.fsync(f.fileno())

    atomic_write(path, write)
    if counts["stories"] == 0:
        raise MoelabError(f"the {split.name} split of the data source has no stories")
    return SplitEntry(file=path.name, **counts, file_bytes=counts["tokens"] * dtype.itemsize,
                      sha256=digest.hexdigest())


# --------------------------------------------------------------------------------------------
# Loading and checking
# --------------------------------------------------------------------------------------------


def has_manifest(cache_dir: Path) -> bool:
    return (cache_dir / MANIFEST).is_file()


def load_cache(cache_dir: Path, source: Source, vocab_size: int
               ) -> tuple[Tokenizer, dict[str, TokenSplit], CacheManifest]:
    """Open a finished cache after checking every file against the manifest."""
    manifest_path = cache_dir / MANIFEST
    manifest = _read_manifest(manifest_path)
    expected = {
        "source_fingerprint": source.fingerprint,
        "tokenizer_recipe_version": TOKENIZER_RECIPE_VERSION,
        "vocab_size": vocab_size,
    }
    for key, value in expected.items():
        found = getattr(manifest, key)
        if found != value:
            _corrupt(manifest_path, f"{key} is {short_repr(found)}, expected {short_repr(value)}")
    tokenizer_path = cache_dir / TOKENIZER_FILE
    if not tokenizer_path.is_file():
        _corrupt(tokenizer_path, "the file is missing")
    if file_sha256(tokenizer_path) != manifest.tokenizer_sha256:
        _corrupt(tokenizer_path, "its sha256 does not match the manifest")
    tokenizer = Tokenizer(tokenizer_path)
    dtype = token_dtype(tokenizer.vocab_size)
    if manifest.dtype != dtype.name or manifest.eot_id != tokenizer.eot_id:
        _corrupt(manifest_path, "dtype or eot_id does not match the tokenizer")
    splits = {name: _open_split(cache_dir, name, manifest, dtype) for name in SPLITS}
    return tokenizer, splits, manifest


def _read_manifest(path: Path) -> CacheManifest:
    try:
        manifest = read_json(path)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        _corrupt(path, "it is not a readable JSON manifest")
    if not isinstance(manifest, dict) or not isinstance(manifest.get("splits"), dict):
        _corrupt(path, "it has no 'splits' table")
    return from_json(CacheManifest, manifest)


def _open_split(cache_dir: Path, name: str, manifest: CacheManifest,
                dtype: np.dtype) -> TokenSplit:
    raw_entry = manifest.splits.get(name)
    if not isinstance(raw_entry, dict):
        _corrupt(cache_dir / MANIFEST, f"split {short_repr(name)} is missing")
    try:
        # file_bytes follows from tokens and the dtype: a manifest without it still opens
        entry = from_json(SplitEntry, {"file_bytes": 0, **raw_entry})
    except (TypeError, ValueError):
        _corrupt(cache_dir / MANIFEST,
                 f"split {short_repr(name)} lacks file, tokens, stories, bytes or sha256")
    path, tokens = cache_dir / entry.file, entry.tokens
    if not path.is_file():
        _corrupt(path, "the file is missing")
    size = path.stat().st_size
    if size != tokens * dtype.itemsize:
        _corrupt(path, f"it has {size} bytes, the manifest says {tokens} {dtype.name} tokens "
                       f"({tokens * dtype.itemsize} bytes)")
    if tokens == 0:
        _corrupt(path, "the split has no tokens")
    if file_sha256(path) != entry.sha256:
        _corrupt(path, "its sha256 does not match the manifest")
    memmap = np.memmap(path, dtype=dtype.newbyteorder("<"), mode="r", shape=(tokens,))
    return TokenSplit(name=name, tokens=memmap, stories=entry.stories, bytes=entry.bytes)


def _corrupt(path: Path, problem: str) -> NoReturn:
    raise MoelabError(
        f"corrupt data cache {path}: {problem}; delete {path.parent} to rebuild it"
    )
