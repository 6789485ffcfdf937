"""S*(C) read off the IsoFLOP minima, no law involved: per budget and sparsity the vertex of a
parabola in log N, and per budget the sparsity of lowest L* with its interval and the trend of
S* with C (``moelab.scaling.isoflop_sparsity``). Stored in isoflop.json's ``sparsity_optima``
and rendered inside the IsoFLOP section (``isoflop``): the text and figure of that part, not an
analysis of its own."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from moelab.report import format_count, markdown_table, new_figure, save_figure
from moelab.scaling.isoflop_sparsity import IsoflopCell, SparsityOptima, SparsityOptimum
from moelab.sweep.analyses.common import palette, poorly_supported_text


def _shares_text(probability_best: dict[str, float], seeds: int) -> str:
    if seeds < MIN_SEEDS_FOR_SHARES:
        return f"– ({seeds} seed{'s' if seeds != 1 else ''}: too few)"
    return ", ".join(f"{s}: {p:.2f}" for s, p in probability_best.items()) or "–"


def _ci_text(value, ci, fmt: str) -> str:
    if value is None:
        return "no minimum"
    shown = fmt.format(value) if fmt else format_count(value)
    if ci is None:
        return shown
    low, high = ((fmt.format(v) if fmt else format_count(v)) for v in ci)
    return f"{shown} [{low}, {high}]"


MIN_SEEDS_FOR_SHARES = 3
"""A resample of fewer seeds per cell has so few distinct outcomes that "best in x % of
replicates" only says whether the seeds agree: shares are shown from 3 seeds on."""


def isoflop_optima_text(optima: SparsityOptima, seeds: int, figure_path: Path) -> str:
    """S*(C) from the minima of each sparsity's IsoFLOP parabolas, no law involved; the
    replicates' shares only with ``MIN_SEEDS_FOR_SHARES`` seeds or more; the figure drawn at
    ``figure_path``."""
    drawn = (any(c.loss is not None for c in optima.cells)
             and any(r.sparsity is not None for r in optima.optimal_sparsity))
    if drawn:
        isoflop_optima_figure(figure_path, optima)
    intervals = (f"95 % intervals from {optima.replicates} bootstrap replicates (resampling "
                 f"{optima.resampling})" if optima.replicates
                 else f"no intervals (resampling {optima.resampling})")
    cells = [[f"{c.flops:.3g}", f"{c.sparsity:g}", _cell_sizes(c),
              _ci_text(c.params, c.params_ci, ""),
              _ci_text(c.loss, c.loss_ci, "{:.4f}"), _residual_ratio(c),
              "" if c.inside_data or c.loss is None else "yes"] for c in optima.cells]
    best = [[f"{r.flops:.3g}", _s_star_text(r, optima.sparsities),
             _ci_text(r.best_sampled, r.best_sampled_ci, "{:g}"),
             _shares_text(r.probability_best, seeds)]
            for r in optima.optimal_sparsity]
    window = (f"within {optima.window_factor:g}x of its vertex"
              if optima.estimator == "window" else "all of them")
    return ("\n### Optimal sparsity per budget from the IsoFLOP minima (no law)\n\n"
            f"Per budget C and sparsity S, a parabola in log N through that sparsity's runs at "
            f"the sizes {window}; its "
            "vertex is N*(C, S) and L*(C, S). S*(C) is where L*(C, S) is lowest: between the "
            "sampled sparsities, the vertex of a parabola of L* in -log(1 - S) kept inside "
            "them, and the sampled sparsity of lowest L* with the share of replicates in which "
            f"each sparsity is lowest. {intervals}; `isoflop.json`, sparsity_optima.\n\n"
            + markdown_table(["C", "S", "sizes used", "N*", "L*", "residual / seed noise",
                              "vertex outside sizes"], cells, "rrrrrrl")
            + poorly_supported_text("minima", optima.cells)
            + "\n" + markdown_table(["C", "S*", "best sampled S", "share of replicates best"],
                                    best, "rrrl")
            + "\n" + _trend_sentence(optima)
            + ("\n![IsoFLOP minima and S*(C)](figures/isoflop_optima.png)\n" if drawn else ""))


def _cell_sizes(cell: IsoflopCell) -> str:
    used = cell.sizes_used
    return f"{cell.n_sizes}" if used is None else f"{len(used)} of {cell.n_sizes}"


def _residual_ratio(cell: IsoflopCell) -> str:
    support = cell.support
    if not support or support.residual_to_noise is None:
        return "–"
    return f"{support.residual_to_noise:.2g}"


def _s_star_text(row: SparsityOptimum, sparsities: list[float]) -> str:
    """S* with its interval; where it sits on the grid's end, only the bound it gives."""
    edge = row.at_edge
    if edge == "upper":
        return f"≥ {max(sparsities):g} (unbounded)"
    if edge == "lower":
        return f"≤ {min(sparsities):g} (unbounded)"
    text = _ci_text(row.sparsity, row.ci, "{:.3f}")
    if row.ci is not None and row.ci[1] >= max(sparsities) - 1e-9:
        text += " (interval reaches the grid's largest S)"
    return text


def _trend_sentence(optima: SparsityOptima) -> str:
    """Does S* rise with compute? The slope of S*(C) per decade of C (not when an S* sits on
    the grid's edge), and per sparse S the slope of its advantage over dense."""
    trend = optima.trend
    if trend.slope_per_decade is None:
        return "No trend of S* with C: fewer than 2 budgets have an S*.\n"
    if trend.clamped:
        return ("No slope of S*(C) is given: at some budget S* sits on the grid's edge, so a "
                "slope would measure where the grid ends, not how S* moves; a grid reaching "
                "further in S is needed to test whether S* rises with C.\n")
    slope = f"{trend.slope_per_decade:+.3f}"
    if trend.ci is None:
        return (f"S*(C) changes by {slope} per decade of C over {trend.n_budgets} budgets; "
                "without resamples there is no interval, so no test of whether S* rises.\n")
    verdict = ("**S* rises with compute**" if trend.rises else
               "**S* falls with compute**" if trend.falls else
               "**no trend of S* with compute is detected** (the interval contains 0)")
    text = (f"Test of whether S* rises with C: S*(C) changes by {slope} "
            f"[{trend.ci[0]:+.3f}, {trend.ci[1]:+.3f}] per decade of C over "
            f"{trend.n_budgets} budgets (one-sided bootstrap p of no rise "
            f"{trend.p_not_rising:.3f}): {verdict}.")
    advantages = [f"S = {a.sparsity:g}: {a.slope_per_decade:+.4f}"
                  + (f" [{a.ci[0]:+.4f}, {a.ci[1]:+.4f}]" if a.ci else "")
                  for a in optima.advantage_trend if a.slope_per_decade is not None]
    if advantages:
        text += (" The advantage over dense, L*(C, 0) - L*(C, S), changes per decade of C by "
                 + "; ".join(advantages) + " nats. That is not a test of S*: a difference that "
                 "scales with L - e shrinks as the loss falls even when S* stays put (the "
                 "effective-size law's L - e ~ C^(-k) g(S) does exactly that).")
    return text + "\n"


def isoflop_optima_figure(path: Path, optima: SparsityOptima) -> Path:
    """Left: L*(C) per sparsity, the IsoFLOP parabolas' minima with their 95 % intervals.
    Right: S*(C) between the sampled sparsities with its band, and the sampled argmin."""
    fig, (loss_ax, sparsity_ax) = new_figure(ncols=2, width_in=5.0)
    sparsities = optima.sparsities
    colours = dict(zip(sparsities, palette(len(sparsities))))
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
