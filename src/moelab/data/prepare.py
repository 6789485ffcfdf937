"""``prepare_data``: from a data config to a tokenizer and memmapped token streams, cached."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from moelab.config import DataConfig
from moelab.data.cache import (
    CacheManifest, TokenSplit, build_cache, cache_folder_name, has_manifest, load_cache,
)
from moelab.data.sources import resolve_source
from moelab.data.tokenizer import Tokenizer, check_vocab_size


@dataclass
class PreparedData:
    """What training needs from the data pipeline."""

    tokenizer: Tokenizer
    train: TokenSplit
    valid: TokenSplit
    cache_dir: Path
    """The cache folder holding tokenizer.json, the token files and manifest.json."""
    manifest: Optional[CacheManifest] = field(default=None, repr=False)

    @property
    def vocab_size(self) -> int:
        return self.tokenizer.vocab_size


def cache_root(data_cfg: DataConfig) -> Path:
    """data.cache_dir, else ``cache_base()``/data."""
    if data_cfg.cache_dir:
        return Path(data_cfg.cache_dir).expanduser()
    return cache_base() / "data"


def cache_base() -> Path:
    """$MOELAB_CACHE, else $XDG_CACHE_HOME/moelab, else ~/.cache/moelab: the configured cache
    root (see ``trusted_cache_dir``). As the XDG base-directory spec says, an empty or relative
    XDG_CACHE_HOME is ignored."""
    if os.environ.get("MOELAB_CACHE"):
        return Path(os.environ["MOELAB_CACHE"]).expanduser()
    xdg_cache = os.environ.get("XDG_CACHE_HOME", "")
    if os.path.isabs(xdg_cache):
        return Path(xdg_cache) / "moelab"
    return Path.home() / ".cache" / "moelab"


def check_data(data_cfg: DataConfig, vocab_size: int) -> None:
    """Refuse, before anything is written, a source that cannot give both splits: a missing
    path or package, and for a dataset source an unknown dataset, a missing or non-text
    column or an empty split (the first batch of each split is read). A source whose token
    cache is built is not read again: its cache is what training reads."""
    source = resolve_source(data_cfg)
    if not has_manifest(cache_root(data_cfg) / cache_folder_name(source, vocab_size)):
        source.check()


def prepare_data(data_cfg: DataConfig, vocab_size: int, *, progress: bool = True) -> PreparedData:
    """Tokenizer and token caches for ``data_cfg``, built on first use and reused afterwards.

    The cache folder is keyed by the source fingerprint, ``vocab_size`` and the tokenizer recipe
    version, so any change of input builds a new one and the old one stays valid. A finished
    cache is checked file by file against its manifest before use (``MoelabError`` if corrupt).
    """
    check_vocab_size(vocab_size)
    source = resolve_source(data_cfg)
    cache_dir = cache_root(data_cfg) / cache_folder_name(source, vocab_size)
    if not has_manifest(cache_dir):
        build_cache(source, vocab_size, cache_dir, progress=progress)
    tokenizer, splits, manifest = load_cache(cache_dir, source, vocab_size)
    return PreparedData(tokenizer=tokenizer, train=splits["train"], valid=splits["valid"],
                        cache_dir=cache_dir, manifest=manifest)
