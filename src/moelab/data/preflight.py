"""Before anything trains: what a run asks of its corpus, checked against the corpus itself.

A run needs its source to parse into stories (a .txt file needs its ``<|endoftext|>``
separators, or it is one story and nothing is held out), a tokenizer of the vocabulary the
model embeds, a training split longer than one window, and a validation split long enough for
``train.eval_windows`` windows of ``max_seq_len + 1`` tokens. All of it is known once the token
cache is built, and the cache lives outside any study or sweep folder: so ``study`` and
``sweep-sparsity`` build it first and check every config they will train against it, and a
corpus that cannot serve them is refused on one line, naming the fix, before a folder exists
(so the corrected command finds nothing in its way).
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path

from moelab.config import Config, DataConfig
from moelab.data.prepare import PreparedData, prepare_data
from moelab.errors import MoelabError, short_repr

VALID_FRACTION_MARGIN = 1.1
"""How much more than the proportional estimate a suggested data.valid_fraction asks for:
stories are held out whole, so the held-out tokens only roughly follow the fraction."""
LARGEST_SUGGESTED_FRACTION = 0.5
"""Past this a corpus trains on less text than it validates on: suggest more text instead."""


def check_runs_fit_data(configs: Sequence[Config], *, progress: bool = True) -> PreparedData:
    """Build (or open) the token cache of every data source ``configs`` train on and refuse,
    on one line naming the fix, a config its corpus cannot serve. Returns the prepared data of
    the first config (what a single run trains on)."""
    if not configs:
        raise MoelabError("no run to check the data of: the plan is empty")
    first = None
    for group in _by_data(configs):
        head = group[0]
        prepared = prepare_data(head.data, head.tokenizer_vocab_size, progress=progress)
        first = first or prepared
        for config in group:
            check_config_fits(config, prepared)
    assert first is not None
    return first


def _by_data(configs: Sequence[Config]) -> list[list[Config]]:
    """The configs grouped by the token cache they read (data section and vocabulary)."""
    groups: dict[str, list[Config]] = {}
    for config in configs:
        key = json.dumps([asdict(config.data), config.tokenizer_vocab_size], sort_keys=True)
        groups.setdefault(key, []).append(config)
    return list(groups.values())


def check_config_fits(config: Config, prepared: PreparedData) -> None:
    """One config against its prepared data: the vocabulary, the training split and the
    validation windows."""
    if prepared.tokenizer.vocab_size > config.model.vocab_size:
        raise MoelabError(
            f"model.vocab_size={config.model.vocab_size} is invalid: the tokenizer of "
            f"data.source={short_repr(config.data.source)} has {prepared.tokenizer.vocab_size} "
            f"tokens; set model.vocab_size to {prepared.tokenizer.vocab_size}")
    window = config.model.max_seq_len + 1
    if prepared.train.num_tokens < window:
        raise MoelabError(
            f"the training split of data.source={short_repr(config.data.source)} has "
            f"{prepared.train.num_tokens:,} tokens, fewer than one window of max_seq_len + 1 = "
            f"{window}: use more text or a smaller model.max_seq_len")
    check_eval_windows(config, prepared.valid.num_tokens, prepared.train.num_tokens)


def check_eval_windows(config: Config, valid_tokens: int, train_tokens: int) -> None:
    """``validation_windows`` cuts train.eval_windows windows of max_seq_len + 1 tokens, each
    from its own stretch of the split: refuse now what it would refuse after the runs start."""
    windows, window = config.train.eval_windows, config.model.max_seq_len + 1
    if valid_tokens >= windows * window:
        return
    fitting = valid_tokens // window
    problem = (f"the validation split of data.source={short_repr(config.data.source)} has "
               f"{valid_tokens:,} tokens, too few for train.eval_windows={windows} windows of "
               f"max_seq_len + 1 = {window} tokens ({windows * window:,})")
    fixes = []
    if fitting >= 1:
        fixes.append(f"--set train.eval_windows={fitting} (the most that fit)")
    fixes.append(_more_validation_text(config.data, valid_tokens, train_tokens, windows * window))
    raise MoelabError(f"{problem}: rerun with " + ", or ".join(fixes))


def _more_validation_text(data: DataConfig, valid_tokens: int, train_tokens: int,
                          needed: int) -> str:
    """The other fix: a larger held-out share of a single file, else a longer split."""
    if not Path(data.source).expanduser().is_file():
        return "give the validation split more text"
    # The held-out tokens grow about in proportion to the fraction.
    fraction = data.valid_fraction * needed / valid_tokens * VALID_FRACTION_MARGIN
    if fraction > LARGEST_SUGGESTED_FRACTION or needed > (valid_tokens + train_tokens) / 2:
        return ("use more text (the file would validate on more than it trains on), or a "
                "smaller model.max_seq_len")
    return (f"--set data.valid_fraction={_round_up(fraction)} (about enough; now "
            f"{data.valid_fraction:g})")


def _round_up(value: float) -> str:
    """``value`` rounded up to two significant digits: 0.2731 -> '0.28'."""
    scale = 10 ** (math.floor(math.log10(value)) - 1)
    return f"{math.ceil(value / scale) * scale:.10g}"
