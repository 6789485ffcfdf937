"""The study commands as library functions: plan, train what is missing, write the outputs."""

from __future__ import annotations

from pathlib import Path
from typing import Callable, Optional

from moelab.config import Config
from moelab.errors import MoelabError
from moelab.runs import RunSpec, execute_plan, is_complete, submit_plan
from moelab.runs.data import prepare_shared_data
from moelab.runs.launchers.commands import train_commands
from moelab.runs.launchers.local import LocalLauncher
from moelab.runs.spec import shown_in_wandb
from moelab.runs.training import TrainFn
from moelab.study.arms import Arm, ladder_arms, study_arms
from moelab.study.plan import check_study_files, plan_runs, write_plan
from moelab.study.report import write_outputs
from moelab.study.results import StudyResults
from moelab.study.settings import StudySettings


def plan(kind: str, config: Config, settings: StudySettings) -> tuple[list[Arm], list[RunSpec]]:
    """The arms (dense-vs-MoE, or the routing ladder) and every run of them."""
    arms = ladder_arms(config) if kind == "ablation" else study_arms(
        config, settings.criteria, settings.match_step)
    tokens_per_step = config.train.batch_size * config.model.max_seq_len  # the same for every arm
    for budget in settings.budgets:
        if budget < tokens_per_step:
            raise MoelabError(
                f"token budget {budget} is invalid: less than one step of batch_size x "
                f"max_seq_len = {tokens_per_step} tokens (every run of it would fail)")
    return arms, plan_runs(arms, settings.seed_list(config.train.seed), settings.budgets)


def write_study_plan(kind: str, config: Config, settings: StudySettings,
                     study_dir: Path) -> list[RunSpec]:
    config = settings.apply_to(config)  # what every arm takes from the study (eval_tasks)
    arms, specs = plan(kind, config, settings)
    specs = shown_in_wandb(specs, group=study_dir.resolve().name, tags=[kind])
    recorded = settings.to_dict()
    if kind == "ablation":
        recorded.pop("criteria")
    write_plan(study_dir, kind, config, recorded, arms, specs)
    return specs


def list_runs(kind: str, config: Config, settings: StudySettings, study_dir: Path) -> list[str]:
    """Write the plan and return one ``moelab train`` command per run not yet complete."""
    specs = write_study_plan(kind, config, settings, study_dir)
    todo = [spec for spec in specs if not is_complete(study_dir / spec.run_dir)]
    return train_commands(study_dir, todo)


def run_study(kind: str, config: Config, settings: StudySettings, study_dir: Path, *,
              launcher=None, train_fn: Optional[TrainFn] = None,
              log: Callable[[str], None] = print, jobs: int = 1) -> StudyResults:
    """Plan, train every run that is not complete (with ``launcher``; default: this machine,
    ``jobs`` at a time, ``train_fn`` in this process), then write results and report."""
    study_dir = Path(study_dir)
    specs = write_study_plan(kind, config, settings, study_dir)
    if launcher is None:
        launcher = LocalLauncher(jobs=jobs, train_fn=train_fn)
    if any(not is_complete(study_dir / spec.run_dir) for spec in specs):
        prepare_shared_data(config, log)
    outcomes = execute_plan(study_dir, specs, launcher, log)
    failed = [outcome for outcome in outcomes if outcome.status == "failed"]
    if failed and len(failed) == len(outcomes):  # else the report would say "not a study folder"
        raise MoelabError(f"every run of the study failed ({len(failed)}; the first: "
                          f"{failed[0].spec.name}: {failed[0].error}); see "
                          f"{study_dir / 'failures.json'}")
    check_study_files(study_dir)
    return write_outputs(study_dir)


def submit_study(kind: str, config: Config, settings: StudySettings, study_dir: Path, launcher,
                 log: Callable[[str], None] = print) -> Optional[str]:
    """Plan, then submit every run that is not complete and return at once (``--detach``):
    the job id, or None when there is nothing to train. ``moelab report`` writes the results
    once the runs are done."""
    study_dir = Path(study_dir)
    specs = write_study_plan(kind, config, settings, study_dir)
    if any(not is_complete(study_dir / spec.run_dir) for spec in specs):
        prepare_shared_data(config, log)  # once, here: not raced by the array's tasks
    return submit_plan(study_dir, specs, launcher, log)
