"""Sub-commands of the law maths: ``fit`` (a law to a CSV), ``optimal`` (S* from a fit),
``isoflop``. The maths and its checks are ``moelab.scaling``; this module parses and prints.

Each handler imports the maths it runs (scipy) when it runs: every ``moelab`` command builds
every parser, and would otherwise pay for imports it does not use."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import TYPE_CHECKING

from moelab.cli import bounded_int, positive_int, seed_int
from moelab.errors import MoelabError
from moelab.fileio import atomic_write_json, refuse_overwriting_inputs

if TYPE_CHECKING:  # the handlers import the maths when they run (scipy)
    from moelab.scaling.optimal import ThreeOptima, VersusDenseInterval
    from moelab.scaling.fit_record import LawFit
    from moelab.scaling.isoflop import BudgetOptimum, IsoflopAnalysis
    from moelab.scaling.isoflop_sparsity import SparsityOptima

LAW_NAMES = ("chinchilla", "sparsity", "sparsity-interaction", "sparsity-additive",
             "sparsity-effective-size", "clark", "granularity", "joint")

MAX_BOOTSTRAP = 100_000
"""Bootstrap resamples: the intervals are stable long before; more would exhaust memory."""


def register(subparsers) -> None:
    """Add this module's sub-commands."""
    fit = subparsers.add_parser(
        "fit", help="fit a scaling law to a CSV of (N, D or C, [S], loss) points",
        description="Fit L = E + A/N^alpha + B/D^beta (chinchilla) or Abnar et al.'s sparsity law "
                    "by summed Huber loss of log residuals, L-BFGS from every start of a grid.",
    )
    fit.add_argument("csv", metavar="CSV", help="one row per training run; a sweep's "
                     "results.csv needs no --columns (N is N_total, loss best_val_loss)")
    # Spelled out (moelab.scaling.laws imports scipy); a test checks them against LAWS.
    fit.add_argument("--law", choices=LAW_NAMES, default="chinchilla",
                     help="chinchilla, Abnar et al.'s sparsity law (eq. 6), one of its reduced "
                          "forms, or the MoE forms clark, granularity (G) and joint (E, "
                          "N_active) (docs/explanation/laws.md)")
    fit.add_argument("--columns", action="append", default=[], metavar="NAME=COLUMN,...",
                     help='map canonical names N, D, C, S, E, G, N_active, loss to CSV columns, '
                          'e.g. --columns N="Model Size",C="Training FLOP"')
    fit.add_argument("--drop-highest", type=int, default=0, metavar="K",
                     help="drop the K highest-loss points first (Epoch's convention: 5)")
    fit.add_argument("--bootstrap", type=bounded_int(MAX_BOOTSTRAP), default=0, metavar="R",
                     help="R bootstrap resamples for 95%% percentile intervals; a "
                     "parameter whose interval is wider than 10x its estimate is noted as not "
                     "identified by the data")
    fit.add_argument("--holdout", metavar="SPEC",
                     help="fit without these points and report their error, e.g. S=max, N>=1e8")
    fit.add_argument("--starts", type=int, default=None, metavar="K",
                     help="use a seeded subset of K grid starts (default: chinchilla all 4,500, "
                          "sparsity 4,096 of 1.3 million)")
    fit.add_argument("--seed", type=seed_int, default=0, help="bootstrap seed")
    fit.add_argument("--json", action="store_true", help="print the fit as JSON")
    fit.add_argument("--out", metavar="FIT.json", help="also write the JSON record here")
    fit.set_defaults(func=_fit)

    optimal = subparsers.add_parser(
        "optimal", help="optimal sparsity (and size) from a fitted law",
        description="S* at a fixed total parameter count (--params N with --tokens D or --flops C), "
                    "or the compute-optimal (N, S) at a fixed budget (--flops C alone). A note "
                    "says when the optimum's total or active parameters lie outside the fitted "
                    "runs' (fits that record their runs' range: since data_ranges was added).",
    )
    optimal.add_argument("fit", metavar="FIT.json",
                         help="written by moelab fit --out/--json, a sweep's fit.json, or the "
                         "sweep folder itself")
    optimal.add_argument("--params", type=float, metavar="N", help="total parameter budget")
    optimal.add_argument("--tokens", type=float, metavar="D", help="training tokens (with --params)")
    optimal.add_argument("--flops", type=float, metavar="C", help="training compute budget")
    optimal.add_argument("--shared-fraction", type=float, default=None, metavar="PHI",
                         help="share of parameters outside the experts: N_active = N (PHI + "
                              "(1-PHI)(1-S)); default: the fit's own estimate, else 0")
    optimal.add_argument("--seconds", type=float, metavar="T",
                         help="wall-clock training budget on the timed hardware: S* there, beside "
                              "S* under the FLOPs it spends and at its size")
    optimal.add_argument("--throughput", metavar="FILE",
                         help="with --seconds: a moelab throughput table (CSV/JSON) or a sweep's "
                              "results.csv; default: throughput.json next to FIT.json")
    optimal.add_argument("--top-k", type=positive_int, default=None, metavar="K",
                         help="with --seconds: experts per token of the family (default: the "
                              "throughput table's)")
    optimal.add_argument("--max-sparsity", type=float, default=0.98, metavar="S",
                         help="upper end of the search (default 0.98)")
    optimal.add_argument("--json", action="store_true", help="print the result as JSON")
    optimal.set_defaults(func=_optimal)

    isoflop = subparsers.add_parser(
        "isoflop", help="IsoFLOP analysis: per-budget parabola in log N, N*(C) ~ C^a",
        description="Per compute budget, fit loss against log N (and -log(1-S) when the CSV has S) "
                    "and report the compute-optimal N*(C) [and S*(C)] and the exponent a. Each "
                    "budget's vertex says which sizes it used and warns when the data support "
                    "it poorly. With several sparsities and a seed column, S*(C) from each "
                    "sparsity's IsoFLOP minima with bootstrap intervals.",
    )
    isoflop.add_argument("csv", metavar="CSV",
                         help="one row per training run; a sweep's results.csv needs no --columns")
    isoflop.add_argument("--columns", action="append", default=[], metavar="NAME=COLUMN,...",
                         help="map N, C, S, N_active, loss (C is the budget column: C_budget "
                         "in a sweep's results.csv)")
    isoflop.add_argument("--where", action="append", default=[], metavar="COLUMN=VALUE",
                         help="keep only rows whose COLUMN equals VALUE (repeatable)")
    isoflop.add_argument("--estimator", choices=("window", "global"), default="window",
                         help="window (default): a parabola through the sizes within "
                              "--window-factor of the vertex; global: through every size of "
                              "the budget (docs/explanation/isoflop.md compares them)")
    isoflop.add_argument("--window-factor", type=float, metavar="F",
                         help="with --estimator window: sizes within F times the vertex (> 1; "
                              "default 3)")
    isoflop.add_argument("--seed-column", metavar="COLUMN",
                         help="the column naming each run's seed (default: seed, when present): "
                              "the fits' residuals are compared with the seeds' noise, and S* "
                              "gets bootstrap intervals over seeds")
    isoflop.add_argument("--bootstrap", type=bounded_int(MAX_BOOTSTRAP), default=200,
                         metavar="R", help="bootstrap replicates for the S* intervals (default "
                                           "200; 0: none)")
    isoflop.add_argument("--seed", type=seed_int, default=0, help="bootstrap seed")
    isoflop.add_argument("--json", action="store_true", help="print the analysis as JSON")
    isoflop.set_defaults(func=_isoflop)


def _fit(args) -> int:
    from moelab.codec import to_json
    from moelab.scaling.fit_record import check_identifiable, fit_columns
    from moelab.scaling.table import drop_highest_loss, parse_column_map, read_fit_table

    if args.out:
        refuse_overwriting_inputs(args.out, "--out", [args.csv])
    from moelab.scaling.laws import get_law

    columns = read_fit_table(args.csv, args.law.startswith("sparsity"),
                             parse_column_map(args.columns), needs=get_law(args.law).columns)
    columns = drop_highest_loss(columns, args.drop_highest)
    check_identifiable(args.law, columns, args.holdout, args.csv)
    fit = fit_columns(args.law, columns, bootstrap_replicates=args.bootstrap,
                      holdout=args.holdout, max_starts=args.starts, seed=args.seed)
    if args.out:
        atomic_write_json(args.out, to_json(fit))
    if args.json:
        print(json.dumps(to_json(fit), indent=2))
    else:
        print(format_fit(fit))
    return 0


def format_fit(fit: LawFit) -> str:
    from moelab.scaling.fit_record import WIDE_INTERVAL_FACTOR, wide_intervals

    lines = [f"law: {fit.law}   points: {fit.n_points}   starts: {fit.num_starts}"
             f"   objective (summed Huber): {fit.objective:.6e}"]
    for name, value in {**fit.params, **fit.derived}.items():
        ci = fit.ci.get(name)
        interval = f"   95% CI [{ci[0]:.5g}, {ci[1]:.5g}]" if ci else ""
        lines.append(f"  {name:>18} = {value:.6g}{interval}")
    wide = wide_intervals(fit)
    if wide:
        lines.append(f"note: {', '.join(wide)}: 95% interval wider than "
                     f"{WIDE_INTERVAL_FACTOR:g}x the estimate, not identified by these data; "
                     "moelab sweep-sparsity and moelab report run the identification checks "
                     "(docs/explanation/laws.md)")
    holdout = fit.holdout
    if holdout:
        lines.append(
            f"held out {holdout.spec} ({holdout.n_points} points): mean |log error| "
            f"{holdout.mean_abs_log_error:.4f}, loss RMSE {holdout.rmse_loss:.4f}, "
            f"max relative error {holdout.max_abs_relative_error:.2%}"
        )
    return "\n".join(lines)


def _optimal(args) -> int:
    from moelab.codec import to_json
    from moelab.scaling.optimal import (
        INTERVAL_KEYS, compute_optimal, optimal_sparsity_at_params, with_intervals,
    )
    from moelab.scaling.fit_record import load_fit

    fit = load_fit(args.fit)
    law, params, replicas = fit.law, fit.params, fit.replicas
    shared = args.shared_fraction
    if shared is None:  # a sweep of dense runs only stores null: nothing to estimate it from
        shared = float(fit.shared_fraction or 0.0)
    if args.seconds is not None:
        return _optimal_seconds(args, law, params, replicas, shared, fit.data_ranges)
    if args.throughput or args.top_k:
        raise MoelabError("--throughput and --top-k go with --seconds T")
    if args.params is not None:
        if args.tokens is None and args.flops is None:
            raise MoelabError("--params N needs --tokens D or --flops C")

        def solve(p):
            return optimal_sparsity_at_params(law, p, args.params, tokens=args.tokens,
                                              flops=args.flops, shared_fraction=shared,
                                              max_sparsity=args.max_sparsity)
        question = f"fixed total parameters N={args.params:.4g}" + (
            f", tokens D={args.tokens:.4g}" if args.tokens is not None
            else f", compute C={args.flops:.4g} (C = 6 N_active D)")
    elif args.flops is not None:
        if args.tokens is not None:
            raise MoelabError("--tokens D needs --params N (with --flops alone, D is derived)")

        def solve(p):
            return compute_optimal(law, p, args.flops, shared_fraction=shared,
                                   max_sparsity=args.max_sparsity)
        question = f"fixed compute C={args.flops:.4g} (C = 6 N_active D)"
    else:
        raise MoelabError("give --params N (with --tokens D or --flops C) or --flops C")
    result = with_intervals(solve, params, replicas)
    notes = extrapolation_notes(result.optimum, fit.data_ranges)
    if result.optimum.at_boundary:
        notes.insert(0, "the optimum lies on the edge of the search range (no interior optimum)")
    if args.json:
        print(json.dumps(to_json(result) | {"question": question, "law": law.name,
                                            "shared_fraction": shared, "notes": notes},
                         indent=2))
        return 0
    print(f"{law.name} law, {question}, shared fraction {shared:.3f}")
    for key in INTERVAL_KEYS:
        ci = result.ci.get(key)
        interval = f"   95% CI [{ci[0]:.4g}, {ci[1]:.4g}]" if ci else ""
        print(f"  {key:>14} = {result.value(key):.4g}{interval}")
    for line in notes:
        print(f"  note: {line}")
    return 0


def extrapolation_notes(optimum, ranges: dict[str, list[float]]) -> list[str]:
    """A line for each of the optimum's sizes (total, active) outside the range of the runs
    the fit was made on (``ranges``: the fit record's ``data_ranges``; none in an older one)."""
    from moelab.report.axes import format_count_tick

    notes = []
    for key, column in (("params_total", "N"), ("params_active", "N_active")):
        if column not in ranges:
            continue
        value, (low, high) = getattr(optimum, key), ranges[column]
        if low <= value <= high:
            continue
        factor = low / value if value < low else value / high
        by = (f"{math.log10(factor):.1f} orders of magnitude" if factor >= 10
              else f"a factor of {factor:.2g}")
        notes.append(f"{key} {format_count_tick(value, 3)} is outside the fitted runs' "
                     f"{format_count_tick(low, 3)}-{format_count_tick(high, 3)}: an "
                     f"extrapolation by {by}")
    return notes


def _optimal_seconds(args, law, params, replicas, shared,
                     ranges: dict[str, list[float]]) -> int:
    """S* under a wall-clock budget, printed beside S* under FLOPs and under parameters."""
    from moelab.codec import to_json
    from moelab.scaling.optimal import three_optima
    from moelab.scaling.throughput import fit_throughput, read_throughput_table, table_top_k

    if not (math.isfinite(args.seconds) and args.seconds > 0):
        raise MoelabError(f"--seconds {args.seconds} is invalid: must be a finite number of "
                          "seconds > 0")
    if args.params is not None or args.tokens is not None or args.flops is not None:
        raise MoelabError("--seconds T goes alone: the FLOPs and the size it is compared at "
                          "are the seconds optimum's own")
    table = Path(args.throughput) if args.throughput else Path(args.fit).parent / "throughput.json"
    if not args.throughput and not table.is_file():
        raise MoelabError(f"--seconds needs a throughput table: pass --throughput FILE (moelab "
                          f"throughput --out FILE), or keep {table} next to the fit")
    rows, header = read_throughput_table(table)
    source = f"throughput table {table}"
    model = fit_throughput(rows, source=source)
    top_k = args.top_k or table_top_k(rows, source)
    three = three_optima(law, params, replicas, args.seconds, model, shared_fraction=shared,
                         top_k=top_k, max_sparsity=args.max_sparsity)
    device = header.get("device_name")
    notes = [f"{name}: {line}" for name, result in three.questions()
             for line in extrapolation_notes(result.optimum, ranges)]
    if args.json:
        print(json.dumps(to_json(three) | {
            "law": law.name, "throughput_table": str(table), "device": device,
            "has_sparsity_term": "log_U" in law.features,
            "throughput_model": to_json(model.record()), "notes": notes}, indent=2))
    else:
        print(format_three_optima(three, law.name, "log_U" in law.features, table, device))
        for line in notes:
            print(f"  note: {line}")
    return 0


def format_three_optima(three: ThreeOptima, law_name: str, has_sparsity_term: bool,
                        table: Path, device: str | None) -> str:
    on_device = f" on {device}" if device else ""
    lines = [f"{law_name} law, shared fraction {three.shared_fraction:.3f}, top-"
             f"{three.top_k}; throughput from {table}{on_device}",
             f"  {'budget':<38} {'S*':>24} {'N total':>10} {'N active':>10} {'tokens':>10} "
             f"{'loss':>8}"]
    labels = (f"wall clock T={three.seconds:.4g} s", f"FLOPs C={three.flops:.4g} (what T buys)",
              f"parameters N={three.params:.4g}, C={three.flops:.3g}")
    for (_, result), label in zip(three.questions(), labels):
        optimum, ci = result.optimum, result.ci
        interval = f" [{ci['sparsity'][0]:.3f}, {ci['sparsity'][1]:.3f}]" if ci else ""
        edge = "  (edge of search)" if optimum.at_boundary else ""
        lines.append(f"  {label:<38} {optimum.sparsity:>7.3f}{interval:<17} "
                     f"{optimum.params_total:>10.4g} {optimum.params_active:>10.4g} "
                     f"{optimum.tokens:>10.4g} {optimum.loss:>8.4f}{edge}")
    lines.append(_dense_comparison(three.by_seconds))
    if not has_sparsity_term:
        lines.append("  note: this law has no sparsity term, so only the hardware prices S here; "
                     "under FLOPs a law without S fixes S* = 0 by convention, and at fixed N the "
                     "sparsest model wins (more tokens for the same loss terms)")
    return "\n".join(lines)


def _dense_comparison(by_seconds: VersusDenseInterval) -> str:
    optimum, ci = by_seconds.optimum, by_seconds.ci
    if math.isnan(optimum.dense_seconds):
        return ("  no dense model reaches the optimum's loss within 10^6 x T on this hardware")

    def interval(key):
        return f" [{ci[key][0]:.3g}, {ci[key][1]:.3g}]" if ci else ""

    return (f"  at S*: {optimum.tokens_per_s:.4g} tokens/s; the dense model reaching the same "
            f"loss soonest (N={optimum.dense_params:.4g}) trains {optimum.dense_tokens_per_s:.4g}"
            f" tokens/s and needs {optimum.dense_seconds:.4g} s: throughput ratio "
            f"{optimum.throughput_ratio:.3g}{interval('throughput_ratio')}, time ratio "
            f"{optimum.seconds_ratio:.3g}{interval('seconds_ratio')}")


def _isoflop(args) -> int:
    from moelab.codec import to_json
    import numpy as np

    from moelab.scaling.isoflop import (
        isoflop_analysis, read_isoflop_table, uses_surface, why_no_budget,
    )
    from moelab.scaling.isoflop_sparsity import sparsity_isoflop
    from moelab.scaling.isoflop_vertex import WINDOW_FACTOR
    from moelab.scaling.table import parse_column_map

    if args.window_factor is not None and args.estimator == "global":
        raise MoelabError(f"--window-factor {args.window_factor:g} is invalid with --estimator "
                          "global, whose parabola goes through every size of a budget: allowed "
                          "with --estimator window only")
    if args.window_factor is None:
        args.window_factor = WINDOW_FACTOR
    if not (math.isfinite(args.window_factor) and args.window_factor > 1.0):
        raise MoelabError(f"--window-factor {args.window_factor} is invalid: must be a number > 1")
    points = read_isoflop_table(args.csv, parse_column_map(args.columns), args.where,
                                seed_column=args.seed_column)
    options = {"estimator": args.estimator, "window_factor": args.window_factor}
    analysis = isoflop_analysis(points, **options)
    if not analysis.budgets:
        raise MoelabError(f"{args.csv}: no budget could be analysed: {why_no_budget(points)}")
    several_sparsities = uses_surface(points)
    optima = None
    if several_sparsities:
        # Without a seed column every point is its own seed: estimates, no intervals.
        seeds = (points.seed if points.seed is not None
                 else np.array([str(i) for i in range(len(points.params))]))
        optima = sparsity_isoflop(
            points, seeds, replicates=args.bootstrap if points.seed is not None else 0,
            seed=args.seed, **options)
    if args.json:
        # The analysis's keys, and sparsity_optima (null when too few cells have a minimum)
        # wherever the table has several sparsities.
        record = to_json(analysis) | ({"sparsity_optima": to_json(optima)}
                                      if several_sparsities else {})
        print(json.dumps(record, indent=2))
        return 0
    print(format_isoflop(analysis, optima))
    return 0


def format_isoflop(analysis: IsoflopAnalysis, optima: SparsityOptima | None = None) -> str:
    """The budgets' optima with the sizes each used and its warnings, the exponent, and S*(C)
    from the per-sparsity minima when there are several sparsities."""
    from moelab.scaling.isoflop import SurfaceBudget

    window = (f", sizes within {analysis.window_factor:g}x of the vertex"
              if analysis.estimator == "window" else ", every size of the budget")
    lines = [f"IsoFLOP vertices: {analysis.estimator} parabola in log N{window}"]
    for row in analysis.budgets:
        sparsity = f"  S*={row.sparsity:.3f}" if isinstance(row, SurfaceBudget) else ""
        outside = "" if row.inside_data else "  outside data: not used for the exponent"
        lines.append(f"  C={row.flops:.3g}: N*={row.params:.4g}  loss*={row.loss:.4f}"
                     f"  ({row.n_points} points){sparsity}{outside}")
        lines.extend(f"      {line}" for line in _support_lines(row))
    fit = analysis.params_exponent
    if fit:
        interval = (f"  95% CI [{fit.ci[0]:.4f}, {fit.ci[1]:.4f}]" if fit.ci
                    else "  (no interval from 2 budgets)")
        lines.append(f"N*(C) = {fit.coefficient:.4g} * C^{fit.exponent:.4f}{interval}"
                     f"  (from the {fit.n_budgets} budgets with their optimum inside the data)")
    else:
        lines.append("N*(C): not fitted: fewer than 2 budgets have their optimum inside the data")
    if analysis.poorly_supported:
        lines.append("warning: poorly supported vertices at C = "
                     + ", ".join(f"{c:.3g}" for c in analysis.poorly_supported))
    if optima:
        lines.extend(format_sparsity_optima(optima))
    return "\n".join(lines)


def _support_lines(row: BudgetOptimum) -> list[str]:
    """Which sizes a budget's vertex used, the grid's balance about it, and its warnings."""
    from moelab.scaling.isoflop import SurfaceBudget

    supports = ({f"S={s}: ": one for s, one in row.support.items()}
                if isinstance(row, SurfaceBudget) else {"": row.support})
    lines = []
    for label, support in supports.items():
        sizes = ", ".join(f"{n:.3g}" for n in support.sizes_used)
        noise = ("" if support.residual_to_noise is None
                 else f"; residuals {support.residual_to_noise:.2g}x seed noise")
        lines.append(f"{label}sizes used {sizes} (span {support.span_used:.3g}x of the "
                     f"grid's {support.grid_span:.3g}x; grid sizes below/above the vertex "
                     f"{support.sizes_below}/{support.sizes_above}){noise}")
    lines.extend(f"warning: {warning}" for warning in row.warnings)
    return lines


def format_sparsity_optima(optima: SparsityOptima) -> list[str]:
    """S*(C) per budget with its interval, "S* ≥ edge (unbounded)" where it sits on the grid's
    end, and the slope of S*(C) only when no S* is clamped."""
    lines = [f"S*(C) from each sparsity's IsoFLOP minima ({optima.replicates} bootstrap "
             f"replicates, resampling {optima.resampling}):"]
    sparsities = optima.sparsities
    for row in optima.optimal_sparsity:
        if row.sparsity is None:
            shown = "no S* (a sparsity without a minimum)"
        elif row.at_edge == "upper":
            shown = f"S* ≥ {max(sparsities):g} (unbounded: the grid's largest sparsity)"
        elif row.at_edge == "lower":
            shown = f"S* ≤ {min(sparsities):g} (unbounded: the grid's smallest sparsity)"
        else:
            ci = row.ci
            shown = f"S* = {row.sparsity:.3f}" + (
                f"  95% CI [{ci[0]:.3f}, {ci[1]:.3f}]" if ci else "  (no interval: one seed)")
            if ci and ci[1] >= max(sparsities) - 1e-9:
                shown += "  (interval reaches the grid's largest S: no upper bound)"
        lines.append(f"  C={row.flops:.3g}: {shown}")
    trend = optima.trend
    if trend.clamped:
        lines.append("  slope of S*(C): not given, an S* sits on the grid's edge")
    elif trend.slope_per_decade is not None:
        ci = trend.ci
        interval = f" [{ci[0]:+.3f}, {ci[1]:+.3f}]" if ci else ""
        lines.append(f"  slope of S*(C): {trend.slope_per_decade:+.3f}{interval} per decade "
                     f"of C over {trend.n_budgets} budgets")
    return lines
