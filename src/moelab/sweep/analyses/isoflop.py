"""IsoFLOP curves (FLOPs-budget sweeps): per budget, the loss fitted as a parabola in log N (one
sparsity) or a quadratic surface in (log N, -log(1 - S)), its minimum N* (and S*), the exponent
of N*(C), how far each run's actual compute is off its budget, a parabola per sparsity and
budget, and S*(C) read off those minima without a law (``moelab.scaling.isoflop``,
``isoflop_sparsity``; its section in ``isoflop_minima``). Written as ``isoflop.json``."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

import numpy as np
from matplotlib.lines import Line2D

from moelab.report import format_count, format_number, markdown_table, new_figure, save_figure
from moelab.report.analysis import Analysis, Findings
from moelab.report.axes import distinct_labels, format_axis, format_count_tick, format_flops_tick, loss_label
from moelab.scaling.family import active_params
from moelab.scaling.fit_record import LawFit
from moelab.scaling.isoflop import (
    COMPUTE_TOLERANCE, BudgetOptimum, IsoflopAnalysis, IsoflopPoints, ParabolaBudget,
    SurfaceBudget, budget_fit_loss, compute_deviation, isoflop_analysis, uses_surface,
)
from moelab.scaling.isoflop_sparsity import SparsityOptima, sparsity_isoflop
from moelab.scaling.laws import get_law
from moelab.sweep.analyses.common import (
    optimum_tokens_per_param, palette, poorly_supported_text, tokens_per_param_caption,
)
from moelab.sweep.analyses.isoflop_minima import isoflop_optima_text
from moelab.sweep.analyses.law_fit import ANALYSIS as LAW_FIT
from moelab.sweep.folder import SweepFolder
from moelab.sweep.results_csv import ResultRow


@dataclass
class ComputeDeviation:
    """How far each run's actual compute C = 6 N_active D is off the budget it was planned for."""

    tolerance: float
    """The largest |C / C_budget - 1| not flagged."""
    max_abs: float
    """The largest |C / C_budget - 1| of any run."""
    per_run: dict[str, float]
    """Run -> C / C_budget - 1."""
    off_budget_runs: dict[str, float]
    """The runs more than ``tolerance`` off."""


@dataclass
class IsoflopRecord:
    """isoflop.json (FLOPs-budget sweeps): the analysis of all points and of each sparsity,
    read and written by ``moelab.codec``."""

    all_points: IsoflopAnalysis
    """The analysis of every run together (a surface or a parabola per budget)."""
    per_sparsity: dict[float, IsoflopAnalysis]
    """A parabola analysis of each sparsity's runs on their own."""
    surface: bool
    """A surface in (log N, S) per budget (several sparsities), else a parabola in log N."""
    compute_deviation: ComputeDeviation
    """How far each run's actual compute is off its budget."""
    sparsity_optima: Optional[SparsityOptima] = field(default=None, metadata={"omit_none": True})
    """N*, L* per budget and sparsity, S*(C) and its trend with C, read off the IsoFLOP minima
    without a law (``moelab.scaling.isoflop_sparsity``); None when too few cells have one."""


def budget_column(rows: list[ResultRow]) -> np.ndarray | None:
    """The planned FLOP budget per run; None for a token-budget sweep (no IsoFLOP curves)."""
    values = [row.C_budget for row in rows]
    if not values or any(v is None for v in values):
        return None
    return np.array(values, dtype=np.float64)


def _isoflop_record(rows: list[ResultRow], columns: dict,
                    replicates: int) -> IsoflopRecord | None:
    budgets = budget_column(rows)
    if budgets is None:
        return None
    seeds = np.array([row.seed for row in rows])
    # The seeds let each IsoFLOP fit's residuals be compared with the seeds' noise.
    points = IsoflopPoints(params=columns["N"], flops=budgets, loss=columns["loss"],
                           sparsity=columns["S"], params_active=columns["N_active"], seed=seeds)
    # Actual compute (results.csv's C) against the budget each run was grouped under.
    deviation = compute_deviation([row.C for row in rows], budgets)
    off_budget = np.flatnonzero(np.abs(deviation) > COMPUTE_TOLERANCE)
    return IsoflopRecord(
        all_points=isoflop_analysis(points), per_sparsity=_per_sparsity(points),
        surface=bool(uses_surface(points)),
        compute_deviation=ComputeDeviation(
            tolerance=COMPUTE_TOLERANCE, max_abs=float(np.max(np.abs(deviation))),
            per_run={row.run: float(d) for row, d in zip(rows, deviation)},
            off_budget_runs={rows[i].run: float(deviation[i]) for i in off_budget}),
        sparsity_optima=sparsity_isoflop(points, seeds, replicates=replicates))


def _per_sparsity(points: IsoflopPoints) -> dict[float, IsoflopAnalysis]:
    """A parabola analysis of each sparsity's runs on their own."""
    return {float(sparsity): isoflop_analysis(points.subset(points.sparsity == sparsity))
            for sparsity in np.unique(points.sparsity)}


def compute(folder: SweepFolder, findings: Findings) -> IsoflopRecord | None:
    if folder.results is None or folder.settings is None:
        return None
    return _isoflop_record(folder.rows, folder.law_columns(),
                           folder.settings.bootstrap_replicates)


def render(record: IsoflopRecord | None, folder: SweepFolder, findings: Findings) -> str:
    if record is None or folder.results is None:
        return ""
    return _isoflop_section(folder, record, findings.record(LAW_FIT))


def _isoflop_section(folder: SweepFolder, isoflop: IsoflopRecord, fit: LawFit | None) -> str:
    assert folder.settings is not None
    rows, columns, shared = folder.rows, folder.law_columns(), folder.settings.shared_fraction
    budgets = np.array([row.C_budget for row in rows], dtype=np.float64)
    points = IsoflopPoints(params=columns["N"], flops=budgets, loss=columns["loss"],
                           sparsity=columns["S"])
    deviation = np.array([isoflop.compute_deviation.per_run[row.run] for row in rows])
    analysis, surface = isoflop.all_points, isoflop.surface
    # The lines need N_active(N, S); with only dense runs it is N whatever the shared fraction.
    figure = isoflop_figure(folder.figure("isoflop.png"), points, fit,
                            0.0 if shared is None else shared, isoflop_fits=analysis)
    text = "## IsoFLOP analysis\n\n" + (
        "Per compute budget, the loss is fitted as a quadratic surface in (log N, -log(1 - S)) "
        "and minimised inside the observed box (after Abnar et al.'s eq. 8, without its "
        "(log N x -log(1 - S))^2 term); `isoflop.json` also holds a "
        "parabola in log N per sparsity and budget (where a budget has 3 sizes).\n\n"
        if surface else
        "The runs have one sparsity, so per compute budget the loss is fitted as a parabola in "
        "log N (Hoffmann et al.'s approach 2); its vertex is N*.\n\n") + _estimator_sentence(analysis)
    text += _budget_table(analysis.budgets, budgets, deviation, surface)
    text += poorly_supported_text("vertices", analysis.budgets)
    text += _exponent_sentence(analysis)
    text += _compute_deviation_sentence(deviation, isoflop.compute_deviation.off_budget_runs,
                                        isoflop.compute_deviation.tolerance)
    if figure:
        text += ("\n![IsoFLOP curves per sparsity](figures/isoflop.png)\n\n"
                 "Points: runs; lines: the fitted law along each budget (D = C / (6 N_active)); "
                 "dashed: the budget's IsoFLOP fit above, star: its N* (hollow: at the edge of "
                 "the data). " + tokens_per_param_caption(rows))
    if isoflop.sparsity_optima is not None:
        seeds = len({row.seed for row in rows})
        text += isoflop_optima_text(isoflop.sparsity_optima, seeds,
                                    folder.figure("isoflop_optima.png"))
    return text


def _estimator_sentence(analysis: IsoflopAnalysis) -> str:
    """Which sizes each vertex is read from (``moelab.scaling.isoflop_vertex``)."""
    if analysis.estimator == "global":
        return "Each parabola goes through every size of its budget.\n\n"
    return (f"Each parabola in log N goes through the sizes within {analysis.window_factor:g}x "
            "of its own vertex only (at least 3: far from its minimum an IsoFLOP curve is no "
            "parabola, and one through a wide grid is pulled towards its longer side); the "
            "surface goes through each sparsity's windowed sizes. `isoflop.json` lists each "
            "vertex's sizes and diagnostics (support).\n\n")


def _sizes_used(row: BudgetOptimum) -> str:
    """How many of the budget's sizes its vertex (each sparsity's, for a surface) used."""
    supports = ([row.support] if isinstance(row, ParabolaBudget)
                else list(row.support.values()))
    if not supports:
        return "–"
    return "/".join(f"{len(s.sizes_used)} of {s.n_sizes}" for s in supports)


def _budget_table(analysis_rows: list[BudgetOptimum], budgets: np.ndarray,
                  deviation: np.ndarray, surface: bool) -> str:
    if not analysis_rows:
        if surface:
            return "Too few points per budget for the surface (6 needed, 2 sizes, 2 sparsities).\n"
        return "No budget has 3 sizes whose losses a parabola with a minimum fits.\n"

    def worst_deviation(flops):
        at_budget = deviation[np.isclose(budgets, flops, rtol=1e-6)]
        return f"{at_budget[np.argmax(np.abs(at_budget))]:+.1%}"

    if surface:
        rows = [[f"{b.flops:.3g}", b.n_points, _sizes_used(b), format_count(b.params),
                 format_count(b.params_active), f"{b.sparsity:.3f}",
                 optimum_tokens_per_param(b.flops, b.params, b.params_active),
                 format_number(b.loss), worst_deviation(b.flops),
                 "yes" if b.at_edge else ""] for b in analysis_rows
                if isinstance(b, SurfaceBudget)]
        return (markdown_table(["C", "points", "sizes used per S", "N*", "N_active*", "S*",
                                "D*/N* (total / active)", "loss*", "worst C/C_budget - 1",
                                "at edge"], rows, "rrrrrrrrrl")
                + "\n'At edge': the surface's minimum lies on the edge of the sizes and sparsities "
                  "tried, so the optimum is at least that far out; such budgets are left out of "
                  "the exponent fit.\n")
    rows = [[f"{b.flops:.3g}", b.n_points, _sizes_used(b), format_count(b.params),
             format_number(b.loss), worst_deviation(b.flops),
             "" if b.inside_data else "yes"] for b in analysis_rows]
    return (markdown_table(["C", "points", "sizes used", "N*", "loss*", "worst C/C_budget - 1",
                            "outside data"], rows, "rrrrrrl")
            + "\n'Outside data': the parabola's vertex lies beyond the sizes tried at that "
              "budget, an extrapolation; such budgets are left out of the exponent fit.\n")


def _exponent_sentence(analysis: IsoflopAnalysis) -> str:
    exponent, outside = analysis.params_exponent, analysis.outside_data
    left_out = (f"; left out (optimum not inside the data): C = "
                f"{', '.join(f'{c:.3g}' for c in outside)}" if outside else "")
    if exponent:
        ci = exponent.ci
        interval = (f" (95 % t interval [{ci[0]:.3f}, {ci[1]:.3f}] from the budgets' scatter "
                    "about the line)" if ci else " (no interval from 2 budgets)")
        return (f"\nAcross the {exponent.n_budgets} budgets with their optimum inside the data, "
                f"N*(C) ~ C^{exponent.exponent:.3f}{interval}{left_out}.\n")
    inside = len(analysis.budgets) - len(outside)
    if analysis.budgets:
        return (f"\nNo exponent N*(C): it needs 2 budgets with their optimum inside the data, "
                f"and {inside} have it{left_out}.\n")
    return ""


def _compute_deviation_sentence(deviation: np.ndarray, off_budget: dict[str, float],
                                tolerance: float) -> str:
    text = ("\nRuns are grouped by their planned budget C_budget, but D is rounded down to whole "
            "optimizer steps, so a run's actual compute C = 6 N_active D is off its budget by up "
            f"to {np.max(np.abs(deviation)):.1%} here (`isoflop.json`, compute_deviation). ")
    if not off_budget:
        return text + f"No run is more than {tolerance:.0%} off.\n"
    runs = ", ".join(f"`{run}` ({value:+.1%})" for run, value in off_budget.items())
    return (text + f"Runs more than {tolerance:.0%} off (kept in the fits, but not quite "
            f"on their budget's curve): {runs}.\n")


ISOFLOP_FIT_STYLE: dict[str, Any] = {"linestyle": "--", "linewidth": 1.2, "gid": "isoflop-fit"}
NO_MINIMUM_STYLE: dict[str, Any] = {"linestyle": ":", "linewidth": 1.0, "alpha": 0.6,
                                    "gid": "isoflop-fit-no-minimum"}
"""A fitted curve that opens downward (a maximum, no minimum): drawn as fitted, faint and
dotted, and named so in the legend, because its vertex is no optimum."""


def opens_upward(budget_fit: BudgetOptimum, sparsity: float) -> bool:
    """Whether the budget's fit, as a function of log N at ``sparsity``, is a parabola with a
    minimum: its second difference (exact for a quadratic) is positive."""
    left, middle, right = budget_fit_loss(budget_fit, np.array([-1.0, 0.0, 1.0]), sparsity)
    return bool(left - 2 * middle + right > 0)


def isoflop_figure(path: Path, points: IsoflopPoints, fit: LawFit | None, shared: float,
                   isoflop_fits: IsoflopAnalysis | None = None) -> Path | None:
    """One panel per budget C: the runs' best losses against N, coloured by sparsity; the law
    ``fit`` along the budget (solid); and, from ``isoflop_fits`` (isoflop.json's
    ``all_points``), the budget's IsoFLOP fit in log N (dashed: the parabola, or the surface
    at each sparsity) with its minimum N* marked (hollow when outside the data: a bound). A fit
    that opens downward at a sparsity has no minimum there: it is drawn dotted and faint, and
    the legend says so."""
    budgets = np.unique(points.flops)
    fig, axes = new_figure(ncols=len(budgets), width_in=5.0)
    axes = axes if isinstance(axes, list) else [axes]
    sparsities = np.unique(points.sparsity)
    colours = dict(zip(sparsities, palette(len(sparsities))))
    fits_by_budget = {row.flops: row for row in (isoflop_fits.budgets if isoflop_fits else [])}
    for ax, flops, budget_label in zip(axes, budgets, distinct_labels(budgets.tolist(), format_flops_tick)):
        at_budget = points.flops == flops
        n_grid = np.geomspace(points.params[at_budget].min() / 1.5,
                              points.params[at_budget].max() * 1.5, 60)
        budget_fit = next((row for c, row in fits_by_budget.items()
                           if np.isclose(c, flops, rtol=1e-6)), None)
        without_minimum = False
        for sparsity in sparsities:
            mask = at_budget & (points.sparsity == sparsity)
            if not mask.any():
                continue
            colour = colours[sparsity]
            ax.scatter(points.params[mask], points.loss[mask], color=colour,
                       label=f"S={sparsity:g}")
            if fit is not None:
                tokens = flops / (6 * active_params(n_grid, sparsity, shared))
                ax.plot(n_grid, get_law(fit.law).predict_loss(fit.params, N=n_grid, D=tokens,
                                                      S=np.full_like(n_grid, sparsity)),
                        color=colour, lw=1)
            if budget_fit is not None:
                fitted = _fitted_range(n_grid, budget_fit, sparsity)
                has_minimum = opens_upward(budget_fit, sparsity)
                without_minimum = without_minimum or not has_minimum
                ax.plot(fitted, budget_fit_loss(budget_fit, np.log(fitted), sparsity),
                        color=colour,
                        **(ISOFLOP_FIT_STYLE if has_minimum else NO_MINIMUM_STYLE))
        handles = ax.get_legend_handles_labels()[0]
        if fit is not None:
            handles.append(Line2D([], [], color="0.3", lw=1, label="fitted law"))
        if budget_fit is not None:
            handles.append(Line2D([], [], color="0.3", **ISOFLOP_FIT_STYLE,
                                  label="IsoFLOP fit (quadratic in log N)"))
            if without_minimum:
                handles.append(Line2D([], [], color="0.3", **NO_MINIMUM_STYLE,
                                      label="IsoFLOP fit that opens downward: no minimum, "
                                            "no N* from it"))
            handles.append(_mark_optimum(ax, budget_fit))
        ax.set_xscale("log")
        format_axis(ax.xaxis, format_count_tick)
        ax.set_xlabel("total parameters N")
        ax.set_ylabel(loss_label("best validation loss"))
        ax.set_title(f"C = {budget_label} FLOPs")
        ax.legend(handles=handles, fontsize=8)
    return save_figure(fig, path)


def _fitted_range(n_grid: np.ndarray, budget_fit: BudgetOptimum, sparsity: float) -> np.ndarray:
    """The part of ``n_grid`` spanned by the sizes the fit used (its window): beyond them the
    parabola describes nothing it was fitted to."""
    support = (budget_fit.support.get(f"{sparsity:g}") if isinstance(budget_fit, SurfaceBudget)
               else budget_fit.support)
    if not support:
        return n_grid
    low, high = min(support.sizes_used), max(support.sizes_used)
    inside = n_grid[(n_grid >= low) & (n_grid <= high)]
    return np.unique(np.concatenate([[low], inside, [high]]))


def _mark_optimum(ax, budget_fit: BudgetOptimum):
    """A star at the budget's (N*, loss*); hollow when N* is outside the data (a bound)."""
    inside = budget_fit.inside_data
    label = f"N* = {format_count_tick(budget_fit.params)}"
    if isinstance(budget_fit, SurfaceBudget):
        label += f", S* = {budget_fit.sparsity:.2f}"
    if not inside:
        label += " (edge of the data: a bound)"
    marker, = ax.plot([budget_fit.params], [budget_fit.loss], marker="*", markersize=14,
                      linestyle="none", color="black", zorder=4,
                      markerfacecolor="black" if inside else "none", gid="isoflop-optimum",
                      label=label)
    return marker


ANALYSIS: Analysis[SweepFolder, IsoflopRecord] = Analysis(
    "isoflop", compute, render, file="isoflop.json", record_type=IsoflopRecord)
