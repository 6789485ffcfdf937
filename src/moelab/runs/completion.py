"""What a plan's folder records about its runs: which are complete, which failed and why, and
whether the files a report is built from can be read."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import yaml

from moelab.config import read_yaml, yaml_problem
from moelab.errors import MoelabError, short_repr, warn
from moelab.fileio import atomic_write_json, read_json
from moelab.train.checkpoint import latest_checkpoint
from moelab.train.events import read_events
from moelab.train.run_folder import RunFolder
from moelab.train.run_summary import is_finite_number

if TYPE_CHECKING:
    from moelab.runs.spec import RunSpec


def is_complete(run_dir: Path) -> bool:
    """Whether the run in ``run_dir`` finished: its summary.json says ``"status": "complete"``."""
    return RunFolder(run_dir).is_complete()


def runs_left(folder: Path, specs: list[RunSpec]) -> list[RunSpec]:
    """The planned runs not yet complete in ``folder``: what running the plan trains, and what
    its dry run prices."""
    return [spec for spec in specs if not is_complete(folder / spec.run_dir)]


def has_checkpoint(run_dir: Path) -> bool:
    """Whether a torn run left a complete checkpoint to resume from (a corrupt one: no)."""
    try:
        return latest_checkpoint(run_dir / "checkpoints") is not None
    except MoelabError:
        return False


def read_failures(folder: Path) -> dict[str, str]:
    """failures.json: run name -> the one-line error of its last failed attempt."""
    try:
        return dict(read_json(folder / "failures.json"))
    except (OSError, ValueError, TypeError):
        return {}


def write_failures(folder: Path, failures: dict[str, str]) -> None:
    atomic_write_json(folder / "failures.json", failures)


# --------------------------------------------------------------------------------------------
# The files a report is built from
# --------------------------------------------------------------------------------------------

def check_run_files(runs_root: Path) -> None:
    """Refuse, on one line naming the file, what a report would choke on: any summary.json under
    ``runs_root`` that is not a JSON object; in every complete run a summary number that is not
    a finite number, a negative loss or none at all (a run without its best_val_loss would drop
    out of the statistics unseen), a metrics.jsonl line that
    is not an event (``moelab.train.events``), without evals or logging a step twice, an
    unreadable config.yaml. A hand edit or a copy gone wrong, never anything training writes;
    a complete run is never to be deleted for it. A torn last metrics line (a copy cut short)
    is skipped with a warning naming the file."""
    if not runs_root.is_dir():
        return
    for summary_path in sorted(runs_root.rglob("summary.json")):
        run = RunFolder(summary_path.parent)
        run.read_summary()  # a summary that is not a JSON object is corrupt, not "incomplete"
        if run.is_complete():
            problem = _summary_problem(run)
            if problem:  # resuming a run without summary.json writes it again, no step trained
                raise MoelabError(f"{problem}: delete it and resume the run (moelab train CONFIG "
                                  f"--out {run.path} --resume) to write it again")
            problem = _metrics_problem(run)
            if problem:
                raise MoelabError(problem)
            problem = _config_problem(run)
            if problem:
                raise MoelabError(f"{problem}: restore it from the copy its checkpoints hold "
                                  f"({run.checkpoints_dir}/step_*/config.yaml)")


def _summary_problem(run: RunFolder) -> str:
    try:
        summary = run.summary()
    except MoelabError as exc:
        return str(exc)
    if summary is not None and summary.best_val_loss is None:  # training always writes it
        return f"{run.summary_path} is corrupt (best_val_loss is missing or null)"
    return ""


def _config_problem(run: RunFolder) -> str:
    try:
        config = read_yaml(run.config_path)
    except yaml.YAMLError as exc:
        return f"{run.config_path} cannot be read ({yaml_problem(exc)})"
    except (OSError, ValueError) as exc:  # UnicodeDecodeError is a ValueError
        detail = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        return f"{run.config_path} cannot be read ({detail})"
    if not isinstance(config, dict):
        return f"{run.config_path} is corrupt (not a mapping)"
    return ""


def _metrics_problem(run: RunFolder) -> str:
    """What is wrong with a complete run's metrics.jsonl, with its fix ('' when nothing)."""
    path = run.metrics_path
    try:
        log = read_events(path)
    except MoelabError as exc:
        return str(exc)
    if log.torn_tail:
        warn(f"{path} ends in a torn line (a write cut short); the report skips it")
    eval_steps: list[int] = []
    for event in log.events:
        if event.kind != "eval":
            continue
        if not is_finite_number(event.fields["val_loss"]):
            return (f"{path} line {event.line}: eval val_loss={short_repr(event.fields['val_loss'])}"
                    f" is not a finite number: fix or remove that line")
        if eval_steps and event.step <= eval_steps[-1]:
            return (f"{path} line {event.line} logs eval step {event.step} again (or out of "
                    f"order): remove the repeated line")
        eval_steps.append(event.step)
    if not eval_steps:
        return (f"{path} of a complete run has no eval events: restore the file from a copy "
                f"(the report needs its eval lines)")
    return ""

