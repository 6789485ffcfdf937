"""Study-level settings and the study presets that carry them.

A study preset is an ordinary config YAML plus an optional ``study:`` section, read here; the
rest is built into a ``Config`` (``moelab.config.load_config`` resolves ``base`` and drops the
section, so ``moelab train`` and ``moelab params`` take a study preset as its MoE arm)::

    study:
      base: paper          # inherit every key of another preset or YAML file (optional)
      seeds: 3             # seeds per arm: train.seed, train.seed + 1, ...
      criteria: [active, total]     # dense arms: matched on active / total params
      budgets: [40.5M, 426.3M]      # token budgets (default: just train.max_tokens)
      match_step: 32       # d_ff of a matched dense arm is a multiple of this

``--set study.seeds=2`` and the study command's flags override these like any other key.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from moelab.config import Config, apply_overrides, build_config, read_with_base
from moelab.errors import ConfigError
from moelab.study.arms import DEFAULT_CRITERIA, check_criteria
from moelab.study.budgets import parse_token_count

STUDY_KEYS = ("base", "seeds", "criteria", "budgets", "match_step")


@dataclass
class StudySettings:
    seeds: int = 3
    """Seeds per arm (train.seed, train.seed + 1, ...)."""
    criteria: list[str] = field(default_factory=lambda: list(DEFAULT_CRITERIA))
    """Fairness criteria, one matched dense arm each: active, total."""
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
    study_raw = raw.pop("study", None)
    return build_config(raw), parse_settings({} if study_raw is None else study_raw)


def parse_settings(study_raw: Any) -> StudySettings:
    """Check the study section (after ``--set`` overrides) and turn it into settings."""
    if not isinstance(study_raw, dict):
        raise ConfigError(f"study={study_raw!r} is invalid: expected a mapping of study "
                          f"settings, e.g. --set study.seeds=2")
    if "base" in study_raw:
        # read_with_base has already merged (and removed) the file's own base by now, so a
        # base here came from --set and would otherwise be silently ignored.
        raise ConfigError(f"study.base={study_raw['base']!r} cannot be set with --set: the base "
                          f"is read before overrides apply; put it in the YAML file's study: "
                          f"section, or pass the preset as CONFIG")
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
