"""The sweep's analysis, from ``grid.json`` and ``results.csv`` alone: the form of the law the
points identify, its fit and held-out check, IsoFLOP curves, the runs' measured throughput and
the optimal sparsity under parameters, FLOPs and wall-clock seconds. Everything it finds goes
into JSON files next to results.csv, which ``sweep_report`` renders:

- ``analysis.json``: the settings (bootstrap resamples, starts), what was and was not computed
  and why (``status``);
- ``forms.json`` (every form's checks, ``moelab.scaling.forms``), ``fit.json`` (the chosen form,
  with bootstrap replicates and the family's shared fraction: ``moelab optimal`` reads it),
  ``fit_holdout.json``;
- ``isoflop.json`` (FLOPs-budget sweeps), with S*(C) read off the minima of each sparsity's
  IsoFLOP parabolas, no law involved (``moelab.scaling.isoflop_sparsity``);
- ``form_tests.json`` (sweeps with several seeds): every form against the pure error of the
  seeds by F tests, with N counted as total and as non-embedding parameters, held out at the
  largest S and the largest D; and, for token budgets, the loss at S minus dense at fixed N and D
  (``moelab.sweep.law_checks``);
- ``zero_shot.json`` (runs that scored zero-shot tasks): accuracy against S at equal loss and at
  equal FLOPs (``moelab.sweep.zero_shot``);
- ``finetune.json`` (grids with ``finetune``): the fine-tuned loss and the gain against S at
  equal pretraining loss and per budget (``moelab.sweep.finetune``);
- ``fixed_size.json`` (two or more sparsities per size and budget): S* of each (size, budget)
  cell read off the runs, with intervals resampling seeds as whole wsd families, and the
  ordinal tests of "S* rises with N" and "S* falls with C" (``moelab.scaling.fixed_size``);
- ``throughput.json``: tokens/s per (N, S) measured by the runs themselves, and the throughput
  model fitted to them (``moelab.scaling.throughput``); a throughput table, so ``moelab optimal
  fit.json --seconds T`` finds it next to fit.json;
- ``optima.json``: S*(N), S*(C) and S*(T) curves and the three optima at the sweep's median
  training time, with the throughput ratio against dense at equal loss.

The findings are a ``SweepAnalysis`` (``moelab.sweep.analysis_records``), written as those files by
``moelab.sweep.folder.write_analysis``: a file the current results no longer support is removed
rather than left stale.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import numpy as np

from moelab.errors import MoelabError
from moelab.scaling.family import estimate_shared_fraction
from moelab.scaling.forms import select_form
from moelab.scaling.isoflop import (
    COMPUTE_TOLERANCE, IsoflopAnalysis, IsoflopPoints, compute_deviation, isoflop_analysis,
    uses_surface,
)
from moelab.scaling.isoflop_sparsity import sparsity_isoflop
from moelab.scaling.laws import SPARSITY, get_law
from moelab.scaling.optimal import (
    INTERVAL_KEYS, FlopsCurvePoint, ParamsCurvePoint, SecondsCurvePoint, compute_optimal,
    optimal_sparsity_at_params, seconds_optimal, three_optima, with_intervals,
)
from moelab.scaling.fit_record import LawFit, fit_columns
from moelab.scaling.table import fit_table_from_rows
from moelab.scaling.throughput import (
    ShapeThroughput, ThroughputRow, family_throughput, fit_throughput,
    moe_versus_dense, per_shape_means,
)
from moelab.sweep.folder import SWEEP_FIT_COLUMNS, read_grid, read_results, write_analysis
from moelab.sweep.law_checks import form_tests, sparsity_deltas
from moelab.sweep.analysis_records import (
    ComputeDeviation, FormsRecord, FormSummary, FormTestsRecord, GridRecord, IsoflopRecord,
    OptimaRecord, SweepAnalysis, SweepFit, ThroughputRecord,
)
from moelab.sweep.finetune import finetune_analysis
from moelab.sweep.fixed_size_report import fixed_size_record
from moelab.sweep.results_csv import ResultRow
from moelab.sweep.zero_shot import zero_shot_analysis

CURVE_POINTS = 9
"""Points per S*(N), S*(C) and S*(T) curve (each solved for every bootstrap replicate used)."""
CURVE_REPLICATES = 100
"""Bootstrap replicates used for the curves' bands and the optima's intervals (the fit's CIs
use all of them)."""


def analyse_sweep(out_dir: Path, *, bootstrap_replicates: int = 200, max_starts: int | None = None,
                  log: Callable[[str], None] = print) -> SweepAnalysis:
    """Analyse ``out_dir`` (grid.json, results.csv), write the analysis files and return what
    they hold."""
    out_dir = Path(out_dir)
    grid = read_grid(out_dir)
    analysis = SweepAnalysis(bootstrap_replicates, max_starts, SWEEP_FIT_COLUMNS)
    results = read_results(out_dir)
    if results is None:
        analysis.status.results = "no complete runs in results.csv yet"
        write_analysis(out_dir, analysis)
        return analysis
    rows = results.rows
    columns = fit_table_from_rows(out_dir / "results.csv", results.header, results.cells, True,
                                  SWEEP_FIT_COLUMNS)
    analysis.n_points = len(rows)
    # None when every run is dense: the runs then say nothing about the expert share.
    analysis.shared_fraction = estimate_shared_fraction(columns["N"], columns["N_active"],
                                                        columns["S"])
    _fit_law(analysis, columns, grid.holdout, log, _non_embedding_column(rows))
    deltas = sparsity_deltas(rows)
    if deltas is not None:
        analysis.form_tests = replace(analysis.form_tests or FormTestsRecord(),
                                      sparsity_deltas=deltas)
    analysis.zero_shot = zero_shot_analysis(results)
    analysis.finetune = finetune_analysis(results)
    analysis.isoflop = _isoflop_record(rows, columns, bootstrap_replicates)
    analysis.fixed_size = fixed_size_record(rows, grid.mode, grid.top_k)
    analysis.throughput = _throughput_record(rows, analysis)
    analysis.optima = _optima_record(columns, grid, analysis)
    write_analysis(out_dir, analysis)
    return analysis


# --------------------------------------------------------------------------------------------
# The law
# --------------------------------------------------------------------------------------------


def _non_embedding_column(rows: list[ResultRow]) -> np.ndarray | None:
    """Each run's non-embedding parameter count, or None where some row (an older file) lacks it."""
    counts = [row.N_non_embedding for row in rows]
    if any(count is None for count in counts):
        return None
    return np.array(counts, dtype=np.float64)


def _fit_law(analysis: SweepAnalysis, columns: dict, holdout: str, log,
             non_embedding: np.ndarray | None = None) -> None:
    """The fit the report uses (None when none), its held-out refit and the forms checked.

    With two or more sparsities every form of the law is checked and the chosen one's fits are
    used (none when no form passes). With one sparsity the S terms are not measured, so the
    forms cannot be told apart: the full law is fitted as it is, without a selection.
    """
    replicates, max_starts = analysis.bootstrap_replicates, analysis.max_starts
    if len(np.unique(columns["S"])) < 2:
        fit = _fit_or_none(columns, replicates, None, max_starts, log)
        holdout_fit = _fit_or_none(columns, 0, holdout, max_starts, log)
        analysis.status.law = "one_sparsity" if fit else "too_few_points"
    else:
        selection = select_form(columns, holdout, bootstrap_replicates=replicates,
                                max_starts=max_starts, log=log)
        chosen = selection.chosen_check()
        fit, holdout_fit = (chosen.fit, chosen.fit_holdout) if chosen else (None, None)
        analysis.forms = FormsRecord(selection.chosen, selection.criteria,
                                     [FormSummary.of(check) for check in selection.forms])
        analysis.status.law = "chosen" if chosen else "no_form_identified"
        analysis.form_tests = form_tests(selection, columns, non_embedding,
                                         max_starts=max_starts, log=log)
    analysis.holdout_fit = holdout_fit
    if fit is not None:
        analysis.fit = SweepFit.of(fit, shared_fraction=analysis.shared_fraction,
                                   source="results.csv", columns=SWEEP_FIT_COLUMNS)


def _fit_or_none(columns, replicates, holdout, max_starts, log) -> LawFit | None:
    try:
        return fit_columns(SPARSITY.name, columns, bootstrap_replicates=replicates,
                           holdout=holdout, max_starts=max_starts)
    except MoelabError as exc:  # too few points, or a holdout that leaves nothing to fit
        log(f"sparsity-law fit skipped: {exc}")
        return None


# --------------------------------------------------------------------------------------------
# IsoFLOP analysis
# --------------------------------------------------------------------------------------------


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


# --------------------------------------------------------------------------------------------
# Throughput measured by the runs
# --------------------------------------------------------------------------------------------


def _throughput_record(rows: list[ResultRow], analysis: SweepAnalysis) -> ThroughputRecord | None:
    """Per (N, S): the median tokens/s of its runs; and the throughput model fitted to every
    run (None when the runs did not record their speed: synthetic or older results)."""
    if any(not row.tokens_per_s for row in rows):
        analysis.status.throughput = "not measured (results.csv has no tokens_per_s)"
        return None
    runs = [_throughput_row(row) for row in rows]
    shapes = per_shape_means(runs)
    ratios = {(r.N_total, r.S): r for r in moe_versus_dense(shapes)}
    for shape in shapes:  # measured against dense models, no throughput model involved
        ratio = ratios.get((shape.N_total, shape.S))
        if ratio is not None:
            shape.tokens_per_s_vs_dense = ratio.tokens_per_s_vs_same_size_dense
            shape.step_time_vs_equal_flops_dense = ratio.step_time_vs_equal_flops_dense
    model, problem = None, None
    try:
        # The folder's own file, not its path: a copied or moved sweep folder stays the same.
        model = fit_throughput(runs, bootstrap_replicates=CURVE_REPLICATES, source="results.csv")
    except MoelabError as exc:
        problem = str(exc)
    analysis.status.throughput = "model fitted" if model else f"no model: {problem}"
    return ThroughputRecord(source="results.csv", rows=shapes, runs=len(runs),
                            devices=sorted({row.device for row in rows}),
                            model=model.record() if model else None, model_problem=problem)


def _throughput_row(row: ResultRow) -> ThroughputRow:
    """The run as ``moelab.scaling.throughput`` reads one."""
    return ThroughputRow(N_total=row.N_total, N_active=row.N_active, S=row.S, E=float(row.E),
                         tokens_per_s=row.tokens_per_s, k=float(row.k or 1), device=row.device,
                         step_time_s=row.step_time_s, peak_memory_bytes=row.peak_memory_bytes,
                         tokens_per_step=row.tokens_per_step)


# --------------------------------------------------------------------------------------------
# Optimal sparsity
# --------------------------------------------------------------------------------------------


def _optima_record(columns: dict, grid: GridRecord, analysis: SweepAnalysis) -> OptimaRecord | None:
    status, fit, shared = analysis.status, analysis.fit, analysis.shared_fraction
    if fit is None:
        status.optima = "no_law"
        return None
    if len(np.unique(columns["S"])) < 2:
        status.optima = "one_sparsity"
        return None
    law = get_law(fit.law)
    if "log_U" not in law.features:
        status.optima = "no_sparsity_term"
        return None
    status.optima = "computed"
    replicas = fit.replicas[:CURVE_REPLICATES]
    observed_c = 6 * columns["N_active"] * columns["D"]
    flops_reference = float(np.median(observed_c))
    c_grid = np.geomspace(observed_c.min(), observed_c.max() * 100, CURVE_POINTS)
    n_grid = np.geomspace(columns["N"].min(), columns["N"].max() * 100, CURVE_POINTS)
    vs_c = [with_intervals(lambda p, c=c: compute_optimal(law, p, c, shared_fraction=shared),
                           fit.params, replicas).at(FlopsCurvePoint, flops=float(c))
            for c in c_grid]
    vs_n = [with_intervals(lambda p, n=n: optimal_sparsity_at_params(
                law, p, n, flops=flops_reference, shared_fraction=shared),
            fit.params, replicas).at(ParamsCurvePoint, params=float(n)) for n in n_grid]
    optima = OptimaRecord(shared_fraction=shared, flops_for_fixed_params=flops_reference,
                          vs_flops=vs_c, vs_params=vs_n)
    model = analysis.throughput.fitted_model() if analysis.throughput else None
    if model is None:
        status.seconds = "no throughput model: " + (status.throughput or "")
        return optima
    speeds = _run_speeds(analysis.throughput, columns)
    train_seconds = columns["D"] / np.array([r.tokens_per_s for r in speeds])
    optima.seconds_reference = float(np.median(train_seconds))
    optima.top_k = grid.top_k
    optima.vs_seconds = _seconds_curve(law, fit.params, replicas, model, shared or 0.0,
                                       grid.top_k, train_seconds)
    optima.three = three_optima(law, fit.params, replicas, optima.seconds_reference, model,
                                shared_fraction=shared or 0.0, top_k=grid.top_k)
    status.seconds = "computed"
    return optima


def _run_speeds(throughput: ThroughputRecord, columns: dict) -> list[ShapeThroughput]:
    """Each run's tokens/s, as the per-shape medians of throughput.json (runs of one shape at
    other budgets are the same model on the same machine)."""
    by_shape = {(r.N_total, r.S): r for r in throughput.rows}
    return [by_shape[(float(n), float(s))] for n, s in zip(columns["N"], columns["S"])]


def _seconds_curve(law, params, replicas, model, shared, top_k,
                   train_seconds) -> list[SecondsCurvePoint]:
    """S*(T) over wall-clock budgets from the sweep's shortest run to 100 x its longest."""
    timings = model.replicates or [model.coefficients]
    pairs = [(p, timings[i % len(timings)]) for i, p in enumerate(replicas)]
    curve = []
    for seconds in np.geomspace(train_seconds.min(), train_seconds.max() * 100, CURVE_POINTS):
        def solve(pair, seconds=float(seconds)):
            rate = family_throughput(model, shared, top_k, pair[1])
            return seconds_optimal(law, pair[0], seconds, rate, shared_fraction=shared)

        curve.append(with_intervals(solve, (params, model.coefficients), pairs,
                                    keys=INTERVAL_KEYS + ("tokens_per_s", "flops"))
                     .at(SecondsCurvePoint, seconds=float(seconds)))
    return curve
