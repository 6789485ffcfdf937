"""The study commands as library functions: plan, train what is missing, write the outputs."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Optional

from moelab.codec import to_json
from moelab.config import Config
from moelab.errors import MoelabError
from moelab.fileio import atomic_write_json
from moelab.runs import RunSpec, execute_plan, is_complete, submit_plan
from moelab.runs.data import prepare_shared_data
from moelab.runs.launchers.commands import train_commands
from moelab.runs.launchers.local import LocalLauncher
from moelab.runs.lr_grid import (
    SELECTION_FOLDER, check_disjoint, lr_folder, read_choices, require_choices, run_selection,
)
from moelab.runs.spec import shown_in_wandb
from moelab.runs.training import TrainFn
from moelab.study.arms import Arm, ladder_arms, study_arms
from moelab.study import tuning as tuning_module
from moelab.study.plan import check_same_study, check_study_files, plan_runs, write_plan
from moelab.study.folder import StudyFolder, read_complete_runs, read_plan
from moelab.study.rounds import (
    RECORD_KEY as ROUNDS_KEY, UntilResolved, all_stopped, analyse, check_same_design,
    comparison_keys, sequential_record,
)
from moelab.study.tuning import LrTuning, with_arm_lrs
from moelab.study.report import write_outputs
from moelab.study.results import StudyResults
from moelab.study.settings import StudySettings


def plan(kind: str, config: Config, settings: StudySettings,
         lrs: Optional[dict[str, float]] = None) -> tuple[list[Arm], list[RunSpec]]:
    """The arms (dense-vs-MoE, or the routing ladder) and every run of them; with ``lrs`` (arm
    -> lr, ``--tune-lr``) each arm at its own lr."""
    arms = plan_arms(kind, config, settings)
    if lrs is not None:
        arms = with_arm_lrs(arms, lrs)
    tokens_per_step = config.train.batch_size * config.model.max_seq_len  # the same for every arm
    for budget in settings.budget_list:
        if budget < tokens_per_step:
            raise MoelabError(
                f"token budget {budget} is invalid: less than one step of batch_size x "
                f"max_seq_len = {tokens_per_step} tokens (every run of it would fail)")
    return arms, plan_runs(arms, settings.seed_list(config.train.seed), settings.budget_list)


def planned_configs(kind: str, config: Config, settings: StudySettings) -> list[Config]:
    """The config of every run the study plans (at the base lr: what the data must serve)."""
    _, specs = plan(kind, settings.apply_to(config), settings)
    return [spec.config for spec in specs]


def plan_arms(kind: str, config: Config, settings: StudySettings) -> list[Arm]:
    return ladder_arms(config) if kind == "ablation" else study_arms(
        config, settings.criteria, settings.match_step)


def write_study_plan(kind: str, config: Config, settings: StudySettings, study_dir: Path,
                     lrs: Optional[dict[str, float]] = None,
                     extra: Optional[dict] = None) -> list[RunSpec]:
    config = settings.apply_to(config)  # what every arm takes from the study (eval_tasks)
    arms, specs = plan(kind, config, settings, lrs)
    specs = shown_in_wandb(specs, group=study_dir.resolve().name, tags=[kind])
    recorded = to_json(settings)
    if kind == "ablation":
        recorded.pop("criteria")
    write_plan(study_dir, kind, config, recorded, arms, specs, extra)
    return specs


def check_not_rounds(study_dir: Path) -> None:
    """Refuse a fixed seed count on a folder of ``--until-resolved`` rounds: its plan would drop
    the rounds record, and the report would read every round's seeds as the fixed ones."""
    try:
        plan = read_plan(study_dir)
    except MoelabError:  # a damaged plan.json: the planner names it (check_same_study)
        return
    if isinstance(plan, dict) and plan.get(ROUNDS_KEY):
        raise MoelabError(f"{study_dir} holds --until-resolved rounds: continue it with "
                          "--until-resolved and the same design, or use another --out folder "
                          "for a fixed number of seeds")


def list_runs(kind: str, config: Config, settings: StudySettings, study_dir: Path) -> list[str]:
    """Write the plan and return one ``moelab train`` command per run not yet complete."""
    check_not_rounds(study_dir)
    specs = write_study_plan(kind, config, settings, study_dir)
    todo = [spec for spec in specs if not is_complete(study_dir / spec.run_dir)]
    return train_commands(study_dir, todo)


def run_study(kind: str, config: Config, settings: StudySettings, study_dir: Path, *,
              launcher=None, train_fn: Optional[TrainFn] = None,
              log: Callable[[str], None] = print, jobs: int = 1,
              tuning: Optional[LrTuning] = None,
              until_resolved: Optional[UntilResolved] = None) -> StudyResults:
    """Plan, train every run that is not complete (with ``launcher``; default: this machine,
    ``jobs`` at a time, ``train_fn`` in this process), then write results and report.

    ``tuning`` (``--tune-lr``) first chooses each arm's lr on the selection seeds;
    ``until_resolved`` adds seeds in rounds until every comparison is decided."""
    study_dir = Path(study_dir)
    if launcher is None:
        launcher = LocalLauncher(jobs=jobs, train_fn=train_fn)
    reporting = settings.seed_list(config.train.seed)
    if until_resolved is None:
        check_not_rounds(study_dir)
    else:
        until_resolved.check(settings.seeds)
        reporting = list(range(config.train.seed, config.train.seed + until_resolved.max_seeds))
    lrs, extra = None, {}
    if tuning is not None:
        lrs, extra[tuning_module.RECORD_KEY] = choose_arm_lrs(
            kind, config, settings, study_dir, tuning, reporting, launcher, log)
    if until_resolved is not None:
        return run_rounds(kind, config, settings, study_dir, until_resolved, reporting,
                          launcher, log, lrs, extra)
    specs = write_study_plan(kind, config, settings, study_dir, lrs, extra)
    train_study(config, study_dir, specs, launcher, log)
    check_study_files(study_dir)
    return write_outputs(StudyFolder.read(study_dir))


def train_study(config: Config, study_dir: Path, specs: list[RunSpec], launcher,
                log: Callable[[str], None]) -> None:
    if any(not is_complete(study_dir / spec.run_dir) for spec in specs):
        prepare_shared_data(config, log)
    outcomes = execute_plan(study_dir, specs, launcher, log)
    failed = [outcome for outcome in outcomes if outcome.status == "failed"]
    if failed and len(failed) == len(outcomes):  # else the report would say "not a study folder"
        raise MoelabError(f"every run of the study failed ({len(failed)}; the first: "
                          f"{failed[0].spec.name}: {failed[0].error}); see "
                          f"{study_dir / 'failures.json'}")


def choose_arm_lrs(kind: str, config: Config, settings: StudySettings, study_dir: Path,
                   tuning: LrTuning, reporting: list[int], launcher,
                   log: Callable[[str], None]) -> tuple[dict[str, float], dict]:
    """Train the selection runs (every tuned arm x lr x selection seed) and return each arm's
    lr with plan.json's record of the selection."""
    config = settings.apply_to(config)
    selection_seeds = tuning.seed_list(config.train.seed)
    check_disjoint(selection_seeds, reporting)
    check_same_study(study_dir, kind, config, [])  # before select/ is written into the folder
    specs_by_lr = tuning_module.selection_specs(
        lambda base: plan_arms(kind, base, settings), selection_seeds, tuning, config,
        settings.budget_list)
    tuning_module.check_selection_folders(study_dir, kind, config, specs_by_lr)
    if any(not is_complete(study_dir / SELECTION_FOLDER / lr_folder(lr) / spec.run_dir)
           for lr, specs in specs_by_lr.items() for spec in specs):
        prepare_shared_data(config, log)
    run_selection(study_dir, specs_by_lr, launcher, log)
    record = tuning_module.tuning_record(tuning, selection_seeds, specs_by_lr)
    lrs = require_choices(read_choices(study_dir, record), study_dir)
    log("lr per arm (selection seeds " + ", ".join(map(str, selection_seeds)) + "): "
        + ", ".join(f"{arm} {lr:g}" for arm, lr in lrs.items()))
    return lrs, record


def run_rounds(kind: str, config: Config, settings: StudySettings, study_dir: Path,
               options: UntilResolved, seed_order: list[int], launcher,
               log: Callable[[str], None], lrs: Optional[dict[str, float]],
               extra: dict) -> StudyResults:
    """Round after round: plan the look's seeds, train them, read every comparison's repeated
    interval; stop when each is decided or at the design's last look."""
    keys = comparison_keys(plan_arms_criteria(kind, config, settings), settings.budget_list)
    design = options.design(settings.seeds, len(keys))
    old_plan = read_plan(study_dir) if (study_dir / "plan.json").is_file() else {}
    check_same_design(old_plan, sequential_record(design, seed_order, keys, 0))
    for look, n in enumerate(design.looks):
        extra[ROUNDS_KEY] = to_json(sequential_record(design, seed_order, keys, look))
        round_settings = replace(settings, seeds=seed_order[:n])
        specs = write_study_plan(kind, config, round_settings, study_dir, lrs, extra)
        log(f"round {look + 1} of at most {len(design.looks)}: {n} seeds")
        train_study(config, study_dir, specs, launcher, log)
        record = sequential_record(design, seed_order, keys, look + 1)
        extra[ROUNDS_KEY] = to_json(record)
        plan_record = read_plan(study_dir)
        atomic_write_json(study_dir / "plan.json", {**plan_record, ROUNDS_KEY: extra[ROUNDS_KEY]})
        comparisons = analyse(record, read_complete_runs(study_dir))
        for c in comparisons:
            if c.outcome.stopped_at == look:
                log(f"  {c.criterion}: {c.outcome.reason} at round {look + 1}")
        if all_stopped(comparisons):
            break
    check_study_files(study_dir)
    return write_outputs(StudyFolder.read(study_dir))


def plan_arms_criteria(kind: str, config: Config, settings: StudySettings) -> list[str]:
    """The criteria whose comparison the study makes (the routing ladder: none)."""
    if kind == "ablation":
        raise MoelabError("--until-resolved is invalid for ablate-routing: it decides the "
                          "dense-vs-MoE comparisons of a study")
    return list(settings.criteria)


def submit_study(kind: str, config: Config, settings: StudySettings, study_dir: Path, launcher,
                 log: Callable[[str], None] = print) -> Optional[str]:
    """Plan, then submit every run that is not complete and return at once (``--detach``):
    the job id, or None when there is nothing to train. ``moelab report`` writes the results
    once the runs are done."""
    study_dir = Path(study_dir)
    check_not_rounds(study_dir)
    specs = write_study_plan(kind, config, settings, study_dir)
    if any(not is_complete(study_dir / spec.run_dir) for spec in specs):
        prepare_shared_data(config, log)  # once, here: not raced by the array's tasks
    return submit_plan(study_dir, specs, launcher, log)
