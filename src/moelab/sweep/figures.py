"""The sweep report's figures: IsoFLOP curves (the runs, the fitted law along each budget, each
budget's own quadratic fit and its N*), and the optimal sparsity against parameters, compute
and wall-clock budgets (optima at the search's limit flagged).

Axis labels, tick formats and colourbars come from ``moelab.report.axes``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib
import numpy as np
from matplotlib.lines import Line2D

from moelab.report import new_figure, save_figure
from moelab.report.axes import (
    distinct_labels, format_axis, format_count_tick, format_flops_tick, loss_label,
)
from moelab.scaling.family import active_params
from moelab.scaling.isoflop import (
    BudgetOptimum, IsoflopAnalysis, IsoflopPoints, SurfaceBudget, budget_fit_loss,
)
from moelab.scaling.isoflop_sparsity import SparsityOptima
from moelab.scaling.laws import get_law
from moelab.scaling.optimal import (
    DEFAULT_MAX_SPARSITY, FlopsCurvePoint, ParamsCurvePoint, SecondsCurvePoint,
)
from moelab.scaling.fit_record import LawFit
from moelab.sweep.analysis_records import SparsityDeltas

ISOFLOP_FIT_STYLE: dict[str, Any] = {"linestyle": "--", "linewidth": 1.2, "gid": "isoflop-fit"}
SEARCH_LIMIT_TOLERANCE = 1e-4
"""|S* - max_sparsity| under which S* sits at the search's upper limit (as optimal._on_edge)."""


def isoflop_figure(path: Path, points: IsoflopPoints, fit: LawFit | None, shared: float,
                   isoflop_fits: IsoflopAnalysis | None = None) -> Path | None:
    """One panel per budget C: the runs' best losses against N, coloured by sparsity; the law
    ``fit`` along the budget (solid); and, from ``isoflop_fits`` (isoflop.json's
    ``all_points``), the budget's IsoFLOP fit in log N (dashed: the parabola, or the surface
    at each sparsity) with its minimum N* marked (hollow when outside the data: a bound)."""
    budgets = np.unique(points.flops)
    fig, axes = new_figure(ncols=len(budgets), width_in=5.0)
    axes = axes if isinstance(axes, list) else [axes]
    sparsities = np.unique(points.sparsity)
    colours = dict(zip(sparsities, _palette(len(sparsities))))
    fits_by_budget = {row.flops: row for row in (isoflop_fits.budgets if isoflop_fits else [])}
    for ax, flops, budget_label in zip(axes, budgets, distinct_labels(budgets, format_flops_tick)):
        at_budget = points.flops == flops
        n_grid = np.geomspace(points.params[at_budget].min() / 1.5,
                              points.params[at_budget].max() * 1.5, 60)
        budget_fit = next((row for c, row in fits_by_budget.items()
                           if np.isclose(c, flops, rtol=1e-6)), None)
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
                ax.plot(fitted, budget_fit_loss(budget_fit, np.log(fitted), sparsity),
                        color=colour, **ISOFLOP_FIT_STYLE)
        handles = ax.get_legend_handles_labels()[0]
        if fit is not None:
            handles.append(Line2D([], [], color="0.3", lw=1, label="fitted law"))
        if budget_fit is not None:
            handles.append(Line2D([], [], color="0.3", **ISOFLOP_FIT_STYLE,
                                  label="IsoFLOP fit (quadratic in log N)"))
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


def _palette(count: int) -> list:
    cmap = matplotlib.colormaps["viridis"]
    return [cmap(x) for x in np.linspace(0.0, 0.9, count)]




def optima_figure(path: Path, vs_n: list[ParamsCurvePoint], vs_c: list[FlopsCurvePoint],
                  vs_t: list[SecondsCurvePoint] | None,
                  flops_reference: float, max_sparsity: float = DEFAULT_MAX_SPARSITY) -> Path:
    """S* against N, C and (measured hardware) T, with the bootstrap band; optima at the
    search's upper limit ``max_sparsity`` are flagged: there the curve flattens because the
    search stops, not because the law has its minimum."""
    panels: list[tuple[Any, str, str, Any, str]] = [(vs_n, "params", "total parameters N", format_count_tick,
               f"fixed N, C = {format_flops_tick(flops_reference)}"),
              (vs_c, "flops", "training compute C (FLOPs)", format_flops_tick, "compute-optimal")]
    if vs_t:
        panels.append((vs_t, "seconds", "wall-clock budget T (s, this hardware)", None,
                       "time-optimal"))
    fig, axes = new_figure(ncols=len(panels), width_in=5.0)
    for ax, (rows, key, label, tick_format, title) in zip(axes, panels):
        x = np.array([getattr(r, key) for r in rows])
        sparsity = np.array([r.optimum.sparsity for r in rows])
        ax.plot(x, sparsity, marker="o", label="best fit")
        if rows[0].ci:
            ax.fill_between(x, [r.ci["sparsity"][0] for r in rows],
                            [r.ci["sparsity"][1] for r in rows], alpha=0.25, label="95 % band")
        at_limit = sparsity >= max_sparsity - SEARCH_LIMIT_TOLERANCE
        if at_limit.any():
            ax.scatter(x[at_limit], sparsity[at_limit], marker="^", s=90, facecolors="none",
                       edgecolors="tab:red", linewidths=1.5, zorder=4, gid="search-limit",
                       label=f"at the search limit S = {max_sparsity:g} (a bound)")
        ax.set_xscale("log")
        if tick_format is not None:
            format_axis(ax.xaxis, tick_format)
        ax.set_ylim(-0.02, 1.0)
        ax.set_xlabel(label)
        ax.set_ylabel("optimal sparsity S*")
        ax.set_title(title)
        ax.legend(fontsize=8)
    return save_figure(fig, path)


def isoflop_optima_figure(path: Path, optima: SparsityOptima) -> Path:
    """Left: L*(C) per sparsity, the IsoFLOP parabolas' minima with their 95 % intervals.
    Right: S*(C) between the sampled sparsities with its band, and the sampled argmin."""
    fig, (loss_ax, sparsity_ax) = new_figure(ncols=2, width_in=5.0)
    sparsities = optima.sparsities
    colours = dict(zip(sparsities, _palette(len(sparsities))))
    for index, sparsity in enumerate(sparsities):
        cells = [c for c in optima.cells if c.sparsity == sparsity and c.loss is not None]
        # Nudge each sparsity's points sideways so that the error bars do not overlap.
        flops = np.array([c.flops for c in cells]) * 1.04 ** (index - len(sparsities) / 2)
        losses = np.array([c.loss for c in cells])
        errors = np.array([[c.loss - c.loss_ci[0], c.loss_ci[1] - c.loss]
                           if c.loss_ci and c.loss is not None else [0.0, 0.0]
                           for c in cells]).T.reshape(2, -1)
        # A percentile interval need not contain the estimate (a biased vertex): clip at 0.
        loss_ax.errorbar(flops, losses, yerr=np.maximum(errors, 0.0), color=colours[sparsity], marker="o",
                         capsize=3, label=f"S={sparsity:g}")
    loss_ax.set_xscale("log")
    loss_ax.set_xlabel("compute budget C (FLOPs)")
    loss_ax.set_ylabel("IsoFLOP minimum L*(C, S)")
    loss_ax.legend(fontsize=8)
    rows = [r for r in optima.optimal_sparsity if r.sparsity is not None]
    flops = [r.flops for r in rows]
    sparsity_ax.plot(flops, [r.sparsity for r in rows], marker="o", label="S* (parabola in u)")
    bands = [r.ci for r in rows if r.ci]
    if rows and len(bands) == len(rows):
        sparsity_ax.fill_between(flops, [ci[0] for ci in bands], [ci[1] for ci in bands],
                                 alpha=0.25, label="95 % band")
    sampled = [r for r in rows if r.best_sampled is not None]
    sparsity_ax.scatter([r.flops for r in sampled], [r.best_sampled for r in sampled],
                        marker="x", color="black", label="best sampled S")
    sparsity_ax.set_xscale("log")
    sparsity_ax.set_ylim(-0.02, 1.0)
    sparsity_ax.set_xlabel("compute budget C (FLOPs)")
    sparsity_ax.set_ylabel("optimal sparsity S*(C)")
    sparsity_ax.set_title("from the IsoFLOP minima, no law")
    sparsity_ax.legend(fontsize=8)
    return save_figure(fig, path)


def sparsity_delta_figure(path: Path, deltas: SparsityDeltas) -> Path:
    """Loss at S minus dense against S, a line per size, a panel per token budget, with the
    95 % intervals."""
    budgets = sorted({d.budget for d in deltas.deltas}, key=lambda b: float(b.lstrip("DC")))
    fig, axes = new_figure(ncols=len(budgets), width_in=4.0)
    axes = axes if isinstance(axes, list) else [axes]
    sizes = list(dict.fromkeys(d.size for d in deltas.deltas))
    colours = dict(zip(sizes, _palette(len(sizes))))
    for ax, budget in zip(axes, budgets):
        for size in sizes:
            rows = sorted((d for d in deltas.deltas if d.budget == budget and d.size == size),
                          key=lambda d: (d.sparsity, d.E or 0))
            x = [d.sparsity for d in rows]
            y = np.array([d.delta for d in rows])
            errors = np.array([[d.delta - d.ci[0], d.ci[1] - d.delta] for d in rows]).T
            ax.errorbar(x, y, yerr=errors.reshape(2, -1), marker="o", capsize=3,
                        color=colours[size], label=size)
        ax.axhline(0.0, color="grey", lw=0.8)
        ax.set_xlabel("sparsity S")
        ax.set_ylabel("loss minus dense (nats)")
        ax.set_title(f"budget {budget}")
        ax.legend(fontsize=8)
    return save_figure(fig, path)
