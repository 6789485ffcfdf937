"""The best sparsity at a fixed model size and budget, S*(N; C), read off the runs themselves.

Abnar et al. 2025 (arXiv 2501.12370) study loss against sparsity S at a fixed total parameter
count N and a fixed compute budget C, and report an interior best S* that rises with N (and, at
fixed N, falls as C grows). A sweep grid with ``mode: fixed_total`` keeps N fixed across S for
each size, so each (size, budget) cell of its runs is one such curve. With ``mode:
fixed_expert`` the experts keep the dense FFN's width and N grows with E: a cell then holds the
active parameters N_active fixed, not N, and its curve is loss against S at fixed N_active
(``FixedSizeAnalysis.holds_fixed``) -- the same table, another question.

**The estimate.** S* of a cell is the sparsity of lowest mean loss over seeds among the S the
grid tried (an ordinal estimate: no curve is fitted, so no model form decides where it falls).
Where that is the grid's largest S, the estimate is censored: the true S* may be anywhere at or
above it, so the cell reports "S* >= edge, unbounded" and no number; at the smallest S tried
(when that is not the dense model, S = 0) it is "S* <= edge".

**The interval.** The runs of one (size, S, seed) share a warmup-stable trunk: their budgets are
cooldown branches of one wsd family, so they are not independent, and the seed of a size is the
unit of replication. A replicate draws the seeds with replacement and takes, for every cell at
once, the runs of the seeds drawn: each seed's whole families move together, across S, sizes
and budgets. With n seeds there are C(2n - 1, n) distinct draws (as multisets; 3 for 2 seeds,
10 for 3) with multinomial probabilities, so up to ``EXACT_SEEDS`` seeds every draw is
enumerated with its exact probability instead of sampling (no resampling noise, no seed to
choose); above that ``replicates`` draws are sampled with a fixed seed. The interval is the
2.5 % and 97.5 % quantiles of the replicates' argmin S (no interval and no trend verdict with
one seed: nothing replicates them). With 2 seeds the three draws are
"seed a alone", "seed b alone" and "both": the interval is then the span of the two seeds'
own argmins and the pooled one, and a share of replicates says no more than whether the seeds
agree, so shares are reported only with >= ``MIN_SEEDS_FOR_SHARES`` seeds.

**The trends.** "S* rises with N" at a fixed budget and "S* falls with C" at a fixed size are
tested ordinally, because censored S* have no value to regress on (a slope through clamped
values is fixed by the grid, not by the runs). For each pair of cells along the axis (sizes at
one budget ordered by N; budgets of one size ordered by C), the sign of S*(larger) - S*(smaller)
on the grid's order is +1, -1, or 0 when equal or when both are censored at the same edge (their
order is then unknown); a censored S* is still ordered against an interior one (S* >= the top
is above every S below it). The statistic is the sum of those signs (Kendall's S over the
pairs, ties at 0), per budget or size and summed over them, and it is recomputed on every
replicate. A trend is "rises" (or "falls") when the replicates' 2.5 % quantile of the sum is
above 0 (97.5 % quantile below 0), "undetermined" otherwise; with 2 seeds "rises" means that
each seed on its own and both together order the cells that way.
"""

from __future__ import annotations

import itertools
import math
from collections import Counter
from dataclasses import dataclass, field
from typing import Optional
from collections.abc import Iterable, Sequence

import numpy as np

EXACT_SEEDS = 7
"""Up to this many seeds every draw with replacement is enumerated (1,716 multisets for 7)."""
MIN_SEEDS_FOR_SHARES = 3
"""A share of replicates ("S* at the edge in 40 %") needs at least this many seeds: with 2
seeds a replicate is one seed, the other, or both, and a share only says whether they agree."""
LEVEL = 0.95
EDGE_TOLERANCE = 1e-9


@dataclass(frozen=True)
class Run:
    """One run of the table: its cell (size, budget), its sparsity, seed and loss."""

    size: str
    budget: str
    flops: float
    """The run's training compute (orders the budgets)."""
    params: float
    """The run's total parameters N."""
    active: float
    """The run's active parameters N_active."""
    sparsity: float
    seed: str
    loss: float


@dataclass
class CellOptimum:
    """S* of one (size, budget) cell: loss against S over the grid's sparsities."""

    size: str
    """The grid's size label."""
    budget: str
    """The budget's label."""
    flops: float
    """The median training compute of the cell's runs."""
    params: list[float]
    """The distinct N of the cell's runs, sorted (one value when N is fixed across S); not
    aligned with ``sparsities``."""
    active: list[float]
    """The distinct N_active of the cell's runs, sorted: ascending, so under fixed_total the
    reverse of ``sparsities``' order."""
    sparsities: list[float]
    """The grid's sparsities the cell has runs at, ascending."""
    mean_loss: list[float]
    """Mean over seeds, per sparsity."""
    seed_loss: dict[str, list[Optional[float]]]
    """Each seed's loss per sparsity (None where the seed has no run)."""
    s_star: float
    """The grid's S of lowest mean loss (a bound, not an estimate, when ``censored``)."""
    censored: Optional[str]
    """"above" when S* is the largest S tried (S* >= it, unbounded), "below" when it is the
    smallest S tried and that is not 0 (S* <= it); None for an interior or dense S*."""
    interval: Optional[list[float]]
    """The replicates' 2.5 % and 97.5 % quantiles of S* (None when the point is censored)."""
    interval_censored: bool
    """Some replicate's S* sits at the grid's top: the interval's upper end is a bound."""
    seed_s_star: dict[str, float]
    """Each seed's own argmin."""
    share_at_edge: Optional[float] = None
    """The share of replicates whose S* is the grid's largest S (>= 3 seeds only)."""

    JSON_EXTRA = ("text",)  # fixed_size.json carries each cell's S* as the report words it

    @property
    def text(self) -> str:
        """"0.75 [0.5, 0.875]", "S* >= 0.875, unbounded", "0.75 [0.5, >= 0.875]"."""
        if self.censored == "above":
            return f"S* ≥ {self.s_star:g}, unbounded"
        if self.censored == "below":
            return f"S* ≤ {self.s_star:g}, unbounded"
        if self.interval is None:
            return f"{self.s_star:g}"
        high = f"≥ {self.interval[1]:g}" if self.interval_censored else f"{self.interval[1]:g}"
        return f"{self.s_star:g} [{self.interval[0]:g}, {high}]"


@dataclass
class TrendTest:
    """An ordinal test of one trend of S* along one axis (sizes or budgets)."""

    claim: str
    """"S* rises with N at fixed C" or "S* falls with C at fixed N" (D for token budgets)."""
    axis: str
    """What the cells are ordered by: "N", "N_active" or "C"."""
    expected_sign: int
    """+1 for "rises", -1 for "falls"."""
    per_group: dict[str, int]
    """The sum of pair signs within each budget (or size), on the pooled seeds."""
    statistic: int
    """The sum over groups, on the pooled seeds."""
    pairs: int
    """The ordered pairs compared (the statistic's range is -pairs..pairs)."""
    undetermined_pairs: int
    """Pairs whose order is unknown: both S* censored at the same edge."""
    interval: Optional[list[float]]
    """The replicates' 2.5 % and 97.5 % quantiles of the statistic (None with one seed)."""
    verdict: str
    """"rises", "falls" (the direction the replicates agree on) or "undetermined" (always with
    one seed: nothing replicates the order)."""
    agrees_with_claim: Optional[bool]
    """True when the verdict is the claim's direction, False when opposite, None undetermined."""
    share_in_claimed_direction: Optional[float] = None
    """The share of replicates with the statistic's sign the claim's (>= 3 seeds only)."""


@dataclass
class FixedSizeAnalysis:
    """S*(N; C) per cell and the trend tests: fixed_size.json."""

    holds_fixed: str
    """"N" (fixed_total: N fixed across S within a size) or "N_active" (fixed_expert: N grows
    with S at a fixed N_active)."""
    budget_kind: str
    """"C" (FLOPs budgets: a cell holds the compute fixed) or "D" (token budgets)."""
    question: str
    """What each cell's curve is, in words."""
    loss_column: str
    """The results.csv column S* minimises (best_val_loss)."""
    seeds: list[str]
    """The seeds resampled whole."""
    draws: int
    """The replicates: every distinct draw (exact) or the sampled ones."""
    exact: bool
    """Every draw enumerated with its probability (<= EXACT_SEEDS seeds)."""
    sparsities: list[float]
    """The grid's sparsities."""
    cells: list[CellOptimum]
    """S* of each (size, budget) cell."""
    rises_with_size: Optional[TrendTest]
    """Whether S* rises with size at a fixed budget; null with one size."""
    falls_with_budget: Optional[TrendTest]
    """Whether S* falls with budget at a fixed size; null with one budget."""
    notes: list[str] = field(default_factory=list)
    """What limits the reading (one seed, how many draws), in words."""


# --------------------------------------------------------------------------------------------
# Resampling whole seeds
# --------------------------------------------------------------------------------------------


def seed_draws(seeds: Sequence[str], replicates: int, rng_seed: int = 0
               ) -> tuple[list[dict[str, int]], np.ndarray, bool]:
    """Draws of the seeds with replacement, as counts per seed, and their probabilities.

    Up to EXACT_SEEDS seeds: every multiset of len(seeds) draws with its multinomial
    probability n! / (prod c_i! n^n); above it ``replicates`` sampled draws, equally weighted.
    """
    n = len(seeds)
    if n <= EXACT_SEEDS:
        draws, weights = [], []
        for combo in itertools.combinations_with_replacement(range(n), n):
            counts = Counter(combo)
            ways = math.factorial(n) / math.prod(math.factorial(c) for c in counts.values())
            draws.append({seeds[i]: c for i, c in counts.items()})
            weights.append(ways / n ** n)
        return draws, np.array(weights), True
    rng = np.random.default_rng(rng_seed)
    draws = [dict(Counter(seeds[i] for i in rng.integers(0, n, n))) for _ in range(replicates)]
    return draws, np.full(replicates, 1.0 / replicates), False


def weighted_quantile(values: Sequence[float] | np.ndarray, weights: np.ndarray,
                      q: float) -> float:
    """The smallest value whose cumulative weight reaches q (an observed value, never between
    two: S* lives on the grid)."""
    order = np.argsort(values, kind="stable")
    cumulative = np.cumsum(np.asarray(weights, dtype=float)[order])
    index = int(np.searchsorted(cumulative, q * cumulative[-1] - 1e-12))
    return float(np.asarray(values, dtype=float)[order][min(index, len(order) - 1)])


# --------------------------------------------------------------------------------------------
# One cell
# --------------------------------------------------------------------------------------------


def _cell_argmin(by_sparsity: dict[float, dict[str, float]], sparsities: list[float],
                 counts: dict[str, int]) -> float:
    """The sparsity of lowest weighted mean loss, each seed weighted by its count in the draw
    (a sparsity none of the drawn seeds ran is skipped; ties go to the lower S)."""
    best, best_loss = None, math.inf
    for sparsity in sparsities:
        runs = by_sparsity[sparsity]
        weight = sum(counts.get(seed, 0) for seed in runs)
        if weight == 0:
            continue
        loss = sum(counts.get(seed, 0) * value for seed, value in runs.items()) / weight
        if loss < best_loss - 1e-15:
            best, best_loss = sparsity, loss
    return best if best is not None else math.nan


def _censoring(s_star: float, sparsities: list[float]) -> Optional[str]:
    if len(sparsities) < 2:
        return None
    if abs(s_star - sparsities[-1]) < EDGE_TOLERANCE:
        return "above"
    if abs(s_star - sparsities[0]) < EDGE_TOLERANCE and sparsities[0] > 0:
        return "below"
    return None


def _cell(runs: list[Run], seeds: list[str], draws, weights) -> tuple[CellOptimum, list[float]]:
    sparsities = sorted({run.sparsity for run in runs})
    by_sparsity: dict[float, dict[str, float]] = {s: {} for s in sparsities}
    for run in runs:
        by_sparsity[run.sparsity][run.seed] = run.loss
    everyone = dict.fromkeys(seeds, 1)
    s_star = _cell_argmin(by_sparsity, sparsities, everyone)
    replicate_stars = [_cell_argmin(by_sparsity, sparsities, counts) for counts in draws]
    censored = _censoring(s_star, sparsities)
    finite = [(s, w) for s, w in zip(replicate_stars, weights) if not math.isnan(s)]
    values, kept = [s for s, _ in finite], np.array([w for _, w in finite])
    interval = None
    if censored is None and values and len(seeds) >= 2:
        tail = (1 - LEVEL) / 2
        interval = [weighted_quantile(values, kept, tail), weighted_quantile(values, kept, 1 - tail)]
    top = sparsities[-1]
    at_edge = float(kept[np.abs(np.array(values) - top) < EDGE_TOLERANCE].sum() / kept.sum()) \
        if values else None
    cell = CellOptimum(
        size=runs[0].size, budget=runs[0].budget,
        flops=float(np.median([run.flops for run in runs])),
        params=sorted({run.params for run in runs}), active=sorted({run.active for run in runs}),
        sparsities=sparsities,
        mean_loss=[float(np.mean(list(by_sparsity[s].values()))) for s in sparsities],
        seed_loss={seed: [by_sparsity[s].get(seed) for s in sparsities] for seed in seeds},
        s_star=s_star, censored=censored, interval=interval,
        interval_censored=bool(interval is not None and abs(interval[1] - top) < EDGE_TOLERANCE
                               and len(sparsities) > 1),
        seed_s_star={seed: _cell_argmin(by_sparsity, sparsities, {seed: 1}) for seed in seeds},
        share_at_edge=at_edge if len(seeds) >= MIN_SEEDS_FOR_SHARES else None)
    return cell, replicate_stars


# --------------------------------------------------------------------------------------------
# The trends
# --------------------------------------------------------------------------------------------


def pair_sign(lower: float, higher: float, lower_censored: Optional[str],
              higher_censored: Optional[str]) -> int:
    """The sign of S*(higher on the axis) - S*(lower on the axis) on the grid's order; 0 when
    equal, and 0 when both are censored at the same edge (their order is unknown)."""
    if lower_censored is not None and lower_censored == higher_censored:
        return 0
    return int(np.sign(higher - lower))


def _trend_statistic(groups: list[list[tuple[float, Optional[str]]]]) -> tuple[list[int], int, int]:
    """Per group (cells along the axis, in order): the sum of pair signs; the pairs and the
    undetermined pairs over all groups."""
    sums, pairs, unknown = [], 0, 0
    for cells in groups:
        total = 0
        for (low, low_edge), (high, high_edge) in itertools.combinations(cells, 2):
            if math.isnan(low) or math.isnan(high):
                continue
            pairs += 1
            unknown += low_edge is not None and low_edge == high_edge
            total += pair_sign(low, high, low_edge, high_edge)
        sums.append(total)
    return sums, pairs, unknown


def _trend(claim: str, axis: str, expected: int, group_names: list[str], point_groups,
           replicate_groups, weights: np.ndarray, seeds: int) -> Optional[TrendTest]:
    """``point_groups``: per group, the cells' (S*, censoring) along the axis on the pooled
    seeds; ``replicate_groups``: the same for every replicate."""
    sums, pairs, unknown = _trend_statistic(point_groups)
    if pairs == 0:
        return None
    replicate_totals = np.array([sum(_trend_statistic(groups)[0]) for groups in replicate_groups])
    tail = (1 - LEVEL) / 2
    interval = None
    verdict = "undetermined"
    if seeds >= 2:
        interval = [weighted_quantile(replicate_totals, weights, tail),
                    weighted_quantile(replicate_totals, weights, 1 - tail)]
        verdict = "rises" if interval[0] > 0 else "falls" if interval[1] < 0 else "undetermined"
    direction = {"rises": 1, "falls": -1}.get(verdict)
    share = float(weights[np.sign(replicate_totals) == expected].sum() / weights.sum())
    return TrendTest(
        claim=claim, axis=axis, expected_sign=expected, per_group=dict(zip(group_names, sums)),
        statistic=int(sum(sums)), pairs=pairs, undetermined_pairs=int(unknown), interval=interval,
        verdict=verdict, agrees_with_claim=None if direction is None else direction == expected,
        share_in_claimed_direction=share if seeds >= MIN_SEEDS_FOR_SHARES else None)


def _censoring_at(star: float, sparsities: list[float]) -> Optional[str]:
    return None if math.isnan(star) else _censoring(star, sparsities)


# --------------------------------------------------------------------------------------------
# The analysis
# --------------------------------------------------------------------------------------------


def fixed_size_optima(runs: Iterable[Run], *, holds_fixed: str = "N", budget_kind: str = "C",
                      loss_column: str = "loss", replicates: int = 1000, rng_seed: int = 0
                      ) -> Optional[FixedSizeAnalysis]:
    """S*(size; budget) per cell and the two trend tests (module docstring); None when no cell
    has two sparsities. ``budget_kind``: "C" for FLOPs budgets, "D" for token budgets (a cell
    then holds the tokens fixed, not the compute)."""
    runs = list(runs)
    cells_runs: dict[tuple[str, str], list[Run]] = {}
    for run in runs:
        cells_runs.setdefault((run.size, run.budget), []).append(run)
    cells_runs = {k: v for k, v in cells_runs.items() if len({r.sparsity for r in v}) >= 2}
    if not cells_runs:
        return None
    seeds = sorted({run.seed for run in runs}, key=_seed_order)
    draws, weights, exact = seed_draws(seeds, replicates, rng_seed)
    cells, stars = {}, {}
    for key, members in cells_runs.items():
        cells[key], stars[key] = _cell(members, seeds, draws, weights)
    size_order = _axis_order(cells.values(), "size")
    budget_order = _axis_order(cells.values(), "budget")
    ordered = sorted(cells.values(), key=lambda c: (budget_order[c.budget], size_order[c.size]))
    rises = _trend_along(cells, stars, weights, len(seeds), along="size", order=size_order,
                         fixed_by=budget_order, claim=f"S* rises with {holds_fixed} at fixed {budget_kind}",
                         axis=holds_fixed, expected=1)
    falls = _trend_along(cells, stars, weights, len(seeds), along="budget", order=budget_order,
                         fixed_by=size_order, claim=f"S* falls with {budget_kind} at fixed {holds_fixed}",
                         axis=budget_kind, expected=-1)
    return FixedSizeAnalysis(
        holds_fixed=holds_fixed, budget_kind=budget_kind,
        question=_question(holds_fixed, budget_kind), loss_column=loss_column,
        seeds=seeds, draws=len(draws), exact=exact,
        sparsities=sorted({run.sparsity for run in runs}), cells=ordered,
        rises_with_size=rises, falls_with_budget=falls, notes=_notes(len(seeds), holds_fixed))


def _trend_along(cells, stars, weights, n_seeds, *, along, order, fixed_by, claim, axis, expected):
    """Group the cells by the fixed axis, order each group along the other, and test."""
    fixed_axis = "budget" if along == "size" else "size"
    groups: dict[str, list] = {}
    for key, cell in cells.items():
        groups.setdefault(getattr(cell, fixed_axis), []).append(key)
    names = sorted((g for g in groups if len(groups[g]) >= 2), key=lambda g: fixed_by[g])
    if not names:
        return None
    for name in names:
        groups[name].sort(key=lambda key: order[getattr(cells[key], along)])
    point = [[(cells[k].s_star, cells[k].censored) for k in groups[g]] for g in names]
    draws = len(next(iter(stars.values())))
    replicate = [[[(stars[k][i], _censoring_at(stars[k][i], cells[k].sparsities))
                   for k in groups[g]] for g in names] for i in range(draws)]
    return _trend(claim, axis, expected, names, point, replicate, weights, n_seeds)


def _axis_order(cells: Iterable[CellOptimum], axis: str) -> dict[str, int]:
    """Sizes ordered by their median N_active, budgets by their median compute."""
    values: dict[str, list[float]] = {}
    for cell in cells:
        values.setdefault(getattr(cell, axis), []).append(
            float(np.median(cell.active)) if axis == "size" else cell.flops)
    ranked = sorted(values, key=lambda name: (float(np.median(values[name])), name))
    return {name: rank for rank, name in enumerate(ranked)}


def _seed_order(seed: str):
    return (0, int(seed), seed) if seed.isdigit() else (1, 0, seed)


def _question(holds_fixed: str, budget_kind: str) -> str:
    budget = ("fixed compute C" if budget_kind == "C"
              else "fixed training tokens D (not fixed compute: sparser models spend fewer FLOPs)")
    if holds_fixed == "N":
        return (f"loss against S at fixed total parameters N and {budget} (each size keeps N "
                "across S)" + (": paper B's fixed-N question" if budget_kind == "C" else ""))
    return (f"loss against S at fixed active parameters N_active and {budget} (N grows with S): "
            "not the fixed-N question")


def _notes(n_seeds: int, holds_fixed: str) -> list[str]:
    notes = []
    if n_seeds == 1:
        notes.append("one seed: no intervals and no trend verdicts (nothing replicates an "
                     "argmin or an order); the S* are the seed's own")
    elif n_seeds < MIN_SEEDS_FOR_SHARES:
        notes.append(f"{n_seeds} seeds: {math.comb(2 * n_seeds - 1, n_seeds)} distinct draws; "
                     "an interval spans the seeds' own argmins and the pooled one, a verdict "
                     "means that each seed alone and both together agree; no shares of "
                     "replicates are given")
    if holds_fixed != "N":
        notes.append("experts keep the dense FFN's width, so N grows with S within a size: the "
                     "trend along sizes is along N_active")
    return notes
