"""Sub-commands of the sparsity sweep: ``sweep-sparsity`` (train a size x sparsity x budget
grid, fit and report), ``merge`` (sweep folders of one grid extended by new sparsities) and
``throughput`` (a tokens/s table of model shapes). The sweep itself
is ``moelab.sweep``; this module parses and prints.

Each handler imports the sweep when it runs (torch, scipy): every ``moelab`` command builds
every parser, and would otherwise pay for imports it does not use."""

from __future__ import annotations

import math
import re
from pathlib import Path

from moelab.cli import bounded_int, non_negative_int, positive_int
from moelab.cli.fit import MAX_BOOTSTRAP
from moelab.cli.launch import (
    add_launcher_arguments, build_launcher, check_launcher_options, print_submitted, wants_commands,
)
from moelab.errors import MoelabError, incomplete, short_repr
from moelab.fileio import refuse_overwriting_inputs, writer_lock

SWEEP_KIND = "sweep-sparsity"
"""The kind of command that owns a sweep folder (its plan.json's kind)."""


def register(subparsers) -> None:
    """Add this module's sub-commands."""
    sweep = subparsers.add_parser(
        "sweep-sparsity", help="train a model size x sparsity x budget grid, fit and report",
        description="Plan and run (resumably) a sparsity sweep, write results.csv, fit the "
                    "sparsity law and write report.md with figures.",
    )
    # Spelled out rather than read from moelab.sweep.grid, whose import (scipy) would slow
    # every moelab command; a test checks the list against grid_preset_names().
    sweep.add_argument("grid", metavar="PRESET|GRID",
                       help="a preset (cpu, cpu-expertn, cpu-finetune, cpu-fixedn, "
                       "cpu-granularity, cpu-isoflop, cpu-prereg, cpu-topk, demo, micro, paper, "
                       "quick-law) "
                       "or a grid YAML file")
    sweep.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                       help="override a grid key (--set token_budgets=[409.6K,1.2M], --set "
                       "seeds=[0,1]) or, for a model./data./train. key, add it to the grid's config "
                       "overrides (--set train.schedule=wsd); repeatable")
    sweep.add_argument("--out", metavar="DIR", default=None, help="sweep folder (default out/<name>-sweep)")
    sweep.add_argument("--dry-run", action="store_true",
                       help="check the data as the sweep would (refused: what it would refuse), "
                       "then print the planned runs, their cost (runs, tokens, FLOPs) and an "
                       "estimated wall time (at the committed runs' measured speeds, or --speeds) "
                       "only")
    sweep.add_argument("--speeds", metavar="CSV", default=None,
                       help="with --dry-run: the time at the tokens/s of the shapes in CSV "
                            "instead (a sweep's results.csv or a moelab throughput CSV: S, "
                            "N_active, tokens_per_s), interpolated log-log in N_active, per shape")
    sweep.add_argument("--per-run-seconds", type=float, default=None, metavar="X",
                       help="with --speeds: seconds each run adds for its start, compile and "
                            "evals (default 2, as measured on the cpu sweep)")
    sweep.add_argument("--bootstrap", type=bounded_int(MAX_BOOTSTRAP), default=200, metavar="R",
                       help="R bootstrap resamples of the law fit (default 200; 0: none)")
    sweep.add_argument("--starts", type=positive_int, default=None, metavar="K",
                       help="fit the law from a seeded subset of K grid starts (as moelab fit; "
                            "default 4,096 of 1.3 million)")
    sweep.add_argument("--lr-grid", metavar="GRID",
                       help="choose each cell's lr (size x sparsity, per budget or wsd budget "
                       "family) from GRID, e.g. 0.005,0.01,0.02, on selection seeds no result "
                       "uses; --dry-run shows the cost first")
    sweep.add_argument("--select-seeds", metavar="N|LIST",
                       help="with --lr-grid: the selection seeds, a count N (the first seed + "
                       "1000000, ...) or a list disjoint from the grid's seeds (default 2)")
    add_launcher_arguments(sweep)
    sweep.set_defaults(func=_sweep)
    _register_merge(subparsers)
    _register_throughput(subparsers)


def _sweep(args) -> int:
    from moelab.runs.data import check_shared_data
    from moelab.sweep.commands import run_sweep, submit_sweep
    from moelab.sweep.grid import load_sweep_grid
    from moelab.sweep.plan import check_finetune_data, plan_sweep, plan_sweep_folder

    check_launcher_options(args)
    grid = load_sweep_grid(args.grid, args.overrides)
    if args.out is None and not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.+-]{0,63}", grid.name):
        # The name would become the folder out/<name>-sweep: nothing that climbs out of it.
        raise MoelabError(f"sweep grid name {short_repr(grid.name)} is invalid as a folder name "
                          "(allowed "
                          f"letters, digits and _ . + -): pass --out DIR")
    out_dir = Path(args.out) if args.out else Path("out") / f"{grid.name}-sweep"
    plan = plan_sweep(grid)
    tuning = _sweep_tuning(args, grid)
    check_finetune_data(grid, plan)
    if args.dry_run:
        from moelab.runs.data import check_shared_data_for_a_dry_run

        # A bad --speeds is refused before any output.
        cost_lines = _cost_lines(args, grid, plan, tuning, out_dir)
        # The corpus checked as the sweep checks it before training: what it would refuse.
        for line in check_shared_data_for_a_dry_run([point.config for point in plan]):
            print(line)
        for point in plan:
            print(point.describe())
        recipe = grid.finetune
        print(f"{len(plan)} runs" + (
            "" if recipe is None else f", each then fine-tuned on {recipe.data} ({recipe.steps} "
            f"steps at lr {recipe.lr:g}) into runs/finetune/<run>"))
        for line in cost_lines:
            print(line)
        return 0
    if args.speeds is not None or args.per_run_seconds is not None:
        raise MoelabError(f"{'--speeds' if args.speeds is not None else '--per-run-seconds'} is "
                          "invalid without --dry-run: it prices the plan, which only a dry run "
                          "prints")
    if tuning is not None and (wants_commands(args) or args.detach):
        raise MoelabError(f"--lr-grid is invalid with {'--detach' if args.detach else '--list-runs'}: "
                          "the sweep's runs take the lrs its selection runs choose, which must "
                          "finish first; run without it")
    if wants_commands(args):
        from moelab.runs import is_complete
        from moelab.runs.launchers.commands import train_commands

        # It writes the plan: the same one writer as a sweep.
        with writer_lock(out_dir, kind=SWEEP_KIND):
            _, specs = plan_sweep_folder(grid, out_dir)
            commands = train_commands(out_dir, [s for s in specs
                                                if not is_complete(out_dir / s.run_dir)])
        for command in commands:
            print(command)
        return 0
    launcher = build_launcher(args)
    # A corpus that cannot serve the runs: refused before the folder exists.
    check_shared_data([point.config for point in plan])
    if args.detach:
        with writer_lock(out_dir, kind=SWEEP_KIND):
            job_id = submit_sweep(grid, out_dir, launcher, bootstrap_replicates=args.bootstrap,
                                  max_starts=args.starts)
        print_submitted(job_id, out_dir, local=args.slurm_local)
        return 0
    with writer_lock(out_dir, kind=SWEEP_KIND):
        report_path = run_sweep(grid, out_dir, bootstrap_replicates=args.bootstrap,
                                max_starts=args.starts, launcher=launcher, tuning=tuning)
    print(f"results: {out_dir / 'results.csv'}\nreport: {report_path}")
    return sweep_exit_code(out_dir, report_path)


def _cost_lines(args, grid, plan, tuning, out_dir: Path) -> list[str]:
    """``--dry-run``'s cost lines (``moelab.sweep.cost``), and the lr selection's with --lr-grid."""
    from moelab.sweep.cost import PER_RUN_SECONDS, dry_run_cost_lines
    from moelab.sweep.plan import run_specs

    per_run = PER_RUN_SECONDS if args.per_run_seconds is None else args.per_run_seconds
    if not (math.isfinite(per_run) and 0 <= per_run <= 3600):
        raise MoelabError(f"--per-run-seconds {per_run:g} is invalid: allowed 0 to 3600 seconds")
    if args.per_run_seconds is not None and args.speeds is None:
        raise MoelabError("--per-run-seconds is invalid without --speeds: only the time uses it")
    specs = run_specs(plan)
    speeds = None if args.speeds is None else Path(args.speeds)
    lines = dry_run_cost_lines(grid, plan, specs, speeds, per_run, args.jobs or 1, out_dir)
    if tuning is not None:
        from moelab.sweep.tuning import dry_run_lines

        lines += dry_run_lines(grid, tuning, specs)
    return lines


def _sweep_tuning(args, grid):
    """The SweepLrGrid --lr-grid asks for (None without it); bad values one line."""
    from moelab.runs.lr_grid import parse_lr_grid
    from moelab.study.settings import check_seeds
    from moelab.sweep.tuning import SweepLrGrid

    if args.lr_grid is None:
        if args.select_seeds is not None:
            raise MoelabError("--select-seeds is invalid without --lr-grid: only the lr "
                              "selection uses selection seeds")
        return None
    tuning = SweepLrGrid(parse_lr_grid(args.lr_grid, "--lr-grid"))
    if args.select_seeds is not None:
        tuning.select_seeds = check_seeds(args.select_seeds, "--select-seeds")
    tuning.seed_list(grid)  # refuses selection seeds that are also the grid's
    return tuning


def report_sweep(out_dir: Path, bootstrap: int | None = None, starts: int | None = None) -> int:
    """``moelab report DIR [--bootstrap R] [--starts K]`` of a sweep folder
    (``moelab.sweep.commands``)."""
    from moelab.sweep.commands import rewrite_sweep_outputs

    report_path = rewrite_sweep_outputs(out_dir, bootstrap_replicates=bootstrap, max_starts=starts)
    print(f"results: {out_dir / 'results.csv'}\nreport: {report_path}")
    return sweep_exit_code(out_dir, report_path)


def sweep_exit_code(out_dir: Path, report_path: Path) -> int:
    """0 when results.csv holds every planned run and finetune; else EXIT_INCOMPLETE (the
    report's "Partial results" section says the same)."""
    from moelab.sweep.analyses.partial_results import completeness
    from moelab.sweep.folder import load_sweep_folder

    folder = load_sweep_folder(out_dir)
    counts = completeness(folder.rows, folder.plan)
    if counts.complete:
        return 0
    return incomplete(f"results.csv holds {counts.describe()} (see {out_dir / 'failures.json'}): "
                      f"{report_path} is partial")


def _register_merge(subparsers) -> None:
    merge = subparsers.add_parser(
        "merge", help="join sweep folders of one grid extended by new sparsities",
        description="Join sweep folders of one grid that differ only in their sparsities (a "
                    "sweep extended to a new S) into one folder: grid.json with the union of "
                    "the sparsities, plan.json and results.csv with every folder's runs. Grids "
                    "that differ in more than the new sparsities are refused. moelab report on "
                    "the merged folder then fits and reports them as one sweep.",
    )
    merge.add_argument("sources", metavar="SWEEP", nargs="+",
                       help="a sweep folder (2 or more; the first one's grid.json is kept)")
    merge.add_argument("--out", metavar="DIR", required=True, help="the merged folder (a new one)")
    merge.set_defaults(func=_merge)


def _merge(args) -> int:
    from moelab.sweep.merging import merge_sweeps

    merged = merge_sweeps([Path(source) for source in args.sources], Path(args.out))
    print(f"{merged.out_dir}: {merged.runs} runs from {len(merged.sources)} folders, sparsities "
          f"{', '.join(f'{s:g}' for s in merged.sparsities)}\n"
          f"to fit and report them as one sweep: moelab report {merged.out_dir}")
    return 0


def _register_throughput(subparsers) -> None:
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
    from moelab.codec import to_json
    from moelab.scaling.throughput import REQUIRED_COLUMNS, ThroughputRow, moe_versus_dense
    from moelab.sweep.timing import config_shapes, grid_shapes, time_shapes, write_table

    if (args.config is None) == (args.grid is None):
        raise MoelabError("give exactly one of CONFIG or --grid PRESET|GRID")
    if not (math.isfinite(args.seconds_per_shape) and 0 < args.seconds_per_shape <= 600):
        raise MoelabError(f"--seconds-per-shape {args.seconds_per_shape} is invalid: allowed "
                          "(0, 600] seconds")
    if args.grid and args.sparsities:
        raise MoelabError("--sparsities goes with CONFIG: a --grid has its own")
    refuse_overwriting_inputs(args.out, "--out", [args.config, args.grid])
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
    timed = [ThroughputRow(**{key: row[key] for key in REQUIRED_COLUMNS}) for row in rows]
    ratios = moe_versus_dense(timed) if any(r.S == 0 for r in timed) else []
    if args.out.endswith(".json"):
        header["moe_vs_dense"] = to_json(ratios)
    path = write_table(args.out, rows, header)
    for ratio in ratios:
        same, flops = ratio.tokens_per_s_vs_same_size_dense, ratio.step_time_vs_equal_flops_dense
        print(f"N_total={ratio.N_total:,} S={ratio.S:g}: tokens/s vs the dense model of "
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
        raise MoelabError(f"--sparsities {short_repr(text)} is invalid: expected numbers like "
                          "0,0.5,0.75") from None
    if not values:
        raise MoelabError(f"--sparsities {short_repr(text)} is invalid: expected numbers like 0,0.5,0.75")
    return values
