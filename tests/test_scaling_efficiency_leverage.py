"""Efficiency leverage from fitted laws (moelab.scaling.efficiency_leverage), against
Chinchilla's closed-form compute-optimal loss and a brute-force grid."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import numpy as np
import pytest

from moelab.scaling.efficiency_leverage import (
    DenseLaw, OptimalDenseCurve, compute, dense_compute_at_loss, optimal_dense_loss, render)
from moelab.scaling.laws import CHINCHILLA, SPARSITY

HOFFMANN = {"E": 1.69, "A": 406.4, "B": 410.7, "alpha": 0.34, "beta": 0.28}
SPARSE_TRUTH = {"a": 30.0, "b": 400.0, "c": 0.3, "d": 200.0, "e": 1.2, "alpha": 0.25,
                "beta": 0.3, "lam": -0.4, "delta": 0.5, "gamma": 0.35}


def closed_form_optimal_loss(p, flops):
    """Hoffmann et al. eq. 4: N* = G (C/6)^a, D* = (C/6)^b / G, G = (alpha A / (beta B))^(1 /
    (alpha + beta)), a = beta / (alpha + beta), b = alpha / (alpha + beta)."""
    total = p["alpha"] + p["beta"]
    g = (p["alpha"] * p["A"] / (p["beta"] * p["B"])) ** (1 / total)
    n_opt = g * (flops / 6) ** (p["beta"] / total)
    d_opt = (flops / 6) ** (p["alpha"] / total) / g
    return p["E"] + p["A"] / n_opt ** p["alpha"] + p["B"] / d_opt ** p["beta"]


@pytest.mark.parametrize("flops", [1e15, 1e19, 1e23])
def test_optimal_dense_loss_is_chinchillas_closed_form(flops):
    dense = DenseLaw(CHINCHILLA, HOFFMANN)
    assert optimal_dense_loss(dense, flops) == pytest.approx(
        closed_form_optimal_loss(HOFFMANN, flops), rel=1e-9)


def test_dense_compute_at_loss_inverts_the_optimal_loss():
    dense = DenseLaw(CHINCHILLA, HOFFMANN)
    target = closed_form_optimal_loss(HOFFMANN, 3e20)
    assert dense_compute_at_loss(dense, target) == pytest.approx(3e20, rel=1e-5)
    assert dense_compute_at_loss(dense, HOFFMANN["E"] - 0.01) is None  # below the floor


@dataclass
class Row:
    size: str
    S: float
    E: int
    N_total: float
    N_active: float
    D: float
    C: float
    best_val_loss: float
    tokens_per_s: Optional[float]


def sparse_loss(n, d, s):
    p, u = SPARSE_TRUTH, 1.0 - s
    return (p["a"] / n ** p["alpha"] + p["b"] / d ** p["beta"] + p["c"] / u ** p["lam"]
            + p["d"] / (u ** p["delta"] * n ** p["gamma"]) + p["e"])


def brute_force_dense_flops(loss):
    """Least C on a grid of C (and of N at each C) whose best dense loss reaches ``loss``."""
    flops = np.geomspace(1e8, 1e20, 6001)[:, None]
    params = np.geomspace(1e3, 1e12, 1801)[None, :]
    best = sparse_loss(params, flops / (6 * params), 0.0).min(axis=1)
    return float(flops[np.argmax(best <= loss), 0])


def test_leverage_of_a_sweep_point_matches_brute_force_in_flops_and_seconds():
    n_total, s, tokens = 2e7, 0.75, 4e9
    n_active = 0.3 * n_total
    rows = [Row("s1", s, 4, n_total, n_active, tokens, 6 * n_active * tokens, 3.0, 2000.0),
            Row("s1", 0.0, 1, n_total, n_total, tokens, 6 * n_total * tokens, 3.1, 1000.0)]
    record = compute(rows, SPARSITY, SPARSE_TRUTH, SPARSITY, SPARSE_TRUTH,
                     [SPARSE_TRUTH] * 5, [SPARSE_TRUTH] * 5)
    point = record.points[0]
    assert point.law_loss == pytest.approx(sparse_loss(n_total, tokens, s), rel=1e-12)
    expected = brute_force_dense_flops(point.law_loss) / (6 * n_active * tokens)
    assert point.leverage == pytest.approx(expected, rel=0.01)  # the grid's step is 0.5 %
    # Identical replicates: the tabulated curve's C_dense agrees with the bisection's.
    assert point.ci == pytest.approx([point.leverage, point.leverage], rel=1e-3)
    # Seconds: dense runs take (D / 1000 tok/s) per 6 N_total D FLOPs; the MoE D / 2000 tok/s.
    dense_rate = (tokens / 1000.0) / (6 * n_total * tokens)
    assert point.leverage_seconds == pytest.approx(
        point.C_dense * dense_rate / (tokens / 2000.0), rel=1e-9)
    assert "## Efficiency leverage" in render(record) and render(None) == ""


def test_an_unreachable_loss_is_unbounded_not_a_number():
    floor = {**HOFFMANN, "E": 4.0}  # every dense model stays above 4
    rows = [Row("s1", 0.5, 2, 1e7, 6e6, 1e9, 3.6e16, 2.4, None)]
    record = compute(rows, CHINCHILLA, floor, SPARSITY, SPARSE_TRUTH)
    assert record.points[0].law_loss < 4.0
    assert record.points[0].leverage is None and record.points[0].ci == []
    assert "unbounded" in render(record)
    assert record.points[0].leverage_seconds is None


@pytest.mark.parametrize("law, params", [(CHINCHILLA, HOFFMANN), (SPARSITY, SPARSE_TRUTH)])
def test_the_tabulated_curve_inverts_as_the_closed_form_and_the_bisection_do(law, params):
    dense = DenseLaw(law, params)
    curve = OptimalDenseCurve.of(dense)
    for flops in (3e12, 1e17, 4e21):
        target = (closed_form_optimal_loss(HOFFMANN, flops) if law is CHINCHILLA
                  else brute_force_loss(flops))
        assert curve.compute_at_loss(target) == pytest.approx(flops, rel=1e-3)
        assert curve.compute_at_loss(target) == pytest.approx(
            dense_compute_at_loss(dense, target), rel=1e-3)
    assert curve.compute_at_loss(params.get("E", params.get("e")) - 0.01) is None


def brute_force_loss(flops):
    """The dense sparsity law's least loss at ``flops`` on a fine grid of N (S = 0)."""
    params = np.geomspace(1e3, 1e15, 200001)
    return float(sparse_loss(params, flops / (6 * params), 0.0).min())
