"""Study-level settings and the study presets that carry them.

A study preset is an ordinary config YAML plus an optional ``study:`` section, read and removed
here before the rest is built into a ``Config`` (so ``moelab train`` never sees it)::

    study:
      base: paper          # inherit every key of another preset or YAML file (optional)
      seeds: 3             # seeds per arm: train.seed, train.seed + 1, ...
      criteria: [active, total]     # dense arms: matched on active / total params / flops
      budgets: [40.5M, 426.3M]      # token budgets (default: just train.max_tokens)
      match_step: 32       # d_ff of a matched dense arm is a multiple of this

``--set study.seeds=2`` and the study command's flags override these like any other key.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from moelab.config import Config, apply_overrides, build_config, read_raw
from moelab.errors import ConfigError
from moelab.study.arms import DEFAULT_CRITERIA, check_criteria
from moelab.study.budgets import parse_token_count

STUDY_KEYS = ("base", "seeds", "criteria", "budgets", "match_step")
MAX_BASE_DEPTH = 8


@dataclass
class StudySettings:
    seeds: int = 3
    """Seeds per arm (train.seed, train.seed + 1, ...)."""
    criteria: list[str] = field(default_factory=lambda: list(DEFAULT_CRITERIA))
    """Fairness criteria, one matched dense arm each: active, total, flops."""
    budgets: list[int] = field(default_factory=list)
    """Token budgets, each a full run with its own schedule; empty: train.max_tokens only."""
    match_step: int = 32
    """The matched dense d_ff is a multiple of this."""

    def to_dict(self) -> dict:
        return {"seeds": self.seeds, "criteria": list(self.criteria),
                "budgets": list(self.budgets), "match_step": self.match_step}


def load_study(source: str | Path, overrides: list[str] | None = None) -> tuple[Config, StudySettings]:
    """The base config and study settings of a preset or YAML file, after ``--set`` overrides."""
    raw = apply_overrides(read_with_base(source), list(overrides or []))
    study_raw = raw.pop("study", None) or {}
    return build_config(raw), parse_settings(study_raw)


def read_with_base(source: str | Path, depth: int = 0) -> dict:
    """The raw dict of ``source`` merged over the preset or file named by its ``study.base``."""
    raw = read_raw(source)
    study = raw.get("study") or {}
    if not isinstance(study, dict):
        raise ConfigError(f"study={study!r} is invalid: expected a mapping of study settings")
    base = study.pop("base", None)
    if base is None:
        return raw
    if depth >= MAX_BASE_DEPTH:
        raise ConfigError(f"study.base={base!r} is invalid: bases nest too deep (a cycle?)")
    return deep_merge(read_with_base(base, depth + 1), raw)


def deep_merge(base: dict, top: dict) -> dict:
    """``top`` over ``base``, merging nested mappings key by key."""
    merged = dict(base)
    for key, value in top.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = deep_merge(merged[key], value)
        else:
            merged[key] = value
    return merged


def parse_settings(study_raw: dict[str, Any]) -> StudySettings:
    unknown = [key for key in study_raw if key not in STUDY_KEYS]
    if unknown:
        raise ConfigError(f"study.{unknown[0]} is not a known key: allowed {', '.join(STUDY_KEYS)}")
    settings = StudySettings()
    if "seeds" in study_raw:
        settings.seeds = check_seeds(study_raw["seeds"])
    if "criteria" in study_raw:
        settings.criteria = check_criteria(_as_list(study_raw["criteria"], "study.criteria"))
    if "budgets" in study_raw and study_raw["budgets"] is not None:
        budgets = _as_list(study_raw["budgets"], "study.budgets")
        settings.budgets = sorted({parse_token_count(b) for b in budgets})
    if "match_step" in study_raw:
        step = study_raw["match_step"]
        if isinstance(step, bool) or not isinstance(step, int) or step <= 0:
            raise ConfigError(f"study.match_step={step!r} is invalid: must be a positive integer")
        settings.match_step = step
    return settings


def check_seeds(seeds: Any) -> int:
    if isinstance(seeds, bool) or not isinstance(seeds, int) or seeds <= 0:
        raise ConfigError(f"seeds={seeds!r} is invalid: must be a positive integer")
    return seeds


def _as_list(value: Any, key: str) -> list:
    if isinstance(value, str):
        return [item.strip() for item in value.split(",") if item.strip()]
    if isinstance(value, list):
        return value
    raise ConfigError(f"{key}={value!r} is invalid: expected a list or a comma-separated string")
