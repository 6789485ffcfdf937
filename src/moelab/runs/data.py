"""The data every run of a plan shares, prepared once before any run starts."""

from __future__ import annotations

from collections.abc import Callable

from moelab.config import Config
from moelab.data.prepare import check_data, prepare_data


def prepare_shared_data(config: Config, log: Callable[[str], None]) -> None:
    """Tokenizer and token cache once, up front: every run then finds them in the cache (and
    parallel runs do not race to build them)."""
    log(f"preparing data ({config.data.source}, vocab {config.tokenizer_vocab_size})")
    prepare_data(config.data, config.tokenizer_vocab_size, progress=config.train.logging.progress)


def check_shared_data(config: Config) -> None:
    """Refuse a data source that cannot serve the runs before the plan is written: a missing
    path or package, an unknown dataset, a missing or non-text column, an empty split."""
    check_data(config.data, config.tokenizer_vocab_size)
