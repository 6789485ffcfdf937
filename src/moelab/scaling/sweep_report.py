"""The sweep report, rebuilt from ``results.csv`` alone: law fit, held-out check, IsoFLOP curves
per sparsity, and the optimal sparsity against N and against C, with bootstrap intervals.

Files written next to results.csv: ``fit.json`` (the sparsity law on every point, with bootstrap
replicates and the family's shared fraction, readable by ``moelab optimal``), ``fit_holdout.json``
(the same law without the held-out points), ``isoflop.json``, ``optima.json``, ``figures/*.png``
and ``report.md``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable

import numpy as np

from moelab.errors import MoelabError
from moelab.fileio import atomic_write_json, atomic_write_text
from moelab.report import format_count, format_number, markdown_table, new_figure, save_figure
from moelab.scaling.isoflop import isoflop_analysis
from moelab.scaling.laws import SPARSITY
from moelab.scaling.optimal import (
    active_params, compute_optimal, estimate_shared_fraction, optimal_sparsity_at_params,
    with_intervals,
)
from moelab.scaling.summary import fit_columns
from moelab.scaling.sweep import SweepGrid, describe_grid, fit_columns_map
from moelab.scaling.table import read_fit_table

CURVE_POINTS = 9
"""Points per S*(N) and S*(C) curve (each solved for every bootstrap replicate)."""
CURVE_REPLICATES = 100
"""Bootstrap replicates used for the curves' bands (the fit's CIs use all of them)."""


def write_sweep_report(out_dir: Path, grid: SweepGrid, *, bootstrap_replicates: int = 200,
                       max_starts: int | None = None, log: Callable[[str], None] = print) -> Path:
    """Fit, analyse and write report.md from ``out_dir/results.csv``; returns the report's path.

    ``max_starts`` limits the sparsity law's start grid (None: its default seeded subset).
    """
    out_dir = Path(out_dir)
    csv_path = out_dir / "results.csv"
    sections = [f"# Sparsity sweep `{grid.name}`\n", _setup(grid)]
    try:
        columns = read_fit_table(csv_path, True, fit_columns_map())
    except MoelabError as exc:
        sections.append(f"No results to analyse yet ({exc}).\n")
        return atomic_write_text(out_dir / "report.md", "\n".join(sections))
    shared = estimate_shared_fraction(columns["N"], columns["N_active"], columns["S"])
    sections.append(_results_table(csv_path))
    fit = _fit_or_none(columns, bootstrap_replicates, None, max_starts, log)
    if fit is None:
        sections.append(f"## Law fit\n\nNot enough points ({len(columns['loss'])}) for the "
                        f"{SPARSITY.num_params}-parameter sparsity law: at least "
                        f"{SPARSITY.num_params + 1} complete runs are needed.\n")
    else:
        fit.update(shared_fraction=shared, source="results.csv", columns=fit_columns_map())
        atomic_write_json(out_dir / "fit.json", fit)
        sections.append(_fit_section(fit, shared, bootstrap_replicates))
        holdout = _fit_or_none(columns, 0, grid.holdout, max_starts, log)
        if holdout is not None:
            atomic_write_json(out_dir / "fit_holdout.json", holdout)
            sections.append(_holdout_section(holdout))
    sections.append(_isoflop_section(out_dir, columns, csv_path, fit, shared))
    if fit is not None:
        sections.append(_optima_section(out_dir, columns, fit, shared))
    sections.append(_reproduce_section(grid, bootstrap_replicates))
    return atomic_write_text(out_dir / "report.md", "\n".join(s for s in sections if s))


def _fit_or_none(columns, replicates, holdout, max_starts, log) -> dict | None:
    try:
        return fit_columns("sparsity", columns, bootstrap_replicates=replicates, holdout=holdout,
                           max_starts=max_starts)
    except MoelabError as exc:  # too few points, or a holdout that leaves nothing to fit
        log(f"sparsity-law fit skipped: {exc}")
        return None


def _setup(grid: SweepGrid) -> str:
    return ("## Setup\n\n"
            f"- Grid: {describe_grid(grid)}.\n"
            "- S = (E - k) / E; S = 0 is the dense model. N is the *total* parameter count, "
            "N_active the parameters one token uses; D is the tokens trained; C = 6 N_active D.\n"
            "- Loss: best validation loss (nats/token) over training, on the same validation "
            "windows for every run. Every number below comes from `results.csv`.\n")


def _results_table(csv_path: Path) -> str:
    import csv

    with open(csv_path, newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    body = [[r["size"], r["budget"], r["S"], r["E"], format_count(float(r["N_total"])),
             format_count(float(r["N_active"])), format_count(float(r["D"])),
             f"{float(r['C']):.3g}", format_number(float(r["best_val_loss"]))] for r in rows]
    return "## Runs\n\n" + markdown_table(
        ["size", "budget", "S", "E", "N total", "N active", "D", "C", "best val loss"], body,
        "llrrrrrrr")


def _fit_section(fit: dict, shared: float, replicates: int) -> str:
    rows = []
    for name, value in fit["params"].items():
        ci = fit["ci"].get(name)
        rows.append([name, f"{value:.5g}", f"[{ci[0]:.4g}, {ci[1]:.4g}]" if ci else "–"])
    return ("## Law fit (Abnar et al. eq. 6, N = total parameters)\n\n"
            "L = a / N^alpha + b / D^beta + c / (1 - S)^lam + d / ((1 - S)^delta N^gamma) + e, "
            f"fitted to all {fit['n_points']} points by summed Huber loss (delta = 1e-3) of log "
            f"residuals from {fit['num_starts']} grid starts; objective {fit['objective']:.4e}. "
            f"95 % intervals from {replicates} bootstrap resamples (`fit.json`).\n\n"
            + markdown_table(["parameter", "value", "95 % CI"], rows, "lrr")
            + f"\nShared (non-expert) fraction of the parameters, fitted to the runs' own "
            f"N_active / N: {shared:.3f} (N_active = N (phi + (1 - phi)(1 - S))).\n")


def _holdout_section(holdout_fit: dict) -> str:
    held = holdout_fit["holdout"]
    rows = [[f"{p['S']:g}", format_count(p["N"]), format_count(p["D"]), format_number(p["loss"]),
             format_number(p["predicted"]), f"{(p['predicted'] - p['loss']) / p['loss']:+.2%}"]
            for p in held["points"]]
    return (f"## Held-out check ({held['spec']})\n\n"
            f"The law refitted without the {held['n_points']} points where {held['spec']} "
            f"(`fit_holdout.json`) predicts them with mean |log error| "
            f"{held['mean_abs_log_error']:.4f}, loss RMSE {held['rmse_loss']:.4f} and at most "
            f"{held['max_abs_relative_error']:.2%} relative error.\n\n"
            + markdown_table(["S", "N", "D", "loss", "predicted", "error"], rows, "rrrrrr"))


def _isoflop_section(out_dir: Path, columns: dict, csv_path: Path, fit: dict | None,
                     shared: float) -> str:
    budgets = _budget_column(csv_path)
    if budgets is None:
        return ""
    iso_columns = {"N": columns["N"], "C": budgets, "S": columns["S"],
                   "N_active": columns["N_active"], "loss": columns["loss"]}
    analysis = isoflop_analysis(iso_columns)
    per_sparsity = {}
    for sparsity in np.unique(columns["S"]):
        mask = columns["S"] == sparsity
        dense_like = {k: v[mask] for k, v in iso_columns.items() if k != "S"}
        per_sparsity[float(sparsity)] = isoflop_analysis(dense_like)
    atomic_write_json(out_dir / "isoflop.json", {"surface": analysis, "per_sparsity": per_sparsity})
    figure = _isoflop_figure(out_dir / "figures" / "isoflop.png", iso_columns, fit, shared)
    rows = [[f"{b['flops']:.3g}", b["n_points"], format_count(b["params"]),
             format_count(b.get("params_active")), f"{b['sparsity']:.3f}", format_number(b["loss"]),
             "yes" if b["at_edge"] else ""]
            for b in analysis["budgets"]]
    text = ("## IsoFLOP analysis\n\n"
            "Per compute budget, the loss is fitted as a quadratic surface in (log N, -log(1 - S)) "
            "and minimised inside the observed box (Abnar et al.); `isoflop.json` also holds a "
            "parabola in log N per sparsity and budget (where a budget has 3 sizes).\n\n")
    if rows:
        text += markdown_table(["C", "points", "N*", "N_active*", "S*", "loss*", "at edge"], rows,
                               "rrrrrrl")
        text += ("\n'At edge': the surface's minimum lies on the edge of the sizes and sparsities "
                 "tried, so the optimum is at least that far out.\n")
    else:
        text += "Too few points per budget for the surface (6 needed).\n"
    exponent = analysis["params_exponent"]
    if exponent and not any(b["at_edge"] for b in analysis["budgets"]):
        text += f"\nAcross budgets N*(C) ~ C^{exponent['exponent']:.3f} (from {len(rows)} budgets).\n"
    if figure:
        text += ("\n![IsoFLOP curves per sparsity](figures/isoflop.png)\n\n"
                 "Points: runs; lines: the fitted law along each budget (D = C / (6 N_active)).\n")
    return text


def _budget_column(csv_path: Path) -> np.ndarray | None:
    import csv

    with open(csv_path, newline="", encoding="utf-8") as f:
        values = [row.get("C_budget", "") for row in csv.DictReader(f)]
    if not values or any(v in ("", None) for v in values):
        return None
    return np.array([float(v) for v in values])


def _isoflop_figure(path: Path, columns: dict, fit: dict | None, shared: float) -> Path | None:
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
                ax.plot(n_grid, SPARSITY.predict_loss(fit["params"], N=n_grid, D=tokens,
                                                      S=np.full_like(n_grid, sparsity)),
                        color=colours[sparsity], lw=1)
        ax.set_xscale("log")
        ax.set_xlabel("total parameters N")
        ax.set_ylabel("best validation loss")
        ax.set_title(f"C = {flops:.3g} FLOPs")
        ax.legend(fontsize=8)
    return save_figure(fig, path)


def _palette(count: int) -> list:
    import matplotlib

    cmap = matplotlib.colormaps["viridis"]
    return [cmap(x) for x in np.linspace(0.0, 0.9, count)]


def _optima_section(out_dir: Path, columns: dict, fit: dict, shared: float) -> str:
    replicas = fit["bootstrap"]["params"][:CURVE_REPLICATES] if fit.get("bootstrap") else []
    observed_c = 6 * columns["N_active"] * columns["D"]
    c_grid = np.geomspace(observed_c.min(), observed_c.max() * 100, CURVE_POINTS)
    n_grid = np.geomspace(columns["N"].min(), columns["N"].max() * 100, CURVE_POINTS)
    flops_reference = float(np.median(observed_c))
    vs_c = [with_intervals(lambda p, c=c: compute_optimal(SPARSITY, p, c, shared_fraction=shared),
                           fit["params"], replicas) | {"flops": float(c)} for c in c_grid]
    vs_n = [with_intervals(lambda p, n=n: optimal_sparsity_at_params(
                SPARSITY, p, n, flops=flops_reference, shared_fraction=shared),
            fit["params"], replicas) | {"params": float(n)} for n in n_grid]
    atomic_write_json(out_dir / "optima.json", {"shared_fraction": shared,
                                                "flops_for_fixed_params": flops_reference,
                                                "vs_flops": vs_c, "vs_params": vs_n})
    _optima_figure(out_dir / "figures" / "optimal_sparsity.png", vs_n, vs_c, flops_reference)
    rows = [[f"{r['flops']:.3g}", _with_ci(r, "sparsity", "{:.3f}"),
             _with_ci(r, "params_total", None), _with_ci(r, "params_active", None),
             "yes" if r["optimum"]["at_boundary"] else ""] for r in vs_c]
    return ("## Optimal sparsity\n\n"
            f"From the fitted law (`optima.json`), with 95 % bands over {len(replicas)} bootstrap "
            "fits. Left: S* at a fixed total parameter count N, trained with the median compute of "
            f"the sweep (C = {flops_reference:.3g}; D = C / (6 N_active) grows with S). Right: the "
            "compute-optimal S* at each budget C, minimising over N as well. Values at the edge "
            "of the search (S in [0, 0.98]) mean the law has no interior optimum there; beyond "
            "the sweep's range they are extrapolations.\n\n"
            "![Optimal sparsity](figures/optimal_sparsity.png)\n\n"
            + markdown_table(["C", "S*", "N*", "N_active*", "at edge"], rows, "rrrrl"))


def _with_ci(result: dict, key: str, fmt: str | None) -> str:
    def show(value):
        return fmt.format(value) if fmt else format_count(value)

    ci = result["ci"].get(key)
    value = show(result["optimum"][key])
    return f"{value} [{show(ci[0])}, {show(ci[1])}]" if ci else value


def _optima_figure(path: Path, vs_n: list[dict], vs_c: list[dict], flops_reference: float) -> Path:
    fig, (ax_n, ax_c) = new_figure(ncols=2, width_in=5.0)
    for ax, rows, key, label in ((ax_n, vs_n, "params", "total parameters N"),
                                 (ax_c, vs_c, "flops", "training compute C (FLOPs)")):
        x = [r[key] for r in rows]
        ax.plot(x, [r["optimum"]["sparsity"] for r in rows], marker="o", label="best fit")
        if rows[0]["ci"]:
            ax.fill_between(x, [r["ci"]["sparsity"][0] for r in rows],
                            [r["ci"]["sparsity"][1] for r in rows], alpha=0.25, label="95 % band")
        ax.set_xscale("log")
        ax.set_ylim(-0.02, 1.0)
        ax.set_xlabel(label)
        ax.set_ylabel("optimal sparsity S*")
        ax.legend(fontsize=8)
    ax_n.set_title(f"fixed N, C = {flops_reference:.3g}")
    ax_c.set_title("compute-optimal")
    return save_figure(fig, path)


def _reproduce_section(grid: SweepGrid, replicates: int) -> str:
    columns = ",".join(f"{k}={v}" for k, v in fit_columns_map().items())
    return ("## Reproduce\n\n"
            f"    moelab sweep-sparsity {grid.name} --out DIR      # reruns skip finished runs\n"
            f"    moelab fit DIR/results.csv --law sparsity --columns {columns} "
            f"--bootstrap {replicates}\n"
            f"    moelab fit DIR/results.csv --law sparsity --columns {columns} "
            f"--holdout '{grid.holdout}'\n"
            "    moelab optimal DIR/fit.json --flops C        # or --params N --flops C\n")
