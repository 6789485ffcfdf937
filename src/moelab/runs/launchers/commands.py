"""The commands launcher: print, for another scheduler or several GPUs, one resumable
``moelab train`` command per unfinished run (``--list-runs``)."""

from __future__ import annotations

import shlex
from pathlib import Path

from moelab.runs.launchers import train_arguments
from moelab.runs.spec import RunSpec


def train_commands(folder: Path, specs: list[RunSpec]) -> list[str]:
    """One ``moelab train ... --resume`` command per run, the runs others branch from first.

    With ``--resume`` a command can simply be rerun: after a preemption it continues its run,
    after completion it returns at once, and a first start it begins afresh. A branch's
    command (``--branch-from``) needs its source run finished first."""
    ordered = [spec for spec in specs if spec.branch is None] + [
        spec for spec in specs if spec.branch is not None]
    return [" ".join(["moelab", "train", *map(shlex.quote, train_arguments(folder, spec))])
            for spec in ordered]
