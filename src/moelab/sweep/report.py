"""The sweep report: ``report.md`` and its figures, rendered from the sweep folder alone.

It reads ``grid.json``, ``results.csv`` and the files ``moelab.sweep.analysis`` wrote
(``analysis.json``, ``forms.json``, ``fit.json``, ``fit_holdout.json``, ``isoflop.json``,
``throughput.json``, ``optima.json``; read back as one ``SweepAnalysis``), so every number it
prints is in one of them; it computes nothing but the fitted law's curves in the figures
(``moelab.sweep.figures``). ``write_sweep_report`` runs the analysis first;
``render_sweep_report`` redraws a folder already analysed.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from moelab.fileio import atomic_write_text
from moelab.report import format_count, format_number, markdown_table
from moelab.scaling.forms import MIN_STEADY_REPLICATES
from moelab.scaling.isoflop import (
    BudgetOptimum, IsoflopAnalysis, IsoflopPoints, ParabolaBudget, SurfaceBudget,
)
from moelab.scaling.laws import SPARSITY, get_law
from moelab.scaling.optimal import OptimumInterval, VersusDenseInterval
from moelab.scaling.table import fit_table_from_rows
from moelab.sweep.analysis import analyse_sweep
from moelab.sweep.figures import isoflop_figure, optima_figure
from moelab.sweep.fixed_size_report import fixed_size_section
from moelab.sweep.folder import (
    read_analysis, read_grid, read_optional_json, read_results, with_derived_files,
)
from moelab.scaling.fit_record import LawFit
from moelab.sweep.analysis_records import FormsRecord, GridRecord, IsoflopRecord, OptimaRecord, SweepAnalysis
from moelab.sweep.results_csv import ResultRow
from moelab.sweep.report_sections import (
    constant_s_star_text, finetune_analysis_text, form_tests_section, isoflop_optima_text,
    poorly_supported_text, zero_shot_analysis_text,
)
from moelab.sweep.run_tables import (
    budget_family_text, format_tokens_per_param, runs_table, tokens_per_param_caption,
    zero_shot_section,
)
from moelab.sweep.tuning import lr_selection_text, read_plan_record
from moelab.numerics import machine_bullet


def write_sweep_report(out_dir: Path, *, bootstrap_replicates: int = 200,
                       max_starts: int | None = None, log: Callable[[str], None] = print) -> Path:
    """Analyse ``out_dir`` (grid.json, results.csv) and write report.md; returns its path.

    ``max_starts`` limits the sparsity law's start grid (None: its default seeded subset).
    """
    analyse_sweep(out_dir, bootstrap_replicates=bootstrap_replicates, max_starts=max_starts,
                  log=log)
    return render_sweep_report(out_dir)


def render_sweep_report(out_dir: Path) -> Path:
    """report.md and figures/*.png from the folder's files; returns the report's path."""
    out_dir = Path(out_dir)
    grid = read_grid(out_dir)
    analysis = read_analysis(out_dir)
    sections = [f"# Sparsity sweep `{grid.name}`\n", _setup(grid) + _machine_line(out_dir)]
    lr_text = lr_selection_text(out_dir, read_plan_record(out_dir))
    if lr_text:  # only a sweep run with --lr-grid
        sections.append(lr_text)
    results = read_results(out_dir)
    sections.append(partial_results_text(out_dir, results.rows if results else []))
    if results is None:
        sections.append("No results to analyse yet (results.csv has no complete runs).\n")
        return atomic_write_text(out_dir / "report.md", "\n".join(sections))
    rows = results.rows
    sections.append(budget_family_text(out_dir, rows))
    columns = fit_table_from_rows(out_dir / "results.csv", results.header, results.cells, True,
                                  analysis.columns)
    analysis = with_derived_files(out_dir, analysis)
    sections.append(runs_table(rows))
    sections.append(zero_shot_section(out_dir, results))
    if analysis.zero_shot:
        sections.append(zero_shot_analysis_text(analysis.zero_shot))
    if analysis.finetune:
        sections.append(finetune_analysis_text(analysis.finetune))
    sections.extend(_law_sections(analysis, len(rows)))
    if analysis.form_tests:
        sections.append(form_tests_section(out_dir, analysis.form_tests, analysis.forms))
    if analysis.isoflop is not None:
        sections.append(_isoflop_section(out_dir, rows, columns, analysis.isoflop, analysis))
    if analysis.fixed_size is not None:
        sections.append(fixed_size_section(out_dir, analysis.fixed_size))
    sections.append(_throughput_section(analysis))
    sections.append(_optima_section(out_dir, analysis, rows))
    sections.append(_reproduce_section(grid, analysis))
    return atomic_write_text(out_dir / "report.md", "\n".join(s for s in sections if s))


@dataclass(frozen=True)
class Completeness:
    """How much of its plan a sweep's results.csv holds: what every table and fit reads."""

    runs: int
    planned_runs: int
    finetunes: int
    planned_finetunes: int

    @property
    def complete(self) -> bool:
        return self.runs >= self.planned_runs and self.finetunes >= self.planned_finetunes

    def describe(self) -> str:
        counts = [f"{self.runs} of {self.planned_runs} planned runs"]
        if self.planned_finetunes:
            counts.append(f"{self.finetunes} of {self.planned_finetunes} planned finetunes")
        return " and ".join(counts)


def completeness(out_dir: Path, rows: list[ResultRow] | None = None) -> Completeness:
    """plan.json's runs and finetunes against the rows of results.csv (read when not given)
    that hold them; a folder without plan.json counts as complete."""
    if rows is None:
        results = read_results(out_dir)
        rows = results.rows if results else []
    plan = read_optional_json(Path(out_dir) / "plan.json") or {}
    return Completeness(len(rows), len(plan.get("runs", [])),
                        sum(1 for row in rows if row.finetune_val_loss is not None),
                        len(plan.get("finetunes", [])))


def partial_results_text(out_dir: Path, rows: list[ResultRow]) -> str:
    """A section saying the report is partial, with the counts, when results.csv holds fewer
    runs or finetunes than plan.json planned (failed, or not trained); "" when complete."""
    counts = completeness(out_dir, rows)
    if counts.complete:
        return ""
    return ("## Partial results\n\n**This report is partial**: it reads " + counts.describe()
            + "; the others failed (`failures.json` gives each one's error) or were not "
            "trained, and every table and fit below leaves them out. Train them again with the "
            "same `moelab sweep-sparsity` command.\n")


def _law_sections(analysis: SweepAnalysis, n_rows: int) -> list[str]:
    """The forms checked, the chosen fit and its held-out check (whichever there are)."""
    sections = []
    if analysis.forms is not None:
        sections.append(_forms_section(analysis.forms))
    if analysis.status.law == "too_few_points":
        sections.append(f"## Law fit\n\nNot enough points ({n_rows}) for the "
                        f"{SPARSITY.num_params}-parameter sparsity law: at least "
                        f"{SPARSITY.num_params + 1} complete runs are needed.\n")
    if analysis.fit is not None:
        sections.append(_fit_section(analysis.fit, analysis.shared_fraction,
                                     analysis.bootstrap_replicates))
    if analysis.holdout_fit is not None:
        sections.append(_holdout_section(analysis.holdout_fit))
    return sections


def _forms_section(selection: FormsRecord) -> str:
    criteria = selection.criteria
    rows = []
    for check in selection.forms:
        law = get_law(check.law)
        if check.skipped is not None:
            rows.append([f"`{law.name}`", str(law.num_params), "–", "–", "skipped: too few points", ""])
            continue
        identified = "yes" if check.identified else "no: " + "; ".join(check.problems or [])
        rows.append([f"`{law.name}`", str(law.num_params), f"{check.objective:.3e}",
                     f"{check.holdout_mae:.4f}", identified,
                     "**chosen**" if check.law == selection.chosen else ""])
    formulas = "\n".join(f"- `{check.law}`: {get_law(check.law).formula}"
                          for check in selection.forms)
    if selection.chosen:
        verdict = (f"The richest form that passes both checks is `{selection.chosen}`; the fit, "
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
            f"({criteria.bootstrap_replicates} resamples) and refitted without the held-out "
            f"points ({criteria.holdout}). A form is identified when "
            + (f"every term adds at least {criteria.min_term_size:g} nats to some point's "
               "loss, " if criteria.min_term_size is not None else "")  # older forms.json lack it
            + f"each exponent moves its term by at least {criteria.min_exponent_effect:g} "
            "nats over the points' range, "
            "every 95 % interval is finite (no coefficient reaching 0 or infinity) and no "
            "exponent's interval contains 0 or is wider than "
            f"{criteria.max_exponent_ci_width:g}"
            + _resamples_caveat(criteria.bootstrap_replicates)
            + "; it is predictive when its held-out "
            f"mean absolute error is at most {criteria.max_holdout_mae:g} nats (`forms.json`)."
            f"\n\n" + markdown_table(["form", "parameters", "objective", "held-out MAE",
                                      "identified", ""], rows, "lrrrll")
            + f"\n{verdict}\n")


def _resamples_caveat(replicates: int) -> str:
    if not replicates:
        return " (intervals not checked: no resamples)"
    if replicates < MIN_STEADY_REPLICATES:
        return (f" (with fewer than {MIN_STEADY_REPLICATES} resamples these intervals, and so "
                "the choice of form, can turn on float rounding)")
    return ""


def _machine_line(out_dir: Path) -> str:
    """The setup's line naming the machines the runs trained on ('' when none recorded one)."""
    results = read_results(out_dir)
    return machine_bullet([row.machine for row in results.rows]) if results else ""


def _setup(grid: GridRecord) -> str:
    return ("## Setup\n\n"
            f"- Grid: {grid.describe()}.\n"
            "- S = (E - k) / E; S = 0 is the dense model. N is the *total* parameter count, "
            "N_active the parameters one token uses; D is the tokens trained; C = 6 N_active D "
            "is the compute a run actually spent, C_budget the budget it was planned for. "
            "Every budget, IsoFLOP fit and S* below counts FLOPs this way (moelab's `six_n` "
            "count, the budget convention of Abnar et al. 2025), not with the attention "
            "FLOPs over the context.\n"
            "- Loss: best validation loss (nats/token) over training, on the same validation "
            "windows for every run. Every number below comes from `results.csv`, whose rows come "
            "from the runs' `summary.json` and `config.yaml`, or from the analysis files next to "
            "it (`analysis.json` lists what was computed).\n")


def _fit_section(fit: LawFit, shared: float | None, replicates: int) -> str:
    rows = []
    for name, value in fit.params.items():
        ci = fit.ci.get(name)
        rows.append([name, f"{value:.5g}", f"[{ci[0]:.4g}, {ci[1]:.4g}]" if ci else "–"])
    intervals = (f"95 % intervals from {replicates} bootstrap resamples (`fit.json`)."
                 if replicates else "No bootstrap resamples (`--bootstrap 0`), so no intervals.")
    if shared is None:
        family = ("Shared (non-expert) fraction of the parameters: not estimable, every run is "
                  "dense (`fit.json` stores null; `moelab optimal` then assumes 0).\n")
    else:
        family = (f"Shared (non-expert) fraction of the parameters, fitted to the runs' own "
                  f"N_active / N: {shared:.3f} (N_active = N (phi + (1 - phi)(1 - S))).\n")
    law = get_law(fit.law)
    return (f"## Law fit (`{law.name}`, N = total parameters)\n\n"
            f"{law.formula}, "
            f"fitted to all {fit.n_points} points by summed Huber loss (delta = 1e-3) of log "
            f"residuals from {fit.num_starts} grid starts; objective {fit.objective:.4e}. "
            f"{intervals}\n\n"
            + markdown_table(["parameter", "value", "95 % CI"], rows, "lrr")
            + "\n" + family)


def _holdout_section(holdout_fit: LawFit) -> str:
    held = holdout_fit.holdout
    rows = [[f"{p.S:g}", format_count(p.N), format_count(p.D), format_number(p.loss),
             format_number(p.predicted), f"{(p.predicted - p.loss) / p.loss:+.2%}"]
            for p in held.points]
    return (f"## Held-out check ({held.spec})\n\n"
            f"The law refitted without the {held.n_points} points where {held.spec} "
            f"(`fit_holdout.json`) predicts them with mean |log error| "
            f"{held.mean_abs_log_error:.4f}, loss RMSE {held.rmse_loss:.4f} and at most "
            f"{held.max_abs_relative_error:.2%} relative error.\n\n"
            + markdown_table(["S", "N", "D", "loss", "predicted", "error"], rows, "rrrrrr"))


# --------------------------------------------------------------------------------------------
# IsoFLOP analysis
# --------------------------------------------------------------------------------------------


def _isoflop_section(out_dir: Path, rows: list[ResultRow], columns: dict,
                     isoflop: IsoflopRecord, sweep: SweepAnalysis) -> str:
    shared = sweep.shared_fraction
    budgets = np.array([row.C_budget for row in rows], dtype=np.float64)
    points = IsoflopPoints(params=columns["N"], flops=budgets, loss=columns["loss"],
                           sparsity=columns["S"])
    deviation = np.array([isoflop.compute_deviation.per_run[row.run] for row in rows])
    analysis, surface = isoflop.all_points, isoflop.surface
    # The lines need N_active(N, S); with only dense runs it is N whatever the shared fraction.
    figure = isoflop_figure(out_dir / "figures" / "isoflop.png", points, sweep.fit,
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
        text += isoflop_optima_text(out_dir, isoflop.sparsity_optima, seeds)
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
                 _optimum_tokens_per_param(b.flops, b.params, b.params_active),
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


# --------------------------------------------------------------------------------------------
# Throughput
# --------------------------------------------------------------------------------------------


def _throughput_section(analysis: SweepAnalysis) -> str:
    throughput = analysis.throughput
    if throughput is None:
        return ("## Throughput\n\n"
                f"Not measured: {analysis.status.throughput or 'no throughput.json'}.\n")
    rows = [[format_count(r.N_total), format_count(r.N_active), f"{r.S:g}",
             f"{r.E:g}", f"{r.tokens_per_s:,.0f}",
             f"{r.step_time_s * 1e3:.1f}" if r.step_time_s else "–",
             f"{r.peak_memory_bytes / 2**20:,.0f}" if r.peak_memory_bytes else "–",
             f"{r.tokens_per_s_vs_dense:.2f}" if r.tokens_per_s_vs_dense else "–",
             f"{r.step_time_vs_equal_flops_dense:.2f}"
             if r.step_time_vs_equal_flops_dense else "–",
             str(r.runs)] for r in throughput.rows]
    text = ("## Throughput\n\n"
            "Training tokens/s each run measured on the machine that ran it (training time "
            "only, eval and checkpoints excluded; median over the runs of a shape, "
            f"`throughput.json`; device {', '.join(throughput.devices)}). 'vs dense': "
            "tokens/s against the dense model of the same total size; 'vs equal FLOPs': step "
            "time against a dense step of the same FLOPs (the dense runs' time per token "
            "interpolated log-log at this N_active; '–' outside the dense sizes). "
            "Peak memory is the training process's "
            "peak resident set on a CPU (a process that trained several runs reports the "
            "largest so far), allocated tensors on a GPU. Runs trained side by side (`--jobs`) "
            "share the machine, so these are speeds under that load.\n\n"
            + markdown_table(["N total", "N active", "S", "E", "tokens/s", "ms/step",
                              "peak MiB", "vs dense", "vs equal FLOPs", "runs"], rows,
                             "rrrrrrrrrr"))
    model = throughput.model
    if model is None:
        return text + f"\nNo throughput model: {throughput.model_problem}\n"
    coefficients, ci = model.coefficients, model.ci
    terms = [[name, f"{coefficients[name]:.3g}",
              f"[{ci[name][0]:.3g}, {ci[name][1]:.3g}]" if ci else "–"] for name in coefficients]
    overhead = (coefficients["a"] + coefficients["m"]) / coefficients["a"] if coefficients["a"] else math.nan
    return (text + f"\nThroughput model (`moelab.scaling.throughput`), fitted to all "
            f"{model.n_rows} runs: {model.form}, with 95 % intervals from "
            f"{model.bootstrap.replicates} resamples of the distinct shapes. A FLOP inside "
            f"the expert layers costs (a + m) / a = {overhead:.2f} x a dense FLOP; attention, "
            "embedding and head FLOPs are priced as dense.\n\n"
            + markdown_table(["term", "seconds per token per unit", "95 % CI"], terms, "lrr"))


# --------------------------------------------------------------------------------------------
# Optimal sparsity
# --------------------------------------------------------------------------------------------


def _optima_section(out_dir: Path, analysis: SweepAnalysis,
                    run_rows: list[ResultRow]) -> str:
    """The optima curves and the three optima, beside the runs (results.csv's rows)."""
    status, fit, optima = analysis.status.optima, analysis.fit, analysis.optima
    first_sparsity = run_rows[0].S  # the only one when every run has the same
    head = "## Optimal sparsity\n\n"
    if status == "no_law":
        return head + ("Not computed: the optima (under parameters, FLOPs and wall-clock seconds) "
                       "are read off a fitted law, and these points identify none (see 'Law "
                       "form'). The measured throughput above stands on its own.\n")
    if status == "one_sparsity":
        return head + (f"Skipped: every run has S = {first_sparsity:g}, so the fit cannot "
                       "tell how the loss changes with S, and an optimal sparsity read off it "
                       "would not be measured. Sweep at least two sparsities.\n")
    if status == "no_sparsity_term":
        return head + (f"The chosen form (`{fit.law}`) has no sparsity term: at fixed total "
                       "parameters and tokens these runs measure no effect of S. Sparsity then "
                       "pays only through compute (a sparser model of the same total size spends "
                       "fewer FLOPs per token, so a FLOPs budget buys it more tokens), and under a "
                       "FLOPs budget the sparsest model the architecture allows is best: S* is "
                       "the edge of any search, a consequence of the accounting rather than a "
                       "measured optimum. No curves are drawn.\n")
    head += constant_s_star_text(fit.law)
    vs_n, vs_c, vs_t = optima.vs_params, optima.vs_flops, optima.vs_seconds
    optima_figure(out_dir / "figures" / "optimal_sparsity.png", vs_n, vs_c, vs_t,
                  optima.flops_for_fixed_params)
    bands = ("with 95 % bands over the bootstrap fits" if vs_c[0].ci
             else "without bands (no bootstrap fits)")
    rows = [[f"{r.flops:.3g}", _with_ci(r, "sparsity", "{:.3f}"),
             _with_ci(r, "params_total", None), _with_ci(r, "params_active", None),
             _optimum_tokens_per_param(r.flops, r.optimum.params_total,
                                       r.optimum.params_active),
             "yes" if r.optimum.at_boundary else ""] for r in vs_c]
    text = (head + f"From the fitted law (`optima.json`), {bands}. Left: S* at a fixed total "
            "parameter count N, trained with the median compute of the sweep (C = "
            f"{optima.flops_for_fixed_params:.3g}; D = C / (6 N_active) grows with S). Middle: "
            "the compute-optimal S* at each budget C, minimising over N as well. Right: S* under "
            "a wall-clock budget T on the machine that ran the sweep (D = T x its measured "
            "tokens/s, from the throughput model). Values at the edge of the search (S in "
            "[0, 0.98]) mean the law has no interior optimum there; beyond the sweep's range "
            "they are extrapolations.\n\n"
            "![Optimal sparsity](figures/optimal_sparsity.png)\n\n"
            + tokens_per_param_caption(run_rows)
            + "D*/N*: the optimum's tokens D = C / (6 N_active) per total and per active "
            "parameter.\n\n"
            + markdown_table(["C", "S*", "N*", "N_active*", "D*/N* (total / active)", "at edge"],
                             rows, "rrrrrl"))
    return text + _three_optima_text(optima, analysis)


def _three_optima_text(optima: OptimaRecord, analysis: SweepAnalysis) -> str:
    three = optima.three
    if three is None:
        return ("\nNo optimum under wall-clock seconds: "
                f"{analysis.status.seconds or 'no throughput model'}.\n")
    rows = []
    for r, label in ((three.by_params, f"parameters N = {format_count(three.params)}, "
                                       f"C = {three.flops:.3g}"),
                     (three.by_flops, f"FLOPs C = {three.flops:.3g}"),
                     (three.by_seconds, f"wall clock T = {three.seconds:.3g} s")):
        sparsity = (_undetermined_or_ci(r) if r is three.by_seconds
                    else _with_ci(r, "sparsity", "{:.3f}"))
        optimum = r.optimum
        rows.append([label, sparsity, _with_ci(r, "params_total", None),
                     _with_ci(r, "params_active", None), format_count(optimum.tokens),
                     format_tokens_per_param(optimum.tokens, optimum.params_total,
                                             optimum.params_active),
                     format_number(optimum.loss), "yes" if optimum.at_boundary else ""])
    return ("\n### The three optima at the sweep's median training time\n\n"
            f"T = {three.seconds:.3g} s is the median training time of the sweep's runs "
            "(D / tokens/s). The FLOPs question is asked at the compute the seconds optimum "
            "spends, the parameters question at its total size with that compute "
            "(`optima.json`, three).\n\n"
            + markdown_table(["budget", "S*", "N*", "N_active*", "D*", "D*/N* (total / active)",
                              "loss", "at edge"], rows, "lrrrrrrl")
            + "\n" + _ratio_sentence(three.by_seconds))


UNDETERMINED_WIDTH = 0.5
"""A 95 % interval of S* wider than this spans most of [0, 1]: no optimum is measured."""


def _optimum_tokens_per_param(flops: float, total: float, active: float | None) -> str:
    """D*/N* of an optimum at compute C: its tokens D = C / (6 N_active) per total and per
    active parameter; '–' without N_active."""
    if not active or not total:
        return "–"
    return format_tokens_per_param(flops / (6 * active), total, active)


def _undetermined_or_ci(result: OptimumInterval) -> str:
    """The wall-clock S* with its interval, or "undetermined on this hardware" when the
    interval spans most of [0, 1] (the point would read as a finding it is not)."""
    ci = result.ci.get("sparsity")
    if ci and ci[1] - ci[0] > UNDETERMINED_WIDTH:
        return f"undetermined on this hardware [{ci[0]:.3f}, {ci[1]:.3f}]"
    return _with_ci(result, "sparsity", "{:.3f}")


def _ratio_sentence(by_seconds: VersusDenseInterval) -> str:
    optimum, ci = by_seconds.optimum, by_seconds.ci
    if optimum.dense_seconds is None or math.isnan(optimum.dense_seconds):
        return "No dense model reaches the optimum's loss within 10^6 x T on this hardware.\n"

    def interval(key):
        return f" [{ci[key][0]:.2f}, {ci[key][1]:.2f}]" if ci.get(key) else ""

    return (f"At S* the model trains {optimum.tokens_per_s:,.0f} tokens/s. The dense model "
            f"that reaches the same loss soonest ({format_count(optimum.dense_params)} "
            f"parameters) trains {optimum.dense_tokens_per_s:,.0f} tokens/s and needs "
            f"{optimum.dense_seconds:.3g} s: **throughput ratio "
            f"{optimum.throughput_ratio:.2f}{interval('throughput_ratio')}** at equal loss, "
            f"and the optimum gets there {optimum.seconds_ratio:.2f}"
            f"{interval('seconds_ratio')} x sooner on this hardware (moelab's measurement: "
            "Abnar et al. count cost in FLOPs only).\n")


def _with_ci(result: OptimumInterval, key: str, fmt: str | None) -> str:
    def show(value):
        return fmt.format(value) if fmt else format_count(value)

    ci = result.ci.get(key)
    value = show(result.value(key))
    return f"{value} [{show(ci[0])}, {show(ci[1])}]" if ci else value


def _reproduce_section(grid: GridRecord, analysis: SweepAnalysis) -> str:
    fit = analysis.fit
    columns = ",".join(f"{k}={v}" for k, v in analysis.columns.items())
    max_starts, replicates = analysis.max_starts, analysis.bootstrap_replicates
    starts = "" if max_starts is None else f" --starts {max_starts}"
    law = fit.law if fit else SPARSITY.name
    text = ("## Reproduce\n\n"
            f"    moelab sweep-sparsity {grid.name} --out DIR{starts}   # skips finished runs\n"
            f"    moelab fit DIR/results.csv --law {law} --columns {columns} "
            f"--bootstrap {replicates}{starts}\n"
            f"    moelab fit DIR/results.csv --law {law} --columns {columns} "
            f"--holdout '{grid.holdout}'{starts}\n")
    if fit:
        text += ("    moelab optimal DIR/fit.json --flops C        # or --params N --flops C\n"
                 "    moelab optimal DIR/fit.json --seconds T      # reads DIR/throughput.json\n")
    return text
