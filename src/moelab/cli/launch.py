"""The launcher options every command that trains a folder of runs shares (study,
ablate-routing, sweep-sparsity): parsing them into a ``moelab.runs.launchers`` launcher.

Every option belongs to one launcher (or two): given with another, it is refused on one line
naming the launcher it belongs to, rather than silently ignored. To tell a given option from
its default, each defaults to None here; ``check_launcher_options`` fills in the defaults."""

from __future__ import annotations

import argparse
import re

from moelab.cli import positive_int
from moelab.errors import MoelabError, short_repr

LAUNCHERS = ("local", "ray", "slurm", "commands")  # moelab.runs.launchers.LAUNCHERS, unimported

DEFAULT_SLURM_MINUTES = 24 * 60

# Each option's launchers and its default. Every option add_launcher_arguments adds is here
# (a test checks it).
_OPTIONS_OF: dict[str, tuple[tuple[str, ...], object]] = {
    "jobs": (("local",), 1), "runs_per_gpu": (("local",), 1),
    "list_runs": (("commands",), False),
    "ray_address": (("ray",), None),
    "cpus_per_run": (("ray", "slurm"), 1), "gpus_per_run": (("ray", "slurm"), 0),
    "slurm_partition": (("slurm",), None), "slurm_time": (("slurm",), DEFAULT_SLURM_MINUTES),
    "slurm_account": (("slurm",), None), "slurm_qos": (("slurm",), None),
    "slurm_mem": (("slurm",), None), "slurm_max_parallel": (("slurm",), None),
    "slurm_option": (("slurm",), []), "slurm_local": (("slurm",), False),
    "detach": (("slurm",), False),
}

# sbatch options that have an option of their own, and those moelab (submitit) writes itself.
_SBATCH_OPTION_OF = {
    "time": "--slurm-time", "partition": "--slurm-partition", "account": "--slurm-account",
    "qos": "--slurm-qos", "mem": "--slurm-mem", "array": "--slurm-max-parallel",
    "cpus-per-task": "--cpus-per-run", "gpus-per-node": "--gpus-per-run",
}
_WRITTEN_SBATCH_OPTIONS = {"nodes", "ntasks-per-node", "output", "error", "open-mode", "signal",
                           "job-name"}


def add_launcher_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group(
        "where runs train", "every launcher trains a run as 'moelab train CONFIG --out RUN "
        "--resume': a retried or requeued run continues from its checkpoint; an option of "
        "another launcher is refused (docs/cluster.md)")
    group.add_argument("--launcher", choices=LAUNCHERS, default=None,
                       help="local: this machine (default); ray: one Ray task per run; slurm: a "
                       "SLURM job array through submitit; commands: print one command per "
                       "unfinished run (as --list-runs)")
    group.add_argument("--jobs", type=positive_int, metavar="N",
                       help="local: train N runs at once, each in its own process with the CPUs "
                       "shared out (OMP_NUM_THREADS, when set, is each run's thread count) and, "
                       "with GPUs, its own GPU; default 1")
    group.add_argument("--runs-per-gpu", type=positive_int, metavar="K",
                       help="local: up to K runs share each GPU (default 1)")
    group.add_argument("--list-runs", action="store_true", default=None,
                       help="write the plan and print one 'moelab train ... --resume' command per "
                       "unfinished run instead of training (--launcher commands)")
    group.add_argument("--ray-address", metavar="ADDRESS",
                       help="ray: the cluster to join (e.g. 10.0.0.1:6379 or auto; default: a "
                       "local cluster started for the runs)")
    group.add_argument("--cpus-per-run", type=positive_int, metavar="N",
                       help="ray, slurm: CPUs reserved per run, also its torch thread count "
                       "(default 1)")
    group.add_argument("--gpus-per-run", type=_gpu_count, metavar="G",
                       help="ray: GPUs per run, a fraction shares one (0.25); slurm: whole GPUs "
                       "(default 0)")
    group.add_argument("--slurm-partition", type=_sbatch_value, metavar="NAME",
                       help="slurm: the partition")
    group.add_argument("--slurm-time", type=positive_int, metavar="MINUTES",
                       help="slurm: time limit per run; a run past it is requeued and resumes "
                       f"(default {DEFAULT_SLURM_MINUTES})")
    group.add_argument("--slurm-account", type=_sbatch_value, metavar="NAME",
                       help="slurm: the account the jobs are charged to (sbatch --account)")
    group.add_argument("--slurm-qos", type=_sbatch_value, metavar="NAME",
                       help="slurm: the quality of service (sbatch --qos)")
    group.add_argument("--slurm-mem", type=_memory, metavar="SIZE",
                       help="slurm: memory per run, e.g. 64G or 500M (sbatch --mem; default: "
                       "the partition's)")
    group.add_argument("--slurm-max-parallel", type=positive_int, metavar="N",
                       help="slurm: at most N of the array's runs at once (sbatch --array=...%%N)")
    group.add_argument("--slurm-option", dest="slurm_option", action="append",
                       type=_sbatch_option, metavar="KEY=VALUE",
                       help="slurm: any other sbatch option, e.g. constraint=a100 or "
                       "exclude=node7 (sbatch --KEY=VALUE; a bare KEY for a flag); repeatable")
    group.add_argument("--slurm-local", action="store_true", default=None,
                       help="slurm: run the job array through submitit's local executor (try a "
                       "setup without a cluster)")
    group.add_argument("--detach", action="store_true", default=None,
                       help="slurm: submit the job array and return at once; 'moelab report "
                       "DIR' collects the results once the runs are done")


def _gpu_count(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not 0 <= value <= 64:  # NaN fails too
        raise argparse.ArgumentTypeError(f"{short_repr(text)} is invalid: allowed a number of GPUs in 0..64")
    return value


def _sbatch_value(text: str) -> str:
    """A name written into the job script: one word (a space or newline would break it)."""
    if not re.fullmatch(r"[\w.:,@%+=/-]+", text):
        raise argparse.ArgumentTypeError(f"{text!r} is invalid: allowed one word of letters, "
                                         "digits and . : , @ % + = / - _")
    return text


def _memory(text: str) -> str:
    if not re.fullmatch(r"[1-9][0-9]*[KMGT]?", text):
        raise argparse.ArgumentTypeError(f"{text!r} is invalid: allowed a size like 64G, 500M "
                                         "or 4096 (megabytes), as sbatch --mem takes")
    return text


def _sbatch_option(text: str) -> tuple[str, str | bool]:
    """KEY=VALUE for ``#SBATCH --KEY=VALUE``, or a bare KEY (True) for ``#SBATCH --KEY``."""
    key, _, value = text.partition("=")
    key = key.strip().replace("_", "-")
    if not re.fullmatch(r"[a-z][a-z-]*", key):
        raise argparse.ArgumentTypeError(f"{text!r} is invalid: expected KEY=VALUE with an "
                                         "sbatch option as KEY, e.g. constraint=a100")
    if key in _SBATCH_OPTION_OF:
        raise argparse.ArgumentTypeError(f"{text!r} is invalid: use {_SBATCH_OPTION_OF[key]}")
    if key in _WRITTEN_SBATCH_OPTIONS:
        raise argparse.ArgumentTypeError(f"{text!r} is invalid: moelab writes --{key} itself")
    if value and not re.fullmatch(r"[^\s'\"\\]+", value):
        raise argparse.ArgumentTypeError(f"{text!r} is invalid: the value must be one word, "
                                         "without quotes or backslashes")
    return key, value or True


def check_launcher_options(args) -> None:
    """Settle ``args.launcher`` (``--list-runs`` alone means commands, else local), refuse any
    launcher option given for another launcher, and fill in the defaults. Called before
    anything is read or written."""
    chosen = args.launcher or ("commands" if args.list_runs else "local")
    named = "--list-runs" if args.list_runs and not args.launcher else f"--launcher {chosen}"
    for name, (launchers, default) in _OPTIONS_OF.items():
        value = getattr(args, name)
        if value is None:
            setattr(args, name, default)
        elif chosen not in launchers:
            option = "--" + name.replace("_", "-")
            raise MoelabError(f"{option} is invalid with {named}: it applies to "
                              f"--launcher {' or '.join(launchers)}")
    args.launcher = chosen


def wants_commands(args) -> bool:
    return args.launcher == "commands"


def build_launcher(args):
    """The launcher the (checked) options ask for."""
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
                             cpus_per_run=args.cpus_per_run, gpus_per_run=int(args.gpus_per_run),
                             account=args.slurm_account, qos=args.slurm_qos, mem=args.slurm_mem,
                             max_parallel=args.slurm_max_parallel,
                             sbatch_options=dict(args.slurm_option))
    from moelab.runs.launchers.local import LocalLauncher

    return LocalLauncher(jobs=args.jobs, runs_per_gpu=args.runs_per_gpu)


def print_submitted(job_id, folder, local: bool) -> None:
    """What a detached submit leaves the user: the job, and how to collect its results."""
    if job_id is None:
        print(f"every run is complete: nothing submitted; moelab report {folder} rebuilds the report")
        return
    watch = "" if local else f"; watch it with squeue -j {job_id}"
    print(f"submitted job {job_id}{watch} (logs in {folder}/slurm/); once its runs are done, "
          f"collect the results with: moelab report {folder}")
