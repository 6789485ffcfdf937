"""Train every run of a plan that is not complete, through a launcher, and record each outcome.

A failing run is recorded in failures.json (its one-line error, ``moelab.runs.failures``) and
the others still run; a run that later completes is removed from it. Bookkeeping happens on the
calling thread only: launchers report each finished run through one callback.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from moelab.errors import MoelabError
from moelab.runs.completion import is_complete, read_failures, runs_left, write_failures
from moelab.runs.spec import RunSpec
from moelab.train.run_folder import RunFolder
from moelab.train.run_summary import RunSummary

Log = Callable[[str], None]


@dataclass
class RunOutcome:
    spec: RunSpec
    status: str
    """'skipped' (already complete), 'complete' (trained now) or 'failed'."""
    seconds: float = 0.0
    error: str = ""
    summary: Optional[RunSummary] = None

    @classmethod
    def completed(cls, spec: RunSpec, seconds: float, run_dir: Path) -> RunOutcome:
        """A run trained to its end, with the summary its folder holds: the one every report
        reads, whichever process or machine wrote it."""
        return cls(spec, "complete", seconds, summary=RunFolder(run_dir).summary())


def execute_plan(folder: Path, specs: list[RunSpec], launcher, log: Log = print) -> list[RunOutcome]:
    """Train, with ``launcher`` (see ``moelab.runs.launchers``), every run not yet complete;
    returns one outcome per spec."""
    failures = read_failures(folder)
    outcomes: list[RunOutcome] = []
    todo = runs_left(folder, specs)
    log(f"{len(specs)} runs planned, {len(specs) - len(todo)} already complete, {len(todo)} to "
        f"train" + (f", {launcher.describe()}" if todo else ""))
    started = time.perf_counter()

    def record(outcome: RunOutcome) -> None:
        outcomes.append(outcome)
        if outcome.status == "failed":
            failures[outcome.spec.name] = outcome.error
            log(f"  {outcome.spec.name}: FAILED ({outcome.error})")
        else:
            failures.pop(outcome.spec.name, None)
            log(f"  {outcome.spec.name}: done, {_best_text(outcome.summary)}{outcome.seconds:.0f} s")
        write_failures(folder, failures)
        done, elapsed = len(outcomes), time.perf_counter() - started
        remaining = elapsed / done * (len(todo) - done)
        log(f"  runs: {done}/{len(todo)} done in {elapsed:.0f} s, about {remaining:.0f} s left")

    # Runs from scratch first, then the branches whose source finished (a wsd budget family),
    # then the finetunes of finished runs.
    for wave in ([spec for spec in todo if spec.source is None],
                 [spec for spec in todo if spec.branch is not None],
                 [spec for spec in todo if spec.finetune is not None]):
        ready: list[RunSpec] = []
        orphaned: list[RunSpec] = []
        for spec in wave:
            (ready if _source_complete(folder, spec) else orphaned).append(spec)
        for spec in orphaned:
            record(RunOutcome(spec, "failed", error=f"its source run {spec.source} is "
                              "not complete: it failed or was not trained"))
        if ready:
            launcher.launch(folder, ready, record, log)
    finished = {outcome.spec.name for outcome in outcomes}
    return outcomes + [RunOutcome(spec, "skipped") for spec in specs if spec.name not in finished]


def submit_plan(folder: Path, specs: list[RunSpec], launcher, log: Log = print) -> Optional[str]:
    """Submit every run not yet complete through a launcher that can leave them training
    (``launcher.submit``, the SLURM one) and return at once: the job id, or None when every
    run is complete. Nothing is recorded here: the run folders tell later what happened."""
    todo = runs_left(folder, specs)
    log(f"{len(specs)} runs planned, {len(specs) - len(todo)} already complete, {len(todo)} to "
        f"submit" + (f", {launcher.describe()}" if todo else ""))
    waiting = [spec for spec in todo if spec.source is not None]
    if waiting:  # a branch or finetune may start only once its source finished: someone must wait
        how = "branches from" if waiting[0].branch is not None else "fine-tunes"
        raise MoelabError(f"--detach cannot submit {waiting[0].name}: it {how} "
                          f"{waiting[0].source}, which must finish first; run without "
                          "--detach (the command then waits for the runs)")
    return launcher.submit(folder, todo) if todo else None


def _source_complete(folder: Path, spec: RunSpec) -> bool:
    return spec.source is None or is_complete(folder / "runs" / spec.source)


def _best_text(summary: Optional[RunSummary]) -> str:
    best = None if summary is None else summary.best_val_loss
    return f"best val loss {best:.4f}, " if best is not None else ""
