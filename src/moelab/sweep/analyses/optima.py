"""The optimal sparsity read off the fitted law: S* at a fixed total size N, the compute-optimal
S* at each budget C and, with a throughput model, S* under a wall-clock budget T on the machine
that ran the sweep, each with bootstrap bands; and the three optima at the sweep's median
training time, with the throughput ratio against dense at equal loss
(``moelab.scaling.optimal``). Written as ``optima.json``."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

import numpy as np

from moelab.report import format_count, format_number, markdown_table, new_figure, save_figure
from moelab.report.analysis import Analysis, Findings
from moelab.report.axes import format_axis, format_count_tick, format_flops_tick
from moelab.scaling.fit_record import OMIT_NONE, LawFit
from moelab.scaling.form_tests import CONSTANT_S_STAR
from moelab.scaling.laws import get_law
from moelab.scaling.optimal import (
    DEFAULT_MAX_SPARSITY, INTERVAL_KEYS, FlopsCurvePoint, OptimumInterval, ParamsCurvePoint,
    SecondsCurvePoint, ThreeOptima, VersusDenseInterval, compute_optimal,
    optimal_sparsity_at_params, seconds_optimal, three_optima, with_intervals,
)
from moelab.scaling.throughput import ShapeThroughput, family_throughput
from moelab.sweep.analyses.common import (
    format_tokens_per_param, optimum_tokens_per_param, several_sparsities,
    tokens_per_param_caption,
)
from moelab.sweep.analyses.law_fit import ANALYSIS as LAW_FIT, has_sparsity_term
from moelab.sweep.analyses.throughput import ANALYSIS as THROUGHPUT, ThroughputRecord
from moelab.sweep.folder import SweepFolder

CURVE_POINTS = 9
"""Points per S*(N), S*(C) and S*(T) curve (each solved for every bootstrap replicate used)."""
CURVE_REPLICATES = 100
"""Bootstrap replicates used for the curves' bands and the optima's intervals (the fit's CIs
use all of them)."""


@dataclass(kw_only=True)
class OptimaRecord:
    """optima.json: S*(C), S*(N) and, with a throughput model, S*(T) and the three optima at
    the sweep's median training time. Each curve point is an optimum with its intervals
    (``moelab.scaling.optimal.with_intervals``) and where it was solved."""

    shared_fraction: Optional[float]
    """The runs' share of parameters outside the experts."""
    flops_for_fixed_params: float
    """The compute S*(N) is solved at: the sweep's median."""
    vs_flops: list[FlopsCurvePoint]
    """S*(C): the compute-optimal shape per FLOPs budget."""
    vs_params: list[ParamsCurvePoint]
    """S*(N): the best S per total size, at flops_for_fixed_params."""
    vs_seconds: Optional[list[SecondsCurvePoint]] = None
    """S*(T): the time-optimal shape per wall-clock budget; null without a throughput model."""
    three: Optional[ThreeOptima] = None
    """S* under the median training time, its FLOPs and its size side by side; null without a
    throughput model."""
    seconds_reference: Optional[float] = field(default=None, metadata=OMIT_NONE)
    """The sweep's median training time (set with the seconds optima)."""
    top_k: Optional[int] = field(default=None, metadata=OMIT_NONE)
    """Experts per token of the shapes solved."""


def not_computed(folder: SweepFolder, fit: LawFit | None) -> str | None:
    """Why the optima are not read off the law (analysis.json's status.optima): no_law,
    one_sparsity or no_sparsity_term; None when they are."""
    if fit is None:
        return "no_law"
    if not several_sparsities(folder):
        return "one_sparsity"
    if not has_sparsity_term(fit):
        return "no_sparsity_term"
    return None


def seconds_status(throughput: ThroughputRecord | None, throughput_status: str) -> str:
    """analysis.json's status.seconds, once the optima are computed."""
    if throughput is None or throughput.fitted_model() is None:
        return "no throughput model: " + throughput_status
    return "computed"


def compute(folder: SweepFolder, findings: Findings) -> OptimaRecord | None:
    fit = findings.record(LAW_FIT)
    if folder.results is None or folder.settings is None or not_computed(folder, fit):
        return None
    assert fit is not None
    columns, grid, shared = folder.law_columns(), folder.grid, folder.settings.shared_fraction
    assert shared is not None  # two sparsities or more: some run is sparse
    law = get_law(fit.law)
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
    throughput = findings.record(THROUGHPUT)
    model = throughput.fitted_model() if throughput else None
    if throughput is None or model is None:
        return optima
    speeds = _run_speeds(throughput, columns)
    train_seconds = columns["D"] / np.array([r.tokens_per_s for r in speeds])
    optima.seconds_reference = float(np.median(train_seconds))
    optima.top_k = grid.top_k
    optima.vs_seconds = _seconds_curve(law, fit.params, replicas, model, shared or 0.0,
                                       grid.top_k, train_seconds)
    optima.three = three_optima(law, fit.params, replicas, optima.seconds_reference, model,
                                shared_fraction=shared or 0.0, top_k=grid.top_k)
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


def render(optima: OptimaRecord | None, folder: SweepFolder, findings: Findings) -> str:
    """The optima curves and the three optima, beside the runs (results.csv's rows)."""
    if folder.results is None or folder.settings is None:
        return ""
    status, fit, run_rows = folder.settings.status.optima, findings.record(LAW_FIT), folder.rows
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
        assert fit is not None  # a fitted form without a sparsity term
        return head + (f"The chosen form (`{fit.law}`) has no sparsity term: at fixed total "
                       "parameters and tokens these runs measure no effect of S. Sparsity then "
                       "pays only through compute (a sparser model of the same total size spends "
                       "fewer FLOPs per token, so a FLOPs budget buys it more tokens), and under a "
                       "FLOPs budget the sparsest model the architecture allows is best: S* is "
                       "the edge of any search, a consequence of the accounting rather than a "
                       "measured optimum. No curves are drawn.\n")
    assert fit is not None and optima is not None  # computed: a law with a sparsity term
    head += constant_s_star_text(fit.law)
    vs_n, vs_c, vs_t = optima.vs_params, optima.vs_flops, optima.vs_seconds
    optima_figure(folder.figure("optimal_sparsity.png"), vs_n, vs_c, vs_t,
                  optima.flops_for_fixed_params)
    bands = ("with 95 % bands over the bootstrap fits" if vs_c[0].ci
             else "without bands (no bootstrap fits)")
    rows = [[f"{r.flops:.3g}", _with_ci(r, "sparsity", "{:.3f}"),
             _with_ci(r, "params_total", None), _with_ci(r, "params_active", None),
             optimum_tokens_per_param(r.flops, r.optimum.params_total,
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
    return text + _three_optima_text(optima, folder.settings.status.seconds)


def _three_optima_text(optima: OptimaRecord, seconds_status: str | None) -> str:
    three = optima.three
    if three is None:
        return ("\nNo optimum under wall-clock seconds: "
                f"{seconds_status or 'no throughput model'}.\n")
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


def constant_s_star_text(law_name: str) -> str:
    """Said in words when the chosen form fixes S*(C): it cannot answer how S* moves with C."""
    reason = CONSTANT_S_STAR.get(law_name)
    if reason is None:
        return ""
    return (f"**The chosen form `{law_name}` cannot answer how S* moves with compute**: {reason}. "
            "A constant S*(C) below is that artefact, not a finding; a FLOPs-budget sweep's "
            "IsoFLOP minima (no law) can answer it.\n\n")


SEARCH_LIMIT_TOLERANCE = 1e-4
"""|S* - max_sparsity| under which S* sits at the search's upper limit (as optimal._on_edge)."""


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


ANALYSIS: Analysis[SweepFolder, OptimaRecord] = Analysis(
    "optima", compute, render, file="optima.json", record_type=OptimaRecord)
