"""The within-cell analysis of the sweep report and the downstream page, on constructed runs with a known answer: the paired
fit recovers the true c where a pooled fit over the runs does not, and its clustered interval and
p equal a CR1 sandwich and scipy's t written out here."""

import itertools

import numpy as np
import pytest
from scipy import stats

from moelab.sweep.analyses.zero_shot import ScoredRun, equal_loss_fit, paired_with_dense

SIZES, BUDGETS, SPARSITIES, SEEDS = ("s0", "s1", "s2"), ("C1", "C2"), (0.0, 0.5, 0.75, 0.875), ("0", "1", "2")
TRUE_B, TRUE_C = -0.10, 0.04


def constructed_runs(noise: float) -> list[ScoredRun]:
    """Accuracy = the cell's own level + a (size, seed) level + TRUE_B loss + TRUE_C S (+ noise).
    The cells' levels do not follow TRUE_B (bigger cells score higher than their loss says),
    and the loss rises with S inside each cell."""
    rng = np.random.default_rng(7)
    runs = []
    for i, (size, budget) in enumerate(itertools.product(SIZES, BUDGETS)):
        cell_loss, cell_accuracy = 3.0 - 0.2 * i, 0.05 + 0.1 * i
        for seed in SEEDS:
            seed_level = rng.normal(0, 0.01)
            for s in SPARSITIES:
                loss = cell_loss + 0.15 * s + rng.normal(0, 0.02)
                accuracy = (cell_accuracy + seed_level + TRUE_B * (loss - cell_loss) + TRUE_C * s
                            + rng.normal(0, noise))
                runs.append(ScoredRun(size, budget, seed, s, loss, accuracy))
    return runs


def test_the_paired_fit_recovers_the_known_c_where_a_pooled_fit_does_not():
    runs = constructed_runs(noise=0.0)
    effect = equal_loss_fit(paired_with_dense(runs))
    assert effect.pairs == 6 * 3 * 3 and effect.clusters == 9
    assert effect.sparsity.value == pytest.approx(TRUE_C, abs=1e-9)
    assert effect.loss.value == pytest.approx(TRUE_B, abs=1e-9)
    pooled = np.linalg.lstsq(np.array([[1.0, r.loss, r.sparsity] for r in runs]),
                             np.array([r.accuracy for r in runs]), rcond=None)[0]
    assert abs(pooled[2] - TRUE_C) > 0.02  # the cells' levels leak into a pooled c


def test_the_clustered_interval_and_p_equal_a_cr1_sandwich_by_hand():
    runs = constructed_runs(noise=0.01)
    dense = {(r.size, r.budget, r.seed): r for r in runs if r.sparsity == 0}
    rows = [(r.size, r.seed, r.loss - dense[r.size, r.budget, r.seed].loss, r.sparsity,
             r.accuracy - dense[r.size, r.budget, r.seed].accuracy) for r in runs if r.sparsity > 0]
    x = np.array([[row[2], row[3]] for row in rows])
    y = np.array([row[4] for row in rows])
    beta = np.linalg.solve(x.T @ x, x.T @ y)
    e = y - x @ beta
    groups = sorted({row[:2] for row in rows})
    meat = np.zeros((2, 2))
    for g in groups:
        score = sum(x[i] * e[i] for i, row in enumerate(rows) if row[:2] == g)
        meat += np.outer(score, score)
    inv = np.linalg.inv(x.T @ x)
    n, big_g = len(y), len(groups)
    se = np.sqrt(np.diag(inv @ meat @ inv) * big_g / (big_g - 1) * (n - 1) / (n - 2))
    df = big_g - 1
    effect = equal_loss_fit(paired_with_dense(runs))
    assert effect.sparsity.df == df
    assert effect.sparsity.value == pytest.approx(beta[1], rel=1e-9)
    assert effect.sparsity.se == pytest.approx(se[1], rel=1e-9)
    half = stats.t.ppf(0.975, df) * se[1]
    assert effect.sparsity.ci == pytest.approx([beta[1] - half, beta[1] + half], rel=1e-9)
    assert effect.sparsity.p == pytest.approx(2 * stats.t.sf(abs(beta[1] / se[1]), df), rel=1e-9)
    assert effect.sparsity.ci[0] < TRUE_C < effect.sparsity.ci[1]


def test_a_sparse_run_without_a_dense_partner_of_its_seed_is_left_out():
    runs = [r for r in constructed_runs(noise=0.0)
            if not (r.size == "s0" and r.budget == "C1" and r.seed == "0" and r.sparsity == 0)]
    assert len(paired_with_dense(runs)) == 6 * 3 * 3 - 3
