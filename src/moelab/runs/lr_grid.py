"""Each unit of a plan (a study arm, a sweep cell) at its own learning rate, chosen from a grid
on selection seeds that no report uses.

The one implementation behind ``moelab study --tune-lr``, ``moelab compare --tune-lr`` and
``moelab sweep-sparsity --lr-grid``. For every lr of the grid the caller plans its runs on the
selection seeds (``plan_at(lr)``); they train through the same launchers as every planned run,
each lr in its own plan folder ``select/lr<X>/`` (``configs/``, ``runs/``, ``failures.json``)
inside the study or sweep folder. Per unit the lr of the lowest mean loss over the selection
seeds wins; a lr where a selection run failed or has no loss cannot win (a diverging lr at
the grid's top must not be chosen by its missing number). A choice at the grid's first or last
lr is flagged: the best lr may lie beyond it.

What was planned is kept as a record (``selection_record``) in the folder's plan; the choices
are read back from the run folders by ``read_choices``, so a report rebuilds them from files.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from moelab.codec import from_json
from moelab.errors import MoelabError, short_repr
from moelab.runs.execute import Log, execute_plan
from moelab.runs.completion import is_complete
from moelab.runs.spec import RunSpec, write_run_configs
from moelab.train.run_folder import RunFolder

SELECTION_FOLDER = "select"
SELECTION_SEED_OFFSET = 1_000_000
"""Default selection seeds start here above train.seed: no reporting seed count (at most 1000
seeds per arm) reaches them."""
DEFAULT_SELECTION_SEEDS = 2
MAX_GRID = 20
"""More lrs than this is a typo, not a grid."""
GRID_ALLOWED = "allowed a comma-separated list of 2 to 20 distinct positive lrs, e.g. 0.005,0.01,0.02"


def parse_lr_grid(text: str, key: str = "--tune-lr") -> list[float]:
    """``0.005,0.01,0.02`` -> [0.005, 0.01, 0.02], sorted; anything else one line naming it."""
    items = [item.strip() for item in str(text).strip().strip("[]").split(",")]
    lrs = []
    for item in items:
        try:
            lr = float(item)
        except ValueError:
            raise MoelabError(f"{key} {short_repr(text)} is invalid: {short_repr(item)} is not a "
                              f"number; {GRID_ALLOWED}") from None
        if not (math.isfinite(lr) and lr > 0):
            raise MoelabError(f"{key} {short_repr(text)} is invalid: lr {item} is not positive "
                              f"and finite; {GRID_ALLOWED}")
        lrs.append(lr)
    if len(set(lrs)) != len(lrs):
        repeated = next(lr for lr in lrs if lrs.count(lr) > 1)
        raise MoelabError(f"{key} {short_repr(text)} is invalid: lr {repeated:g} is listed "
                          f"twice; {GRID_ALLOWED}")
    if not 2 <= len(lrs) <= MAX_GRID:
        raise MoelabError(f"{key} {short_repr(text)} is invalid: {len(lrs)} lrs; {GRID_ALLOWED}")
    return sorted(lrs)


def lr_folder(lr: float) -> str:
    """``lr0.01``: the plan folder of one lr, under ``select/``."""
    return f"lr{lr:g}"


def default_selection_seeds(count: int, base_seed: int) -> list[int]:
    return [base_seed + SELECTION_SEED_OFFSET + i for i in range(count)]


def check_disjoint(selection_seeds: list[int], reporting_seeds: list[int],
                   key: str = "--select-seeds") -> None:
    """A seed that chose an lr must never report: refuse an overlap on one line."""
    shared = sorted(set(selection_seeds) & set(reporting_seeds))
    if shared:
        raise MoelabError(
            f"{key}={','.join(str(s) for s in selection_seeds)} is invalid: seed {shared[0]} is "
            f"also a reporting seed; the seeds that choose the lr and those that report must be "
            f"disjoint (default: train.seed + {SELECTION_SEED_OFFSET:,} on)")


@dataclass
class LrChoice:
    """One unit's selection: the loss of every (lr, selection seed) and the lr that won."""

    unit: str
    grid: list[float]
    seeds: list[int]
    lr: Optional[float] = None
    """The chosen lr; None when no lr of the grid has every selection seed's loss."""
    edge: Optional[str] = None
    """'lowest' or 'highest' when the choice is the grid's first or last lr."""
    means: dict[float, Optional[float]] = field(
        default_factory=dict, metadata={"json_key": "mean_loss", "key_format": "g"})
    """lr -> the mean loss over the selection seeds (None: a seed's loss is missing)."""
    losses: dict[float, dict[int, Optional[float]]] = field(
        default_factory=dict, metadata={"key_format": "g"})
    """lr -> selection seed -> the run's loss (None: failed, missing or not finite)."""


def choose_lr(unit: str, grid: list[float], seeds: list[int],
              losses: dict[float, dict[int, Optional[float]]]) -> LrChoice:
    """The lr of the lowest mean loss over ``seeds`` among the lrs that have all of them (a
    tie goes to the smaller lr); flagged when it is the grid's first or last lr."""
    grid = sorted(grid)
    means: dict[float, Optional[float]] = {}
    for lr in grid:
        values = [losses.get(lr, {}).get(seed) for seed in seeds]
        finite = [v for v in values if v is not None and math.isfinite(v)]
        means[lr] = sum(finite) / len(finite) if values and len(finite) == len(values) else None
    ranked = [lr for lr in grid if means[lr] is not None]
    chosen = min(ranked, key=lambda lr: (means[lr], lr)) if ranked else None
    edge = None
    if chosen is not None and chosen == grid[0]:
        edge = "lowest"
    elif chosen is not None and chosen == grid[-1]:
        edge = "highest"
    return LrChoice(unit, grid, list(seeds), lr=chosen, edge=edge, means=means,
                    losses={lr: dict(losses.get(lr, {})) for lr in grid})


# --------------------------------------------------------------------------------------------
# Training the selection runs and reading them back
# --------------------------------------------------------------------------------------------


def selection_record(grid: list[float], seeds: list[int],
                     specs_by_lr: dict[float, list[RunSpec]],
                     unit_of: Callable[[RunSpec], str], metric: str = "best_val_loss") -> dict:
    """What the plan keeps of a selection: the grid, the seeds, the metric, and every selection
    run with its unit, lr, seed and folder (relative to the study or sweep folder)."""
    return {
        "grid": list(grid), "seeds": list(seeds), "metric": metric,
        "runs": [{"unit": unit_of(spec), "lr": lr, "seed": spec.config.train.seed,
                  "run_dir": (Path(SELECTION_FOLDER) / lr_folder(lr) / spec.run_dir).as_posix()}
                 for lr, specs in specs_by_lr.items() for spec in specs],
    }


def run_selection(folder: Path, specs_by_lr: dict[float, list[RunSpec]], launcher,
                  log: Log = print) -> None:
    """Train every selection run not yet complete, one plan folder per lr (``select/lr<X>``),
    through ``launcher``. A failed run is recorded in its folder's failures.json and leaves
    its lr out of that unit's choice."""
    for lr, specs in specs_by_lr.items():
        where = folder / SELECTION_FOLDER / lr_folder(lr)
        where.mkdir(parents=True, exist_ok=True)
        write_run_configs(where, specs)
        log(f"lr selection at lr {lr:g}:")
        execute_plan(where, specs, launcher, log)


@dataclass
class SelectionRun:
    """One selection run a plan names: its unit, lr, seed and folder."""

    unit: str
    lr: float
    seed: int
    run_dir: str
    """Relative to the study or sweep folder: ``select/lr<X>/runs/...``."""


@dataclass
class SelectionRecord:
    """What a plan keeps of a selection (``selection_record``), read once from the plan
    (``read_selection``). A study or a sweep may add keys of its own to the record."""

    grid: list[float]
    seeds: list[int]
    metric: Optional[str] = None
    """The run summary's number compared; None in plans from before it was recorded (the
    best val loss)."""
    runs: list[SelectionRun] = field(default_factory=list)


def read_selection(record: dict) -> SelectionRecord:
    return from_json(SelectionRecord, record)


def read_choices(folder: Path, record: dict) -> dict[str, LrChoice]:
    """Every unit's choice from the selection runs a plan's record names, read from their run
    folders (a run not complete counts as failed). A unit with several runs per lr and seed (a
    sweep's budget family) takes their mean, missing when one is."""
    selection = read_selection(record)
    metric = selection.metric or "best_val_loss"
    runs: dict[str, dict[float, dict[int, list[Optional[float]]]]] = {}
    for run in selection.runs:
        by_seed = runs.setdefault(run.unit, {}).setdefault(run.lr, {})
        by_seed.setdefault(run.seed, []).append(_run_loss(folder / run.run_dir, metric))
    losses = {unit: {lr: {seed: _mean(values) for seed, values in by_seed.items()}
                     for lr, by_seed in by_lr.items()} for unit, by_lr in runs.items()}
    return {unit: choose_lr(unit, selection.grid, selection.seeds, by_lr)
            for unit, by_lr in losses.items()}


def _mean(values: list[Optional[float]]) -> Optional[float]:
    present = [v for v in values if v is not None]
    return None if len(present) < len(values) else sum(present) / len(present)


def _run_loss(run_dir: Path, metric: str) -> Optional[float]:
    if not is_complete(run_dir):
        return None
    value = getattr(RunFolder(run_dir).summary(), metric, None)
    return float(value) if value is not None and math.isfinite(value) else None


def require_choices(choices: dict[str, LrChoice], folder: Path) -> dict[str, float]:
    """unit -> chosen lr; one line naming the unit when no lr of the grid trained on every
    selection seed."""
    chosen = {}
    for unit, choice in choices.items():
        if choice.lr is None:
            raise MoelabError(
                f"lr selection for {unit} failed: no lr of {','.join(f'{lr:g}' for lr in choice.grid)} "
                f"has a loss on every selection seed; see "
                f"{folder / SELECTION_FOLDER}/lr*/failures.json")
        chosen[unit] = choice.lr
    return chosen


def check_same_selection(plan: dict, record: Optional[dict], key: str = "--lr-grid") -> None:
    """A folder's planned runs were trained at the lrs of one selection (or of none): planning
    them again without it, or with another grid or seeds, would mix runs at other lrs."""
    if not plan.get("runs"):
        return
    old_record = plan.get("lr_selection")
    if old_record is None and record is None:
        return
    old = None if old_record is None else read_selection(old_record)
    if old is not None and record is not None:
        new = read_selection(record)
        if (old.grid, old.seeds) == (new.grid, new.seeds):
            return
    was = (f"no {key}" if old is None else f"{key} {','.join(f'{lr:g}' for lr in old.grid)} "
           f"on selection seeds {','.join(str(s) for s in old.seeds)}")
    raise MoelabError(f"the folder's runs were planned with {was}: planning them otherwise "
                      "would mix runs at other lrs; use another --out folder")
