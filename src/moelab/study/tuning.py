"""``--tune-lr``: every arm of a study at its own learning rate, chosen on selection seeds.

Per lr of the grid the study's arms train on the selection seeds (``select/lr<X>/runs/<arm>/
seed<k>``, through the study's launcher); per arm the lr of the lowest mean best validation
loss wins (``moelab.runs.lr_grid``); then the study runs on its reporting seeds, disjoint from
the selection seeds, each arm at its own lr. The equal-compute arm ``moe_compute`` is the MoE
(same model, same recipe) trained on more tokens: it is not tuned, it takes the ``moe`` arm's
lr (``SHARED_LR``). With token budgets the lrs are chosen at the largest budget and used at
every budget. plan.json keeps the selection (``lr_selection``); the study folder reads the
choices back from the selection runs' folders (``StudyFolder.lr_choices``) and the report shows
them (``moelab.study.analyses.lr_tuning``).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Optional

from moelab.config import Config
from moelab.runs.lr_grid import (
    DEFAULT_SELECTION_SEEDS, SELECTION_FOLDER, default_selection_seeds, lr_folder,
    selection_record,
)
from moelab.runs.spec import RunSpec
from moelab.study.arms import COMPUTE_ARM, MOE_ARM, Arm
from moelab.study.plan import check_same_study

SHARED_LR = {COMPUTE_ARM: MOE_ARM}
"""An arm that is not tuned -> the arm whose chosen lr it takes."""
RECORD_KEY = "lr_selection"


@dataclass
class LrTuning:
    """What ``--tune-lr GRID [--select-seeds N|LIST]`` asks for."""

    grid: list[float]
    select_seeds: int | list[int] = DEFAULT_SELECTION_SEEDS
    """A count (train.seed + 1,000,000, + 1,000,001, ...) or the seeds themselves."""

    def seed_list(self, base_seed: int) -> list[int]:
        if isinstance(self.select_seeds, int):
            return default_selection_seeds(self.select_seeds, base_seed)
        return list(self.select_seeds)


def with_lr(config: Config, lr: float, max_tokens: Optional[int] = None,
            selecting: bool = False) -> Config:
    """``config`` at peak lr ``lr`` (and ``max_tokens``); ``selecting``: a selection run,
    judged on its loss alone, scores no zero-shot tasks."""
    train = replace(config.train, lr=lr)
    if max_tokens is not None:
        train = replace(train, max_tokens=max_tokens)
    if selecting:
        train = replace(train, eval_tasks=[])
    return replace(config, train=train).validate()


def with_arm_lrs(arms: list[Arm], lrs: dict[str, float]) -> list[Arm]:
    """Each arm at its chosen lr; an untuned arm (``SHARED_LR``) at its partner's."""
    return [replace(arm, config=with_lr(arm.config, lrs[SHARED_LR.get(arm.name, arm.name)]))
            for arm in arms]


def selection_specs(arms_at, seeds: list[int], tuning: LrTuning, config: Config,
                    budgets: list[int]) -> dict[float, list[RunSpec]]:
    """lr -> the selection runs at it: every tuned arm x selection seed, at the study's largest
    budget. ``arms_at(config)`` gives the arms of a base config and ``plan_runs`` plans them."""
    from moelab.study.plan import plan_runs

    largest = max(budgets) if budgets else None
    specs_by_lr = {}
    for lr in tuning.grid:
        arms = [arm for arm in arms_at(with_lr(config, lr, largest, selecting=True))
                if arm.name not in SHARED_LR]
        specs_by_lr[lr] = plan_runs(arms, seeds, [])
    return specs_by_lr


def check_selection_folders(study_dir: Path, kind: str, config: Config,
                            specs_by_lr: dict[float, list[RunSpec]]) -> None:
    """Selection runs planned before with another config would be silently reused: refuse."""
    for lr, specs in specs_by_lr.items():
        where = study_dir / SELECTION_FOLDER / lr_folder(lr)
        if where.is_dir():
            check_same_study(where, kind, with_lr(config, lr, selecting=True), specs)


def tuning_record(tuning: LrTuning, seeds: list[int],
                  specs_by_lr: dict[float, list[RunSpec]]) -> dict:
    return {**selection_record(tuning.grid, seeds, specs_by_lr, lambda spec: spec.labels["arm"]),
            "shared": dict(SHARED_LR)}
