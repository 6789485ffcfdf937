"""A study's plan: arms x seeds (x token budgets), written to its folder and checked against
what an earlier plan of the folder holds. Training the runs is ``moelab.runs``' job.

Layout of a study folder::

    DIR/study.yaml            the base config and study settings (rerunnable as a CONFIG)
    DIR/plan.json             every planned run: arm, seed, budget, folder, config
    DIR/configs/<run>.yaml    the resolved config of each run
    DIR/runs/[<budget>/]<arm>/seed<k>/    one training run folder each
    DIR/failures.json         runs whose last attempt raised, with the message
"""

from __future__ import annotations

import copy
import shlex
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Optional

import yaml

from moelab.config import (
    NUMERICS_OF_OLD_RUNS, Config, build_config, read_yaml, to_dict, with_numerics_of_its_day,
    without_logging, yaml_problem,
)
from moelab.errors import MoelabError, short_repr
from moelab.fileio import (
    atomic_write_json, atomic_write_text, is_bookkeeping, read_json, remove_stale_temporaries,
)
from moelab.runs import RunSpec, write_run_configs
from moelab.runs.spec import branch_record
from moelab.runs.families import as_budget_family
from moelab.runs.completion import check_run_files, is_complete
from moelab.study.arms import Arm
from moelab.runs.tokens import format_token_count
from moelab.train.run_folder import first_difference


def run_name(arm: str, seed: int, budget: Optional[int]) -> str:
    """``moe/seed0``, or ``40.5M/moe/seed0`` in a budget sweep: the run's folder under runs/."""
    parts = [arm, f"seed{seed}"]
    if budget is not None:
        parts.insert(0, format_token_count(budget))
    return "/".join(parts)


def plan_runs(arms: list[Arm], seeds: list[int], budgets: list[int]) -> list[RunSpec]:
    """Every arm x seed (x budget); one seed of every arm before the next seed of any.

    That order means a study stopped half-way already holds complete, comparable seeds. A run's
    config is its arm's with ``train.seed`` (and the budget) set: it does not depend on where the
    seed sits in the list, nor on the base ``train.seed`` a count started from; the budget labels
    every arm's run, though the equal-compute arm trains more tokens (``Arm.run_tokens``). Under
    ``train.schedule: wsd`` the budgets of an arm and seed are one budget family
    (``moelab.runs.families``): the largest trained in full, the others branching from it.
    """
    specs = []
    each_budget: list[Optional[int]] = [*budgets] or [None]
    for budget in each_budget:
        for seed in seeds:
            for arm in arms:
                specs.append(RunSpec(run_name(arm.name, seed, budget),
                                     run_config(arm.config, seed, arm.run_tokens(budget)),
                                     {"arm": arm.name, "seed": seed, "budget": budget}))
    families = [as_budget_family([s for s in specs if (s.labels["arm"], s.labels["seed"]) == key])
                for key in dict.fromkeys((s.labels["arm"], s.labels["seed"]) for s in specs)]
    planned = {spec.name: spec for family in families for spec in family}
    return [planned[spec.name] for spec in specs]


def run_config(arm_config: Config, seed: int, tokens: Optional[int]) -> Config:
    """An arm's config with the run's ``train.seed`` and, in a budget sweep or for the
    equal-compute arm, its ``train.max_tokens``."""
    train = replace(arm_config.train, seed=seed)
    if tokens is not None:
        train = replace(train, max_tokens=tokens)
    return replace(arm_config, train=train).validate()


# --------------------------------------------------------------------------------------------
# The plan on disk
# --------------------------------------------------------------------------------------------


def write_plan(study_dir: Path, kind: str, base: Config, settings: dict, arms: list[Arm],
               specs: list[RunSpec], extra: Optional[dict] = None) -> None:
    """Write study.yaml, plan.json and every run's config; refuse to mix two studies in a folder.
    ``extra`` adds records to plan.json (``lr_selection``, ``sequential``) when given.

    Temporary files a killed write left in the folder are removed first (one process drives a
    study, so none is being written now)."""
    check_same_study(study_dir, kind, base, specs)
    remove_stale_temporaries(study_dir, study_dir / "configs", study_dir / "figures")
    write_run_configs(study_dir, specs)
    study_yaml = {**to_dict(base), "study": {k: v for k, v in settings.items() if k != "budgets"}}
    if settings.get("budgets"):
        study_yaml["study"]["budgets"] = [format_token_count(b) for b in settings["budgets"]]
    atomic_write_text(study_dir / "study.yaml", yaml.safe_dump(study_yaml, sort_keys=False))
    atomic_write_json(study_dir / "plan.json", {
        "kind": kind,
        "settings": settings,
        "arms": [
            {"name": arm.name, "criterion": arm.criterion, "mismatch": arm.mismatch,
             "description": arm.description}
            for arm in arms
        ],
        "runs": [
            {"name": spec.name, **spec.labels, "run_dir": str(spec.run_dir),
             "config": str(spec.config_path), **branch_record(spec)}
            for spec in specs
        ],
        **(extra or {}),
    })


def check_same_study(study_dir: Path, kind: str, base: Config, specs: list[RunSpec]) -> None:
    """Runs planned before with another config would be silently mixed in: refuse instead.

    More seeds or budgets for the same base config are fine (the base train.seed aside: it only
    starts a seed count); another kind of study, another base config or another config for a run
    already planned are not.
    """
    plan_path, study_path = study_dir / "plan.json", study_dir / "study.yaml"
    if study_dir.is_dir() and not any((study_dir / name).exists()
                                      for name in ("plan.json", "study.yaml", "runs", "select")):
        others = sorted(p.name for p in study_dir.iterdir() if not is_bookkeeping(p))
        if others:
            raise MoelabError(f"{study_dir} is not empty and holds no study (it has "
                              f"{', '.join(others[:3])}{', ...' if len(others) > 3 else ''}): "
                              "use another --out folder or an empty one")
    if plan_path.is_file():
        old_kind = _read_planned(plan_path, _read_json).get("kind")
        if old_kind != kind:
            raise MoelabError(f"{study_dir} already holds a {short_repr(old_kind)} study, "
                              f"not {short_repr(kind)}: use another --out folder")
    pairs = [("base config", study_path, _without_seed(to_dict(base)))] + [
        (f"config for run {spec.name}", study_dir / spec.config_path, to_dict(spec.config)) for spec in specs
    ]
    for what, path, new in pairs:
        if path.is_file():
            old = _with_defaults(_read_planned(path, read_yaml))
            if path == study_path:
                old = _without_seed(old)
            # how runs are shown may change: a study rerun with W&B, or moved (its W&B group)
            difference = first_difference(without_logging(old), without_logging(new))
            if difference:
                key, old_value, new_value = difference
                raise MoelabError(
                    f"{study_dir} already holds a study with another {what}: "
                    f"{key}={short_repr(old_value)} (now {short_repr(new_value)}); "
                    + _how_to_go_on(study_dir, key, old_value)
                )


def _how_to_go_on(study_dir: Path, key: str, old_value: object) -> str:
    """What to do about a folder planned with another config: a failed first try, with no
    run finished, has nothing to keep, so the one command that starts afresh is named; a
    study planned before train.numerics existed resumes with the numerics it trained with."""
    if key == "train.numerics" and old_value == NUMERICS_OF_OLD_RUNS:
        return f"resume with --set train.numerics={NUMERICS_OF_OLD_RUNS}"
    if any(is_complete(summary.parent) for summary in study_dir.glob("**/summary.json")):
        return "use another --out folder or the same config"
    return (f"none of its runs finished, so nothing is lost by starting afresh: "
            f"rm -r {shlex.quote(str(study_dir))}, then rerun (or use another --out folder)")


def _with_defaults(planned: dict) -> dict:
    """A planned config with the defaults of keys added since it was written (a study planned
    by an older moelab is the same study); as written when it no longer builds."""
    planned = with_numerics_of_its_day({key: value for key, value in planned.items()
                                        if key != "study"})
    try:
        return to_dict(build_config(copy.deepcopy(planned)))
    except MoelabError:
        return planned


def _without_seed(config: dict) -> dict:
    """The base config less train.seed: it only starts a seed count, and every run sets its own,
    so ``--seeds 3`` from train.seed=10 and ``--seeds 10,11,12`` plan the same runs."""
    train = {k: v for k, v in (config.get("train") or {}).items() if k != "seed"}
    return {**config, "train": train}


def _read_json(path: Path) -> object:
    return read_json(path)


def _read_planned(path: Path, read: Callable[[Path], object]) -> dict:
    """plan.json, study.yaml or a run's config as a dict; a damaged one is a one-line error."""
    try:
        content = read(path)
    except (OSError, ValueError, yaml.YAMLError) as exc:  # JSONDecodeError is a ValueError
        detail = (yaml_problem(exc) if isinstance(exc, yaml.YAMLError)
                  else (str(exc).strip().splitlines() or [type(exc).__name__])[0])
        raise MoelabError(f"{path} is corrupt ({detail}): delete it to plan the study "
                          f"again") from None
    if not isinstance(content, dict):  # an empty file too: it would compare as "all differ"
        raise MoelabError(f"{path} is corrupt (not a mapping): delete it to plan the study again")
    return content


# --------------------------------------------------------------------------------------------
# Checking the files a report is built from
# --------------------------------------------------------------------------------------------

def check_study_files(study_dir: Path) -> None:
    """Refuse, on one line naming the file, what the report would choke on: a plan.json that is
    not a mapping of arms and runs, and the damaged run files ``check_run_files`` finds."""
    plan_path = study_dir / "plan.json"
    if plan_path.is_file():
        plan = _read_planned(plan_path, _read_json)
        for key in ("arms", "runs"):
            entries = plan.get(key, [])
            if not isinstance(entries, list) or not all(
                    isinstance(e, dict) and isinstance(e.get("name"), str) for e in entries):
                raise MoelabError(f"{plan_path} is corrupt ({key} is not a list of named "
                                  f"entries): delete it to plan the study again")
    check_run_files(study_dir / "runs")
