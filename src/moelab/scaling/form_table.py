"""Model selection across law forms as one table: held-out error, lack of fit against the pure
error of replicate seeds, and the number of parameters, for every form the data can hold.

Each candidate form is fitted to the points outside the held-out set; a form whose columns the
data lack, or that the fitted points cannot identify (one value of a variable, no more distinct
points than parameters), gets a row that says why instead of numbers. The lack-of-fit F is
``moelab.scaling.form_tests.lack_of_fit`` on the fitted points, with the pure error grouped by
every column any candidate reads, so all forms are judged against one noise estimate. No row is
declared the winner here: the table is what the reader compares (a lower held-out error with
fewer parameters and a lack of fit that is not significant is the form the data support).

A self-contained analysis (record, ``compute``, ``render``) for a report's registry; torch-free.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Optional

import numpy as np

from moelab.errors import MoelabError
from moelab.scaling.fit_record import check_identifiable, fit_columns
from moelab.scaling.form_tests import lack_of_fit, pure_error, residual_ss
from moelab.scaling.laws import get_law
from moelab.scaling.table import holdout_mask, select


@dataclass
class FormRow:
    """One law form's row of the sweep's form table: its size and how it fits and predicts."""

    law: str
    """The law form's name (``moelab fit --law``)."""
    num_params: int
    """Fitted coefficients of the form."""
    fitted_points: int = 0
    """Runs the form was fitted on (the held-out ones excluded)."""
    holdout_mae: Optional[float] = None
    """Mean |predicted - actual| loss on the held-out points."""
    lack_of_fit_F: Optional[float] = None
    """F statistic of the form's lack of fit against the seeds' pure error (None: no replicates)."""
    lack_of_fit_p: Optional[float] = None
    """p-value of that F test: small means the form misses structure the seeds resolve."""
    lack_of_fit_df: Optional[list[int]] = None
    """The F test's degrees of freedom: [lack of fit, pure error]."""
    not_fitted: str = ""
    """Why the form has no numbers ("" when fitted)."""


@dataclass
class FormTable:
    """Every law form on one sweep, side by side (the report's form table)."""

    holdout: str
    """The sweep's holdout rule (e.g. ``S=max``): which runs the fits did not see."""
    held_out_points: int
    """Runs held out of every fit."""
    pure_error_df: int
    """Degrees of freedom of the pure error (runs less distinct cells)."""
    rows: list[FormRow]
    """One row per law form."""


def compute(columns: dict[str, np.ndarray], law_names: Sequence[str], holdout: str,
            max_starts: Optional[int] = None) -> Optional[FormTable]:
    """One row per form of ``law_names`` fitted to ``columns`` without the ``holdout`` points;
    None when the holdout leaves no point out, or none in (nothing to compare or to fit)."""
    try:
        held = holdout_mask(columns, holdout)
    except MoelabError:  # a spec that holds out none or all of the points
        return None
    fitted = select(columns, ~held)
    keys = tuple(dict.fromkeys(key for name in law_names for key in ("N", "D", *get_law(name).columns)
                               if key in fitted))
    pure = pure_error(fitted, keys)
    rows = [_row(name, columns, fitted, holdout, pure, max_starts) for name in law_names]
    return FormTable(holdout=holdout, held_out_points=int(held.sum()), pure_error_df=pure.df,
                     rows=rows)


def _row(name, columns, fitted, holdout, pure, max_starts) -> FormRow:
    law = get_law(name)
    row = FormRow(law=name, num_params=law.num_params)
    missing = [key for key in law.columns if key not in columns]
    if missing:
        row.not_fitted = f"no {', '.join(missing)} column"
        return row
    try:
        check_identifiable(name, columns, holdout, "the table")
        record = fit_columns(name, columns, holdout=holdout, max_starts=max_starts)
    except MoelabError as exc:
        row.not_fitted = str(exc).split(": ", 1)[-1]
        return row
    row.fitted_points = record.n_points
    row.holdout_mae = record.holdout.mean_abs_error if record.holdout else None
    test = lack_of_fit(residual_ss(law, record.theta, fitted), law.num_params, pure)
    if test is not None:
        row.lack_of_fit_F, row.lack_of_fit_p, row.lack_of_fit_df = test.F, test.p, test.df
    return row


def render(record: Optional[FormTable]) -> str:
    """The markdown section ("" for none)."""
    if record is None:
        return ""
    lines = []
    for row in record.rows:
        if row.not_fitted:
            lines.append(f"| `{row.law}` | {row.num_params} | not fitted: {row.not_fitted} | | |")
            continue
        mae = "–" if row.holdout_mae is None else f"{row.holdout_mae:.4f}"
        fit = ("–" if row.lack_of_fit_F is None or row.lack_of_fit_df is None else
               f"F({row.lack_of_fit_df[0]}, {row.lack_of_fit_df[1]}) = {row.lack_of_fit_F:.3g}, "
               f"p = {_p(row.lack_of_fit_p)}")
        lines.append(f"| `{row.law}` | {row.num_params} | {row.fitted_points} | {mae} | {fit} |")
    return ("## Law forms compared\n\n"
            f"Every form fitted without the {record.held_out_points} points of "
            f"`{record.holdout}`; held-out error is the mean |predicted − actual| loss on them, "
            "lack of fit the F of the form's misfit of the replicate groups' means against the "
            f"seeds' pure error ({record.pure_error_df} degrees of freedom; – without replicate "
            "seeds or spare groups). A lower held-out error with fewer parameters, and a lack of "
            "fit that is not significant, is the form these data support.\n\n"
            "| form | parameters | fitted points | held-out error | lack of fit |\n"
            "|---|---:|---:|---:|---|\n" + "\n".join(lines) + "\n")


def _p(value: Optional[float]) -> str:
    return "–" if value is None or math.isnan(value) else f"{value:.2g}"
