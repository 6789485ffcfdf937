"""IsoFLOP analysis (Hoffmann et al. 2022, approach 2; Abnar et al. 2025 for sparsity).

Runs are grouped by compute budget C. Per budget:

- dense (no S column, or one sparsity): loss is fitted as a parabola in log N; its vertex is the
  compute-optimal size N*(C). By default the parabola goes through the sizes near the lowest
  loss only (``moelab.scaling.isoflop_vertex``: a window of sizes within 3x of the vertex);
  ``estimator="global"`` fits every size, as Hoffmann et al. did;
- with several sparsities: loss is fitted as a full quadratic surface in x = log N and
  y = -log(1 - S) (after Abnar et al.'s eq. 8, which adds an (x y)^2 term and chooses its
  degrees by cross-validation), minimised inside the box of the
  observed points, giving N*(C) and S*(C); N_active*(C) follows from the points' own
  N_active / N ratios (``estimate_shared_fraction``). With the window estimator, the surface
  goes through each sparsity's windowed sizes only.

Every budget row carries its diagnostics (``support``: the sizes used, the grid's span and
balance about the vertex, the residuals against the seeds' noise) and its ``warnings``.

Across budgets, log N*(C) = a log C + log k is fitted by least squares (N* = k C^a; Chinchilla's
own IsoFLOP analysis gives a = 0.49, Besiroglu et al.'s refit ~0.5), on the budgets whose optimum
lies inside the data only (see ``isoflop_analysis``), with a 95 % t interval from the budgets'
scatter about the line.

Runs are grouped by their *nominal* budget. A run's actual compute can miss it (a sweep rounds D
down to whole optimizer steps); ``compute_deviation`` measures by how much, and runs beyond
``COMPUTE_TOLERANCE`` are flagged in the sweep report.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

import numpy as np
import scipy.optimize

from moelab.errors import MoelabError, short_repr
from moelab.scaling.family import active_params, estimate_shared_fraction
from moelab.scaling.isoflop_vertex import (
    MIN_SIZES, WINDOW_FACTOR, VertexEstimator, VertexSupport, check_estimator, vertex_support,
)
from moelab.scaling.table import (
    numeric_column, read_csv_rows, require_column, validate_columns, with_default_columns,
)
from moelab.stats.intervals import t_interval

MIN_POINTS_PARABOLA = MIN_SIZES
SEED_COLUMN = "seed"
"""A table's seed column, read when present: the seeds' scatter is the noise the IsoFLOP fits'
residuals are compared with, and the unit S*'s bootstrap resamples."""
MIN_POINTS_SURFACE = 6
COMPUTE_TOLERANCE = 0.02
"""|C / C_budget - 1| above which a run is flagged as off its IsoFLOP budget. A rule of thumb:
with a data exponent beta ~ 0.3, 2 % less compute raises the data term of the loss by ~0.6 %,
small next to the seed noise of short runs; further off, a reader should know the point does
not sit on its budget's curve."""


@dataclass
class IsoflopPoints:
    """The runs an IsoFLOP analysis reads, one array entry per run."""

    params: np.ndarray
    """N, total parameters."""
    flops: np.ndarray
    """C: the budget the run is grouped under."""
    loss: np.ndarray
    sparsity: np.ndarray
    """S (zeros for dense runs)."""
    params_active: Optional[np.ndarray] = None
    """N_active, when the table has it: it gives the family's shared fraction."""
    seed: Optional[np.ndarray] = None
    """Each run's seed (strings), when known: the seeds' scatter is the noise the fits'
    residuals are compared with."""

    @classmethod
    def from_columns(cls, columns: dict[str, np.ndarray]) -> IsoflopPoints:
        """From a law table's columns N, C, loss and, where present, S, N_active and seed."""
        params = np.asarray(columns["N"], dtype=np.float64)
        sparsity = columns.get("S")
        return cls(params=params, flops=np.asarray(columns["C"], dtype=np.float64),
                   loss=np.asarray(columns["loss"], dtype=np.float64),
                   sparsity=np.zeros(len(params)) if sparsity is None else np.asarray(sparsity),
                   params_active=columns.get("N_active"), seed=columns.get("seed"))

    def subset(self, mask: np.ndarray) -> IsoflopPoints:
        """The runs where ``mask`` is true."""
        return IsoflopPoints(
            params=self.params[mask], flops=self.flops[mask], loss=self.loss[mask],
            sparsity=self.sparsity[mask],
            params_active=None if self.params_active is None else self.params_active[mask],
            seed=None if self.seed is None else self.seed[mask])


@dataclass
class SurfaceFit:
    """The minimum of a quadratic surface in (log N, -log(1 - S)) inside the observed box."""

    coefficients: list[float]
    """c0 + c1 x + c2 y + c3 x^2 + c4 x y + c5 y^2 with x = log N, y = -log(1 - S)."""
    log_params: float
    sparsity: float
    loss: float
    at_edge: bool
    """The minimum lies on the edge of the box (a bound, not an optimum)."""


@dataclass
class ParabolaBudget:
    """One budget's optimum from a parabola in log N (one sparsity)."""

    flops: float
    """The FLOPs budget C."""
    n_points: int
    """Runs at this budget."""
    params: float
    """N*: the parabola's vertex."""
    loss: float
    """The loss at the vertex."""
    parabola: list[float]
    """c2, c1, c0 in log N."""
    inside_data: bool
    """The vertex lies within the sizes fitted (otherwise an extrapolation)."""
    support: VertexSupport
    """Which sizes the vertex stands on, and its diagnostics."""
    warnings: list[str]
    """What makes the vertex doubtful, in words; [] when nothing does."""


@dataclass
class SurfaceBudget:
    """One budget's optimum (N*, S*) from a quadratic surface in (log N, -log(1 - S)).

    Files written before the window estimator lack ``n_points_used``, ``support`` and
    ``warnings``: they read as None and empty."""

    flops: float
    """The FLOPs budget C."""
    n_points: int
    """Runs at this budget."""
    params: float
    """N*: total parameters at the surface's minimum."""
    sparsity: float
    """S* at the surface's minimum."""
    loss: float
    """The loss there."""
    surface: list[float]
    """``SurfaceFit.coefficients``."""
    at_edge: bool
    """The minimum sits on the edge of the sampled region."""
    inside_data: bool
    """The minimum lies within the sizes and sparsities fitted."""
    n_points_used: Optional[int] = field(default=None, metadata={"omit_none": True})
    """Runs the surface was fitted to (the windowed sizes')."""
    support: dict[str, VertexSupport] = field(default_factory=dict)
    """Each sparsity's own vertex (keyed ``f"{S:g}"``), whose windowed sizes the surface used."""
    warnings: list[str] = field(default_factory=list)
    """What makes the minimum doubtful, in words."""
    params_active: Optional[float] = field(default=None, metadata={"omit_none": True})
    """N_active*, when the runs give the family's shared fraction."""


BudgetOptimum = ParabolaBudget | SurfaceBudget


@dataclass
class PowerLawFit:
    """log N* = a log C + log k across budgets."""

    exponent: float
    """a, in N* = k C^a."""
    coefficient: float
    """k, in N* = k C^a."""
    n_budgets: int
    """Budgets fitted."""
    ci: Optional[list[float]]
    """a's 95 % t interval; None from 2 budgets (no degrees of freedom left)."""


@dataclass(kw_only=True)
class IsoflopAnalysis:
    """Per-budget optima and N*(C) = k C^a across budgets (``isoflop_analysis``). Files written
    before the window estimator lack ``estimator``, ``window_factor`` and ``poorly_supported``:
    they read as the global parabola they used."""

    estimator: str = "global"
    """How each budget's vertex is read: window (a parabola over the sizes near the minimum) or
    global (every size, as Hoffmann et al.)."""
    window_factor: Optional[float] = None
    """The window's factor; None for the global parabola."""
    budgets: list[BudgetOptimum]
    """Each budget's optimum, smallest budget first."""
    shared_fraction: Optional[float]
    """The runs' share of parameters outside the experts (null when every run is dense)."""
    params_exponent: Optional[PowerLawFit]
    """N*(C) = k C^a fitted across the budgets inside the data; null with fewer than 2."""
    outside_data: list[float]
    """The budgets whose optimum lies outside the data, left out of the exponent fit."""
    poorly_supported: list[float] = field(default_factory=list)
    """The budgets with a warning."""


def read_isoflop_table(path: str | Path, column_map: dict[str, str] | None = None,
                       where: list[str] | None = None,
                       seed_column: str | None = None) -> IsoflopPoints:
    """Columns N, C (the IsoFLOP budget), loss, and S / N_active when present (validated as for
    ``moelab fit``: N, C, N_active, loss > 0 and S in [0, 1)); ``seed`` (strings) from
    ``seed_column``, which must then be a column, else from a 'seed' column with a value in
    every row."""
    path = Path(path)
    header, rows = read_csv_rows(path)
    # In moelab's results.csv, C is a run's actual compute and C_budget the budget it was
    # planned for: the IsoFLOP curves group runs by the budget.
    names = {key: key for key in ("N", "C", "S", "N_active", "loss")}
    names.update(with_default_columns(header, column_map))
    if "C_budget" in header and (column_map or {}).get("C") is None:
        names["C"] = "C_budget"
        if not any((row.get("C_budget") or "").strip() for row in rows):
            raise MoelabError(
                f"{path}: C_budget is empty in every row: these runs had token budgets, and an "
                "IsoFLOP analysis needs runs grouped by FLOPs budget (a sweep with "
                "flops_budgets), or --columns C=C to group them by their actual compute")
    for condition in where or []:
        key, sep, value = condition.partition("=")
        if not sep or key not in header:
            raise MoelabError(
                f"--where {short_repr(condition)} is invalid: expected COLUMN=VALUE with COLUMN one of "
                f"{', '.join(header)}"
            )
        rows = [row for row in rows if row[key] == value]
    if not rows:
        raise MoelabError(f"{path}: no rows left after --where {' '.join(where or [])}")
    for key in ("N", "C", "loss"):
        require_column(path, header, names[key], key)
    columns = {key: numeric_column(path, rows, names[key])
               for key in ("N", "C", "S", "N_active", "loss") if names[key] in header}
    validate_columns(path, columns)
    if seed_column is not None and seed_column not in header:  # else: "one seed per point"
        raise MoelabError(f"--seed-column {short_repr(seed_column)} is not a column of {path}; "
                          f"found: {', '.join(header)}")
    seed_column = seed_column or SEED_COLUMN
    if seed_column in header and all((row[seed_column] or "").strip() for row in rows):
        columns["seed"] = np.array([row[seed_column].strip() for row in rows])
    return IsoflopPoints.from_columns(columns)


def compute_deviation(actual_flops, budget_flops) -> np.ndarray:
    """C / C_budget - 1 per run: how far a run's actual compute is from its IsoFLOP budget."""
    actual = np.asarray(actual_flops, dtype=np.float64)
    return actual / np.asarray(budget_flops, dtype=np.float64) - 1.0


def _surface_terms(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    return np.stack([np.ones_like(x), x, y, x * x, x * y, y * y], axis=1)


def fit_surface(log_params: np.ndarray, sparsity: np.ndarray, loss: np.ndarray) -> SurfaceFit:
    """Quadratic surface in (log N, -log(1-S)), minimised inside the observed box."""
    y = -np.log1p(-sparsity)
    coefficients, *_ = np.linalg.lstsq(_surface_terms(log_params, y), loss, rcond=None)
    box = [(float(log_params.min()), float(log_params.max())), (float(y.min()), float(y.max()))]

    def surface(point):
        return float((_surface_terms(np.array([point[0]]), np.array([point[1]])) @ coefficients)[0])

    stationary = _stationary_point(coefficients)
    if stationary is not None and all(lo <= v <= hi for v, (lo, hi) in zip(stationary, box)):
        x_star, y_star = stationary
        return SurfaceFit([float(c) for c in coefficients], log_params=float(x_star),
                          sparsity=float(-math.expm1(-y_star)), loss=surface(stationary),
                          at_edge=False)
    # Otherwise the minimum lies on the edge of the box: search it numerically.
    grid_x, grid_y = np.meshgrid(np.linspace(*box[0], 101), np.linspace(*box[1], 101))
    values = _surface_terms(grid_x.ravel(), grid_y.ravel()) @ coefficients
    start = int(np.argmin(values))
    best = scipy.optimize.minimize(surface, [grid_x.ravel()[start], grid_y.ravel()[start]],
                                   method="L-BFGS-B", bounds=box)
    x_star, y_star = best.x
    at_edge = any(min(v - lo, hi - v) <= 1e-6 * max(1.0, hi - lo)
                  for v, (lo, hi) in zip(best.x, box))
    return SurfaceFit([float(c) for c in coefficients], log_params=float(x_star),
                      sparsity=float(-math.expm1(-y_star)), loss=float(best.fun),
                      at_edge=bool(at_edge))


def _stationary_point(coefficients: np.ndarray) -> tuple[float, float] | None:
    """The minimum of the quadratic surface when its Hessian is positive definite."""
    _, cx, cy, cxx, cxy, cyy = coefficients
    hessian = np.array([[2 * cxx, cxy], [cxy, 2 * cyy]])
    if np.any(np.linalg.eigvalsh(hessian) <= 0):
        return None
    x_star, y_star = np.linalg.solve(hessian, [-cx, -cy])
    return float(x_star), float(y_star)


def budget_fit_loss(budget: BudgetOptimum, log_params: np.ndarray,
                    sparsity: float = 0.0) -> np.ndarray:
    """The loss a budget row of ``isoflop_analysis`` fitted, along ``log_params`` (log N): its
    parabola, or its surface's slice at ``sparsity`` (a parabola in log N too)."""
    log_params = np.asarray(log_params, dtype=np.float64)
    if isinstance(budget, ParabolaBudget):
        return np.polyval(budget.parabola, log_params)
    y = np.full_like(log_params, -math.log1p(-sparsity))
    return _surface_terms(log_params, y) @ np.asarray(budget.surface)


def isoflop_analysis(points: IsoflopPoints, *, estimator: str = "window",
                     window_factor: float = WINDOW_FACTOR) -> IsoflopAnalysis:
    """Per-budget optima and the power law N*(C) = k C^a across budgets.

    Every budget row says whether its optimum lies inside the data (``inside_data``): a
    parabola's vertex within the sizes it was fitted to, or a surface minimum off the edge of
    the sampled box. Only those budgets enter the exponent fit: an optimum outside the data is
    an extrapolation (or, on the edge, only a bound), so it would bend the exponent towards the
    sizes that happened to be sampled. ``outside_data`` lists the budgets left out;
    ``poorly_supported`` those with a warning (``isoflop_vertex.VertexSupport``).
    """
    check_estimator(estimator, window_factor)
    has_sparsity = uses_surface(points)
    shared = None
    if has_sparsity and points.params_active is not None:
        shared = estimate_shared_fraction(points.params, points.params_active, points.sparsity)
    vertices = VertexEstimator(estimator, window_factor)
    budgets = []
    for flops in np.unique(points.flops):
        at_budget = points.subset(np.isclose(points.flops, flops, rtol=1e-6))
        budget = (_surface_row(float(flops), at_budget, shared, vertices) if has_sparsity
                  else _parabola_row(float(flops), at_budget, vertices))
        if budget is not None:
            budgets.append(budget)
    inside = [b for b in budgets if b.inside_data]
    exponent = _power_law([b.flops for b in inside], [b.params for b in inside])
    return IsoflopAnalysis(
        estimator=estimator, window_factor=window_factor if estimator == "window" else None,
        budgets=budgets, shared_fraction=shared, params_exponent=exponent,
        outside_data=[b.flops for b in budgets if not b.inside_data],
        poorly_supported=[b.flops for b in budgets if b.warnings])


def uses_surface(points: IsoflopPoints) -> bool:
    """Several sparsities: a surface per budget (rows with S*); else a parabola (N* only)."""
    return len(np.unique(points.sparsity)) > 1


def _surface_row(flops: float, points: IsoflopPoints, shared: float | None,
                 vertices: VertexEstimator) -> SurfaceBudget | None:
    """N*, S* of one budget from the quadratic surface through each sparsity's windowed sizes;
    None with too few points to fit it."""
    keep, support = _windowed_points(points, vertices)
    log_n, sparsity = np.log(points.params[keep]), points.sparsity[keep]
    if (len(log_n) < MIN_POINTS_SURFACE or len(np.unique(sparsity)) < 2
            or len(np.unique(log_n)) < 2):
        return None
    surface = fit_surface(log_n, sparsity, points.loss[keep])
    warnings = [f"S={s}: {w}" for s, one in support.items() for w in one.warnings]
    if surface.at_edge:
        warnings.insert(0, "minimum on the edge of the sizes and sparsities fitted (a bound)")
    params = math.exp(surface.log_params)
    return SurfaceBudget(
        flops=flops, n_points=len(points.params), params=params, sparsity=surface.sparsity,
        loss=surface.loss, surface=surface.coefficients, at_edge=surface.at_edge,
        inside_data=not surface.at_edge, n_points_used=int(keep.sum()), support=support,
        warnings=warnings,
        params_active=(None if shared is None
                       else float(active_params(params, surface.sparsity, shared))))


def _windowed_points(points: IsoflopPoints,
                     vertices: VertexEstimator) -> tuple[np.ndarray, dict[str, VertexSupport]]:
    """The points the surface is fitted to: per sparsity, those at the sizes its own IsoFLOP
    vertex used (all of them where it has no vertex), and that vertex's diagnostics."""
    keep = np.zeros(len(points.params), dtype=bool)
    support = {}
    log_n_all = np.log(points.params)
    for sparsity in np.unique(points.sparsity):
        mask = points.sparsity == sparsity
        fit = vertices.fit(log_n_all[mask], points.loss[mask])
        if fit is None:
            keep |= mask
            continue
        keep |= mask & fit.uses(points.params)
        seeds = points.seed[mask] if points.seed is not None else None
        support[f"{sparsity:g}"] = vertex_support(
            fit, log_n_all[mask], points.loss[mask], seeds, vertices.estimator)
    return keep, support


def _parabola_row(flops: float, points: IsoflopPoints,
                  vertices: VertexEstimator) -> ParabolaBudget | None:
    """N* of one budget from the parabola in log N; None with too few sizes or no minimum."""
    log_n = np.log(points.params)
    fit = vertices.fit(log_n, points.loss)
    if fit is None:
        return None
    support = vertex_support(fit, log_n, points.loss, points.seed, vertices.estimator)
    return ParabolaBudget(flops=flops, n_points=len(points.params), params=math.exp(fit.log_params),
                          loss=fit.loss, parabola=fit.coefficients, inside_data=fit.inside,
                          support=support, warnings=support.warnings)


def _power_law(flops: list[float], params: list[float]) -> PowerLawFit | None:
    """log N* = a log C + log k by least squares, with a's 95 % t interval from the budgets'
    scatter about the line (None with 2 budgets: no degrees of freedom left)."""
    if len(flops) < 2:
        return None
    x, y = np.log(flops), np.log(params)
    exponent, log_coefficient = np.polyfit(x, y, 1)
    ci = None
    if len(flops) > 2:
        residuals = y - (exponent * x + log_coefficient)
        standard_error = math.sqrt(np.sum(residuals ** 2) / (len(x) - 2)
                                   / np.sum((x - x.mean()) ** 2))
        ci = list(t_interval(exponent, standard_error, len(x) - 2))
    return PowerLawFit(exponent=float(exponent), coefficient=float(math.exp(log_coefficient)),
                       n_budgets=len(flops), ci=ci)


def why_no_budget(points: IsoflopPoints) -> str:
    """Why ``isoflop_analysis`` found no budget, for the one-line error."""
    counts = []
    for flops in np.unique(points.flops):
        at_budget = np.isclose(points.flops, flops, rtol=1e-6)
        sizes = len(np.unique(points.params[at_budget]))
        counts.append(f"C={flops:.3g}: {int(at_budget.sum())} points, {sizes} sizes")
    shown = "; ".join(counts[:4]) + ("; ..." if len(counts) > 4 else "")
    if uses_surface(points):
        need = (f"a surface in (log N, S) needs {MIN_POINTS_SURFACE} points with 2 or more sizes "
                f"and sparsities per budget")
    else:
        need = (f"a parabola in log N needs {MIN_POINTS_PARABOLA} distinct sizes per budget "
                f"and a minimum")
    return f"{need} ({shown})"
