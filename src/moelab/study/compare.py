"""Two configs, paired by seed: ``moelab compare A B --seeds N``.

Each side trains on the same seeds (``train.seed`` = the seed, so with the default
``train.data_seed`` both sides see the same batches), in ``runs/A/seed<s>`` and
``runs/B/seed<s>`` of one folder; finished runs are skipped, torn ones resumed. The gap is
A - B of the best validation loss (positive: B reaches the lower loss), tested as the study
tests its arms (``moelab.study.gaps.compare``: the paired t-test, its 95 % interval, p, and
the minimum gap it detects with power 0.8). ``compare.json`` keeps every number printed.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Optional

from moelab.codec import to_json
from moelab.config import Config
from moelab.errors import MoelabError
from moelab.fileio import atomic_write_json
from moelab.runs import RunSpec, execute_plan, is_complete, write_run_configs
from moelab.runs.data import prepare_shared_data
from moelab.runs.launchers.local import LocalLauncher
from moelab.runs.lr_grid import (
    SELECTION_FOLDER, LrChoice, check_disjoint, lr_folder, read_choices, require_choices,
    run_selection, selection_record,
)
from moelab.study.results import json_safe
from moelab.stats.intervals import summarize
from moelab.study.gaps import Gap, compare
from moelab.study.tuning import LrTuning, with_lr
from moelab.train.run_folder import RunFolder

SIDES = ("A", "B")
OUTCOMES = {"MoE better": "B better", "dense better": "A better"}
"""stats.compare names its second arm 'MoE' and its first 'dense': here they are B and A."""


@dataclass
class SidesSelection:
    """With ``--tune-lr``: each side's choice and the seeds that chose and that report
    (compare.json's ``lr_selection``)."""

    grid: list[float]
    selection_seeds: list[int]
    reporting_seeds: list[int]
    sides: dict[str, LrChoice]


@dataclass
class Comparison:
    """Best val loss of each side by seed, and the test of A - B."""

    labels: dict[str, str]
    """What each side is (its config and own overrides), as the user gave them."""
    common: list[str] = field(metadata={"json_key": "common_overrides"})
    """The overrides both sides took."""
    losses: dict[str, dict[int, float]] = field(metadata={"json_key": "best_val_loss"})
    outcome: str
    """'B better', 'A better', 'not significant' or 'not testable'."""
    gap: Gap = field(metadata={"json_key": "gap_a_minus_b"})
    missing: list[str] = field(default_factory=list, metadata={"json_key": "missing_runs"})
    """Planned runs without a complete result (failed or not trained): not in the test."""
    lr_selection: Optional[SidesSelection] = field(default=None, metadata={"omit_none": True})
    """With ``--tune-lr`` only."""


def comparison_json(comparison: Comparison) -> dict:
    """compare.json: the comparison's fields in order (``moelab.codec``), NaN as null."""
    return to_json(json_safe(comparison))


def comparison_specs(configs: dict[str, Config], seeds: list[int]) -> list[RunSpec]:
    """One run per side and seed, the seed set as ``train.seed``."""
    return [RunSpec(f"{side}/seed{seed}",
                    replace(configs[side], train=replace(configs[side].train, seed=seed)).validate(),
                    labels={"side": side, "seed": seed})
            for side in SIDES for seed in seeds]


def run_comparison(configs: dict[str, Config], labels: dict[str, str], seeds: list[int],
                   folder: Path, *, common: Sequence[str] = (), launcher=None, jobs: int = 1,
                   log: Callable[[str], None] = print,
                   tuning: Optional[LrTuning] = None) -> Comparison:
    """Train what is missing of both sides, then test and write compare.json. With ``tuning``
    (``--tune-lr``) each side first gets its own lr, chosen on the selection seeds."""
    folder = Path(folder)
    launcher = launcher or LocalLauncher(jobs=jobs)
    selection = None
    if tuning is not None:
        configs, selection = tune_sides(configs, seeds, folder, tuning, launcher, log)
    specs = comparison_specs(configs, seeds)
    write_run_configs(folder, specs)
    todo = [spec for spec in specs if not is_complete(folder / spec.run_dir)]
    for side in SIDES:
        if any(spec.labels["side"] == side for spec in todo):
            prepare_shared_data(configs[side], log)
    execute_plan(folder, specs, launcher, log)
    result = compare_runs(folder, specs, labels, list(common))
    result.lr_selection = selection
    atomic_write_json(folder / "compare.json", comparison_json(result))
    return result


def tune_sides(configs: dict[str, Config], seeds: list[int], folder: Path, tuning: LrTuning,
               launcher, log: Callable[[str], None]) -> tuple[dict[str, Config], SidesSelection]:
    """Each side at the lr of the grid with its lowest mean best val loss on the selection
    seeds (``select/lr<X>/runs/<side>/seed<k>``); the configs at those lrs and the record."""
    selection_seeds = tuning.seed_list(configs["A"].train.seed)
    check_disjoint(selection_seeds, seeds)
    specs_by_lr = {lr: comparison_specs({side: with_lr(config, lr, selecting=True)
                                         for side, config in configs.items()}, selection_seeds)
                   for lr in tuning.grid}
    if any(not is_complete(folder / SELECTION_FOLDER / lr_folder(lr) / spec.run_dir)
           for lr, specs in specs_by_lr.items() for spec in specs):
        for config in configs.values():
            prepare_shared_data(config, log)
    run_selection(folder, specs_by_lr, launcher, log)
    record = selection_record(tuning.grid, selection_seeds, specs_by_lr,
                              lambda spec: spec.labels["side"])
    choices = read_choices(folder, record)
    lrs = require_choices(choices, folder)
    return ({side: with_lr(config, lrs[side]) for side, config in configs.items()},
            SidesSelection(list(tuning.grid), selection_seeds, list(seeds), choices))


def compare_runs(folder: Path, specs: list[RunSpec], labels: dict[str, str],
                 common: list[str]) -> Comparison:
    """The test of A - B over the seeds whose runs both finished."""
    losses: dict[str, dict[int, float]] = {side: {} for side in SIDES}
    missing = []
    for spec in specs:
        run = RunFolder(folder / spec.run_dir)
        summary = run.summary() if run.is_complete() else None
        if summary is not None and summary.best_val_loss is not None:
            losses[spec.labels["side"]][spec.labels["seed"]] = float(summary.best_val_loss)
        else:
            missing.append(spec.name)
    if not all(losses.values()):
        empty = next(side for side in SIDES if not losses[side])
        raise MoelabError(f"no run of side {empty} finished: see {folder / 'failures.json'}")
    gap = compare("pair", "B", "A", losses["B"], losses["A"])
    return Comparison(labels=labels, common=common, losses=losses,
                      outcome=OUTCOMES.get(gap.outcome, gap.outcome), gap=gap, missing=missing)


def side_summary(losses: dict[int, float]) -> tuple[float, float, int]:
    summary = summarize(list(losses.values()))
    return summary.mean, (summary.std if summary.n > 1 else math.nan), summary.n
