"""The complete run folders of a study, read back: what every result is computed from.

``find_runs`` reads every complete run under ``DIR/runs`` (its ``summary.json`` as a
``RunSummary``, the eval lines of ``metrics.jsonl``, its ``config.yaml`` as a ``Config`` and,
when the run scored zero-shot tasks (``train.eval_tasks``), its ``tasks.json``); ``read_plan``
reads ``plan.json`` (arm descriptions and the runs that are missing).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from moelab.fileio import read_json
from moelab.config import Config
from moelab.errors import ConfigError, MoelabError
from moelab.runs import is_complete
from moelab.runs.tokens import parse_token_count
from moelab.study.plan import run_name
from moelab.tasks import read_run_tasks
from moelab.train.events import read_events
from moelab.train.run_folder import RunFolder
from moelab.train.run_summary import RunSummary

_SEED_FOLDER = re.compile(r"^seed(\d+)$")


@dataclass
class RunRecord:
    """One complete run folder, read back."""

    arm: str
    seed: int
    budget: Optional[int]
    run_dir: Path
    """Relative to the study folder, so a moved folder reports the same."""
    summary: RunSummary
    evals: list[dict] = field(default_factory=list)
    """The ``"kind": "eval"`` lines of metrics.jsonl, as logged."""
    config: Optional[Config] = None
    """The run's config.yaml (always read from a run folder)."""
    tasks: dict = field(default_factory=dict)
    """Task name -> its entry in the run's tasks.json; {} when the run scored none."""

    @property
    def name(self) -> str:
        return run_name(self.arm, self.seed, self.budget)


def find_runs(study_dir: Path) -> list[RunRecord]:
    """Every complete run under ``DIR/runs/[<budget>/]<arm>/seed<k>/``."""
    records = []
    runs_root = study_dir / "runs"
    for summary_path in sorted(runs_root.rglob("summary.json")):
        run_dir = summary_path.parent
        parts = run_dir.relative_to(runs_root).parts
        match = _SEED_FOLDER.match(parts[-1])
        if len(parts) not in (2, 3) or not match or not is_complete(run_dir):
            continue
        budget = parse_token_count(parts[0]) if len(parts) == 3 else None
        records.append(read_run(study_dir, run_dir, parts[-2], int(match.group(1)), budget))
    return records


def read_run(study_dir: Path, run_dir: Path, arm: str, seed: int,
             budget: Optional[int]) -> RunRecord:
    """The run folder ``run_dir`` of ``arm``'s ``seed`` (at ``budget``), read back."""
    folder = RunFolder(run_dir)
    return RunRecord(arm, seed, budget, run_dir.relative_to(study_dir), folder.summary(),
                     read_evals(folder.metrics_path), read_run_config(folder),
                     read_run_tasks(run_dir))


def read_run_config(folder: RunFolder) -> Config:
    """The run's config.yaml as a ``Config``; one that no longer loads (hand-edited, or written
    by a moelab with other keys) is a one-line error naming the file."""
    try:
        return folder.read_config()
    except ConfigError as exc:
        raise MoelabError(f"{folder.config_path} does not load as a config ({exc}): restore "
                          f"it from the copy its checkpoints hold "
                          f"({folder.checkpoints_dir}/step_*/config.yaml)") from None


def read_evals(metrics_path: Path) -> list[dict]:
    """The eval lines of a metrics.jsonl ([] without one); a line that is not an event is a
    one-line error (``moelab.train.events``)."""
    return read_events(metrics_path).evals()


def read_plan(study_dir: Path) -> dict:
    """plan.json as written (``moelab.study.plan.write_plan``); {} for a folder without one."""
    path = study_dir / "plan.json"
    return _read_json(path) if path.is_file() else {}


def _read_json(path: Path) -> Any:
    try:
        return read_json(path)
    except ValueError:
        raise MoelabError(f"{path} is not valid JSON") from None
