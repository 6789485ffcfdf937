"""The commands launcher: print, for another scheduler or several GPUs, one resumable
``moelab train`` (or ``moelab finetune``) command per unfinished run (``--list-runs``)."""

from __future__ import annotations

import shlex
from pathlib import Path

from moelab.runs.spec import RunSpec


def train_commands(folder: Path, specs: list[RunSpec]) -> list[str]:
    """One ``moelab train ... --resume`` command per run, the runs others branch from first.

    With ``--resume`` a command can simply be rerun: after a preemption it continues its run,
    after completion it returns at once, and a first start it begins afresh. A branch's
    command (``--branch-from``) needs its source run finished first."""
    ordered = ([spec for spec in specs if spec.source is None]
               + [spec for spec in specs if spec.branch is not None]
               + [spec for spec in specs if spec.finetune is not None])
    return [" ".join(["moelab", "finetune" if spec.finetune else "train",
                      *map(shlex.quote, train_arguments(folder, spec))])
            for spec in ordered]


def train_arguments(folder: Path, spec: RunSpec) -> list[str]:
    """The ``moelab train`` arguments that train ``spec`` as
    ``moelab.runs.training.train_planned_run`` does, from the config file the plan wrote: what a
    user or another scheduler runs. A finetune's are ``moelab finetune``'s (rerun, it resumes
    too)."""
    if spec.finetune is not None:
        sets = [arg for item in spec.finetune.overrides for arg in ("--set", item)]
        return [str(folder / "runs" / spec.finetune.source), "--data", spec.finetune.data,
                "--out", str(folder / spec.run_dir), *sets]
    arguments = [str(folder / spec.config_path), "--out", str(folder / spec.run_dir)]
    if spec.branch is not None:
        arguments += ["--branch-from", str(folder / "runs" / spec.branch.source),
                      "--branch-step", str(spec.branch.step)]
    return arguments + ["--resume"]
