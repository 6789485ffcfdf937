"""Sub-commands ``study``, ``ablate-routing`` and ``report``: parsing and printing only."""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING

from moelab.cli import add_config_arguments, bounded_int, positive_int
from moelab.cli.fit import MAX_BOOTSTRAP
from moelab.cli.launch import (
    add_launcher_arguments, build_launcher, check_launcher_options, print_submitted, wants_commands,
)
from moelab.cli.sweep import report_sweep
from moelab.errors import MoelabError, incomplete
from moelab.fileio import writer_lock
from moelab.report import (
    format_count, format_mean_std, format_number, format_p_value, markdown_table,
)
from moelab.study.arms import LADDER_DESCRIPTIONS, LADDER_RUNGS, parse_criteria
from moelab.runs.tokens import parse_budget_list
from moelab.study.settings import check_seeds, load_study

if TYPE_CHECKING:
    from moelab.study.results import StudyResults
    from moelab.study.zero_shot import TaskResult

# The study machinery below (training, statistics, figures) imports torch and scipy, seconds
# of start-up: the commands import it when they run, so that every other command and
# ``moelab --help`` start at once.


def register(subparsers) -> None:
    """Add this module's sub-commands."""
    study = subparsers.add_parser(
        "study", help="dense-vs-MoE study: arms x seeds, statistics and report",
        description="Derive the moe, dense_active and dense_total arms from one MoE config, "
        "train arms x seeds (x budgets), then write results.json, results.csv, report.md and "
        "figures/ in --out. Rerunning skips finished runs.",
    )
    add_config_arguments(study)
    _add_run_arguments(study, "study")
    study.add_argument("--criteria", metavar="LIST",
                       help="fairness criteria, comma-separated from active,total,compute "
                       "(compute: dense_total against the MoE trained on as many tokens as "
                       "spend its training FLOPs; default: the preset's, else active,total)")
    study.add_argument("--budgets", metavar="LIST",
                       help="token budgets, e.g. 40.5M,426.3M: every arm x seed at each, "
                       "each with its own full schedule")
    _add_fair_arguments(study)
    study.set_defaults(func=_study, kind="study")

    ladder = subparsers.add_parser(
        "ablate-routing", help="routing-stability ladder: " + " -> ".join(LADDER_RUNGS),
        description=f"Train the {len(LADDER_RUNGS)} rungs of the routing ladder on the same "
        "budget and seeds: " + "; ".join(f"{name} ({LADDER_DESCRIPTIONS[name]})"
                                          for name in LADDER_RUNGS)
        + ". Report best val loss, collapse and routing diagnostics per rung.",
    )
    add_config_arguments(ladder)
    _add_run_arguments(ladder, "ablation")
    ladder.set_defaults(func=_study, kind="ablation", criteria=None, budgets=None, tune_lr=None,
                        select_seeds=None, until_resolved=False, max_seeds=None,
                        round_seeds=None, threshold=None)

    _register_compare(subparsers)

    report = subparsers.add_parser(
        "report", help="rebuild results and report of a study or sweep folder from its run files",
    )
    report.add_argument("study_dir", metavar="DIR",
                        help="a folder written by study, ablate-routing or sweep-sparsity")
    report.add_argument("--bootstrap", type=bounded_int(MAX_BOOTSTRAP), default=None, metavar="R",
                        help="a sweep folder: fit the law again with R bootstrap resamples "
                             "(default: the settings the sweep recorded)")
    report.add_argument("--starts", type=positive_int, default=None, metavar="K",
                        help="a sweep folder: fit the law again from a seeded subset of K grid "
                             "starts (default: the settings the sweep recorded)")
    report.set_defaults(func=_report)

    pool = subparsers.add_parser(
        "pool", help="pool studies of the same design into one paired comparison",
        description="Combine the seeds of several studies of one design (study folders or "
        "their results.json) into one paired comparison per budget and criterion, each pair "
        "within its seed; designs that differ, or seeds in two studies, are refused.",
    )
    pool.add_argument("sources", metavar="STUDY", nargs="+",
                      help="a study folder or a study's results.json (2 or more)")
    pool.add_argument("--out", metavar="DIR",
                      help="write pooled.json and pooled.md here (default: print only)")
    pool.set_defaults(func=_pool)


def _register_compare(subparsers) -> None:
    compare = subparsers.add_parser(
        "compare", help="two configs trained on the same seeds: the paired gap, its interval, "
        "p and the minimum detectable gap",
        description="Train configs A and B on the same seeds (train.seed, so the same batches "
        "with the default data_seed), then test A - B of the best val loss paired by seed "
        "(positive: B is better), as the study tests its arms. Writes compare.json in --out; "
        "rerunning skips finished runs.",
    )
    compare.add_argument("config_a", metavar="A", help="a YAML file or preset name")
    compare.add_argument("config_b", metavar="B", help="a YAML file or preset name")
    compare.add_argument("--set", dest="overrides", action="append", default=[],
                         metavar="KEY=VALUE", help="override a config key of both sides (repeatable)")
    for side in ("a", "b"):
        compare.add_argument(f"--set-{side}", dest=f"overrides_{side}", action="append",
                             default=[], metavar="KEY=VALUE",
                             help=f"override a config key of {side.upper()} only, after --set "
                             "(repeatable)")
    compare.add_argument("--seeds", metavar="N|LIST", default="3",
                         help="seeds: a count N (A's train.seed, train.seed + 1, ...) or the "
                         "seeds themselves, e.g. 10,11,12 (default 3)")
    compare.add_argument("--out", metavar="DIR",
                         help="comparison folder (default: out/<A name>-vs-<B name>-compare)")
    compare.add_argument("--json", action="store_true", help="print compare.json's record")
    compare.add_argument("--tune-lr", metavar="GRID",
                         help="choose each side's lr from GRID (e.g. 0.005,0.01,0.02) on "
                         "selection seeds that never report, then compare at those lrs")
    compare.add_argument("--select-seeds", metavar="N|LIST",
                         help="with --tune-lr: the selection seeds, a count N (A's train.seed + "
                         "1000000, ...) or a list disjoint from --seeds (default 2)")
    add_launcher_arguments(compare)
    compare.set_defaults(func=_compare)


def _compare(args) -> int:
    import json

    from moelab.config import load_config
    from moelab.runs.launchers.commands import train_commands
    from moelab.study.compare import comparison_json, comparison_specs, run_comparison
    from moelab.study.settings import StudySettings

    check_launcher_options(args)
    configs, labels = {}, {}
    for side, source, own in (("A", args.config_a, args.overrides_a),
                              ("B", args.config_b, args.overrides_b)):
        configs[side] = load_config(source, args.overrides + own)
        labels[side] = " ".join([source] + [f"--set {o}" for o in own])
    seeds = StudySettings(seeds=check_seeds(args.seeds, "--seeds")).seed_list(
        configs["A"].train.seed)
    args.until_resolved, args.max_seeds, args.round_seeds, args.threshold = False, None, None, None
    tuning, _ = fair_options(args, seeds)
    if tuning is not None:
        from moelab.runs.lr_grid import check_disjoint

        check_disjoint(tuning.seed_list(configs["A"].train.seed), seeds)
    out = Path(args.out) if args.out else (
        Path("out") / f"{Path(args.config_a).stem}-vs-{Path(args.config_b).stem}-compare")
    if wants_commands(args):
        from moelab.runs import is_complete, write_run_configs

        specs = comparison_specs(configs, seeds)
        with writer_lock(out, kind="compare"):  # it writes the plan: the same one writer
            write_run_configs(out, specs)
        for command in train_commands(out, [s for s in specs if not is_complete(out / s.run_dir)]):
            print(command)
        return 0
    launcher = build_launcher(args)
    with writer_lock(out, kind="compare"):
        result = run_comparison(configs, labels, seeds, out, common=args.overrides,
                                launcher=launcher, tuning=tuning)
    if args.json:
        print(json.dumps(comparison_json(result), indent=2))
    else:
        print_comparison(result, out)
    if result.missing:
        shown = ", ".join(result.missing[:3]) + (", ..." if len(result.missing) > 3 else "")
        return incomplete(f"{len(result.missing)} of the compared runs are not complete "
                          f"({shown}; see {out / 'failures.json'}): the comparison is over the "
                          "seeds both sides finished")
    return 0


def print_comparison(result, out: Path) -> None:
    from moelab.study.compare import side_summary
    from moelab.stats.intervals import ALPHA
    from moelab.stats.power import POWER

    print()
    if result.common:
        print("both: " + " ".join(f"--set {o}" for o in result.common))
    for side, label in result.labels.items():
        mean, std, n = side_summary(result.losses[side])
        print(f"{side}: {label}\n    best val loss {format_mean_std(mean, std)} (n={n})")
    if result.lr_selection is not None:
        selection = result.lr_selection
        for side, choice in selection.sides.items():
            edge = f" (at the grid's {choice.edge} lr: the best may lie beyond)" if choice.edge else ""
            print(f"{side}: lr {choice.lr:g}{edge}")
        print(f"lrs chosen on seeds {', '.join(map(str, selection.selection_seeds))}; "
              f"reported on seeds {', '.join(map(str, selection.reporting_seeds))}")
    gap = result.gap
    print(f"gap A - B {gap.gap:+.4f} (positive: B better): {result.outcome}")
    print(f"    paired t: {_interval(gap.paired)}, n={gap.paired.n_pairs} pairs")
    if math.isfinite(gap.min_detectable_gap):
        print(f"    min detectable gap {format_number(gap.min_detectable_gap)} "
              f"(power {POWER:g}, two-sided alpha {ALPHA:.2g})")
    if result.missing:
        print(f"not complete, left out of the test: {', '.join(result.missing)}")
    print(f"\nresults: {out / 'compare.json'}")


def _add_run_arguments(parser, kind: str) -> None:
    parser.add_argument("--seeds", metavar="N|LIST",
                        help="seeds per arm: a count N (train.seed, train.seed + 1, ...) or the "
                        "seeds themselves, e.g. 10,11,12 (default: the preset's, else 3)")
    parser.add_argument("--dry-run", action="store_true",
                        help="check the data as a run would (refused: what the run would "
                        "refuse), then list the runs, their tokens and FLOPs and an estimated "
                        "wall time (at the committed runs' measured speeds); train nothing, "
                        "write no folder (the token cache it builds is the runs')")
    parser.add_argument("--out", metavar="DIR",
                        help=f"study folder (default: out/<config name>-{kind})")
    add_launcher_arguments(parser)


def _add_fair_arguments(parser) -> None:
    """--tune-lr and --until-resolved (docs/explanation/matching.md and statistics.md)."""
    parser.add_argument("--tune-lr", metavar="GRID",
                        help="choose each arm's lr from GRID (e.g. 0.005,0.01,0.02) on selection "
                        "seeds that never report, then run the study at each arm's own lr "
                        "(moe_compute takes moe's)")
    parser.add_argument("--select-seeds", metavar="N|LIST",
                        help="with --tune-lr: the selection seeds, a count N (train.seed + "
                        "1000000, ...) or a list disjoint from the reporting seeds (default 2)")
    parser.add_argument("--until-resolved", action="store_true",
                        help="add seeds in rounds until every comparison's repeated interval "
                        "excludes 0 or lies inside +-threshold (group-sequential, "
                        "O'Brien-Fleming-type spending), or --max-seeds is reached; --seeds is "
                        "the first round")
    parser.add_argument("--max-seeds", metavar="M",
                        help="with --until-resolved: the most seeds per arm (default 12)")
    parser.add_argument("--round-seeds", metavar="R",
                        help="with --until-resolved: seeds added per round (default 2)")
    parser.add_argument("--threshold", metavar="NATS",
                        help="with --until-resolved: the smallest gap that matters, nats/token "
                        "(default 0.01)")


def _whole(text: str, flag: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise MoelabError(f"{flag}={text} is invalid: allowed a whole number >= 1")
    return value


def fair_options(args, seeds):
    """The LrTuning and UntilResolved the flags ask for (None when not asked); a flag that
    needs another, or a bad value, is one line."""
    from moelab.runs.lr_grid import parse_lr_grid
    from moelab.study.rounds import UntilResolved
    from moelab.study.tuning import LrTuning

    if args.select_seeds is not None and args.tune_lr is None:
        raise MoelabError("--select-seeds is invalid without --tune-lr: only the lr selection "
                          "uses selection seeds")
    for name in ("max_seeds", "round_seeds", "threshold"):
        if getattr(args, name) is not None and not args.until_resolved:
            raise MoelabError(f"--{name.replace('_', '-')} is invalid without --until-resolved")
    tuning = None
    if args.tune_lr is not None:
        tuning = LrTuning(parse_lr_grid(args.tune_lr, "--tune-lr"))
        if args.select_seeds is not None:
            tuning.select_seeds = check_seeds(args.select_seeds, "--select-seeds")
    until = None
    if args.until_resolved:
        until = UntilResolved()
        if args.max_seeds is not None:
            until.max_seeds = _whole(args.max_seeds, "--max-seeds")
        if args.round_seeds is not None:
            until.round_seeds = _whole(args.round_seeds, "--round-seeds")
        if args.threshold is not None:
            until.threshold = _threshold(args.threshold)
        until.check(seeds)
    if (tuning or until) and (wants_commands(args) or args.detach):
        flag = "--tune-lr" if tuning else "--until-resolved"
        raise MoelabError(f"{flag} is invalid with {'--detach' if args.detach else '--list-runs'}: "
                          "the runs it plans depend on runs that must finish first; run without it")
    return tuning, until


def _threshold(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value > 0):
        raise MoelabError(f"--threshold={text} is invalid: allowed a positive gap in nats/token, "
                          "e.g. 0.01")
    return value


def _study(args) -> int:
    check_launcher_options(args)
    config, settings = load_study(args.config, args.overrides)
    if args.seeds is not None:
        settings.seeds = check_seeds(args.seeds, "--seeds")
    if args.criteria is not None:
        settings.criteria = parse_criteria(args.criteria)
    if args.budgets is not None:
        settings.budgets = parse_budget_list(args.budgets)
    settings.check_size("--budgets" if args.budgets is not None else "study.budgets",
                        "--seeds" if args.seeds is not None else "study.seeds")
    tuning, until_resolved = fair_options(args, settings.seeds)
    if tuning is not None:
        from moelab.runs.lr_grid import check_disjoint

        reporting = (list(range(config.train.seed, config.train.seed + until_resolved.max_seeds))
                     if until_resolved else settings.seed_list(config.train.seed))
        check_disjoint(tuning.seed_list(config.train.seed), reporting)
    if args.dry_run:
        if tuning is not None or until_resolved:
            raise MoelabError(f"--dry-run is invalid with "
                              f"{'--tune-lr' if tuning is not None else '--until-resolved'}: "
                              "their runs depend on what earlier runs find; price the study "
                              "without it")
        return _dry_run(args, config, settings)
    # the arguments are checked: now the engine (torch, scipy)
    from moelab.runs.data import check_shared_data
    from moelab.study.commands import list_runs, planned_configs, run_study, submit_study

    out = _study_folder(args)
    if wants_commands(args):  # it writes the plan: the same one writer as a study
        with writer_lock(out, kind=args.kind):
            commands = list_runs(args.kind, config, settings, out)
        for command in commands:
            print(command)
        return 0
    launcher = build_launcher(args)  # its options first: the data check below may build a cache
    # A corpus that cannot serve the runs (no separators, too short for train.eval_windows):
    # refused before the folder exists, so the corrected command finds nothing in its way.
    check_shared_data(planned_configs(args.kind, config, settings))
    if args.detach:
        with writer_lock(out, kind=args.kind):
            job_id = submit_study(args.kind, config, settings, out, launcher)
        print_submitted(job_id, out, local=args.slurm_local)
        return 0
    with writer_lock(out, kind=args.kind):
        results = run_study(args.kind, config, settings, out, launcher=launcher, tuning=tuning,
                            until_resolved=until_resolved)
    print_results(results, out)
    return study_exit_code(results, out)


def _study_folder(args) -> Path:
    return Path(args.out) if args.out else Path("out") / f"{Path(args.config).stem}-{args.kind}"


def _dry_run(args, config, settings) -> int:
    """The data checked as the real run checks them (a corpus it would refuse is refused
    here), then each planned run with its size and tokens, and the total and estimated time
    of those the folder does not hold complete (what the real run trains)."""
    from moelab.accounting import count_params, flops_per_token
    from moelab.runs.completion import runs_left
    from moelab.runs.data import check_shared_data_for_a_dry_run
    from moelab.runs.estimate import (
        already_complete_text, plan_seconds, sparsity_of, stored_speeds, time_line,
    )
    from moelab.study.commands import plan

    _, planned = plan(args.kind, settings.apply_to(config), settings)
    for line in check_shared_data_for_a_dry_run([spec.config for spec in planned]):
        print(line)
    for spec in planned:
        model, tokens = spec.config.model, spec.config.train.max_tokens
        print(f"{spec.name:32} S={sparsity_of(spec):<6g} N_active={count_params(model).active:>11,}"
              f" tokens={format_count(tokens)}")
    out = _study_folder(args)
    specs = runs_left(out, planned)
    flops = sum(flops_per_token(spec.config.model).six_n * spec.config.train.max_tokens
                for spec in specs)
    tokens = sum(spec.config.train.max_tokens for spec in specs)
    print(f"cost: {len(specs)} runs{already_complete_text(len(planned) - len(specs), out)}, "
          f"{format_count(tokens)} tokens, {flops:.3g} training FLOPs (6ND)")
    stored = stored_speeds()
    seconds = plan_seconds(specs, stored.speeds, stored.seconds_per_run)
    print(time_line(seconds, args.jobs or 1) + " (plus the report)")
    print(stored.basis(stored.seconds_per_run))
    return 0


def study_exit_code(results: StudyResults, study_dir: Path) -> int:
    """0 when every planned run is complete; else EXIT_INCOMPLETE, the report saying which are
    missing (its "Incomplete runs" section)."""
    if not results.missing_runs:
        return 0
    return incomplete(f"{len(results.missing_runs)} planned runs are not complete (see "
                      f"{study_dir / 'failures.json'}); {study_dir / 'report.md'} is partial")


def _report(args) -> int:
    from moelab.study.plan import check_study_files
    from moelab.study.folder import StudyFolder, check_recorded_runs
    from moelab.study.report import write_outputs

    study_dir = Path(args.study_dir)
    if study_dir.exists() and not study_dir.is_dir():
        raise MoelabError(f"{args.study_dir} is a file, not a study folder (nor a sweep folder)")
    if (study_dir / "grid.json").is_file():
        return report_sweep(study_dir, args.bootstrap, args.starts)
    if args.bootstrap is not None or args.starts is not None:
        option = "--bootstrap" if args.bootstrap is not None else "--starts"
        raise MoelabError(f"{option} is invalid for {args.study_dir}: it has no grid.json, and "
                          "only a sweep folder's report fits a law")
    check_study_files(study_dir)
    with writer_lock(args.study_dir):
        check_recorded_runs(study_dir)
        results = write_outputs(StudyFolder.read(study_dir))
    print_results(results, study_dir)
    return study_exit_code(results, study_dir)


def _pool(args) -> int:
    from moelab.study.pooling import check_out_dir, pool, read_source, render_pooled, write_pooled

    pooled = pool([read_source(Path(source)) for source in args.sources])
    if args.out:
        check_out_dir(Path(args.out))  # before the lock, which would write into a study folder
        with writer_lock(args.out, kind="pool"):
            write_pooled(pooled, Path(args.out))
    print(render_pooled(pooled))
    if args.out:
        print(f"pooled: {Path(args.out) / 'pooled.md'}")
    return 0


def print_results(results: StudyResults, study_dir: Path) -> None:
    """The study table on the terminal: arms, then each comparison with its tests."""
    from moelab.stats.intervals import ALPHA
    from moelab.stats.power import POWER

    rows = []
    for arm, r in results.arms.items():
        loss, bpb = r.best_val_loss, r.best_val_bpb
        collapsed = f"{r.collapsed_runs}/{loss.n}" if r.routing.recorded else "–"
        rows.append([arm, format_count(r.active_params), format_count(r.total_params),
                     format_mean_std(loss.mean, loss.std), str(loss.n),
                     format_mean_std(bpb.mean, bpb.std), collapsed])
    print()
    print(markdown_table(["arm", "active", "total", "best val loss", "n", "bits/byte", "collapsed"],
                         rows, "lrrrrrr"))
    for criterion, g in results.gaps.items():
        print(f"matched {criterion:<6} {g.moe_arm} vs {g.dense_arm}: gap (dense - moe) "
              f"{g.gap:+.4f}: {g.verdict}")
        if g.test == "paired":
            print(f"    paired t: {_interval(g.paired)}, n={g.paired.n_pairs} pairs")
        print(f"    Welch t:  {_interval(g.welch)}")
        print(f"    adjusted ({g.adjustment}): p={format_p_value(g.p_adjusted)}")
        if g.min_detectable_gap is not None:
            print(f"    min detectable gap {format_number(g.min_detectable_gap)} "
                  f"(power {POWER:g}, two-sided alpha {ALPHA:.2g})")
    _print_zero_shot(results.zero_shot)
    for name, error in results.failed_runs.items():
        print(f"FAILED {name}: {error}")
    print(f"\nreport: {study_dir / 'report.md'}")


def _print_zero_shot(zero_shot: dict[str, TaskResult]) -> None:
    """Each task the runs scored: accuracy per arm, then each paired MoE - dense difference."""
    for task, result in zero_shot.items():
        chance = next(iter(result.arms.values())).chance
        arms = ", ".join(f"{arm} {format_mean_std(r.accuracy.mean, r.accuracy.std)}"
                         for arm, r in result.arms.items())
        print(f"zero-shot {task} (chance {chance:.4f}): {arms}")
        for criterion, c in result.comparisons.items():
            interval = ("no CI" if c.ci_low is None else
                        f"95% CI [{c.ci_low:.4f}, {c.ci_high:.4f}], p={format_p_value(c.p_value)}")
            print(f"    matched {criterion}: moe - {c.dense_arm} {c.difference:+.4f}, "
                  f"{interval}: {c.verdict}")


def _interval(test) -> str:
    """A test's 95 % interval and p-value on one line (a PairedTest or a WelchTest)."""
    if test.ci_low is None:
        return "no CI (not testable)"
    p_text = format_p_value(test.p_value)
    p_text = f"p{p_text.replace(' ', '')}" if p_text.startswith("<") else f"p={p_text}"
    return f"95% CI [{format_number(test.ci_low)}, {format_number(test.ci_high)}], {p_text}"
