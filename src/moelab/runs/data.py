"""The data every run of a plan shares, prepared once before any run starts."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from moelab.config import Config
from moelab.data.preflight import check_runs_fit_data
from moelab.data.prepare import prepare_data
from moelab.data.sources import read_from_the_hub


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


def check_shared_data_for_a_dry_run(configs: Sequence[Config]) -> list[str]:
    """``--dry-run``'s data check: the same refusals as ``check_shared_data`` (it builds or
    opens the same token cache, which the runs then reuse), for every source read from this
    machine. A hub source is named instead: its check would download the dataset, which a
    price of the plan should not cost; the run checks it before any training. Returns the
    lines that say which sources were checked."""
    local = [config for config in configs if not read_from_the_hub(config.data)]
    if local:
        check_shared_data(local)
    lines = [f"data: {source} checked against every run (vocabulary, training split, "
             "validation windows)" for source in _sources(local)]
    lines += [f"data: {source} not checked: a dry run does not download from the Hugging Face "
              "hub; the run checks it before training"
              for source in _sources([c for c in configs if read_from_the_hub(c.data)])]
    return lines


def _sources(configs: Sequence[Config]) -> list[str]:
    """The data.source names of ``configs``, once each, in order."""
    return list(dict.fromkeys(config.data.source for config in configs))
