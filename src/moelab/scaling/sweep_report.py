"""The sweep report, rebuilt from ``results.csv`` alone: the form of the law the points identify,
its fit and held-out check, IsoFLOP curves per sparsity, and the optimal sparsity against N and
against C, with bootstrap intervals.

Files written next to results.csv: ``forms.json`` (every form's checks, ``moelab.scaling.forms``),
``fit.json`` (the chosen form on every point, with bootstrap replicates and the family's shared
fraction, readable by ``moelab optimal``), ``fit_holdout.json`` (the same form without the
held-out points), ``isoflop.json``, ``optima.json``, ``figures/*.png`` and ``report.md``. A file
the current results no longer support (no form chosen) is removed rather than left stale.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable

import numpy as np

from moelab.errors import MoelabError
from moelab.fileio import atomic_write_json, atomic_write_text
from moelab.report import format_count, format_number, markdown_table, new_figure, save_figure
from moelab.scaling.isoflop import (
    COMPUTE_TOLERANCE, compute_deviation, isoflop_analysis, uses_surface,
)
from moelab.scaling.forms import select_form
from moelab.scaling.laws import SPARSITY, get_law
from moelab.scaling.optimal import (
    active_params, compute_optimal, estimate_shared_fraction, optimal_sparsity_at_params,
    with_intervals,
)
from moelab.scaling.summary import fit_columns
from moelab.scaling.grid import SweepGrid, describe_grid
from moelab.scaling.sweep import fit_columns_map
from moelab.scaling.table import fit_table_from_rows, read_csv_rows

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
        header, rows = read_csv_rows(csv_path)
        columns = fit_table_from_rows(csv_path, header, rows, True, fit_columns_map())
    except MoelabError as exc:
        sections.append(f"No results to analyse yet ({exc}).\n")
        return atomic_write_text(out_dir / "report.md", "\n".join(sections))
    # None when every run is dense: the runs then say nothing about the expert share.
    shared = estimate_shared_fraction(columns["N"], columns["N_active"], columns["S"])
    sections.append(_results_table(rows))
    fit, holdout, selection = _law_fits(columns, grid.holdout, bootstrap_replicates, max_starts, log)
    _write_or_remove(out_dir / "fit_holdout.json", holdout)
    _write_or_remove(out_dir / "forms.json", selection and _forms_record(selection))
    if selection is not None:
        sections.append(_forms_section(selection))
    if fit is None and selection is None:
        sections.append(f"## Law fit\n\nNot enough points ({len(columns['loss'])}) for the "
                        f"{SPARSITY.num_params}-parameter sparsity law: at least "
                        f"{SPARSITY.num_params + 1} complete runs are needed.\n")
    if fit is not None:
        fit.update(shared_fraction=shared, source="results.csv", columns=fit_columns_map())
        sections.append(_fit_section(fit, shared, bootstrap_replicates))
    if holdout is not None:
        sections.append(_holdout_section(holdout))
    _write_or_remove(out_dir / "fit.json", fit)
    sections.append(_isoflop_section(out_dir, rows, columns, fit, shared))
    if fit is not None:
        sections.append(_optima_section(out_dir, columns, fit, shared))
    else:
        _write_or_remove(out_dir / "optima.json", None)
    sections.append(_reproduce_section(grid, bootstrap_replicates, max_starts, fit))
    return atomic_write_text(out_dir / "report.md", "\n".join(s for s in sections if s))


def _law_fits(columns, holdout, replicates, max_starts, log) -> tuple[dict | None, dict | None, dict | None]:
    """(fit, held-out fit, form selection) of the law the report uses.

    With two or more sparsities every form of the law is checked and the chosen one's fits are
    returned (None, None when no form passes). With one sparsity the S terms are not measured,
    so the forms cannot be told apart: the full law is fitted as it is, without a selection.
    """
    if len(np.unique(columns["S"])) < 2:
        return (_fit_or_none(columns, replicates, None, max_starts, log),
                _fit_or_none(columns, 0, holdout, max_starts, log), None)
    selection = select_form(columns, holdout, bootstrap_replicates=replicates,
                            max_starts=max_starts, log=log)
    chosen = next((c for c in selection["forms"] if c["law"] == selection["chosen"]), None)
    if chosen is None:
        return None, None, selection
    return chosen["fit"], chosen["fit_holdout"], selection


def _write_or_remove(path: Path, record: dict | None) -> None:
    """Write a derived record, or remove a stale one that the current results no longer support."""
    if record is not None:
        atomic_write_json(path, record)
    elif path.exists():
        path.unlink()


def _fit_or_none(columns, replicates, holdout, max_starts, log) -> dict | None:
    try:
        return fit_columns("sparsity", columns, bootstrap_replicates=replicates, holdout=holdout,
                           max_starts=max_starts)
    except MoelabError as exc:  # too few points, or a holdout that leaves nothing to fit
        log(f"sparsity-law fit skipped: {exc}")
        return None


def _forms_record(selection: dict) -> dict:
    """forms.json: the checks of every form, without the bulky bootstrap replicates."""
    forms = []
    for check in selection["forms"]:
        summary = {k: v for k, v in check.items() if k not in ("fit", "fit_holdout")}
        if "fit" in check:
            summary.update(params=check["fit"]["params"], ci=check["fit"]["ci"])
        forms.append(summary)
    return {**selection, "forms": forms}


def _forms_section(selection: dict) -> str:
    criteria = selection["criteria"]
    rows = []
    for check in selection["forms"]:
        law = get_law(check["law"])
        if "skipped" in check:
            rows.append([f"`{law.name}`", str(law.num_params), "–", "–", "skipped: too few points", ""])
            continue
        identified = "yes" if check["identified"] else "no: " + "; ".join(check["problems"])
        rows.append([f"`{law.name}`", str(law.num_params), f"{check['objective']:.3e}",
                     f"{check['holdout_mae']:.4f}", identified,
                     "**chosen**" if check["law"] == selection["chosen"] else ""])
    formulas = "\n".join(f"- `{name}`: {get_law(name).formula}"
                          for name in (c["law"] for c in selection["forms"]))
    if selection["chosen"]:
        verdict = (f"The richest form that passes both checks is `{selection['chosen']}`; the fit, "
                   "the held-out check and the optima below use it (`fit.json`).")
    else:
        verdict = ("**No form of the law passes both checks**, so these points identify no law: "
                   "the report shows no fitted law and no optimal sparsity read off one "
                   "(every form's parameters and intervals are in `forms.json`). Sweep more "
                   "sizes, budgets or seeds.")
    return ("## Law form\n\n"
            "Abnar et al.'s eq. 6, its reduced forms, and Chinchilla's law, in which S enters "
            "only through compute (N = total parameters):\n\n"
            f"{formulas}\n\n"
            "Each is fitted to every point with bootstrap intervals "
            f"({criteria['bootstrap_replicates']} resamples) and refitted without the held-out "
            f"points ({criteria['holdout']}). A form is identified when each exponent moves its "
            f"term by at least {criteria['min_exponent_effect']:g} nats over the points' range, "
            "every 95 % interval is finite (no coefficient reaching 0 or infinity) and no "
            "exponent's interval contains 0 or is wider than "
            f"{criteria['max_exponent_ci_width']:g}"
            + ("" if criteria["bootstrap_replicates"] else " (intervals not checked: no resamples)")
            + "; it is predictive when its held-out "
            f"mean absolute error is at most {criteria['max_holdout_mae']:g} nats (`forms.json`)."
            f"\n\n" + markdown_table(["form", "parameters", "objective", "held-out MAE",
                                      "identified", ""], rows, "lrrrll")
            + f"\n{verdict}\n")


def _setup(grid: SweepGrid) -> str:
    return ("## Setup\n\n"
            f"- Grid: {describe_grid(grid)}.\n"
            "- S = (E - k) / E; S = 0 is the dense model. N is the *total* parameter count, "
            "N_active the parameters one token uses; D is the tokens trained; C = 6 N_active D "
            "is the compute a run actually spent, C_budget the budget it was planned for.\n"
            "- Loss: best validation loss (nats/token) over training, on the same validation "
            "windows for every run. Every number below comes from `results.csv`, whose rows come "
            "from the runs' `summary.json` and `config.yaml`.\n")


def _results_table(rows: list[dict[str, str]]) -> str:
    body = [[r["size"], r["budget"], r["S"], r["E"], format_count(float(r["N_total"])),
             format_count(float(r["N_active"])), format_count(float(r["D"])),
             f"{float(r['C']):.3g}", format_number(float(r["best_val_loss"]))] for r in rows]
    return "## Runs\n\n" + markdown_table(
        ["size", "budget", "S", "E", "N total", "N active", "D", "C", "best val loss"], body,
        "llrrrrrrr")


def _fit_section(fit: dict, shared: float | None, replicates: int) -> str:
    rows = []
    for name, value in fit["params"].items():
        ci = fit["ci"].get(name)
        rows.append([name, f"{value:.5g}", f"[{ci[0]:.4g}, {ci[1]:.4g}]" if ci else "–"])
    intervals = (f"95 % intervals from {replicates} bootstrap resamples (`fit.json`)."
                 if replicates else "No bootstrap resamples (`--bootstrap 0`), so no intervals.")
    if shared is None:
        family = ("Shared (non-expert) fraction of the parameters: not estimable, every run is "
                  "dense (`fit.json` stores null; `moelab optimal` then assumes 0).\n")
    else:
        family = (f"Shared (non-expert) fraction of the parameters, fitted to the runs' own "
                  f"N_active / N: {shared:.3f} (N_active = N (phi + (1 - phi)(1 - S))).\n")
    law = get_law(fit["law"])
    return (f"## Law fit (`{law.name}`, N = total parameters)\n\n"
            f"{law.formula}, "
            f"fitted to all {fit['n_points']} points by summed Huber loss (delta = 1e-3) of log "
            f"residuals from {fit['num_starts']} grid starts; objective {fit['objective']:.4e}. "
            f"{intervals}\n\n"
            + markdown_table(["parameter", "value", "95 % CI"], rows, "lrr")
            + "\n" + family)


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


# --------------------------------------------------------------------------------------------
# IsoFLOP analysis
# --------------------------------------------------------------------------------------------


def _isoflop_section(out_dir: Path, rows: list[dict[str, str]], columns: dict,
                     fit: dict | None, shared: float | None) -> str:
    budgets = _budget_column(rows)
    if budgets is None:
        return ""
    iso_columns = {"N": columns["N"], "C": budgets, "S": columns["S"],
                   "N_active": columns["N_active"], "loss": columns["loss"]}
    analysis = isoflop_analysis(iso_columns)
    # Actual compute (results.csv's C) against the budget each run was grouped under.
    deviation = compute_deviation([float(row["C"]) for row in rows], budgets)
    off_budget = {rows[i]["run"]: float(deviation[i])
                  for i in np.flatnonzero(np.abs(deviation) > COMPUTE_TOLERANCE)}
    atomic_write_json(out_dir / "isoflop.json", {
        "all_points": analysis, "per_sparsity": _per_sparsity(iso_columns),
        "compute_deviation": {"tolerance": COMPUTE_TOLERANCE,
                              "max_abs": float(np.max(np.abs(deviation))),
                              "off_budget_runs": off_budget}})
    # The lines need N_active(N, S); with only dense runs it is N whatever the shared fraction.
    figure = _isoflop_figure(out_dir / "figures" / "isoflop.png", iso_columns, fit,
                             0.0 if shared is None else shared)
    surface = uses_surface(iso_columns)
    text = "## IsoFLOP analysis\n\n" + (
        "Per compute budget, the loss is fitted as a quadratic surface in (log N, -log(1 - S)) "
        "and minimised inside the observed box (Abnar et al.); `isoflop.json` also holds a "
        "parabola in log N per sparsity and budget (where a budget has 3 sizes).\n\n"
        if surface else
        "The runs have one sparsity, so per compute budget the loss is fitted as a parabola in "
        "log N (Hoffmann et al.'s approach 2); its vertex is N*.\n\n")
    text += _budget_table(analysis["budgets"], budgets, deviation, surface)
    text += _exponent_sentence(analysis)
    text += _compute_deviation_sentence(deviation, off_budget)
    if figure:
        text += ("\n![IsoFLOP curves per sparsity](figures/isoflop.png)\n\n"
                 "Points: runs; lines: the fitted law along each budget (D = C / (6 N_active)).\n")
    return text


def _per_sparsity(iso_columns: dict[str, np.ndarray]) -> dict[float, dict]:
    """A parabola analysis of each sparsity's runs on their own."""
    analyses = {}
    for sparsity in np.unique(iso_columns["S"]):
        mask = iso_columns["S"] == sparsity
        one_sparsity = {k: v[mask] for k, v in iso_columns.items() if k != "S"}
        analyses[float(sparsity)] = isoflop_analysis(one_sparsity)
    return analyses


def _budget_table(analysis_rows: list[dict], budgets: np.ndarray, deviation: np.ndarray,
                  surface: bool) -> str:
    if not analysis_rows:
        if surface:
            return "Too few points per budget for the surface (6 needed, 2 sizes, 2 sparsities).\n"
        return "No budget has 3 sizes whose losses a parabola with a minimum fits.\n"

    def worst_deviation(flops):
        at_budget = deviation[np.isclose(budgets, flops, rtol=1e-6)]
        return f"{at_budget[np.argmax(np.abs(at_budget))]:+.1%}"

    if surface:
        rows = [[f"{b['flops']:.3g}", b["n_points"], format_count(b["params"]),
                 format_count(b.get("params_active")), f"{b['sparsity']:.3f}",
                 format_number(b["loss"]), worst_deviation(b["flops"]),
                 "yes" if b["at_edge"] else ""] for b in analysis_rows]
        return (markdown_table(["C", "points", "N*", "N_active*", "S*", "loss*",
                                "worst C/C_budget - 1", "at edge"], rows, "rrrrrrrl")
                + "\n'At edge': the surface's minimum lies on the edge of the sizes and sparsities "
                  "tried, so the optimum is at least that far out; such budgets are left out of "
                  "the exponent fit.\n")
    rows = [[f"{b['flops']:.3g}", b["n_points"], format_count(b["params"]),
             format_number(b["loss"]), worst_deviation(b["flops"]),
             "" if b["inside_data"] else "yes"] for b in analysis_rows]
    return (markdown_table(["C", "points", "N*", "loss*", "worst C/C_budget - 1",
                            "outside data"], rows, "rrrrrl")
            + "\n'Outside data': the parabola's vertex lies beyond the sizes tried at that "
              "budget, an extrapolation; such budgets are left out of the exponent fit.\n")


def _exponent_sentence(analysis: dict) -> str:
    exponent, outside = analysis["params_exponent"], analysis["outside_data"]
    left_out = (f"; left out (optimum not inside the data): C = "
                f"{', '.join(f'{c:.3g}' for c in outside)}" if outside else "")
    if exponent:
        return (f"\nAcross the {exponent['n_budgets']} budgets with their optimum inside the data, "
                f"N*(C) ~ C^{exponent['exponent']:.3f}{left_out}.\n")
    inside = len(analysis["budgets"]) - len(outside)
    if analysis["budgets"]:
        return (f"\nNo exponent N*(C): it needs 2 budgets with their optimum inside the data, "
                f"and {inside} have it{left_out}.\n")
    return ""


def _compute_deviation_sentence(deviation: np.ndarray, off_budget: dict[str, float]) -> str:
    text = ("\nRuns are grouped by their planned budget C_budget, but D is rounded down to whole "
            "optimizer steps, so a run's actual compute C = 6 N_active D is off its budget by up "
            f"to {np.max(np.abs(deviation)):.1%} here (`isoflop.json`, compute_deviation). ")
    if not off_budget:
        return text + f"No run is more than {COMPUTE_TOLERANCE:.0%} off.\n"
    runs = ", ".join(f"`{run}` ({value:+.1%})" for run, value in off_budget.items())
    return (text + f"Runs more than {COMPUTE_TOLERANCE:.0%} off (kept in the fits, but not quite "
            f"on their budget's curve): {runs}.\n")


def _budget_column(rows: list[dict[str, str]]) -> np.ndarray | None:
    """The planned FLOP budget per run; None for a token-budget sweep (no IsoFLOP curves)."""
    values = [row.get("C_budget", "") for row in rows]
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
                ax.plot(n_grid, get_law(fit["law"]).predict_loss(fit["params"], N=n_grid, D=tokens,
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


# --------------------------------------------------------------------------------------------
# Optimal sparsity
# --------------------------------------------------------------------------------------------


def _optima_section(out_dir: Path, columns: dict, fit: dict, shared: float | None) -> str:
    sparsities = np.unique(columns["S"])
    if len(sparsities) < 2:
        return ("## Optimal sparsity\n\n"
                f"Skipped: every run has S = {sparsities[0]:g}, so the fit cannot tell how the "
                "loss changes with S, and an optimal sparsity read off it would not be measured. "
                "Sweep at least two sparsities.\n")
    law = get_law(fit["law"])
    if "log_U" not in law.features:
        _write_or_remove(out_dir / "optima.json", None)
        return ("## Optimal sparsity\n\n"
                f"The chosen form (`{law.name}`) has no sparsity term: at fixed total parameters "
                "and tokens these runs measure no effect of S. Sparsity then pays only through "
                "compute (a sparser model of the same total size spends fewer FLOPs per token, "
                "so a FLOPs budget buys it more tokens), and under a FLOPs budget the sparsest "
                "model the architecture allows is best: S* is the edge of any search, a "
                "consequence of the accounting rather than a measured optimum. No curves are "
                "drawn.\n")
    replicas = fit["bootstrap"]["params"][:CURVE_REPLICATES] if fit.get("bootstrap") else []
    observed_c = 6 * columns["N_active"] * columns["D"]
    c_grid = np.geomspace(observed_c.min(), observed_c.max() * 100, CURVE_POINTS)
    n_grid = np.geomspace(columns["N"].min(), columns["N"].max() * 100, CURVE_POINTS)
    flops_reference = float(np.median(observed_c))
    vs_c = [with_intervals(lambda p, c=c: compute_optimal(law, p, c, shared_fraction=shared),
                           fit["params"], replicas) | {"flops": float(c)} for c in c_grid]
    vs_n = [with_intervals(lambda p, n=n: optimal_sparsity_at_params(
                law, p, n, flops=flops_reference, shared_fraction=shared),
            fit["params"], replicas) | {"params": float(n)} for n in n_grid]
    atomic_write_json(out_dir / "optima.json", {"shared_fraction": shared,
                                                "flops_for_fixed_params": flops_reference,
                                                "vs_flops": vs_c, "vs_params": vs_n})
    _optima_figure(out_dir / "figures" / "optimal_sparsity.png", vs_n, vs_c, flops_reference)
    rows = [[f"{r['flops']:.3g}", _with_ci(r, "sparsity", "{:.3f}"),
             _with_ci(r, "params_total", None), _with_ci(r, "params_active", None),
             "yes" if r["optimum"]["at_boundary"] else ""] for r in vs_c]
    bands = (f"with 95 % bands over {len(replicas)} bootstrap fits" if replicas
             else "without bands (no bootstrap fits)")
    return ("## Optimal sparsity\n\n"
            f"From the fitted law (`optima.json`), {bands}. Left: S* at a fixed total parameter "
            "count N, trained with the median compute of "
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


def _reproduce_section(grid: SweepGrid, replicates: int, max_starts: int | None,
                       fit: dict | None) -> str:
    columns = ",".join(f"{k}={v}" for k, v in fit_columns_map().items())
    starts = "" if max_starts is None else f" --starts {max_starts}"
    law = fit["law"] if fit else SPARSITY.name
    text = ("## Reproduce\n\n"
            f"    moelab sweep-sparsity {grid.name} --out DIR{starts}   # skips finished runs\n"
            f"    moelab fit DIR/results.csv --law {law} --columns {columns} "
            f"--bootstrap {replicates}{starts}\n"
            f"    moelab fit DIR/results.csv --law {law} --columns {columns} "
            f"--holdout '{grid.holdout}'{starts}\n")
    if fit:
        text += "    moelab optimal DIR/fit.json --flops C        # or --params N --flops C\n"
    return text
