"""``--until-resolved``: a study's seeds added in rounds until every comparison is decided.

The design is fixed before the first run (``moelab.stats.sequential``): the seeds at each look
(the study's seed count, then ``round_seeds`` more a round, up to ``max_seeds``), alpha and the
practical threshold. After each round every comparison (criterion x budget, dense - moe of the
best validation loss, paired by seed) gets its repeated confidence interval; a comparison stops
once it is resolved (the interval excludes 0) or smaller than the threshold (the interval lies
inside +- threshold), and the study stops once every comparison has, or at the maximum. Every
arm trains every seed of a round, so the paired tests of the rest of the report keep their
pairs. plan.json keeps the design and the rounds run (``sequential``); the report recomputes
every look from the run folders (``moelab.study.analyses.rounds``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional

from moelab.codec import from_json
from moelab.errors import MoelabError
from moelab.stats.sequential import (
    METHOD, SequentialDesign, SequentialOutcome, round_looks, run_looks,
)
from moelab.study.arms import COMPARED_ARMS
from moelab.study.folder import CompleteRun
from moelab.stats.intervals import ALPHA

RECORD_KEY = "sequential"
DEFAULT_MAX_SEEDS = 12
DEFAULT_ROUND_SEEDS = 2
DEFAULT_THRESHOLD = 0.01
"""nats/token: a gap smaller than this does not matter in moelab's CPU settings."""
MAX_SEEDS = 1000


@dataclass
class UntilResolved:
    """What ``--until-resolved [--max-seeds M] [--round-seeds R] [--threshold T]`` asks for."""

    max_seeds: int = DEFAULT_MAX_SEEDS
    threshold: float = DEFAULT_THRESHOLD
    round_seeds: int = DEFAULT_ROUND_SEEDS
    alpha: float = ALPHA

    def check(self, first_seeds: int | list[int]) -> int:
        """The first round's seed count; one line naming the bad value: the first round is a
        count of at least 2 seeds, the maximum above it, a positive finite threshold, rounds of
        at least one seed."""
        if not isinstance(first_seeds, int) or first_seeds < 2:
            raise MoelabError(f"--seeds={first_seeds} is invalid with --until-resolved: the first "
                              "round is a seed count of at least 2 (train.seed, train.seed + 1, "
                              "...)")
        if not first_seeds < self.max_seeds <= MAX_SEEDS:
            raise MoelabError(f"--max-seeds={self.max_seeds} is invalid: allowed more than the "
                              f"first round's {first_seeds} seeds and at most {MAX_SEEDS}")
        if not (math.isfinite(self.threshold) and self.threshold > 0):
            raise MoelabError(f"--threshold={self.threshold} is invalid: allowed a positive gap "
                              "in nats/token, e.g. 0.01")
        if self.round_seeds < 1:
            raise MoelabError(f"--round-seeds={self.round_seeds} is invalid: allowed 1 or more")
        return first_seeds

    def design(self, first_seeds: int | list[int], comparisons: int) -> SequentialDesign:
        first = self.check(first_seeds)
        return SequentialDesign(round_looks(first, self.round_seeds, self.max_seeds),
                                self.alpha, self.threshold, comparisons)


def comparison_keys(criteria: list[str], budgets: list[int]) -> list[tuple[Optional[int], str]]:
    """(budget, criterion) of every comparison the rounds decide: the family, fixed in
    advance."""
    each_budget: list[Optional[int]] = [*budgets] or [None]
    return [(budget, criterion) for budget in each_budget for criterion in criteria]


@dataclass
class PlannedComparison:
    budget: Optional[int]
    criterion: str


@dataclass
class SequentialRecord:
    """plan.json's ``sequential`` entry: the design, fixed before the first round, the seed
    order, the family of comparisons and the rounds run so far."""

    method: str
    looks: list[int]
    alpha: float
    alpha_per_comparison: float
    threshold: float
    comparisons: int
    t_critical: list[float]
    seed_order: list[int]
    comparisons_planned: list[PlannedComparison]
    rounds_run: int

    @property
    def design(self) -> SequentialDesign:
        return SequentialDesign(self.looks, self.alpha, self.threshold, self.comparisons)


FIXED_BY_DESIGN = ("looks", "alpha", "threshold", "comparisons", "seed_order")
"""What a folder's later rounds may not change."""


def sequential_record(design: SequentialDesign, seed_order: list[int],
                      keys: list[tuple[Optional[int], str]], rounds_run: int) -> SequentialRecord:
    return SequentialRecord(
        method=METHOD, looks=list(design.looks), alpha=design.alpha,
        alpha_per_comparison=design.alpha / design.comparisons, threshold=design.threshold,
        comparisons=design.comparisons, t_critical=list(design.critical),
        seed_order=list(seed_order),
        comparisons_planned=[PlannedComparison(budget, criterion) for budget, criterion in keys],
        rounds_run=rounds_run)


def read_sequential(plan: dict) -> Optional[SequentialRecord]:
    """The rounds plan.json records; None for a study without ``--until-resolved``."""
    record = plan.get(RECORD_KEY)
    return from_json(SequentialRecord, record) if record else None


def check_same_design(plan: dict, record: SequentialRecord) -> None:
    """A folder's rounds continue only under the design they started with: another threshold,
    maximum or round size chosen after seeing results would void the error control."""
    old = read_sequential(plan)
    if old is None:
        return
    for name in FIXED_BY_DESIGN:
        if getattr(old, name) != getattr(record, name):
            raise MoelabError(f"the study folder already holds rounds with another {name} "
                              f"({getattr(old, name)}, now {getattr(record, name)}): the design "
                              "is fixed before the first round; use another --out folder")


@dataclass
class ComparisonRounds:
    budget: Optional[int]
    criterion: str
    moe_arm: str
    dense_arm: str
    outcome: SequentialOutcome


def analyse(record: SequentialRecord, records: list[CompleteRun]) -> list[ComparisonRounds]:
    """Every planned comparison read look by look from the complete runs, up to the rounds
    run: where it stopped and why."""
    design, order = record.design, record.seed_order
    looks = record.looks[:record.rounds_run]
    results = []
    for entry in record.comparisons_planned:
        budget, criterion = entry.budget, entry.criterion
        moe_arm, dense_arm = COMPARED_ARMS[criterion]
        loss = {(r.arm, r.seed): r.summary.best_val_loss for r in records
                if r.budget == budget and r.summary.best_val_loss is not None}
        by_look = []
        for n in looks:
            by_look.append([loss[dense_arm, seed] - loss[moe_arm, seed] for seed in order[:n]
                            if (dense_arm, seed) in loss and (moe_arm, seed) in loss])
        results.append(ComparisonRounds(budget, criterion, moe_arm, dense_arm,
                                        run_looks(by_look, design)))
    return results


def all_stopped(comparisons: list[ComparisonRounds]) -> bool:
    return all(c.outcome.reason is not None for c in comparisons)
