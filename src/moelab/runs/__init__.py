"""A folder of training runs, below the study and the sparsity sweep: what to train, how, and
what happened.

A study or a sweep plans a list of ``RunSpec`` (a name and a resolved config), writes each
config under ``configs/``, and hands the unfinished ones to ``execute_plan`` with a launcher:

    spec.py       RunSpec, the config files of a plan
    completion.py completion (summary.json says "complete"), failures.json, the file checks
                  a report relies on
    execute.py    execute_plan: train what is not complete through a launcher, record outcomes;
                  submit_plan: submit it and return (a detached SLURM array)
    training.py   train_planned_run: the one way a planned run trains, whatever the launcher
                  (a branch from its source's checkpoint, a finetune from its final weights)
    failures.py   the one line failures.json records for a failed run
    launchers/    local processes, a Ray cluster, SLURM through submitit, or printed commands
    data.py       the tokenizer and token cache every run of a plan shares, prepared once

Every launcher trains a run the same way, as ``moelab train CONFIG --out RUN --resume`` would:
rerun, it continues a torn run from its checkpoint and returns at once for a finished one, so
a retried, requeued or preempted run ends identical to an uninterrupted one.

The names below load their module (and with it torch) when first used (``__getattr__``), not
when the package is imported: ``moelab.runs.tokens``, which the command line parses budgets
with, must import without torch (docs/architecture.md, cli).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # imported on first use, below
    from moelab.runs.completion import has_checkpoint, is_complete, read_failures, runs_left
    from moelab.runs.execute import RunOutcome, execute_plan, submit_plan
    from moelab.runs.spec import RunSpec, write_run_configs
    from moelab.runs.training import train_planned_run

_MODULE_OF = {"RunOutcome": "execute", "execute_plan": "execute", "submit_plan": "execute",
              "has_checkpoint": "completion", "is_complete": "completion",
              "read_failures": "completion", "runs_left": "completion", "RunSpec": "spec",
              "write_run_configs": "spec", "train_planned_run": "training"}

__all__ = ["RunOutcome", "RunSpec", "execute_plan", "has_checkpoint", "is_complete",
           "read_failures", "runs_left", "submit_plan", "train_planned_run", "write_run_configs"]


def __getattr__(name: str) -> Any:
    if name in _MODULE_OF:
        return getattr(importlib.import_module(f"moelab.runs.{_MODULE_OF[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
