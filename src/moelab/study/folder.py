"""A study folder, read once: what every result, figure and report section is computed from.

``StudyFolder.read(DIR)`` is called where a command starts (``moelab study``, ``moelab report``,
``moelab pool``) and the folder object is passed down: nothing below a command reads the folder
again. It holds every complete run under ``DIR/runs`` (``CompleteRun``: its ``summary.json`` as
a ``RunSummary``, the eval lines of ``metrics.jsonl``, its ``config.yaml`` as a ``Config`` and,
when the run scored zero-shot tasks (``train.eval_tasks``), its ``tasks.json``), ``plan.json``
(the arms' order, the runs planned, the ``--tune-lr`` and ``--until-resolved`` records),
``failures.json`` and, under ``--tune-lr``, each arm's lr choice read from the selection runs.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from moelab.config import Config
from moelab.errors import ConfigError, MoelabError
from moelab.fileio import read_json
from moelab.runs import is_complete, read_failures
from moelab.runs.lr_grid import LrChoice, read_choices
from moelab.runs.tokens import parse_token_count
from moelab.study.plan import run_name
from moelab.study.tuning import RECORD_KEY as LR_SELECTION_KEY
from moelab.tasks import read_run_tasks
from moelab.train.events import read_events
from moelab.train.run_folder import RunFolder
from moelab.train.run_summary import RunSummary

_SEED_FOLDER = re.compile(r"^seed(\d+)$")


@dataclass
class CompleteRun:
    """One complete run folder of a study, read back."""

    arm: str
    seed: int
    budget: Optional[int]
    run_dir: Path
    """Relative to the study folder, so a moved folder reports the same."""
    summary: RunSummary
    evals: list[dict] = field(default_factory=list)
    """The ``"kind": "eval"`` lines of metrics.jsonl, as logged."""
    config: Config = field(default_factory=Config)
    """The run's config.yaml (always read from a run folder)."""
    tasks: dict = field(default_factory=dict)
    """Task name -> its entry in the run's tasks.json; {} when the run scored none."""

    @property
    def name(self) -> str:
        return run_name(self.arm, self.seed, self.budget)


@dataclass
class StudyFolder:
    """Everything of a study folder that its results and report are computed from."""

    root: Path
    runs: list[CompleteRun]
    """Every complete run, in the order of their folders' paths."""
    plan: dict = field(default_factory=dict)
    """plan.json as written (``moelab.study.plan.write_plan``); {} for a folder without one."""
    failures: dict[str, str] = field(default_factory=dict)
    """Run name -> the error its last attempt raised (failures.json)."""
    lr_choices: Optional[dict[str, LrChoice]] = None
    """Under ``--tune-lr``: each arm's lr, chosen from its selection runs; None otherwise."""

    @classmethod
    def read(cls, root: Path, purpose: str = "report") -> StudyFolder:
        """The study folder ``root``; a one-line error when it has no runs/ folder or no complete
        run (nothing to ``purpose``)."""
        root = Path(root)
        if not (root / "runs").is_dir():
            raise MoelabError(f"{root} is not a study folder: it has no runs/ folder")
        runs = read_complete_runs(root)
        if not runs:
            raise MoelabError(f"{root} has no complete runs yet: nothing to {purpose}")
        plan = read_plan(root)
        selection = plan.get(LR_SELECTION_KEY)
        return cls(root, runs, plan, read_failures(root),
                   read_choices(root, selection) if selection else None)

    @property
    def name(self) -> str:
        """The study folder's name, as results.json and the report's title give it."""
        return self.root.resolve().name

    @property
    def kind(self) -> Optional[str]:
        """'study' or 'ablation', as planned; None for a folder without a plan."""
        return self.plan.get("kind")

    @property
    def planned_arms(self) -> list[str]:
        """The arms in the plan's order."""
        return [arm["name"] for arm in self.plan.get("arms", [])]

    @property
    def planned_runs(self) -> list[str]:
        """Every planned run's name."""
        return [run["name"] for run in self.plan.get("runs", [])]


def read_complete_runs(study_dir: Path) -> list[CompleteRun]:
    """Every complete run under ``DIR/runs/[<budget>/]<arm>/seed<k>/``."""
    runs = []
    runs_root = study_dir / "runs"
    for summary_path in sorted(runs_root.rglob("summary.json")):
        run_dir = summary_path.parent
        parts = run_dir.relative_to(runs_root).parts
        match = _SEED_FOLDER.match(parts[-1])
        if len(parts) not in (2, 3) or not match or not is_complete(run_dir):
            continue
        budget = parse_token_count(parts[0]) if len(parts) == 3 else None
        runs.append(read_run(study_dir, run_dir, parts[-2], int(match.group(1)), budget))
    return runs


def read_run(study_dir: Path, run_dir: Path, arm: str, seed: int,
             budget: Optional[int]) -> CompleteRun:
    """The complete run folder ``run_dir`` of ``arm``'s ``seed`` (at ``budget``), read back."""
    folder = RunFolder(run_dir)
    summary = folder.summary()
    if summary is None:  # is_complete said it has one: only a folder changed meanwhile lacks it
        raise MoelabError(f"{folder.path / 'summary.json'} disappeared while the study was read")
    return CompleteRun(arm, seed, budget, run_dir.relative_to(study_dir), summary,
                       read_events(folder.metrics_path).evals(), read_run_config(folder),
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


def read_plan(study_dir: Path) -> dict:
    """plan.json as written (``moelab.study.plan.write_plan``); {} for a folder without one."""
    path = study_dir / "plan.json"
    if not path.is_file():
        return {}
    try:
        record: Any = read_json(path)
    except ValueError:
        raise MoelabError(f"{path} is not valid JSON") from None
    return record


def check_recorded_runs(study_dir: Path) -> None:
    """Refuse to rebuild a study whose results.json reports runs that are no longer complete in
    their folders (a results folder kept without runs/, runs deleted since): the rebuilt
    report would drop them, and nothing could bring their numbers back."""
    study_dir = Path(study_dir)
    results_path = study_dir / "results.json"
    if not results_path.is_file():
        return
    try:
        recorded = _run_dirs(read_json(results_path))
    except (OSError, ValueError):
        return  # unreadable: nothing there to lose, the rebuild writes it again
    absent = sorted({d for d in recorded if not is_complete(study_dir / d)})
    if absent:
        raise MoelabError(
            f"{results_path} reports {len(absent)} runs whose folders are missing or incomplete "
            f"({', '.join(absent[:3])}{', ...' if len(absent) > 3 else ''}): restore them to "
            "rebuild the report; results.json, results.csv, report.md and figures/ are left as "
            "they are")


def _run_dirs(record: Any) -> list[str]:
    """Every ``run_dir`` a results.json names, at any depth (arms, budgets)."""
    if isinstance(record, dict):
        found = [record["run_dir"]] if isinstance(record.get("run_dir"), str) else []
        return found + [d for value in record.values() for d in _run_dirs(value)]
    if isinstance(record, list):
        return [d for value in record for d in _run_dirs(value)]
    return []
