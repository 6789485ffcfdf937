"""A folder of training runs, below the study and the sparsity sweep: what to train, how, and
what happened.

A study or a sweep plans a list of ``RunSpec`` (a name and a resolved config), writes each
config under ``configs/``, and hands the unfinished ones to ``execute_plan`` with a launcher:

    spec.py       RunSpec, the config files of a plan
    records.py    completion (summary.json says "complete"), failures.json, the file checks
                  a report relies on
    execute.py    execute_plan: train what is not complete through a launcher, record outcomes
    launchers/    local processes, a Ray cluster, SLURM through submitit, or printed commands
    data.py       the tokenizer and token cache every run of a plan shares, prepared once

Every launcher trains a run the same way, ``moelab train CONFIG --out RUN --resume``: rerun,
it continues a torn run from its checkpoint and returns at once for a finished one, so a
retried, requeued or preempted run ends identical to an uninterrupted one.
"""

from moelab.runs.execute import RunOutcome, execute_plan
from moelab.runs.records import has_checkpoint, is_complete, read_failures
from moelab.runs.spec import RunSpec, write_run_configs

__all__ = ["RunOutcome", "RunSpec", "execute_plan", "has_checkpoint", "is_complete",
           "read_failures", "write_run_configs"]
