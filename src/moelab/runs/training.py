"""The one way a planned run trains, whatever the launcher: ``train_planned_run``.

In this process, in a local child process, in a Ray task or in a SLURM job, a run of a plan
trains as ``moelab train CONFIG --out RUN --resume`` would: rerun, it continues a torn run
from its checkpoint and returns at once for a finished one, so a retried, requeued or
preempted run ends identical to an uninterrupted one. The spec travels as it is (a picklable
dataclass holding the typed config): nothing is parsed again on the way.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Optional

import torch

from moelab.runs.spec import RunSpec
from moelab.train.branch import branch_run
from moelab.train.finetune import finetune
from moelab.train.loop import train
from moelab.train.run_summary import RunSummary

TrainFn = Callable[..., Optional[RunSummary]]
"""``train_fn(config, run_dir, resume=True)``: ``moelab.train.train``, or a stand-in of it."""


def train_planned_run(folder: Path, spec: RunSpec, threads: Optional[int] = None,
                      train_fn: Optional[TrainFn] = None) -> Optional[RunSummary]:
    """Train (or continue, or return at once if complete) the run ``spec`` of the plan in
    ``folder``, with ``threads`` torch threads (None: this process's); returns its summary.
    A branch starts from its source run's kept checkpoint (``moelab.train.branch_run``);
    a finetune trains as ``moelab finetune SOURCE --data D --out RUN --set ...`` would
    (``moelab.train.finetune``); ``train_fn`` (default ``moelab.train.train``) trains the
    others."""
    if threads is not None:
        torch.set_num_threads(threads)  # losses depend on the thread count: set it, always
    run_dir = folder / spec.run_dir
    if spec.finetune is not None:
        return finetune(folder / "runs" / spec.finetune.source, spec.finetune.data, run_dir,
                        list(spec.finetune.overrides)).run
    if spec.branch is not None:
        return branch_run(folder / "runs" / spec.branch.source, spec.branch.step, spec.config,
                          run_dir)
    return (train_fn or train)(spec.config, run_dir, resume=True)

