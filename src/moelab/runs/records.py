"""What a plan's folder records about its runs: which are complete, which failed and why, and
whether the files a report is built from can be read."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from moelab.errors import MoelabError
from moelab.fileio import atomic_write_json
from moelab.train.checkpoint import latest_checkpoint
from moelab.train.run_folder import RunFolder
from moelab.train.summary import is_finite_number


def is_complete(run_dir: Path) -> bool:
    """Whether the run in ``run_dir`` finished: its summary.json says ``"status": "complete"``."""
    return RunFolder(run_dir).is_complete()


def has_checkpoint(run_dir: Path) -> bool:
    """Whether a torn run left a complete checkpoint to resume from (a corrupt one: no)."""
    try:
        return latest_checkpoint(run_dir / "checkpoints") is not None
    except MoelabError:
        return False


def read_failures(folder: Path) -> dict[str, str]:
    """failures.json: run name -> the one-line error of its last failed attempt."""
    try:
        return dict(json.loads((folder / "failures.json").read_text("utf-8")))
    except (OSError, ValueError, TypeError):
        return {}


def write_failures(folder: Path, failures: dict[str, str]) -> None:
    atomic_write_json(folder / "failures.json", failures)


# --------------------------------------------------------------------------------------------
# The files a report is built from
# --------------------------------------------------------------------------------------------

def check_run_files(runs_root: Path) -> None:
    """Refuse, on one line naming the file, what a report would choke on: in every complete run
    under ``runs_root`` a summary number that is not a finite number, a metrics.jsonl without
    evals or logging a step twice, an unreadable config.yaml. A hand edit or a copy gone wrong,
    never anything training writes."""
    if not runs_root.is_dir():
        return
    for summary_path in sorted(runs_root.rglob("summary.json")):
        run = RunFolder(summary_path.parent)
        if run.is_complete():
            problem = _summary_problem(run)
            if problem:  # resuming a run without summary.json writes it again, no step trained
                raise MoelabError(f"{problem}: delete it and resume the run (moelab train CONFIG "
                                  f"--out {run.path} --resume) to write it again")
            problem = _metrics_problem(run) or _config_problem(run)
            if problem:
                raise MoelabError(f"{problem}: delete {run.path} to train the run again")


def _summary_problem(run: RunFolder) -> str:
    try:
        run.summary()
    except MoelabError as exc:
        return str(exc)
    return ""


def _config_problem(run: RunFolder) -> str:
    try:
        config = yaml.safe_load(run.config_path.read_text("utf-8"))
    except (OSError, ValueError, yaml.YAMLError) as exc:  # UnicodeDecodeError is a ValueError
        detail = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        return f"{run.config_path} cannot be read ({detail})"
    if not isinstance(config, dict):
        return f"{run.config_path} is corrupt (not a mapping)"
    return ""


def _metrics_problem(run: RunFolder) -> str:
    path = run.metrics_path
    try:
        lines = path.read_text("utf-8").splitlines() if path.is_file() else []
    except (OSError, UnicodeDecodeError) as exc:
        return f"{path} cannot be read ({exc})"
    eval_steps = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            event = json.loads(line)
        except ValueError:
            return f"{path} line {number} is not valid JSON"
        if not isinstance(event, dict):
            return f"{path} line {number} is not a JSON object"
        if event.get("kind") != "eval":
            continue
        step, loss = event.get("step"), event.get("val_loss")
        if not isinstance(step, int) or isinstance(step, bool) or not is_finite_number(loss):
            return f"{path} line {number}: an eval without a whole step and a finite val_loss"
        if eval_steps and step <= eval_steps[-1]:
            return f"{path} line {number} logs eval step {step} again (or out of order)"
        eval_steps.append(step)
    if not eval_steps:
        return f"{path} of a complete run has no eval events"
    return ""
