"""Efficiency leverage of a study's MoE against its dense arms at several budgets
(moelab.scaling.leverage_budgets): read off a dense curve known by construction."""

from __future__ import annotations

import math

import pytest

from moelab.scaling.leverage_budgets import compute, dense_compute_at, render

import numpy as np

BUDGETS = [1e15, 4e15, 1.6e16]


def dense_loss(flops: float) -> float:
    """A dense curve linear in log C: 4.0 at 1e15, 0.1 lower per e-fold of compute."""
    return 4.0 - 0.1 * math.log(flops / 1e15)


def test_a_loss_on_the_dense_curve_gives_its_compute_by_hand():
    budgets = np.array(BUDGETS)
    losses = np.array([dense_loss(c) for c in BUDGETS])
    # 3.9 is one e-fold above 1e15 on a curve linear in log C: e x 1e15.
    assert dense_compute_at(budgets, losses, 3.9)[0] == pytest.approx(math.e * 1e15)
    assert dense_compute_at(budgets, losses, 4.2) == (None, "below the smallest budget")
    assert dense_compute_at(budgets, losses, 3.0) == (None, "above the largest budget")


def test_moe_two_e_folds_ahead_has_leverage_e_squared_and_the_seeds_give_an_interval():
    dense = {c: {s: dense_loss(c) + noise for s, noise in enumerate((-0.002, 0.0, 0.002))}
             for c in BUDGETS}
    # The MoE at 1e15 and 2e15 reaches what dense reaches with e^2 times the compute.
    moe = {c: {s: dense_loss(c * math.e ** 2) + noise for s, noise in enumerate((-0.001, 0.001))}
           for c in (1e15, 2e15)}
    record = compute({"dense_active": dense}, "moe", moe, replicates=500)
    assert [row.leverage for row in record.rows] == pytest.approx([math.e ** 2] * 2, rel=1e-9)
    for row in record.rows:
        low, high = row.ci
        assert low < math.e ** 2 < high and high / low < 1.2  # the seeds' small noise
    assert "## Efficiency leverage" in render(record)


def test_a_moe_loss_beyond_the_dense_budgets_is_not_a_number():
    dense = {c: {0: dense_loss(c), 1: dense_loss(c)} for c in BUDGETS}
    moe = {1.6e16: {0: 3.0, 1: 3.0}}  # far below anything dense reached
    record = compute({"dense_total": dense}, "moe", moe, replicates=50)
    row = record.rows[0]
    assert row.leverage is None and row.beyond == "above the largest budget"
    assert row.replicates_beyond == 50 and row.ci == []
    assert "beyond the dense budgets (above the largest budget)" in render(record)


def test_no_record_without_a_falling_dense_curve():
    flat = {c: {0: 3.5, 1: 3.5} for c in BUDGETS}
    assert compute({"dense": flat}, "moe", {1e15: {0: 3.4}}) is None
    assert render(None) == ""
