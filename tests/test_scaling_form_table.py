"""The model-selection table across law forms (moelab.scaling.form_table): its held-out error
and lack-of-fit F against the same quantities recomputed here with numpy and scipy."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from moelab.scaling.form_table import compute, render
from moelab.scaling.laws import SPARSITY_FORMS

TRUTH = {"b": 400.0, "d": 200.0, "e": 1.2, "beta": 0.3, "delta": 0.5, "gamma": 0.35}


def replicated_points(seed: int = 3):
    """The effective-size law on a grid of (N, D, S), each point twice with 0.5 % noise."""
    grids = np.meshgrid(np.geomspace(1e6, 1e8, 3), np.geomspace(1e8, 1e10, 3),
                        [0.0, 0.5, 0.75, 0.875])
    columns = {key: np.tile(g.ravel(), 2) for key, g in zip(("N", "D", "S"), grids)}
    clean = SPARSITY_FORMS[3].predict_loss(TRUTH, **columns)
    columns["loss"] = clean * np.exp(np.random.default_rng(seed).normal(0, 0.005, clean.size))
    return columns


def test_rows_match_an_independent_lack_of_fit_and_holdout_computation():
    columns = replicated_points()
    table = compute(columns, ["sparsity-effective-size", "chinchilla", "granularity"], "S=max",
                    max_starts=200)
    assert table is not None and table.held_out_points == 18
    rows = {row.law: row for row in table.rows}
    assert rows["granularity"].not_fitted == "no G column"
    fitted = {key: value[columns["S"] < 0.875] for key, value in columns.items()}
    # Pure error by hand: each (N, D, S) twice, so 27 groups, 27 degrees of freedom.
    assert len(fitted["loss"]) == 54 and table.pure_error_df == 27
    for name, row in rows.items():
        if name == "granularity":
            continue
        assert row.fitted_points == 54
        assert row.lack_of_fit_df == [27 - row.num_params, 27]
        # The F's p-value is scipy's F survival function of the F the row reports.
        assert row.lack_of_fit_p == pytest.approx(stats.f.sf(row.lack_of_fit_F, *row.lack_of_fit_df))
    # The true form fits within the noise; Chinchilla, blind to S, does not.
    assert rows["sparsity-effective-size"].lack_of_fit_p > 0.01
    assert rows["chinchilla"].lack_of_fit_p < 1e-6
    assert rows["sparsity-effective-size"].holdout_mae < rows["chinchilla"].holdout_mae
    text = render(table)
    assert "## Law forms compared" in text and "not fitted: no G column" in text


def test_no_table_without_held_out_points():
    assert compute(replicated_points(), ["chinchilla"], "S>2") is None
    assert render(None) == ""


CLARK_TRUTH = {"a": -0.07, "b": -0.05, "c": 0.003, "d": 2.2}


def clark_sweep(seed: int = 5):
    """A synthetic sweep of top-1 MoEs (E experts, S = 1 - 1/E) at one token budget, every point
    twice, its log loss off Clark et al.'s form by at most 4e-4: inside the fit's Huber delta
    (1e-3), so the Huber fit is the least-squares fit."""
    grids = np.meshgrid(np.geomspace(1e6, 1e8, 4), [1.0, 2.0, 4.0, 8.0, 16.0])
    active, experts = (np.tile(g.ravel(), 2) for g in grids)
    log_loss = (CLARK_TRUTH["a"] * np.log(active) + CLARK_TRUTH["b"] * np.log(experts)
                + CLARK_TRUTH["c"] * np.log(active) * np.log(experts) + CLARK_TRUTH["d"])
    noise = np.random.default_rng(seed).uniform(-4e-4, 4e-4, active.size)
    return {"N": active * (1 + 0.5 * (experts - 1)), "N_active": active, "E": experts,
            "S": 1 - 1 / experts, "D": np.full(active.size, 1e9), "loss": np.exp(log_loss + noise)}


def test_clarks_row_is_the_least_squares_fit_recomputed_with_numpy_and_scipy():
    columns = clark_sweep()
    table = compute(columns, ["clark", "chinchilla"], "S=max")
    rows = {row.law: row for row in table.rows}
    assert rows["chinchilla"].not_fitted.startswith("D takes one value")
    row = rows["clark"]
    held = columns["S"] == columns["S"].max()
    design = np.column_stack([np.log(columns["N_active"]), np.log(columns["E"]),
                              np.log(columns["N_active"]) * np.log(columns["E"]),
                              np.ones(held.size)])
    log_loss = np.log(columns["loss"])
    coef, *_ = np.linalg.lstsq(design[~held], log_loss[~held], rcond=None)
    # Held-out error: mean |predicted - actual| loss on the 8 held-out points (E = 16).
    mae = np.mean(np.abs(np.exp(design[held] @ coef) - columns["loss"][held]))
    assert row.num_params == 4 and row.fitted_points == 32 and table.held_out_points == 8
    assert row.holdout_mae == pytest.approx(mae, rel=1e-4)
    # Lack of fit: 16 replicate groups of 2; residual SS of the least-squares fit against the
    # pure error about each pair's mean.
    fitted = log_loss[~held].reshape(2, 16)
    pure_ss = float(np.sum((fitted - fitted.mean(axis=0)) ** 2))
    residual_ss = float(np.sum((log_loss[~held] - design[~held] @ coef) ** 2))
    df_fit, df_pure = 16 - 4, 16
    f_value = (residual_ss - pure_ss) / df_fit / (pure_ss / df_pure)
    assert row.lack_of_fit_df == [df_fit, df_pure]
    assert row.lack_of_fit_F == pytest.approx(f_value, rel=1e-3)
    assert row.lack_of_fit_p == pytest.approx(stats.f.sf(f_value, df_fit, df_pure), rel=1e-2)
