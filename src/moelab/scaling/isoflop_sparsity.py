"""The optimal sparsity per compute budget read off the IsoFLOP minima directly, with no law.

A law form can decide the answer before the data do: in the effective-size form
L = b / D^beta + d / ((1 - S)^delta N^gamma) + e, optimising over N leaves
L - e ~ C^(-beta gamma / (beta + gamma)) g(S), so its S* cannot move with C. This module asks the
IsoFLOP points themselves (Hoffmann et al.'s approach 2, per sparsity):

1. per budget C and sparsity S, loss is fitted as a parabola in log N; its vertex gives
   N*(C, S) and L*(C, S) (``moelab.scaling.isoflop_vertex``: by default through the sizes
   within 3x of the vertex, recomputed on every replicate; each cell reports the sizes used and
   its diagnostics);
2. per budget, S*(C) is where L*(C, S) is lowest: the sampled sparsity with the lowest L*
   (``best_sampled``), and, between the sampled ones, the vertex of a parabola of L*(C, S) in
   u = -log(1 - S) kept inside the sampled range (``sparsity``). Where that lands on the largest
   (or smallest) sampled sparsity, S* is only bounded by the grid (``at_edge``);
3. across budgets, the slope of S*(C) against log10 C is the statistic of how S* moves with
   compute (with N free, Abnar et al. 2025 find S* at the top of their grid at every budget,
   §3), meaningful only when no S* is clamped to the grid's edge (``clamped``: a slope through
   a clamped S* is not an estimate); so is, per sparse S, the slope of L*(C, 0) - L*(C, S), the
   sparse model's advantage over dense.

Intervals come from one bootstrap over the whole table: within each size and sparsity the seeds
are drawn with replacement, and a drawn seed brings its points at every budget (a wsd budget
family shares its run up to each decay, so its budgets move together and are resampled
together), its deviations from the seeds' mean scaled by sqrt(n / (n - 1)) so that n seeds'
resamples keep their mean's variance. Every quantity above is recomputed on each replicate;
95 % percentile intervals. A
replicate whose parabola opens downward has no minimum: beyond ``MAX_FAILED_FRACTION`` of
them the interval is reported as not finite (None). Without two seeds per size and sparsity
there is nothing to resample and no intervals are given.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional
from collections.abc import Sequence

import numpy as np

from moelab.scaling.fitting import percentile_interval
from moelab.scaling.isoflop import IsoflopPoints
from moelab.scaling.isoflop_vertex import (
    WINDOW_FACTOR, VertexEstimator, VertexFit, VertexSupport, check_estimator, vertex_support,
)

EDGE_TOLERANCE = 1e-9
"""|u* - u at a grid end| (u = -log(1 - S)) under which S* sits on the grid's edge."""
MAX_FAILED_FRACTION = 0.025
"""Replicates without a minimum beyond which an interval is not finite (the 2.5 % tail)."""


@dataclass
class IsoflopCell:
    """One (budget, sparsity) IsoFLOP curve's minimum N*(C, S), L*(C, S) with intervals."""

    flops: float
    """The FLOPs budget C."""
    sparsity: float
    """The curve's sparsity S."""
    n_points: int
    """Runs on the curve."""
    n_sizes: int
    """Distinct sizes on it."""
    sizes_used: Optional[list[float]]
    """The sizes the vertex was read from; None without a vertex."""
    support: Optional[VertexSupport]
    """The vertex's diagnostics; null without a vertex."""
    warnings: list[str]
    """What makes the vertex doubtful, in words."""
    params: Optional[float]
    """N*; None when the curve has no minimum."""
    params_ci: Optional[list[float]]
    """N*'s bootstrap 95 % interval."""
    loss: Optional[float]
    """L*(C, S), the loss at the vertex; null without a minimum."""
    loss_ci: Optional[list[float]]
    """Its bootstrap 95 % interval."""
    inside_data: bool
    """The vertex lies within the sizes fitted."""
    replicates_without_minimum: int
    """Bootstrap resamples whose curve had no minimum."""


@dataclass
class SparsityOptimum:
    """S*(C) at one budget: the vertex in u = -log(1 - S) and the best sampled sparsity."""

    flops: float
    """The FLOPs budget C."""
    sparsity: Optional[float]
    """None when some sparsity has no minimum at this budget."""
    at_edge: Optional[str]
    """"upper" or "lower" when S* sits on the grid's end (only a bound), else None."""
    ci: Optional[list[float]]
    """S*'s bootstrap 95 % interval."""
    best_sampled: Optional[float]
    """The sampled sparsity with the lowest L*(C, S)."""
    best_sampled_ci: Optional[list[float]]
    """Its bootstrap 95 % percentile interval (of the best sampled S per resample)."""
    probability_best: dict[str, float]
    """Per sampled sparsity (keyed ``f"{S:g}"``): the share of replicates in which it is best."""


@dataclass
class SparsityTrend:
    """How S*(C) moves with compute: its slope per decade of C with a bootstrap interval."""

    statistic: str
    """What the slope measures, in words."""
    slope_per_decade: Optional[float]
    """The change of S* per tenfold of C; null without two budgets."""
    ci: Optional[list[float]]
    """Its bootstrap 95 % interval."""
    n_budgets: int
    """Budgets with an S*."""
    p_not_rising: Optional[float]
    """The bootstrap's one-sided p of "no rise": the share of replicates with slope <= 0."""
    rises: bool
    """The interval lies above 0."""
    falls: bool
    """The interval lies below 0."""
    clamped: bool
    """Some S* sits on the grid's edge: the slope then measures where the grid ends."""


@dataclass
class AdvantageTrend:
    """Per sparse S: L*(C, 0) - L*(C, S) per budget and its slope per decade of C."""

    sparsity: float
    """The sparse S."""
    advantage: list[Optional[float]]
    """L*(C, 0) - L*(C, S) per budget (positive: sparse is better); null where a curve has no
    minimum."""
    slope_per_decade: Optional[float]
    """Its change per tenfold of C."""
    ci: Optional[list[float]]
    """Its bootstrap 95 % interval."""


@dataclass
class SparsityOptima:
    """``sparsity_isoflop``'s answer (isoflop.json's ``sparsity_optima``)."""

    estimator: str
    """How each curve's vertex is read: window or global (as IsoflopAnalysis)."""
    window_factor: Optional[float]
    """The window's factor; null for the global parabola."""
    budgets: list[float]
    """The FLOPs budgets, smallest first."""
    sparsities: list[float]
    """The sparsities of the grid."""
    replicates: int
    """Bootstrap resamples behind the intervals."""
    resampling: str
    """What a bootstrap resample draws, in words."""
    cells: list[IsoflopCell]
    """Each (budget, sparsity) curve's minimum."""
    optimal_sparsity: list[SparsityOptimum]
    """S*(C) at each budget."""
    trend: SparsityTrend
    """How S*(C) moves with compute."""
    advantage_trend: list[AdvantageTrend]
    """Per sparse S, its loss advantage over dense across budgets."""


def sparsity_isoflop(points: IsoflopPoints, seeds: np.ndarray, *,
                     replicates: int = 200, seed: int = 0, estimator: str = "window",
                     window_factor: float = WINDOW_FACTOR) -> SparsityOptima | None:
    """N*, L* per (C, S), S*(C) and the trend of S* with C, with bootstrap intervals.

    ``points``: N, C (the budget), S and loss; ``seeds``: each point's training seed (the
    resampling unit). ``estimator`` and ``window_factor``: how each IsoFLOP vertex is read
    (``isoflop_vertex.fit_vertex``). None when fewer than two sparsities have a parabola at
    two budgets."""
    check_estimator(estimator, window_factor)
    table = _Table(points, np.asarray(seeds), estimator, window_factor)
    estimate = table.solve(np.ones(len(table.loss)), keep_fits=True)
    if np.sum(np.isfinite(estimate.loss).sum(axis=0) >= 2) < 2:
        return None
    draws = table.bootstrap_weights(replicates, seed)
    adjusted = table.adjusted_loss()
    solved = [table.solve(weights, adjusted) for weights in draws] if draws is not None else []
    return SparsityOptima(
        estimator=estimator, window_factor=window_factor if estimator == "window" else None,
        budgets=table.budgets.tolist(), sparsities=table.sparsities.tolist(),
        replicates=len(solved),
        resampling=("seeds within each size and sparsity, a seed's points at every budget "
                    "together" if solved else "none: one seed per size and sparsity"),
        cells=_cells(table, estimate, solved),
        optimal_sparsity=_optima(table, estimate, solved),
        trend=_trend(table, estimate, solved),
        advantage_trend=_advantage_trends(table, estimate, solved),
    )


class _Solution:
    """One table's answers: (budgets, sparsities) arrays of log N* and L* (nan: no minimum),
    and per budget the S* estimates."""

    def __init__(self, log_params, loss, inside, sparsities, fits=None):
        self.log_params, self.loss, self.inside = log_params, loss, inside
        self.fits: dict[tuple[int, int], VertexFit] = fits or {}
        self.best_sampled = np.array([_best_sampled(row, sparsities) for row in loss])
        vertices = [_vertex_sparsity(row, sparsities) for row in loss]
        self.sparsity = np.array([v[0] for v in vertices])
        self.edge = [v[1] for v in vertices]
        """Per budget: "upper" or "lower" when S* sits on the grid's end, else None."""


class _Table:
    def __init__(self, points: IsoflopPoints, seeds: np.ndarray, estimator: str,
                 window_factor: float):
        self.vertices = VertexEstimator(estimator, window_factor)
        self.log_n = np.log(points.params)
        self.loss = np.asarray(points.loss, dtype=np.float64)
        self.budgets = np.unique(points.flops)
        self.sparsities = np.unique(points.sparsity)
        self.budget_index = np.searchsorted(self.budgets, points.flops)
        self.sparsity_index = np.searchsorted(self.sparsities, points.sparsity)
        self.seeds = seeds
        self.sizes = points.params

    def cell(self, c: int, s: int) -> np.ndarray:
        return np.flatnonzero((self.budget_index == c) & (self.sparsity_index == s))

    def adjusted_loss(self) -> np.ndarray:
        """Each point's loss with its deviation from the mean of its seeds (same size,
        sparsity and budget) scaled by sqrt(n / (n - 1)): resampling n seeds with replacement
        shrinks the variance of their mean by (n - 1) / n, which with 2 or 3 seeds would leave
        the intervals a fifth to a third too narrow (Davison & Hinkley's adjusted residuals)."""
        adjusted = self.loss.copy()
        groups: dict[tuple, list[int]] = {}
        for index, key in enumerate(zip(self.sizes, self.sparsity_index, self.budget_index)):
            groups.setdefault(key, []).append(index)
        for indices in groups.values():
            if len(indices) > 1:
                values = self.loss[indices]
                scale = math.sqrt(len(values) / (len(values) - 1))
                adjusted[indices] = values.mean() + scale * (values - values.mean())
        return adjusted

    def solve(self, weights: np.ndarray, point_loss: np.ndarray | None = None,
              keep_fits: bool = False) -> _Solution:
        shape = (len(self.budgets), len(self.sparsities))
        log_params, loss = np.full(shape, np.nan), np.full(shape, np.nan)
        inside = np.zeros(shape, dtype=bool)
        fits = {}
        values = self.loss if point_loss is None else point_loss
        for c in range(shape[0]):
            for s in range(shape[1]):
                points = self.cell(c, s)
                fit = self.vertices.fit(self.log_n[points], values[points], weights[points])
                if fit is not None:
                    log_params[c, s], loss[c, s], inside[c, s] = fit.log_params, fit.loss, fit.inside
                    if keep_fits:
                        fits[c, s] = fit
        return _Solution(log_params, loss, inside, self.sparsities, fits)

    def bootstrap_weights(self, replicates: int, seed: int) -> list[np.ndarray] | None:
        """Point multiplicities per replicate: per (size, sparsity), seeds drawn with
        replacement; None when some size and sparsity has one seed."""
        strata: dict[tuple, dict] = {}
        for index, key in enumerate(zip(self.sizes, self.sparsity_index)):
            strata.setdefault(key, {}).setdefault(self.seeds[index], []).append(index)
        if replicates <= 0 or any(len(by_seed) < 2 for by_seed in strata.values()):
            return None
        rng = np.random.default_rng(seed)
        draws = []
        for _ in range(replicates):
            weights = np.zeros(len(self.loss))
            for by_seed in strata.values():
                units = list(by_seed.values())
                for pick in rng.integers(len(units), size=len(units)):
                    weights[units[pick]] += 1.0
            draws.append(weights)
        return draws


def _best_sampled(loss_row: np.ndarray, sparsities: np.ndarray) -> float:
    """The sampled sparsity with the lowest L* (nan when any L* is missing: the comparison
    would be over a different set of sparsities)."""
    if not np.all(np.isfinite(loss_row)):
        return math.nan
    return float(sparsities[int(np.argmin(loss_row))])


def _vertex_sparsity(loss_row: np.ndarray, sparsities: np.ndarray) -> tuple[float, str | None]:
    """Where a parabola of L* in u = -log(1 - S) is lowest inside the sampled u range (an end
    when it opens downward); the sampled argmin with two sparsities. With it, "upper" or
    "lower" when that is an end of the grid (S* is then only bounded), else None."""
    if not np.all(np.isfinite(loss_row)):
        return math.nan, None
    u = -np.log1p(-sparsities)
    if len(u) < 3:
        best = -math.log1p(-_best_sampled(loss_row, sparsities))
    else:
        c2, c1, _ = np.polyfit(u, loss_row, 2)
        candidates = [u.min(), u.max()] + ([-c1 / (2 * c2)] if c2 > 0 else [])
        candidates = [x for x in candidates if u.min() <= x <= u.max()]
        best = min(candidates, key=lambda x: c2 * x * x + c1 * x)
    edge = ("upper" if best >= u.max() - EDGE_TOLERANCE else
            "lower" if best <= u.min() + EDGE_TOLERANCE else None)
    return float(-math.expm1(-best)), edge


def _interval(values: Sequence[float] | np.ndarray) -> list[float] | None:
    """95 % percentile interval of replicate values; None without replicates or when more than
    MAX_FAILED_FRACTION of them have no value (the tail is not bounded)."""
    values = np.asarray(values, dtype=np.float64)
    if not len(values) or np.mean(~np.isfinite(values)) > MAX_FAILED_FRACTION:
        return None
    return list(percentile_interval(values[np.isfinite(values)]))


def _cells(table: _Table, estimate: _Solution, solved: list[_Solution]) -> list[IsoflopCell]:
    rows = []
    for c, flops in enumerate(table.budgets):
        for s, sparsity in enumerate(table.sparsities):
            points = table.cell(c, s)
            log_n = np.array([r.log_params[c, s] for r in solved])
            losses = np.array([r.loss[c, s] for r in solved])
            found = math.isfinite(estimate.loss[c, s])
            fit = estimate.fits.get((c, s))
            support = None if fit is None else vertex_support(
                fit, table.log_n[points], table.loss[points], table.seeds[points],
                table.vertices.estimator)
            rows.append(IsoflopCell(
                flops=float(flops), sparsity=float(sparsity), n_points=int(len(points)),
                n_sizes=int(len(np.unique(table.log_n[points]))),
                sizes_used=None if fit is None else fit.sizes_used, support=support,
                warnings=[] if support is None else support.warnings,
                params=math.exp(estimate.log_params[c, s]) if found else None,
                params_ci=(None if (ci := _interval(log_n)) is None
                           else [math.exp(ci[0]), math.exp(ci[1])]),
                loss=float(estimate.loss[c, s]) if found else None,
                loss_ci=_interval(losses),
                inside_data=bool(estimate.inside[c, s]),
                replicates_without_minimum=int(np.sum(~np.isfinite(losses))),
            ))
    return rows


def _optima(table: _Table, estimate: _Solution,
            solved: list[_Solution]) -> list[SparsityOptimum]:
    rows = []
    for c, flops in enumerate(table.budgets):
        best = np.array([r.best_sampled[c] for r in solved])
        finite = best[np.isfinite(best)]
        rows.append(SparsityOptimum(
            flops=float(flops),
            sparsity=_finite_or_none(estimate.sparsity[c]),
            at_edge=estimate.edge[c],
            ci=_interval([r.sparsity[c] for r in solved]),
            best_sampled=_finite_or_none(estimate.best_sampled[c]),
            best_sampled_ci=_interval(best),
            probability_best=({f"{s:g}": float(np.mean(finite == s)) for s in table.sparsities}
                              if len(finite) else {}),
        ))
    return rows


def _finite_or_none(value: float) -> float | None:
    return float(value) if math.isfinite(value) else None


def _slope(log_flops: np.ndarray, values: np.ndarray) -> float:
    """Least-squares slope of values against log10 C over the budgets that have a value."""
    keep = np.isfinite(values)
    if keep.sum() < 2:
        return math.nan
    return float(np.polyfit(log_flops[keep], values[keep], 1)[0])


def _trend(table: _Table, estimate: _Solution, solved: list[_Solution]) -> SparsityTrend:
    """Slope of S*(C) per decade of C, its interval and the bootstrap's one-sided p of "no
    rise" (the share of replicates whose slope is <= 0); ``rises`` when the interval is above 0.
    ``clamped`` when some budget's S* sits on the grid's edge: the slope then measures where
    the grid ends, not where S* is, and is no test (reports print no slope then)."""
    log_flops = np.log10(table.budgets)
    slopes = np.array([_slope(log_flops, r.sparsity) for r in solved])
    ci = _interval(slopes)
    return SparsityTrend(
        statistic="slope of S*(C) per decade of C",
        slope_per_decade=_finite_or_none(_slope(log_flops, estimate.sparsity)),
        ci=ci, n_budgets=int(np.isfinite(estimate.sparsity).sum()),
        p_not_rising=(float(np.mean(slopes[np.isfinite(slopes)] <= 0))
                      if np.isfinite(slopes).any() else None),
        rises=bool(ci is not None and ci[0] > 0),
        falls=bool(ci is not None and ci[1] < 0),
        clamped=any(edge is not None for edge in estimate.edge))


def _advantage_trends(table: _Table, estimate: _Solution,
                      solved: list[_Solution]) -> list[AdvantageTrend]:
    """Per sparse S: the slope per decade of C of L*(C, 0) - L*(C, S) (positive: sparsity's
    advantage over dense grows with compute)."""
    if table.sparsities[0] != 0.0:
        return []
    log_flops = np.log10(table.budgets)
    rows = []
    for s in range(1, len(table.sparsities)):
        slopes = np.array([_slope(log_flops, r.loss[:, 0] - r.loss[:, s]) for r in solved])
        advantage = estimate.loss[:, 0] - estimate.loss[:, s]
        rows.append(AdvantageTrend(
            sparsity=float(table.sparsities[s]),
            advantage=[_finite_or_none(v) for v in advantage],
            slope_per_decade=_finite_or_none(_slope(log_flops, advantage)),
            ci=_interval(slopes)))
    return rows
