"""The launcher options every command that trains a folder of runs shares (study,
ablate-routing, sweep-sparsity): parsing them into a ``moelab.runs.launchers`` launcher."""

from __future__ import annotations

import argparse

from moelab.cli import positive_int
from moelab.errors import MoelabError, short_repr

LAUNCHERS = ("local", "ray", "slurm", "commands")  # moelab.runs.launchers.LAUNCHERS, unimported


def add_launcher_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group(
        "where runs train", "every launcher trains a run as 'moelab train CONFIG --out RUN "
        "--resume': a retried or requeued run continues from its checkpoint (docs/cluster.md)")
    group.add_argument("--launcher", choices=LAUNCHERS, default="local",
                       help="local: this machine (default); ray: one Ray task per run; slurm: a "
                       "SLURM job array through submitit; commands: print one command per "
                       "unfinished run (as --list-runs)")
    group.add_argument("--jobs", type=positive_int, default=1, metavar="N",
                       help="local: train N runs at once, each in its own process with the CPUs "
                       "shared out (OMP_NUM_THREADS, when set, is each run's thread count) and, "
                       "with GPUs, its own GPU; default 1")
    group.add_argument("--runs-per-gpu", type=positive_int, default=1, metavar="K",
                       help="local: up to K runs share each GPU (default 1)")
    group.add_argument("--list-runs", action="store_true",
                       help="write the plan and print one 'moelab train ... --resume' command per "
                       "unfinished run instead of training (--launcher commands)")
    group.add_argument("--ray-address", metavar="ADDRESS",
                       help="ray: the cluster to join (e.g. 10.0.0.1:6379 or auto; default: a "
                       "local cluster started for the runs)")
    group.add_argument("--cpus-per-run", type=positive_int, default=1, metavar="N",
                       help="ray, slurm: CPUs reserved per run, also its torch thread count "
                       "(default 1)")
    group.add_argument("--gpus-per-run", type=_gpu_count, default=0, metavar="G",
                       help="ray: GPUs per run, a fraction shares one (0.25); slurm: whole GPUs "
                       "(default 0)")
    group.add_argument("--slurm-partition", metavar="NAME", help="slurm: the partition")
    group.add_argument("--slurm-time", type=positive_int, default=24 * 60, metavar="MINUTES",
                       help="slurm: time limit per run; a run past it is requeued and resumes "
                       "(default 1440)")
    group.add_argument("--slurm-local", action="store_true",
                       help="slurm: run the job array through submitit's local executor (try a "
                       "setup without a cluster)")


def _gpu_count(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not 0 <= value <= 64:  # NaN fails too
        raise argparse.ArgumentTypeError(f"{short_repr(text)} is invalid: allowed a number of GPUs in 0..64")
    return value


def wants_commands(args) -> bool:
    return args.list_runs or args.launcher == "commands"


def build_launcher(args):
    """The launcher the options ask for; options that belong to another launcher are refused
    (a ``--ray-address`` with the local launcher would silently train here)."""
    _refuse_foreign_options(args)
    # Each launcher is imported when chosen: they import the training engine (torch), which
    # parsing the other commands' arguments must not pay.
    if args.launcher == "ray":
        from moelab.runs.launchers.ray import RayLauncher

        return RayLauncher(address=args.ray_address, cpus_per_run=args.cpus_per_run,
                           gpus_per_run=args.gpus_per_run)
    if args.launcher == "slurm":
        from moelab.runs.launchers.slurm import SlurmLauncher

        if args.gpus_per_run != int(args.gpus_per_run):
            raise MoelabError(f"--gpus-per-run {args.gpus_per_run:g} is invalid with --launcher "
                              "slurm: allowed a whole number of GPUs")
        return SlurmLauncher(cluster="local" if args.slurm_local else "slurm",
                             partition=args.slurm_partition, time_minutes=args.slurm_time,
                             cpus_per_run=args.cpus_per_run, gpus_per_run=int(args.gpus_per_run))
    from moelab.runs.launchers.local import LocalLauncher

    return LocalLauncher(jobs=args.jobs, runs_per_gpu=args.runs_per_gpu)


_OPTIONS_OF = {
    "jobs": ("local", 1), "runs_per_gpu": ("local", 1), "ray_address": ("ray", None),
    "cpus_per_run": ("ray slurm", 1), "gpus_per_run": ("ray slurm", 0),
    "slurm_partition": ("slurm", None), "slurm_time": ("slurm", 24 * 60),
    "slurm_local": ("slurm", False),
}


def _refuse_foreign_options(args) -> None:
    for name, (launchers, default) in _OPTIONS_OF.items():
        if getattr(args, name) != default and args.launcher not in launchers.split():
            option = "--" + name.replace("_", "-")
            raise MoelabError(f"{option} is invalid with --launcher {args.launcher}: it applies "
                              f"to --launcher {' or '.join(launchers.split())}")

