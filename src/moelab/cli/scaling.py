"""Sub-commands: ``fit`` (a law to a CSV), ``optimal`` (S* from a fit), ``isoflop``,
``sweep-sparsity``, ``throughput`` (a tokens/s table of model shapes)."""

from __future__ import annotations

import json
import re
from pathlib import Path

from moelab.errors import MoelabError


LAW_NAMES = ("chinchilla", "sparsity", "sparsity-interaction", "sparsity-additive",
             "sparsity-effective-size")

MAX_BOOTSTRAP = 100_000
"""Bootstrap resamples: the intervals are stable long before; more would exhaust memory."""


def register(subparsers) -> None:
    """Add this module's sub-commands."""
    from moelab.cli import bounded_int, positive_int, seed_int
    from moelab.cli.launch import add_launcher_arguments

    fit = subparsers.add_parser(
        "fit", help="fit a scaling law to a CSV of (N, D or C, [S], loss) points",
        description="Fit L = E + A/N^alpha + B/D^beta (chinchilla) or Abnar et al.'s sparsity law "
                    "by summed Huber loss of log residuals, L-BFGS from every start of a grid.",
    )
    fit.add_argument("csv", metavar="CSV", help="one row per training run")
    # Spelled out (moelab.scaling.laws imports scipy); a test checks them against LAWS.
    fit.add_argument("--law", choices=LAW_NAMES, default="chinchilla",
                     help="chinchilla, Abnar et al.'s sparsity law (eq. 6) or one of its reduced "
                          "forms (docs/scaling.md)")
    fit.add_argument("--columns", action="append", default=[], metavar="NAME=COLUMN,...",
                     help='map canonical names N, D, C, S, N_active, loss to CSV columns, '
                          'e.g. --columns N="Model Size",C="Training FLOP"')
    fit.add_argument("--drop-highest", type=int, default=0, metavar="K",
                     help="drop the K highest-loss points first (Epoch's convention: 5)")
    fit.add_argument("--bootstrap", type=bounded_int(MAX_BOOTSTRAP), default=0, metavar="R",
                     help="R bootstrap resamples for 95%% percentile intervals")
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
                    "or the compute-optimal (N, S) at a fixed budget (--flops C alone).",
    )
    optimal.add_argument("fit", metavar="FIT.json", help="written by moelab fit --out/--json")
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
                    "and report the compute-optimal N*(C) [and S*(C)] and the exponent a.",
    )
    isoflop.add_argument("csv", metavar="CSV")
    isoflop.add_argument("--columns", action="append", default=[], metavar="NAME=COLUMN,...",
                         help="map N, C, S, N_active, loss (C is the budget column)")
    isoflop.add_argument("--where", action="append", default=[], metavar="COLUMN=VALUE",
                         help="keep only rows whose COLUMN equals VALUE (repeatable)")
    isoflop.add_argument("--json", action="store_true")
    isoflop.set_defaults(func=_isoflop)

    sweep = subparsers.add_parser(
        "sweep-sparsity", help="train a model size x sparsity x budget grid, fit and report",
        description="Plan and run (resumably) a sparsity sweep, write results.csv, fit the "
                    "sparsity law and write report.md with figures.",
    )
    # Spelled out rather than read from moelab.scaling.grid, whose import (scipy) would slow
    # every moelab command; a test checks the list against grid_preset_names().
    sweep.add_argument("grid", metavar="PRESET|GRID",
                       help="a preset (demo, cpu, paper, micro) or a grid YAML file")
    sweep.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                       help="override a grid key (--set token_budgets=[409.6K,1.2M], --set "
                       "seeds=[0,1]) or, for a model./data./train. key, add it to the grid's config "
                       "overrides (--set train.schedule=wsd); repeatable")
    sweep.add_argument("--out", metavar="DIR", default=None, help="sweep folder (default sweep_<name>)")
    sweep.add_argument("--dry-run", action="store_true", help="print the planned runs only")
    sweep.add_argument("--bootstrap", type=bounded_int(MAX_BOOTSTRAP), default=200, metavar="R",
                       help="R bootstrap resamples of the law fit (default 200; 0: none)")
    sweep.add_argument("--starts", type=positive_int, default=None, metavar="K",
                       help="fit the law from a seeded subset of K grid starts (as moelab fit; "
                            "default 4,096 of 1.3 million)")
    add_launcher_arguments(sweep)
    sweep.set_defaults(func=_sweep)
    _register_throughput(subparsers)


def _fit(args) -> int:
    from moelab.fileio import atomic_write_json
    from moelab.scaling.summary import fit_columns
    from moelab.scaling.table import drop_highest_loss, parse_column_map, read_fit_table

    columns = read_fit_table(args.csv, args.law.startswith("sparsity"), parse_column_map(args.columns))
    columns = drop_highest_loss(columns, args.drop_highest)
    check_identifiable(args.law, columns, args.holdout, args.csv)
    record = fit_columns(args.law, columns, bootstrap_replicates=args.bootstrap,
                         holdout=args.holdout, max_starts=args.starts, seed=args.seed)
    if args.out:
        atomic_write_json(args.out, record)
    if args.json:
        print(json.dumps(record, indent=2))
    else:
        print(format_fit(record))
    return 0


def check_identifiable(law_name: str, columns: dict, holdout: str | None, csv_path: str) -> None:
    """Refuse a table the law cannot be identified from (the fit would report a perfect
    objective and meaningless parameters): the loss must vary, every variable of the law must
    take at least two values, and there must be more distinct points than parameters."""
    import numpy as np

    from moelab.scaling.laws import get_law
    from moelab.scaling.table import holdout_mask, select

    law = get_law(law_name)
    if holdout:
        columns = select(columns, ~holdout_mask(columns, holdout))
    variables = {"log_N": "N", "log_D": "D", "log_U": "S"}
    used = [variables[feature] for feature in law.features]
    where = f"{csv_path}" + (f" (without --holdout {holdout})" if holdout else "")
    loss = np.asarray(columns["loss"], dtype=float)
    if np.ptp(loss) == 0:
        raise MoelabError(f"{where}: every loss is {loss[0]:g}: a table without loss variation "
                          f"cannot identify the {law.name} law")
    for name in used:
        distinct = np.unique(columns[name])
        if len(distinct) < 2:
            raise MoelabError(f"{where}: {name} takes one value ({distinct[0]:g}): the {law.name} "
                              f"law's {name} term cannot be identified; vary {name} across runs")
    points = len({tuple(row) for row in np.column_stack([columns[name] for name in used])})
    if points <= law.num_params:
        raise MoelabError(f"{where}: too few distinct ({', '.join(used)}) points for the "
                          f"{law.name} law: {points} for {law.num_params} parameters; allowed "
                          f"{law.num_params + 1} or more (more points than parameters)")


def format_fit(record: dict) -> str:
    lines = [f"law: {record['law']}   points: {record['n_points']}   starts: {record['num_starts']}"
             f"   objective (summed Huber): {record['objective']:.6e}"]
    for name, value in {**record["params"], **record["derived"]}.items():
        ci = record["ci"].get(name)
        interval = f"   95% CI [{ci[0]:.5g}, {ci[1]:.5g}]" if ci else ""
        lines.append(f"  {name:>18} = {value:.6g}{interval}")
    holdout = record.get("holdout")
    if holdout:
        lines.append(
            f"held out {holdout['spec']} ({holdout['n_points']} points): mean |log error| "
            f"{holdout['mean_abs_log_error']:.4f}, loss RMSE {holdout['rmse_loss']:.4f}, "
            f"max relative error {holdout['max_abs_relative_error']:.2%}"
        )
    return "\n".join(lines)


def _optimal(args) -> int:
    from moelab.scaling.optimal import compute_optimal, optimal_sparsity_at_params, with_intervals
    from moelab.scaling.summary import load_fit

    check_fit_file(args.fit)
    law, params, replicas, record = load_fit(args.fit)
    shared = args.shared_fraction
    if shared is None:  # a sweep of dense runs only stores null: nothing to estimate it from
        shared = float(record.get("shared_fraction") or 0.0)
    if args.seconds is not None:
        return _optimal_seconds(args, law, params, replicas, shared)
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
            else f", compute C={args.flops:.4g}")
    elif args.flops is not None:
        if args.tokens is not None:
            raise MoelabError("--tokens D needs --params N (with --flops alone, D is derived)")

        def solve(p):
            return compute_optimal(law, p, args.flops, shared_fraction=shared,
                                   max_sparsity=args.max_sparsity)
        question = f"fixed compute C={args.flops:.4g}"
    else:
        raise MoelabError("give --params N (with --tokens D or --flops C) or --flops C")
    result = with_intervals(solve, params, replicas)
    result.update(question=question, law=law.name, shared_fraction=shared)
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    print(f"{law.name} law, {question}, shared fraction {shared:.3f}")
    for key in ("sparsity", "params_total", "params_active", "tokens", "loss"):
        ci = result["ci"].get(key)
        interval = f"   95% CI [{ci[0]:.4g}, {ci[1]:.4g}]" if ci else ""
        print(f"  {key:>14} = {result['optimum'][key]:.4g}{interval}")
    if result["optimum"]["at_boundary"]:
        print("  note: the optimum lies on the edge of the search range (no interior optimum)")
    return 0


def _optimal_seconds(args, law, params, replicas, shared) -> int:
    """S* under a wall-clock budget, printed beside S* under FLOPs and under parameters."""
    import math

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
    result = three_optima(law, params, replicas, args.seconds, model, shared_fraction=shared,
                          top_k=top_k, max_sparsity=args.max_sparsity)
    result.update(law=law.name, throughput_table=str(table), device=header.get("device_name"),
                  has_sparsity_term="log_U" in law.features,
                  throughput_model=model.to_dict())
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print(format_three_optima(result))
    return 0


def format_three_optima(result: dict) -> str:
    device = f" on {result['device']}" if result.get("device") else ""
    lines = [f"{result['law']} law, shared fraction {result['shared_fraction']:.3f}, top-"
             f"{result['top_k']}; throughput from {result['throughput_table']}{device}",
             f"  {'budget':<38} {'S*':>24} {'N total':>10} {'N active':>10} {'tokens':>10} "
             f"{'loss':>8}"]
    questions = (("by_seconds", f"wall clock T={result['seconds']:.4g} s"),
                 ("by_flops", f"FLOPs C={result['flops']:.4g} (what T buys)"),
                 ("by_params", f"parameters N={result['params']:.4g}, C={result['flops']:.3g}"))
    for key, label in questions:
        optimum, ci = result[key]["optimum"], result[key]["ci"]
        interval = f" [{ci['sparsity'][0]:.3f}, {ci['sparsity'][1]:.3f}]" if ci else ""
        edge = "  (edge of search)" if optimum["at_boundary"] else ""
        lines.append(f"  {label:<38} {optimum['sparsity']:>7.3f}{interval:<17} "
                     f"{optimum['params_total']:>10.4g} {optimum['params_active']:>10.4g} "
                     f"{optimum['tokens']:>10.4g} {optimum['loss']:>8.4f}{edge}")
    lines.append(_dense_comparison(result["by_seconds"]))
    if not result["has_sparsity_term"]:
        lines.append("  note: this law has no sparsity term, so only the hardware prices S here; "
                     "under FLOPs a law without S fixes S* = 0 by convention, and at fixed N the "
                     "sparsest model wins (more tokens for the same loss terms)")
    return "\n".join(lines)


def _dense_comparison(by_seconds: dict) -> str:
    import math

    optimum, ci = by_seconds["optimum"], by_seconds["ci"]
    if math.isnan(optimum["dense_seconds"]):
        return ("  no dense model reaches the optimum's loss within 10^6 x T on this hardware")

    def interval(key):
        return f" [{ci[key][0]:.3g}, {ci[key][1]:.3g}]" if ci else ""

    return (f"  at S*: {optimum['tokens_per_s']:.4g} tokens/s; the dense model reaching the same "
            f"loss soonest (N={optimum['dense_params']:.4g}) trains {optimum['dense_tokens_per_s']:.4g}"
            f" tokens/s and needs {optimum['dense_seconds']:.4g} s: throughput ratio "
            f"{optimum['throughput_ratio']:.3g}{interval('throughput_ratio')}, time ratio "
            f"{optimum['seconds_ratio']:.3g}{interval('seconds_ratio')}")


def check_fit_file(path_text: str) -> None:
    """A FIT.json as ``optimal`` needs it, checked before use: UTF-8 JSON whose parameters, and
    bootstrap replicas, are finite numbers (a NaN exponent would print ``loss = nan``)."""
    import math

    path = Path(path_text)
    try:
        record = json.loads(path.read_bytes().decode("utf-8"))
    except OSError as exc:
        raise MoelabError(f"cannot read {path}: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        raise MoelabError(f"{path} is not UTF-8 text (byte {exc.start}): expected the output "
                          f"of moelab fit --json") from None
    except (ValueError, RecursionError):
        raise MoelabError(f"{path} is not JSON: expected the output of moelab fit --json") from None
    if not isinstance(record, dict):
        return  # load_fit names what is missing

    def check(params, where: str) -> None:
        if not isinstance(params, dict):
            raise MoelabError(f"{path}: {where}={params!r} is invalid: expected a mapping of "
                              f"parameter names to numbers")
        for name, value in params.items():
            if isinstance(value, bool) or not isinstance(value, (int, float)) \
                    or not math.isfinite(value):
                raise MoelabError(f"{path}: {where}.{name}={value!r} is invalid: expected a "
                                  f"finite number")

    if "params" in record:
        check(record["params"], "params")
        check_scale_exponents(record["params"], path)
    bootstrap = record.get("bootstrap")
    if bootstrap is not None and not isinstance(bootstrap, dict):
        raise MoelabError(f"{path}: bootstrap is invalid: expected a mapping or null")
    replicas = (bootstrap or {}).get("params")
    if replicas is not None:
        if not isinstance(replicas, list):
            raise MoelabError(f"{path}: bootstrap.params is invalid: expected a list of fits")
        for index, replica in enumerate(replicas):
            check(replica, f"bootstrap.params[{index}]")
    shared = record.get("shared_fraction")
    if shared is not None and (isinstance(shared, bool) or not isinstance(shared, (int, float))
                               or not 0 <= shared <= 1):
        raise MoelabError(f"{path}: shared_fraction={shared!r} is invalid: allowed [0, 1] or null")


SCALE_EXPONENTS = ("alpha", "beta", "gamma")
"""The exponents of N and D in every law: at or below 0 the loss would not fall with size or
data, and every optimum would sit at the edge of the search."""


def check_scale_exponents(params: dict, path: Path) -> None:
    for name in SCALE_EXPONENTS:
        value = params.get(name)
        if value is not None and value <= 0:
            raise MoelabError(f"{path}: params.{name}={value!r} is invalid: allowed > 0 (the "
                              "loss must fall with parameters and tokens for an optimum to exist)")


def _isoflop(args) -> int:
    from moelab.scaling.isoflop import isoflop_analysis, read_isoflop_table
    from moelab.scaling.table import parse_column_map

    columns = read_isoflop_table(args.csv, parse_column_map(args.columns), args.where)
    result = isoflop_analysis(columns)
    if not result["budgets"]:
        raise MoelabError(f"{args.csv}: no budget could be analysed: {why_no_budget(columns)}")
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    for row in result["budgets"]:
        sparsity = f"  S*={row['sparsity']:.3f}" if "sparsity" in row else ""
        outside = "" if row["inside_data"] else "  outside data: not used for the exponent"
        print(f"  C={row['flops']:.3g}: N*={row['params']:.4g}  loss*={row['loss']:.4f}"
              f"  ({row['n_points']} points){sparsity}{outside}")
    fit = result["params_exponent"]
    if fit:
        print(f"N*(C) = {fit['coefficient']:.4g} * C^{fit['exponent']:.4f}"
              f"  (from the {fit['n_budgets']} budgets with their optimum inside the data)")
    elif result["budgets"]:
        print("N*(C): not fitted: fewer than 2 budgets have their optimum inside the data")
    return 0


def why_no_budget(columns: dict) -> str:
    """Why ``isoflop_analysis`` found no budget, for the one-line error."""
    import numpy as np

    from moelab.scaling.isoflop import MIN_POINTS_PARABOLA, MIN_POINTS_SURFACE, uses_surface

    surface = uses_surface(columns)
    counts = []
    for flops in np.unique(columns["C"]):
        at_budget = np.isclose(columns["C"], flops, rtol=1e-6)
        sizes = len(np.unique(columns["N"][at_budget]))
        counts.append(f"C={flops:.3g}: {int(at_budget.sum())} points, {sizes} sizes")
    shown = "; ".join(counts[:4]) + ("; ..." if len(counts) > 4 else "")
    if surface:
        need = (f"a surface in (log N, S) needs {MIN_POINTS_SURFACE} points with 2 or more sizes "
                f"and sparsities per budget")
    else:
        need = (f"a parabola in log N needs {MIN_POINTS_PARABOLA} distinct sizes per budget "
                f"and a minimum")
    return f"{need} ({shown})"


def _sweep(args) -> int:
    from moelab.cli.launch import build_launcher, wants_commands
    from moelab.fileio import writer_lock
    from moelab.scaling.sweep import plan_sweep, run_sweep

    grid = load_sweep_grid(args.grid, args.overrides)
    if args.out is None and not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.+-]{0,63}", grid.name):
        # The name would become the folder sweep_<name>: nothing that climbs out of it.
        raise MoelabError(f"sweep grid name {grid.name!r} is invalid as a folder name (allowed "
                          f"letters, digits and _ . + -): pass --out DIR")
    out_dir = Path(args.out or f"sweep_{grid.name}")
    plan = plan_sweep(grid)
    if args.dry_run:
        for point in plan:
            print(point.describe())
        print(f"{len(plan)} runs")
        return 0
    if wants_commands(args):
        from moelab.runs import is_complete
        from moelab.runs.launchers.commands import train_commands
        from moelab.scaling.sweep import plan_sweep_folder

        _, specs = plan_sweep_folder(grid, out_dir)
        for command in train_commands(out_dir, [s for s in specs if not is_complete(out_dir / s.run_dir)]):
            print(command)
        return 0
    launcher = build_launcher(args)
    with writer_lock(out_dir):
        report_path = run_sweep(grid, out_dir, bootstrap_replicates=args.bootstrap,
                                max_starts=args.starts, launcher=launcher)
    print(f"results: {out_dir / 'results.csv'}\nreport: {report_path}")
    return 0


CONFIG_SECTIONS = ("model.", "data.", "train.")


def load_sweep_grid(source: str, overrides: list[str]):
    """The grid after ``--set`` pairs: grid keys as given, config keys (model./data./train.)
    appended to the grid's own ``overrides`` list, after the ones it has."""
    from dataclasses import replace

    from moelab.scaling.grid import load_grid

    config_pairs = [pair for pair in overrides if pair.startswith(CONFIG_SECTIONS)]
    grid = load_grid(source, [pair for pair in overrides if pair not in config_pairs])
    return replace(grid, overrides=[*grid.overrides, *config_pairs]) if config_pairs else grid


def report_sweep(out_dir: Path) -> int:
    """``moelab report DIR`` of a sweep folder: results.csv, the fit and report.md again, from
    the run folders, grid.json and the fit settings plan.json recorded."""
    from moelab.fileio import writer_lock
    from moelab.runs.records import check_run_files
    from moelab.scaling.grid import load_grid
    from moelab.scaling.sweep import plan_sweep, recorded_fit_settings, write_sweep_outputs

    grid = load_grid(out_dir / "grid.json")
    check_run_files(out_dir / "runs")
    with writer_lock(out_dir):
        report_path = write_sweep_outputs(out_dir, grid, plan_sweep(grid),
                                          **recorded_fit_settings(out_dir))
    print(f"results: {out_dir / 'results.csv'}\nreport: {report_path}")
    return 0


def _register_throughput(subparsers) -> None:
    from moelab.cli import non_negative_int, positive_int

    throughput = subparsers.add_parser(
        "throughput", help="time training steps of a grid of model shapes: a tokens/s table",
        description="Build each shape's model, time a few warm training steps (forward, "
                    "backward, optimizer) on random tokens, and write a throughput table for "
                    "moelab optimal --seconds. Seconds per shape, no training to the end.",
    )
    throughput.add_argument("config", metavar="CONFIG", nargs="?",
                            help="a config (YAML or preset) whose model is timed; or use --grid")
    throughput.add_argument("--set", dest="overrides", action="append", default=[],
                            metavar="KEY=VALUE", help="override a config key (repeatable)")
    throughput.add_argument("--grid", metavar="PRESET|GRID",
                            help="time every size x sparsity of a sweep grid (e.g. cpu, paper)")
    throughput.add_argument("--sparsities", metavar="S,S,...",
                            help="with CONFIG: time its model at these sparsities (fixed total "
                                 "FFN, E = k / (1 - S)), e.g. 0,0.5,0.75")
    throughput.add_argument("--top-k", type=positive_int, default=1, metavar="K",
                            help="with --sparsities: experts per token (default 1)")
    throughput.add_argument("--seconds-per-shape", type=float, default=3.0, metavar="X",
                            help="time steps of each shape for about X seconds (default 3)")
    throughput.add_argument("--warmup-steps", type=non_negative_int, default=2, metavar="N",
                            help="untimed steps first (default 2)")
    throughput.add_argument("--rounds", type=positive_int, default=1, metavar="R",
                            help="time every shape R times, X / R seconds each, and keep its "
                                 "fastest round (a shared machine's load bursts; default 1)")
    throughput.add_argument("--clock", choices=("wall", "process"), default="wall",
                            help="wall time (default), or on a CPU the process's own CPU time "
                                 "(leaves out time the scheduler gave to other work)")
    throughput.add_argument("--out", metavar="FILE", required=True,
                            help="the table: .json (with a header) or .csv")
    throughput.set_defaults(func=_throughput)


def _throughput(args) -> int:
    import math

    from moelab.scaling.throughput import moe_versus_dense
    from moelab.scaling.timing import config_shapes, grid_shapes, time_shapes, write_table

    if (args.config is None) == (args.grid is None):
        raise MoelabError("give exactly one of CONFIG or --grid PRESET|GRID")
    if not (math.isfinite(args.seconds_per_shape) and 0 < args.seconds_per_shape <= 600):
        raise MoelabError(f"--seconds-per-shape {args.seconds_per_shape} is invalid: allowed "
                          "(0, 600] seconds")
    if args.grid and args.sparsities:
        raise MoelabError("--sparsities goes with CONFIG: a --grid has its own")
    if args.grid:
        shapes = grid_shapes(args.grid, args.overrides)
    else:
        shapes = config_shapes(args.config, args.overrides, _sparsity_list(args.sparsities),
                               args.top_k)
    rows = time_shapes(shapes, args.seconds_per_shape, args.warmup_steps, args.rounds, args.clock)
    header = {"source": args.grid or args.config, "overrides": args.overrides,
              "seconds_per_shape": args.seconds_per_shape, "warmup_steps": args.warmup_steps,
              "rounds": args.rounds, "clock": args.clock,
              "device": rows[0]["device"], "device_name": rows[0]["device_name"],
              "threads": rows[0]["threads"]}
    ratios = moe_versus_dense(rows) if any(r["S"] == 0 for r in rows) else []
    if args.out.endswith(".json"):
        header["moe_vs_dense"] = ratios
    path = write_table(args.out, rows, header)
    for ratio in ratios:
        same, flops = ratio["tokens_per_s_vs_same_size_dense"], ratio["step_time_vs_equal_flops_dense"]
        print(f"N_total={ratio['N_total']:,} S={ratio['S']:g}: tokens/s vs the dense model of "
              f"its size {'–' if same is None else f'{same:.2f}'}; step time vs a dense step "
              f"of equal FLOPs {'– (outside the dense sizes)' if flops is None else f'{flops:.2f}'}")
    print(f"throughput table: {path} ({len(rows)} shapes)")
    return 0


def _sparsity_list(text: str | None) -> list[float] | None:
    if text is None:
        return None
    try:
        values = [float(item) for item in text.split(",") if item.strip()]
    except ValueError:
        raise MoelabError(f"--sparsities {text!r} is invalid: expected numbers like "
                          "0,0.5,0.75") from None
    if not values:
        raise MoelabError(f"--sparsities {text!r} is invalid: expected numbers like 0,0.5,0.75")
    return values
