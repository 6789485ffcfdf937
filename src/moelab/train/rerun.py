"""``moelab rerun``: train a stored run again from its own config.yaml and say whether it gives
the same numbers bit for bit; else by how much each evaluation moved, and what differs between
the two machines (their summaries' ``Machine`` records, moelab.numerics).

The rerun uses the numerics and the torch threads the stored run recorded: a run from before
moelab recorded its machine was trained with the machine's own kernels (``native``), and its
threads are its summary's ``torch_threads``.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Optional, cast

import torch

from moelab.config.schema import Numerics
from moelab.errors import MoelabError
from moelab.numerics import NUMERICS_MODES, Machine
from moelab.train.loop import train
from moelab.train.run_folder import RunFolder
from moelab.train.run_summary import RunSummary

LOSS_KINDS = {"train": "loss", "eval": "val_loss"}
"""The metrics events compared, and the loss each carries."""


@dataclass
class EvalDifference:
    step: int
    stored: float
    rerun: float

    @property
    def difference(self) -> float:
        return self.rerun - self.stored


@dataclass
class RerunComparison:
    stored: Path
    rerun: Path
    identical: bool
    """Every train and validation loss equal, bit for bit."""
    evals: list[EvalDifference] = field(default_factory=list)
    machine_differences: list[str] = field(default_factory=list)
    """'name: stored vs rerun' per field of the machine records that differs; one line saying
    so when the stored run has no record."""


def rerun(run_dir: str | Path, out_dir: str | Path) -> RerunComparison:
    """Train ``run_dir``'s config into ``out_dir`` (which must not exist) and compare."""
    stored = RunFolder(run_dir)
    config = stored.read_config()
    summary = stored.summary()
    if summary is None or summary.status != "complete":
        raise MoelabError(f"{stored.path} is not a finished run: it has no complete summary.json")
    if Path(out_dir).exists():
        raise MoelabError(f"--out {out_dir} exists: give a folder that does not exist yet")
    machine = summary.machine
    numerics = machine.numerics if machine else "native"
    if numerics not in NUMERICS_MODES:
        raise MoelabError(f"{stored.summary_path} is corrupt (machine.numerics="
                          f"{numerics!r} is not one of {', '.join(NUMERICS_MODES)})")
    threads = machine.threads if machine else summary.torch_threads
    config = replace(config, train=replace(config.train, numerics=cast(Numerics, numerics)))
    if threads:
        torch.set_num_threads(threads)
    new_summary = train(config, out_dir)
    assert new_summary is not None  # a rerun is one process, never a DDP rank
    return compare(stored.path, Path(out_dir), summary, new_summary)


def compare(stored_dir: Path, rerun_dir: Path, stored: RunSummary,
            rerun_summary: RunSummary) -> RerunComparison:
    old, new = _losses(RunFolder(stored_dir)), _losses(RunFolder(rerun_dir))
    evals = [EvalDifference(step, old[("eval", step)], new[("eval", step)])
             for kind, step in old if kind == "eval" and ("eval", step) in new]
    return RerunComparison(stored=stored_dir, rerun=rerun_dir, identical=old == new,
                           evals=evals,
                           machine_differences=_machine_differences(stored.machine,
                                                                    rerun_summary.machine))


def _losses(run: RunFolder) -> dict[tuple[str, int], float]:
    return {(event["kind"], event["step"]): event[LOSS_KINDS[event["kind"]]]
            for event in run.read_metrics() if event.get("kind") in LOSS_KINDS}


def _machine_differences(stored: Optional[Machine], rerun_machine: Optional[Machine]) -> list[str]:
    if stored is None:
        return ["the stored run records no machine (trained before moelab recorded it)"]
    return stored.differences(rerun_machine) if rerun_machine else []
