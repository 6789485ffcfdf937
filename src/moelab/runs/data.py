"""The data every run of a plan shares, prepared once before any run starts."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from moelab.config import Config
from moelab.data.preflight import check_runs_fit_data
from moelab.data.prepare import prepare_data


def prepare_shared_data(config: Config, log: Callable[[str], None]) -> None:
    """Tokenizer and token cache once, up front: every run then finds them in the cache (and
    parallel runs do not race to build them)."""
    log(f"preparing data ({config.data.source}, vocab {config.tokenizer_vocab_size})")
    prepare_data(config.data, config.tokenizer_vocab_size, progress=config.train.logging.progress)


def check_shared_data(configs: Sequence[Config]) -> None:
    """Refuse, before the plan is written, a corpus that cannot serve the runs of ``configs``:
    a missing path or package, an unknown dataset, a missing or non-text column, a .txt
    without separators, an empty split, a vocabulary it cannot reach, a validation split too
    short for train.eval_windows (``moelab.data.preflight``). The token cache is built here,
    outside the folder, so a refused command leaves no folder behind."""
    check_runs_fit_data(configs, progress=configs[0].train.logging.progress if configs else False)
