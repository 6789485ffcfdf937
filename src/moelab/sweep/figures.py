"""The sweep report's figures: IsoFLOP curves with the fitted law along each budget, and the
optimal sparsity against parameters, compute and wall-clock budgets."""

from __future__ import annotations

from pathlib import Path

import matplotlib
import numpy as np

from moelab.report import new_figure, save_figure
from moelab.scaling.family import active_params
from moelab.scaling.laws import get_law
from moelab.sweep.records import LawFit


def isoflop_figure(path: Path, columns: dict, fit: LawFit | None, shared: float) -> Path | None:
    budgets = np.unique(columns["C"])
    fig, axes = new_figure(ncols=len(budgets), width_in=5.0)
    axes = axes if isinstance(axes, list) else [axes]
    sparsities = np.unique(columns["S"])
    colours = dict(zip(sparsities, _palette(len(sparsities))))
    for ax, flops in zip(axes, budgets):
        at_budget = columns["C"] == flops
        for sparsity in sparsities:
            mask = at_budget & (columns["S"] == sparsity)
            ax.scatter(columns["N"][mask], columns["loss"][mask], color=colours[sparsity],
                       label=f"S={sparsity:g}")
            if fit is not None and mask.any():
                n_grid = np.geomspace(columns["N"][at_budget].min() / 1.5,
                                      columns["N"][at_budget].max() * 1.5, 60)
                tokens = flops / (6 * active_params(n_grid, sparsity, shared))
                ax.plot(n_grid, get_law(fit.law).predict_loss(fit.params, N=n_grid, D=tokens,
                                                      S=np.full_like(n_grid, sparsity)),
                        color=colours[sparsity], lw=1)
        ax.set_xscale("log")
        ax.set_xlabel("total parameters N")
        ax.set_ylabel("best validation loss")
        ax.set_title(f"C = {flops:.3g} FLOPs")
        ax.legend(fontsize=8)
    return save_figure(fig, path)


def _palette(count: int) -> list:
    cmap = matplotlib.colormaps["viridis"]
    return [cmap(x) for x in np.linspace(0.0, 0.9, count)]




def optima_figure(path: Path, vs_n: list[dict], vs_c: list[dict], vs_t: list[dict] | None,
                   flops_reference: float) -> Path:
    panels = [(vs_n, "params", "total parameters N", f"fixed N, C = {flops_reference:.3g}"),
              (vs_c, "flops", "training compute C (FLOPs)", "compute-optimal")]
    if vs_t:
        panels.append((vs_t, "seconds", "wall-clock budget T (s, this hardware)", "time-optimal"))
    fig, axes = new_figure(ncols=len(panels), width_in=5.0)
    for ax, (rows, key, label, title) in zip(axes, panels):
        x = [r[key] for r in rows]
        ax.plot(x, [r["optimum"]["sparsity"] for r in rows], marker="o", label="best fit")
        if rows[0]["ci"]:
            ax.fill_between(x, [r["ci"]["sparsity"][0] for r in rows],
                            [r["ci"]["sparsity"][1] for r in rows], alpha=0.25, label="95 % band")
        ax.set_xscale("log")
        ax.set_ylim(-0.02, 1.0)
        ax.set_xlabel(label)
        ax.set_ylabel("optimal sparsity S*")
        ax.set_title(title)
        ax.legend(fontsize=8)
    return save_figure(fig, path)


def isoflop_optima_figure(path: Path, optima: dict) -> Path:
    """Left: L*(C) per sparsity, the IsoFLOP parabolas' minima with their 95 % intervals.
    Right: S*(C) between the sampled sparsities with its band, and the sampled argmin."""
    fig, (loss_ax, sparsity_ax) = new_figure(ncols=2, width_in=5.0)
    sparsities = optima["sparsities"]
    colours = dict(zip(sparsities, _palette(len(sparsities))))
    for index, sparsity in enumerate(sparsities):
        cells = [c for c in optima["cells"] if c["sparsity"] == sparsity and c["loss"] is not None]
        # Nudge each sparsity's points sideways so that the error bars do not overlap.
        flops = np.array([c["flops"] for c in cells]) * 1.04 ** (index - len(sparsities) / 2)
        losses = np.array([c["loss"] for c in cells])
        errors = np.array([[c["loss"] - c["loss_ci"][0], c["loss_ci"][1] - c["loss"]]
                           if c["loss_ci"] else [0.0, 0.0] for c in cells]).T.reshape(2, -1)
        # A percentile interval need not contain the estimate (a biased vertex): clip at 0.
        loss_ax.errorbar(flops, losses, yerr=np.maximum(errors, 0.0), color=colours[sparsity], marker="o",
                         capsize=3, label=f"S={sparsity:g}")
    loss_ax.set_xscale("log")
    loss_ax.set_xlabel("compute budget C (FLOPs)")
    loss_ax.set_ylabel("IsoFLOP minimum L*(C, S)")
    loss_ax.legend(fontsize=8)
    rows = [r for r in optima["optimal_sparsity"] if r["sparsity"] is not None]
    flops = [r["flops"] for r in rows]
    sparsity_ax.plot(flops, [r["sparsity"] for r in rows], marker="o", label="S* (parabola in u)")
    if rows and all(r["ci"] for r in rows):
        sparsity_ax.fill_between(flops, [r["ci"][0] for r in rows], [r["ci"][1] for r in rows],
                                 alpha=0.25, label="95 % band")
    sampled = [r for r in rows if r["best_sampled"] is not None]
    sparsity_ax.scatter([r["flops"] for r in sampled], [r["best_sampled"] for r in sampled],
                        marker="x", color="black", label="best sampled S")
    sparsity_ax.set_xscale("log")
    sparsity_ax.set_ylim(-0.02, 1.0)
    sparsity_ax.set_xlabel("compute budget C (FLOPs)")
    sparsity_ax.set_ylabel("optimal sparsity S*(C)")
    sparsity_ax.set_title("from the IsoFLOP minima, no law")
    sparsity_ax.legend(fontsize=8)
    return save_figure(fig, path)


def sparsity_delta_figure(path: Path, deltas: dict) -> Path:
    """Loss at S minus dense against S, a line per size, a panel per token budget, with the
    95 % intervals."""
    budgets = sorted({d["budget"] for d in deltas["deltas"]}, key=lambda b: float(b.lstrip("DC")))
    fig, axes = new_figure(ncols=len(budgets), width_in=4.0)
    axes = axes if isinstance(axes, list) else [axes]
    sizes = list(dict.fromkeys(d["size"] for d in deltas["deltas"]))
    colours = dict(zip(sizes, _palette(len(sizes))))
    for ax, budget in zip(axes, budgets):
        for size in sizes:
            rows = sorted((d for d in deltas["deltas"] if d["budget"] == budget and d["size"] == size),
                          key=lambda d: (d["sparsity"], d.get("E", 0)))
            x = [d["sparsity"] for d in rows]
            y = np.array([d["delta"] for d in rows])
            errors = np.array([[d["delta"] - d["ci"][0], d["ci"][1] - d["delta"]] for d in rows]).T
            ax.errorbar(x, y, yerr=errors.reshape(2, -1), marker="o", capsize=3,
                        color=colours[size], label=size)
        ax.axhline(0.0, color="grey", lw=0.8)
        ax.set_xlabel("sparsity S")
        ax.set_ylabel("loss minus dense (nats)")
        ax.set_title(f"budget {budget}")
        ax.legend(fontsize=8)
    return save_figure(fig, path)
