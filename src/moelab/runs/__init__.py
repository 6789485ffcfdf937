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
"""

from moelab.runs.execute import RunOutcome, execute_plan, submit_plan
from moelab.runs.completion import has_checkpoint, is_complete, read_failures
from moelab.runs.spec import RunSpec, write_run_configs
from moelab.runs.training import train_planned_run

__all__ = ["RunOutcome", "RunSpec", "execute_plan", "has_checkpoint", "is_complete",
           "read_failures", "submit_plan", "train_planned_run", "write_run_configs"]
