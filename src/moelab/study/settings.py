"""Study-level settings and the study presets that carry them.

A study preset is an ordinary config YAML plus an optional ``study:`` section, read here into
``StudySettings`` by the config parser (``moelab.config.from_dict``: the same keys, types and
one-line errors as ``model`` and ``train``); the rest is built into a ``Config``
(``moelab.config.load_config`` resolves ``base`` and drops the section, so ``moelab train`` and
``moelab params`` take a study preset as its MoE arm)::

    study:
      base: paper          # inherit every key of another preset or YAML file (optional)
      seeds: 3             # seeds per arm: train.seed, train.seed + 1, ...; or a list [10, 11, 12]
      criteria: [active, total]     # dense arms: matched on active / total params
      budgets: [40.5M, 426.3M]      # token budgets (default: just train.max_tokens)
      match_step: 32       # d_ff of a matched dense arm is a multiple of this
      eval_tasks: [last_word, ending]  # zero-shot tasks every arm scores (train.eval_tasks)

``--set study.seeds=2`` (or ``=10,11,12``) and the study command's flags override these like
any other key.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Annotated, Any, Optional, Union

from moelab.config import (
    EVAL_TASK_NAMES, MAX_TOKENS, Config, Parsed, apply_overrides, build_config, from_dict,
    read_with_base,
)
from moelab.errors import ConfigError, MoelabError, short_repr
from moelab.study.arms import DEFAULT_CRITERIA, check_criteria
from moelab.runs.tokens import TokenCount

MAX_SEEDS = 1000
"""Seeds per arm: more is a typo (a count where a list was meant), not a study."""
SEEDS_ALLOWED = ("allowed a count N (train.seed, train.seed + 1, ...) or a list of distinct "
                 "seeds >= 0, e.g. 3 or 10,11,12")


def check_seeds(seeds: Any, key: str = "seeds") -> int | list[int]:
    """A seed count (a positive int) or a list of distinct seeds (>= 0), from YAML or from text
    (``--seeds 3``, ``--seeds 10,11,12``, ``--seeds [11]``); anything else is a ConfigError."""
    shown = seeds if isinstance(seeds, str) else repr(seeds)  # --seeds 0 reads "seeds=0"

    def refuse(why: str) -> ConfigError:
        return ConfigError(f"{key}={shown} is invalid: {why}; {SEEDS_ALLOWED}")

    value = _parse_seed_text(seeds, refuse) if isinstance(seeds, str) else seeds
    if isinstance(value, bool) or not isinstance(value, (int, list)):
        raise refuse("not a whole number or a list")
    if isinstance(value, int):
        if value <= 0:
            raise refuse("a seed count must be at least 1")
        return value
    if not value:
        raise refuse("the list is empty")
    for seed in value:
        # bool is an int in Python, but `true` is no seed
        if isinstance(seed, bool) or not isinstance(seed, int):
            raise refuse(f"{short_repr(seed)} is not a whole number")
        if seed < 0:
            raise refuse(f"seed {seed} is negative")
    repeated = sorted({seed for seed in value if value.count(seed) > 1})
    if repeated:
        raise refuse(f"seed {repeated[0]} is listed twice")
    return list(value)


def _parse_seed_text(text: str, refuse) -> int | list[int]:
    """``"3"`` -> 3 (a count); ``"10,11,12"`` or ``"[11]"`` -> a list."""
    stripped = text.strip()
    bracketed = stripped.startswith("[") and stripped.endswith("]")
    inner = stripped[1:-1].strip() if bracketed else stripped
    is_list = bracketed or "," in inner
    if not inner:
        if is_list:
            return []  # check_seeds refuses the empty list
        raise refuse("it is empty")
    seeds = []
    for item in (item.strip() for item in inner.split(",")):
        if not re.fullmatch(r"[+-]?\d+", item):
            raise refuse(f"{short_repr(item)} is not a whole number" if item else "an item is empty")
        seeds.append(int(item))
    return seeds if is_list else seeds[0]


Seeds = Annotated[Union[int, list[int]], Parsed(check_seeds)]
"""A settings field type: a seed count or a list of seeds, as ``check_seeds`` reads them."""


@dataclass
class StudySettings:
    """The ``study:`` section: what a study runs besides the base config."""

    seeds: Seeds = 3
    """A count N (train.seed, train.seed + 1, ..., N seeds) or the seeds themselves."""
    criteria: list[str] = field(default_factory=lambda: list(DEFAULT_CRITERIA))
    """Fairness criteria, one matched dense arm each: active, total."""
    budgets: Optional[list[TokenCount]] = field(default_factory=list)
    """Token budgets (40.5M, 1.2B, 500K or plain numbers), each a full run with its own
    schedule; empty or null: train.max_tokens only."""
    match_step: int = 32
    """The matched dense d_ff is a multiple of this."""
    eval_tasks: list[str] = field(default_factory=list)
    """Zero-shot tasks (moelab.tasks) every arm scores at the end of its runs, as its
    train.eval_tasks; empty: the base config's train.eval_tasks."""

    def validate(self, prefix: str = "study") -> StudySettings:
        """Check the values and normalise them: criteria without repeats, budgets sorted."""
        self.criteria = check_criteria(self.criteria)
        self.budgets = sorted(set(self.budgets or []))
        if self.match_step <= 0:
            raise ConfigError(f"{prefix}.match_step={self.match_step} is invalid: must be > 0")
        check_task_names(self.eval_tasks, f"{prefix}.eval_tasks")
        self.eval_tasks = list(dict.fromkeys(self.eval_tasks))
        return self

    @property
    def budget_list(self) -> list[int]:
        """The token budgets, smallest first; [] for train.max_tokens only (null reads as [])."""
        return list(self.budgets or [])

    def seed_list(self, base_seed: int) -> list[int]:
        """The seeds every arm runs, counted from ``base_seed`` (train.seed) for a count."""
        if isinstance(self.seeds, int):
            return list(range(base_seed, base_seed + self.seeds))
        return list(self.seeds)

    def apply_to(self, config: Config) -> Config:
        """The base config with the settings every arm takes from the study: eval_tasks."""
        if not self.eval_tasks:
            return config
        train = replace(config.train, eval_tasks=list(self.eval_tasks))
        return replace(config, train=train).validate()

    def check_size(self, budgets_key: str = "study.budgets",
                   seeds_key: str = "study.seeds") -> None:
        """Budgets within train.max_tokens' sanity cap and a seed count that is a study, checked
        before any plan is written (a budget of 1e400 tokens is a whole number too); the keys
        name where the values came from (``--budgets`` or the preset)."""
        for budget in self.budget_list:
            if budget > MAX_TOKENS:
                shown = budget if budget < 10**20 else f"~1e{len(str(budget)) - 1}"  # no float cast
                raise MoelabError(f"{budgets_key}: token budget {shown} is invalid: allowed up "
                                  f"to {MAX_TOKENS:.0e} (train.max_tokens' sanity cap)")
        count = self.seeds if isinstance(self.seeds, int) else len(self.seeds)
        if count > MAX_SEEDS:
            raise MoelabError(f"{seeds_key}={count} seeds is invalid: allowed 1..{MAX_SEEDS} "
                              "per arm")


def check_task_names(names: list[str], key: str) -> None:
    for index, name in enumerate(names):
        if name not in EVAL_TASK_NAMES:
            raise ConfigError(f"{key}[{index}]={short_repr(name)} is invalid: allowed "
                              f"{', '.join(EVAL_TASK_NAMES)}")


def load_study(source: str | Path, overrides: list[str] | None = None) -> tuple[Config, StudySettings]:
    """The base config and study settings of a preset or YAML file, after ``--set`` overrides;
    the settings every arm takes (eval_tasks) are applied to the config."""
    raw = apply_overrides(read_with_base(source), list(overrides or []))
    study_raw = raw.pop("study", None)
    config = build_config(raw)
    settings = parse_settings(study_raw)
    return settings.apply_to(config), settings


def parse_settings(study_raw: Any) -> StudySettings:
    """Check the study section (after ``--set`` overrides) and turn it into settings."""
    if study_raw is not None and not isinstance(study_raw, dict):
        raise ConfigError(f"study={short_repr(study_raw)} is invalid: expected a mapping of study "
                          f"settings, e.g. --set study.seeds=2")
    if study_raw and "base" in study_raw:
        # read_with_base has already merged (and removed) the file's own base by now, so a
        # base here came from --set and would otherwise be silently ignored.
        raise ConfigError(f"study.base={short_repr(study_raw['base'])} cannot be set with --set: the base "
                          f"is read before overrides apply; put it in the YAML file's study: "
                          f"section, or pass the preset as CONFIG")
    return from_dict(StudySettings, study_raw, "study").validate()
