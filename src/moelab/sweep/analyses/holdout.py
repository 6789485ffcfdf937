"""The held-out check of the law the report uses: the same form refitted without the grid's
held-out points (``holdout``, e.g. the largest S), and its errors on them. Written as
``fit_holdout.json``."""

from __future__ import annotations

from moelab.report import format_count, format_number, markdown_table
from moelab.report.analysis import Analysis, Findings
from moelab.scaling.fit_record import LawFit
from moelab.sweep.analyses.law_form import chosen_check
from moelab.sweep.analyses.common import several_sparsities
from moelab.sweep.analyses.law_fit import fit_or_none
from moelab.sweep.folder import SweepFolder


def compute(folder: SweepFolder, findings: Findings) -> LawFit | None:
    if folder.results is None:
        return None
    if several_sparsities(folder):
        chosen = chosen_check(findings)
        return chosen.fit_holdout if chosen else None
    return fit_or_none(folder, 0, folder.grid.holdout)


def render(record: LawFit | None, folder: SweepFolder, findings: Findings) -> str:
    if record is None or folder.results is None:
        return ""
    held = record.holdout
    assert held is not None  # a fit with a holdout has its errors
    rows = [[f"{p.S:g}", format_count(p.N), format_count(p.D), format_number(p.loss),
             format_number(p.predicted), f"{(p.predicted - p.loss) / p.loss:+.2%}"]
            for p in held.points]
    return (f"## Held-out check ({held.spec})\n\n"
            f"The law refitted without the {held.n_points} points where {held.spec} "
            f"(`fit_holdout.json`) predicts them with mean |log error| "
            f"{held.mean_abs_log_error:.4f}, loss RMSE {held.rmse_loss:.4f} and at most "
            f"{held.max_abs_relative_error:.2%} relative error.\n\n"
            + markdown_table(["S", "N", "D", "loss", "predicted", "error"], rows, "rrrrrr"))


ANALYSIS: Analysis[SweepFolder, LawFit] = Analysis(
    "holdout", compute, render, file="fit_holdout.json", record_type=LawFit)
