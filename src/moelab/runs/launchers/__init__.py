"""Launchers: how the unfinished runs of a plan get trained.

Every launcher has ``describe() -> str`` (for the log) and ``launch(folder, specs, record,
log)``, which trains each spec and calls ``record(RunOutcome)`` once per run, on the calling
thread, as runs finish. Each trains a run as ``moelab train CONFIG --out RUN --resume`` does
(``train_planned_run``), from the config file the plan wrote, so launchers differ in where
runs train, never in what they compute:

    local     this machine: in this process, or N child processes (pinned one per GPU slot),
              which die with the parent
    ray       one Ray task per run on a Ray cluster (an existing one, or a local one)
    slurm     a SLURM job array through submitit, requeued on preemption
    commands  train nothing: print one resumable command per run (``--list-runs``)
"""

from __future__ import annotations

from pathlib import Path

LAUNCHERS = ("local", "ray", "slurm", "commands")


def train_planned_run(config_path: str, run_dir: str, threads: int | None = None,
                      branch_from: str | None = None, branch_step: int | None = None) -> dict:
    """Train (or continue, or skip if complete) one planned run from its config file, with
    ``threads`` torch threads; returns its summary. A branch starts from ``branch_from``'s
    kept checkpoint at ``branch_step``. What a remote worker calls."""
    import torch

    from moelab.config import load_config

    if threads is not None:
        torch.set_num_threads(threads)  # losses depend on the thread count: set it, always
    config = load_config(config_path)
    if branch_from is not None:
        from moelab.train.branch import branch_run

        return branch_run(Path(branch_from), branch_step, config, Path(run_dir))
    from moelab.train import train

    return train(config, Path(run_dir), resume=True)


def train_arguments(folder: Path, spec) -> list[str]:
    """``moelab train`` arguments of a planned run: what every launcher runs, in some form."""
    arguments = [str(folder / spec.config_path), "--out", str(folder / spec.run_dir)]
    if spec.branch is not None:
        arguments += ["--branch-from", str(folder / "runs" / spec.branch.source),
                      "--branch-step", str(spec.branch.step)]
    return arguments + ["--resume"]


def remote_arguments(folder: Path, spec, threads: int) -> tuple:
    """``train_planned_run``'s arguments for a planned run."""
    source = None if spec.branch is None else str(folder / "runs" / spec.branch.source)
    return (str(folder / spec.config_path), str(folder / spec.run_dir), threads, source,
            None if spec.branch is None else spec.branch.step)
