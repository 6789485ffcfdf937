"""``sweep-sparsity --lr-grid``: every cell of a sweep at its own learning rate, chosen on
selection seeds that no result uses (``moelab.runs.lr_grid``).

A cell is a budget x size x sparsity (x k) point without its seed; under ``train.schedule: wsd``
the budgets of a size and sparsity are one budget family (one trunk, branched cooldowns), so
they share one lr, chosen on the family's runs together (mean over budgets and selection
seeds). Per lr of the grid the whole grid trains on the selection seeds (``select/lr<X>/runs/
<budget>/<size>/<S...>/seed<k>``, wsd families branched as in the sweep itself); then the sweep
trains on its own seeds, each cell at its lr. Finetunes keep their recipe's lr. plan.json keeps
the selection (``lr_selection``); the report reads the choices back from the selection runs.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, replace

from moelab.accounting import flops_per_token
from moelab.report import format_count
from moelab.runs.lr_grid import (
    DEFAULT_SELECTION_SEEDS, check_disjoint, default_selection_seeds,
    selection_record,
)
from moelab.runs.spec import RunSpec
from moelab.sweep.cost import tokens_trained
from moelab.sweep.folder import LR_SELECTION_KEY
from moelab.sweep.grid import SweepGrid
from moelab.sweep.plan import SweepPoint, plan_sweep, run_specs

RECORD_KEY = LR_SELECTION_KEY


@dataclass
class SweepLrGrid:
    """What ``--lr-grid GRID [--select-seeds N|LIST]`` asks for."""

    grid: list[float]
    select_seeds: int | list[int] = DEFAULT_SELECTION_SEEDS

    def seed_list(self, sweep: SweepGrid) -> list[int]:
        seeds = (default_selection_seeds(self.select_seeds, min(sweep.seeds))
                 if isinstance(self.select_seeds, int) else list(self.select_seeds))
        check_disjoint(seeds, list(sweep.seeds))
        return seeds


def is_family(sweep: SweepGrid, points: list[SweepPoint]) -> bool:
    """Whether budgets form wsd budget families (several budgets, wsd schedule)."""
    budgets = len(sweep.flops_budgets) + len(sweep.token_budgets)
    return budgets > 1 and points[0].config.train.schedule == "wsd"


def cell_of(spec_or_point, family: bool) -> str:
    """``D409600/s1/S0.500-E2k1`` (a budget's cell) or, in a budget family, ``s1/S0.500-E2k1``
    (the family's cell, every budget together)."""
    name = spec_or_point.run_name if isinstance(spec_or_point, SweepPoint) else spec_or_point.name
    parts = name.split("/")[:-1]  # without seed<k>
    return "/".join(parts[1:] if family else parts)


def selection_specs(sweep: SweepGrid, tuning: SweepLrGrid) -> dict[float, list[RunSpec]]:
    """lr -> the grid's runs on the selection seeds at that lr (no finetunes)."""
    seeds = tuning.seed_list(sweep)
    # A selection run is judged on its loss alone: it scores no zero-shot tasks.
    return {lr: run_specs(plan_sweep(replace(
                sweep, seeds=seeds,
                overrides=[*sweep.overrides, f"train.lr={lr!r}", "train.eval_tasks=[]"])))
            for lr in tuning.grid}


def sweep_selection_record(sweep: SweepGrid, tuning: SweepLrGrid,
                           specs_by_lr: dict[float, list[RunSpec]]) -> dict:
    family = is_family(sweep, plan_sweep(sweep))
    record = selection_record(tuning.grid, tuning.seed_list(sweep), specs_by_lr,
                              lambda spec: cell_of(spec, family))
    record["per"] = "budget family" if family else "budget"
    return record


def with_cell_lrs(points: list[SweepPoint], lrs: dict[str, float], family: bool) -> list[SweepPoint]:
    """Every point at its cell's chosen lr."""
    return [dataclasses.replace(point, config=replace(
        point.config, train=replace(point.config.train, lr=lrs[cell_of(point, family)])).validate())
        for point in points]


# --------------------------------------------------------------------------------------------
# Cost before anything trains
# --------------------------------------------------------------------------------------------


@dataclass
class PlanCost:
    runs: int
    tokens: int
    flops_6n: float
    """Training FLOPs, 6 N_active x tokens trained, summed over runs (a branched wsd budget
    trains only its cooldown, from its branch step)."""

    def text(self) -> str:
        return (f"{self.runs} runs, {format_count(self.tokens)} tokens, "
                f"{self.flops_6n:.3g} training FLOPs (6ND)")


def plan_cost(specs: list[RunSpec]) -> PlanCost:
    trained = [tokens_trained(spec) for spec in specs]
    flops = sum(flops_per_token(spec.config.model).six_n * tokens
                for spec, tokens in zip(specs, trained))
    return PlanCost(len(specs), sum(trained), float(flops))


def dry_run_lines(sweep: SweepGrid, tuning: SweepLrGrid, sweep_specs: list[RunSpec]) -> list[str]:
    """What ``--dry-run`` adds under ``--lr-grid``: the selection's cost and the sweep's."""
    specs_by_lr = selection_specs(sweep, tuning)
    selection = plan_cost([spec for specs in specs_by_lr.values() for spec in specs])
    sweep_cost = plan_cost(sweep_specs)
    family = is_family(sweep, plan_sweep(sweep))
    cells = {cell_of(spec, family) for specs in specs_by_lr.values() for spec in specs}
    return [
        f"lr selection: {len(cells)} cells (per {'budget family' if family else 'budget'}) x "
        f"{len(tuning.grid)} lrs ({', '.join(f'{lr:g}' for lr in tuning.grid)}) x "
        f"{len(tuning.seed_list(sweep))} selection seed{'' if len(tuning.seed_list(sweep)) == 1 else 's'} "
        f"({', '.join(str(s) for s in tuning.seed_list(sweep))}): {selection.text()}",
        f"then the sweep at each cell's lr: {sweep_cost.text()}",
        f"total: {selection.runs + sweep_cost.runs} runs, "
        f"{selection.flops_6n + sweep_cost.flops_6n:.3g} training FLOPs "
        f"({selection.flops_6n / sweep_cost.flops_6n:.1f}x the sweep's own for the selection)",
    ]
