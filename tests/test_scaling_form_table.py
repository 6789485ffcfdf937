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
