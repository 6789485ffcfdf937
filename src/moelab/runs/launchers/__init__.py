"""Launchers: how the unfinished runs of a plan get trained.

Every launcher has ``describe() -> str`` (for the log) and ``launch(folder, specs, record,
log)``, which trains each spec and calls ``record(RunOutcome)`` once per run, on the calling
thread, as runs finish. Each trains a run through ``moelab.runs.training.train_planned_run``
(as ``moelab train CONFIG --out RUN --resume`` would), so launchers differ in where runs
train, never in what they compute:

    local     this machine: in this process, or N child processes (pinned one per GPU slot),
              which die with the parent
    ray       one Ray task per run on a Ray cluster (an existing one, or a local one)
    slurm     a SLURM job array through submitit, requeued on preemption
    commands  train nothing: print one resumable ``moelab train`` command per run
              (``--list-runs``)
"""

LAUNCHERS = ("local", "ray", "slurm", "commands")
