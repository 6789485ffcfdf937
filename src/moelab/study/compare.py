"""Two configs, paired by seed: ``moelab compare A B --seeds N``.

Each side trains on the same seeds (``train.seed`` = the seed, so with the default
``train.data_seed`` both sides see the same batches), in ``runs/A/seed<s>`` and
``runs/B/seed<s>`` of one folder; finished runs are skipped, torn ones resumed. The gap is
A - B of the best validation loss (positive: B reaches the lower loss), tested as the study
tests its arms (``moelab.study.stats.compare``: the paired t-test, its 95 % interval, p, and
the minimum gap it detects with power 0.8). ``compare.json`` keeps every number printed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable

from moelab.config import Config
from moelab.errors import MoelabError
from moelab.fileio import atomic_write_json
from moelab.runs import RunSpec, execute_plan, is_complete, write_run_configs
from moelab.runs.data import prepare_shared_data
from moelab.runs.launchers.local import LocalLauncher
from moelab.study.results import json_safe
from moelab.study.stats import Gap, compare, summarize
from moelab.train.run_folder import RunFolder

SIDES = ("A", "B")
OUTCOMES = {"MoE better": "B better", "dense better": "A better"}
"""stats.compare names its second arm 'MoE' and its first 'dense': here they are B and A."""


@dataclass
class Comparison:
    """Best val loss of each side by seed, and the test of A - B."""

    labels: dict[str, str]
    """What each side is (its config and own overrides), as the user gave them."""
    common: list[str]
    """The overrides both sides took."""
    losses: dict[str, dict[int, float]]
    gap: Gap
    outcome: str
    """'B better', 'A better', 'not significant' or 'not testable'."""
    missing: list[str] = field(default_factory=list)
    """Planned runs without a complete result (failed or not trained): not in the test."""

    def to_dict(self) -> dict:
        return json_safe({"labels": self.labels, "common_overrides": self.common,
                          "best_val_loss": {side: {str(s): v for s, v in by_seed.items()}
                                            for side, by_seed in self.losses.items()},
                          "outcome": self.outcome, "gap_a_minus_b": self.gap.to_dict(),
                          "missing_runs": list(self.missing)})


def comparison_specs(configs: dict[str, Config], seeds: list[int]) -> list[RunSpec]:
    """One run per side and seed, the seed set as ``train.seed``."""
    return [RunSpec(f"{side}/seed{seed}",
                    replace(configs[side], train=replace(configs[side].train, seed=seed)).validate(),
                    labels={"side": side, "seed": seed})
            for side in SIDES for seed in seeds]


def run_comparison(configs: dict[str, Config], labels: dict[str, str], seeds: list[int],
                   folder: Path, *, common: list[str] = (), launcher=None, jobs: int = 1,
                   log: Callable[[str], None] = print) -> Comparison:
    """Train what is missing of both sides, then test and write compare.json."""
    folder = Path(folder)
    specs = comparison_specs(configs, seeds)
    write_run_configs(folder, specs)
    todo = [spec for spec in specs if not is_complete(folder / spec.run_dir)]
    for side in SIDES:
        if any(spec.labels["side"] == side for spec in todo):
            prepare_shared_data(configs[side], log)
    execute_plan(folder, specs, launcher or LocalLauncher(jobs=jobs), log)
    result = compare_runs(folder, specs, labels, list(common))
    atomic_write_json(folder / "compare.json", result.to_dict())
    return result


def compare_runs(folder: Path, specs: list[RunSpec], labels: dict[str, str],
                 common: list[str]) -> Comparison:
    """The test of A - B over the seeds whose runs both finished."""
    losses: dict[str, dict[int, float]] = {side: {} for side in SIDES}
    missing = []
    for spec in specs:
        run = RunFolder(folder / spec.run_dir)
        if run.is_complete():
            losses[spec.labels["side"]][spec.labels["seed"]] = float(run.summary().best_val_loss)
        else:
            missing.append(spec.name)
    if not all(losses.values()):
        empty = next(side for side in SIDES if not losses[side])
        raise MoelabError(f"no run of side {empty} finished: see {folder / 'failures.json'}")
    gap = compare("pair", "B", "A", losses["B"], losses["A"])
    return Comparison(labels, common, losses, gap, OUTCOMES.get(gap.outcome, gap.outcome),
                      missing)


def side_summary(losses: dict[int, float]) -> tuple[float, float, int]:
    summary = summarize(list(losses.values()))
    return summary.mean, (summary.std if summary.n > 1 else math.nan), summary.n
