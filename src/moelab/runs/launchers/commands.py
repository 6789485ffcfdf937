"""The commands launcher: print, for another scheduler or several GPUs, one resumable
``moelab train`` command per unfinished run (``--list-runs``)."""

from __future__ import annotations

import shlex
from pathlib import Path

from moelab.runs.spec import RunSpec


def train_commands(folder: Path, specs: list[RunSpec]) -> list[str]:
    """One ``moelab train ... --resume`` command per run.

    With ``--resume`` a command can simply be rerun: after a preemption it continues its run,
    after completion it returns at once, and a first start it begins afresh."""
    return [
        "moelab train {} --out {} --resume".format(
            shlex.quote(str(folder / spec.config_path)), shlex.quote(str(folder / spec.run_dir)))
        for spec in specs
    ]
