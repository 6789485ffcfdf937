"""Plans and runs a folder of training runs: arms x seeds (x token budgets), resumably.

Layout of a study folder::

    DIR/study.yaml            the base config and study settings (rerunnable as a CONFIG)
    DIR/plan.json             every planned run: arm, seed, budget, folder, config, command
    DIR/configs/<run>.yaml    the resolved config of each run
    DIR/runs/[<budget>/]<arm>/seed<k>/    one training run folder each
    DIR/failures.json         runs whose last attempt raised, with the message

Runs train one at a time in this process, or ``jobs`` at a time, each in its own
``moelab train`` process. A run is finished when its ``summary.json`` says ``"status":
"complete"``. Any other run folder is torn (killed mid-way, or failed): it is trained again
with ``resume=True``, which continues from its checkpoint when it has one and starts afresh
otherwise. A failing run is recorded in failures.json and the others still run.
"""

from __future__ import annotations

import json
import math
import os
import shlex
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional

import yaml

from moelab.config import Config, dump_config, override, to_dict
from moelab.errors import MoelabError
from moelab.fileio import (
    atomic_write_json, atomic_write_text, is_bookkeeping, remove_stale_temporaries,
)
from moelab.study.arms import Arm
from moelab.study.budgets import format_token_count
from moelab.train.checkpoint import latest_checkpoint
from moelab.train.run_folder import RunFolder, first_difference

TrainFn = Callable[..., dict]


def run_name(arm: str, seed: int, budget: Optional[int]) -> str:
    """``moe/seed0``, or ``40.5M/moe/seed0`` in a budget sweep: the run's folder under runs/."""
    parts = [arm, f"seed{seed}"]
    if budget is not None:
        parts.insert(0, format_token_count(budget))
    return "/".join(parts)


@dataclass
class RunSpec:
    """One planned training run."""

    arm: str
    seed: int
    budget: Optional[int]
    """Token budget of a budget sweep (None: the config's train.max_tokens)."""
    config: Config

    @property
    def name(self) -> str:
        return run_name(self.arm, self.seed, self.budget)

    @property
    def run_dir(self) -> Path:
        return Path("runs") / self.name

    @property
    def config_path(self) -> Path:
        return Path("configs") / (self.name.replace("/", "-") + ".yaml")


def plan_runs(arms: list[Arm], seeds: list[int], budgets: list[int]) -> list[RunSpec]:
    """Every arm x seed (x budget); one seed of every arm before the next seed of any.

    That order means a study stopped half-way already holds complete, comparable seeds. A run's
    config is its arm's with ``train.seed`` (and the budget) set: it does not depend on where the
    seed sits in the list, nor on the base ``train.seed`` a count started from.
    """
    specs = []
    for budget in budgets or [None]:
        for seed in seeds:
            for arm in arms:
                changes = [f"train.seed={seed}"]
                if budget is not None:
                    changes.append(f"train.max_tokens={budget}")
                specs.append(RunSpec(arm.name, seed, budget, override(arm.config, changes)))
    return specs


# --------------------------------------------------------------------------------------------
# The plan on disk
# --------------------------------------------------------------------------------------------


def write_plan(study_dir: Path, kind: str, base: Config, settings: dict, arms: list[Arm],
               specs: list[RunSpec]) -> None:
    """Write study.yaml, plan.json and every run's config; refuse to mix two studies in a folder.

    Temporary files a killed write left in the folder are removed first (one process drives a
    study, so none is being written now)."""
    check_same_study(study_dir, kind, base, specs)
    remove_stale_temporaries(study_dir, study_dir / "configs", study_dir / "figures")
    for spec in specs:
        atomic_write_text(study_dir / spec.config_path, dump_config(spec.config))
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
            {"name": spec.name, "arm": spec.arm, "seed": spec.seed, "budget": spec.budget,
             "run_dir": str(spec.run_dir), "config": str(spec.config_path)}
            for spec in specs
        ],
    })


def check_same_study(study_dir: Path, kind: str, base: Config, specs: list[RunSpec]) -> None:
    """Runs planned before with another config would be silently mixed in: refuse instead.

    More seeds or budgets for the same base config are fine (the base train.seed aside: it only
    starts a seed count); another kind of study, another base config or another config for a run
    already planned are not.
    """
    plan_path, study_path = study_dir / "plan.json", study_dir / "study.yaml"
    if study_dir.is_dir() and not any((study_dir / name).exists()
                                      for name in ("plan.json", "study.yaml", "runs")):
        others = sorted(p.name for p in study_dir.iterdir() if not is_bookkeeping(p))
        if others:
            raise MoelabError(f"{study_dir} is not empty and holds no study (it has "
                              f"{', '.join(others[:3])}{', ...' if len(others) > 3 else ''}): "
                              "use another --out folder or an empty one")
    if plan_path.is_file():
        old_kind = _read_planned(plan_path, json.loads).get("kind")
        if old_kind != kind:
            raise MoelabError(f"{study_dir} already holds a {old_kind!r} study, not {kind!r}: "
                              "use another --out folder")
    pairs = [("base config", study_path, _without_seed(to_dict(base)))] + [
        (f"config for run {spec.name}", study_dir / spec.config_path, to_dict(spec.config)) for spec in specs
    ]
    for what, path, new in pairs:
        if path.is_file():
            old = _read_planned(path, yaml.safe_load)
            old.pop("study", None)
            if path == study_path:
                old = _without_seed(old)
            difference = first_difference(old, new)
            if difference:
                key, old_value, new_value = difference
                raise MoelabError(
                    f"{study_dir} already holds a study with another {what}: "
                    f"{key}={old_value!r} (now {new_value!r}); use another --out folder or the "
                    "same config"
                )


def _without_seed(config: dict) -> dict:
    """The base config less train.seed: it only starts a seed count, and every run sets its own,
    so ``--seeds 3`` from train.seed=10 and ``--seeds 10,11,12`` plan the same runs."""
    train = {k: v for k, v in (config.get("train") or {}).items() if k != "seed"}
    return {**config, "train": train}


def _read_planned(path: Path, parse: Callable[[str], object]) -> dict:
    """plan.json, study.yaml or a run's config as a dict; a damaged one is a one-line error."""
    try:
        content = parse(path.read_text("utf-8"))
    except (OSError, ValueError, yaml.YAMLError) as exc:  # JSONDecodeError is a ValueError
        detail = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise MoelabError(f"{path} is corrupt ({detail}): delete it to plan the study "
                          f"again") from None
    if not isinstance(content, dict):  # an empty file too: it would compare as "all differ"
        raise MoelabError(f"{path} is corrupt (not a mapping): delete it to plan the study again")
    return content


def train_commands(study_dir: Path, specs: list[RunSpec]) -> list[str]:
    """One ``moelab train ... --resume`` command per run, for a cluster or several GPUs.

    With ``--resume`` a command can simply be rerun: after a preemption it continues its run,
    after completion it returns at once, and a first start it begins afresh."""
    return [
        "moelab train {} --out {} --resume".format(
            shlex.quote(str(study_dir / spec.config_path)), shlex.quote(str(study_dir / spec.run_dir))
        )
        for spec in specs
    ]


# --------------------------------------------------------------------------------------------
# Running
# --------------------------------------------------------------------------------------------


def is_complete(run_dir: Path) -> bool:
    """Whether the run in ``run_dir`` finished (``RunFolder.is_complete``, for study code)."""
    return RunFolder(run_dir).is_complete()


def has_checkpoint(run_dir: Path) -> bool:
    """Whether a torn run left a complete checkpoint to resume from (a corrupt one: no)."""
    try:
        return latest_checkpoint(run_dir / "checkpoints") is not None
    except MoelabError:
        return False


@dataclass
class RunOutcome:
    spec: RunSpec
    status: str
    """'skipped' (already complete), 'complete' (trained now) or 'failed'."""
    seconds: float = 0.0
    error: str = ""
    summary: Optional[dict] = None


def execute_plan(study_dir: Path, specs: list[RunSpec], train_fn: TrainFn,
                 log: Callable[[str], None] = print, jobs: int = 1) -> list[RunOutcome]:
    """Train every run that is not complete; a failure is recorded, and the rest go on.

    ``jobs`` > 1 trains that many runs at once, each in its own ``moelab train`` process (see
    ``run_in_subprocess``); ``train_fn`` is then not used.
    """
    if jobs < 1:
        raise MoelabError(f"jobs={jobs} is invalid: allowed 1 or more")
    failures = read_failures(study_dir)
    outcomes: list[RunOutcome] = []
    todo = [spec for spec in specs if not is_complete(study_dir / spec.run_dir)]
    log(f"{len(specs)} runs planned, {len(specs) - len(todo)} already complete, {len(todo)} to train"
        + (f", {jobs} at a time" if jobs > 1 and todo else ""))
    started = time.perf_counter()

    def record(outcome: RunOutcome) -> None:
        outcomes.append(outcome)
        if outcome.status == "failed":
            failures[outcome.spec.name] = outcome.error
        else:
            failures.pop(outcome.spec.name, None)
        atomic_write_json(study_dir / "failures.json", failures)
        done, elapsed = len(outcomes), time.perf_counter() - started
        remaining = elapsed / done * (len(todo) - done)
        log(f"  study: {done}/{len(todo)} runs done in {elapsed:.0f} s, about {remaining:.0f} s left")

    counters = {spec.name: f"[{index}/{len(todo)}]" for index, spec in enumerate(todo, start=1)}
    if jobs == 1:
        for spec in todo:
            record(run_one(study_dir / spec.run_dir, spec, train_fn, log, counters[spec.name]))
    else:
        threads = threads_per_job(jobs)
        with ThreadPoolExecutor(max_workers=jobs) as pool:  # threads that wait on processes
            futures = [pool.submit(run_in_subprocess, study_dir, spec, threads, log, counters[spec.name])
                       for spec in todo]
            for future in as_completed(futures):
                record(future.result())  # bookkeeping stays on this thread
    finished = {outcome.spec.name for outcome in outcomes}
    outcomes += [RunOutcome(spec, "skipped") for spec in specs if spec.name not in finished]
    return outcomes


def run_one(run_dir: Path, spec: RunSpec, train_fn: TrainFn, log: Callable[[str], None],
            counter: str) -> RunOutcome:
    """Train one run. ``resume=True`` always: the training engine continues a torn run from its
    checkpoint, starts one without a checkpoint afresh, and refuses a folder of another config."""
    how = "resuming from its checkpoint" if has_checkpoint(run_dir) else "training"
    log(f"{counter} {spec.name}: {how}")
    started = time.perf_counter()
    try:
        summary = train_fn(spec.config, run_dir, resume=True)
    except Exception as exc:  # noqa: BLE001 -- one failed run must not stop the study
        error = f"{type(exc).__name__}: {exc}".splitlines()[0]
        log(f"{counter} {spec.name}: FAILED ({error})")
        return RunOutcome(spec, "failed", time.perf_counter() - started, error)
    seconds = time.perf_counter() - started
    best = summary.get("best_val_loss") if isinstance(summary, dict) else None
    best_text = f"best val loss {best:.4f}, " if isinstance(best, (int, float)) else ""
    log(f"{counter} {spec.name}: done, {best_text}{seconds:.0f} s")
    return RunOutcome(spec, "complete", seconds, summary=summary)


def threads_per_job(jobs: int) -> int:
    """Torch threads for each of ``jobs`` parallel runs: OMP_NUM_THREADS when the caller set it,
    else the CPUs shared out (at least 1), so the runs do not oversubscribe the cores."""
    if os.environ.get("OMP_NUM_THREADS", "").isdigit():
        return int(os.environ["OMP_NUM_THREADS"])
    return max(1, (os.cpu_count() or 1) // jobs)


def run_in_subprocess(study_dir: Path, spec: RunSpec, threads: int, log: Callable[[str], None],
                      counter: str) -> RunOutcome:
    """Train one run as ``moelab train CONFIG --out RUN --resume`` in a child process.

    The same config file, folder and resume rule as ``run_one``, and the same numbers: a run's
    losses depend on its config, seed and thread count, not on what else runs beside it. The
    child's output is captured (parallel progress bars would interleave); on failure its last
    line, the CLI's one-line error, becomes the recorded error.
    """
    run_dir = study_dir / spec.run_dir
    how = "resuming from its checkpoint" if has_checkpoint(run_dir) else "training"
    log(f"{counter} {spec.name}: {how} ({threads} thread{'s' if threads > 1 else ''})")
    command = [sys.executable, "-m", "moelab", "train", str(study_dir / spec.config_path),
               "--out", str(run_dir), "--resume"]
    started = time.perf_counter()
    child = subprocess.run(command, capture_output=True, text=True,
                           env={**os.environ, "OMP_NUM_THREADS": str(threads)})
    seconds = time.perf_counter() - started
    if child.returncode != 0 or not is_complete(run_dir):
        lines = (child.stderr.strip() or child.stdout.strip()).splitlines()
        if child.returncode < 0:  # killed (out of memory, a signal): its output ends anywhere
            error = f"moelab train was killed by signal {-child.returncode}"
        else:
            error = lines[-1] if lines else f"moelab train exited with code {child.returncode}"
        log(f"{counter} {spec.name}: FAILED ({error})")
        return RunOutcome(spec, "failed", seconds, error)
    summary = RunFolder(run_dir).read_summary()
    log(f"{counter} {spec.name}: done, best val loss {summary['best_val_loss']:.4f}, {seconds:.0f} s")
    return RunOutcome(spec, "complete", seconds, summary=summary)


def read_failures(study_dir: Path) -> dict[str, str]:
    try:
        return dict(json.loads((study_dir / "failures.json").read_text("utf-8")))
    except (OSError, ValueError, TypeError):
        return {}


# --------------------------------------------------------------------------------------------
# Checking the files a report is built from
# --------------------------------------------------------------------------------------------

_REPORTED_NUMBERS = ("best_val_loss", "best_val_bpb", "final_val_loss", "final_val_bpb",
                     "tokens_per_s", "wall_time_s", "tokens", "steps", "best_val_step",
                     "active_params", "total_params", "non_embedding_params",
                     "flops_per_token_6n", "flops_per_token_full")


def check_study_files(study_dir: Path) -> None:
    """Refuse, on one line naming the file, what the report would choke on: a plan.json that is
    not a mapping of arms and runs, and in every complete run a summary number that is not a
    finite number, a metrics.jsonl without evals or logging a step twice, an unreadable
    config.yaml. A hand edit or a copy gone wrong, never anything training writes."""
    plan_path = study_dir / "plan.json"
    if plan_path.is_file():
        plan = _read_planned(plan_path, json.loads)
        for key in ("arms", "runs"):
            entries = plan.get(key, [])
            if not isinstance(entries, list) or not all(
                    isinstance(e, dict) and isinstance(e.get("name"), str) for e in entries):
                raise MoelabError(f"{plan_path} is corrupt ({key} is not a list of named "
                                  f"entries): delete it to plan the study again")
    runs_root = study_dir / "runs"
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
    summary = run.read_summary()
    for key in _REPORTED_NUMBERS:
        value = summary.get(key)
        if value is not None and not _is_finite_number(value):
            return f"{run.summary_path} is corrupt ({key}={value!r} is not a finite number)"
    routing = summary.get("routing")
    if routing is not None and not (isinstance(routing, list)
                                    and all(isinstance(layer, dict) for layer in routing)):
        return f"{run.summary_path} is corrupt (routing is not a list of layers)"
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
        if not isinstance(step, int) or isinstance(step, bool) or not _is_finite_number(loss):
            return f"{path} line {number}: an eval without a whole step and a finite val_loss"
        if eval_steps and step <= eval_steps[-1]:
            return f"{path} line {number} logs eval step {step} again (or out of order)"
        eval_steps.append(step)
    if not eval_steps:
        return f"{path} of a complete run has no eval events"
    return ""


def _is_finite_number(value) -> bool:
    return (isinstance(value, (int, float)) and not isinstance(value, bool)
            and math.isfinite(value))
