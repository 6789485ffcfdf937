"""Each sparse run paired with its (size, budget) cell's dense run of the same seed, and what an
equal-loss fit over such pairs needs: shared by the zero-shot and fine-tuning analyses.

Both read an outcome y against sparsity within cells: dy = b·dL + c·S without an intercept over
the pairs (dL the pair's difference of pretraining loss), CR1 standard errors clustered by
(size, seed) (``moelab.stats.regression.clustered_least_squares``), because the pairs of one
size and seed share a dense partner within a cell and a wsd trunk across budgets.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from typing import Protocol, TypeVar

import numpy as np


class CellRun(Protocol):
    """A run of one (size, budget) cell and seed (a results.csv row, a scored run)."""

    @property
    def size(self) -> str: ...
    @property
    def budget(self) -> str: ...
    @property
    def seed(self) -> str: ...


Run = TypeVar("Run", bound=CellRun)

MIN_PAIRS, MIN_CLUSTERS = 4, 3
"""The smallest clustered fit of two coefficients the analyses make."""


def pairs_with_dense(runs: Sequence[Run], sparsity: Callable[[Run], float]
                     ) -> list[tuple[Run, Run]]:
    """(sparse run, its cell's dense run of the same seed) for every sparse run that has one."""
    def cell_seed(run: Run) -> tuple[str, str, str]:
        return (run.size, run.budget, run.seed)

    dense = {cell_seed(run): run for run in runs if sparsity(run) == 0}
    return [(run, dense[cell_seed(run)]) for run in runs
            if sparsity(run) > 0 and cell_seed(run) in dense]


def fit_blocker(design: np.ndarray, clusters: Sequence[Hashable], unit: str) -> str | None:
    """Why the pairs (rows of ``design``: dL, S) support no clustered fit, in words; None when
    they do. ``unit`` names the clusters in the reason."""
    count = len(set(clusters))
    if count < MIN_CLUSTERS or len(design) < MIN_PAIRS:
        return (f"{len(design)} pairs in {count} {unit} clusters: the clustered fit needs at "
                f"least {MIN_PAIRS} pairs in {MIN_CLUSTERS} clusters")
    if np.linalg.matrix_rank(design) < 2:
        return "the pairs do not vary independently in dL and S"
    return None
