"""What every data source resolves to: a ``Source`` (a cheap fingerprint now, its stories on
demand) whose splits are ``StorySplit``s read in batches, and the helpers every kind of source
builds one with (a fingerprint of its settings, a content hash, a label safe in folder names).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Optional

# Stories per batch, the unit of work of tokenizer training and of the encoding workers
# (about 1.7 MB of TinyStories).
BATCH_STORIES = 2048


@dataclass
class StorySplit:
    """The stories of one split, readable in batches as often as needed (hf streams from Arrow)."""

    name: str
    read_batches: Callable[[], Iterator[list[str]]]
    num_stories: Optional[int] = None
    """Story count when known up front (sizes the progress bar)."""


@dataclass
class Source:
    """A resolved data source: its fingerprint now, its stories on demand."""

    label: str
    """Short readable name used in cache folder names and messages."""
    fingerprint: str
    """sha256 hex of the raw content plus the settings that pick stories from it."""
    load: Callable[[], tuple[StorySplit, StorySplit]]
    """Parse and return (train, valid)."""
    check: Callable[[], None] = lambda: None
    """Read what it takes to know that both splits have text (cheap; ``check_source``)."""


def list_split(name: str, stories: list[str]) -> StorySplit:
    def read_batches() -> Iterator[list[str]]:
        for start in range(0, len(stories), BATCH_STORIES):
            yield stories[start : start + BATCH_STORIES]

    return StorySplit(name, read_batches, len(stories))


def limit_stories(stories: list[str], max_stories: Optional[int]) -> list[str]:
    return stories if max_stories is None else stories[:max_stories]


def fingerprint_of(parts: dict) -> str:
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode("utf-8")).hexdigest()


def content_hash(raw: bytes) -> str:
    return hashlib.sha256(raw).hexdigest()


def safe_label(name: str) -> str:
    label = "".join(c if c.isalnum() or c in "-_" else "_" for c in name)[:32]
    return label or "data"
