"""IsoFLOP analysis (Hoffmann et al. 2022, approach 2; Abnar et al. 2025 for sparsity).

Runs are grouped by compute budget C. Per budget:

- dense (no S column, or one sparsity): loss is fitted as a parabola in log N; its vertex is the
  compute-optimal size N*(C);
- with several sparsities: loss is fitted as a full quadratic surface in x = log N and
  y = -log(1 - S) (Abnar et al.'s polynomial fit per budget), minimised inside the box of the
  observed points, giving N*(C) and S*(C); N_active*(C) follows from the points' own
  N_active / N ratios (``estimate_shared_fraction``).

Across budgets, log N*(C) = a log C + log k is fitted by least squares (N* = k C^a; Chinchilla's
own IsoFLOP analysis gives a = 0.49, Besiroglu et al.'s refit ~0.5).
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import scipy.optimize

from moelab.errors import MoelabError
from moelab.scaling.optimal import active_params, estimate_shared_fraction
from moelab.scaling.table import numeric_column, read_csv_rows, require_column

MIN_POINTS_PARABOLA = 3
MIN_POINTS_SURFACE = 6


def read_isoflop_table(path: str | Path, column_map: dict[str, str] | None = None,
                       where: list[str] | None = None) -> dict[str, np.ndarray]:
    """Columns N, C (the IsoFLOP budget), loss, and S / N_active when present."""
    path = Path(path)
    names = {key: key for key in ("N", "C", "S", "N_active", "loss")}
    names.update(column_map or {})
    header, rows = read_csv_rows(path)
    for condition in where or []:
        key, sep, value = condition.partition("=")
        if not sep or key not in header:
            raise MoelabError(
                f"--where {condition!r} is invalid: expected COLUMN=VALUE with COLUMN one of "
                f"{', '.join(header)}"
            )
        rows = [row for row in rows if row[key] == value]
    if not rows:
        raise MoelabError(f"{path}: no rows left after --where {' '.join(where or [])}")
    for key in ("N", "C", "loss"):
        require_column(path, header, names[key], key)
    columns = {key: numeric_column(path, rows, names[key])
               for key in ("N", "C", "S", "N_active", "loss") if names[key] in header}
    for key in ("N", "C", "loss"):
        if np.any(columns[key] <= 0):
            raise MoelabError(f"{path}: column {names[key]!r} has a value <= 0: must be > 0")
    return columns


def fit_parabola(log_params: np.ndarray, loss: np.ndarray) -> dict | None:
    """Vertex of loss = c2 x^2 + c1 x + c0 in x = log N; None when the parabola opens downward."""
    c2, c1, c0 = np.polyfit(log_params, loss, 2)
    if c2 <= 0:
        return None
    x_star = -c1 / (2 * c2)
    return {"coefficients": [float(c2), float(c1), float(c0)], "log_params": float(x_star),
            "loss": float(c0 - c1 * c1 / (4 * c2)),
            "inside": bool(log_params.min() <= x_star <= log_params.max())}


def _surface_terms(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    return np.stack([np.ones_like(x), x, y, x * x, x * y, y * y], axis=1)


def fit_surface(log_params: np.ndarray, sparsity: np.ndarray, loss: np.ndarray) -> dict:
    """Quadratic surface in (log N, -log(1-S)), minimised inside the observed box."""
    y = -np.log1p(-sparsity)
    coefficients, *_ = np.linalg.lstsq(_surface_terms(log_params, y), loss, rcond=None)
    box = [(float(log_params.min()), float(log_params.max())), (float(y.min()), float(y.max()))]

    def surface(point):
        return float((_surface_terms(np.array([point[0]]), np.array([point[1]])) @ coefficients)[0])

    stationary = _stationary_point(coefficients)
    if stationary is not None and all(lo <= v <= hi for v, (lo, hi) in zip(stationary, box)):
        x_star, y_star = stationary
        return {"coefficients": [float(c) for c in coefficients], "log_params": float(x_star),
                "sparsity": float(-math.expm1(-y_star)), "loss": surface(stationary),
                "at_edge": False}
    # Otherwise the minimum lies on the edge of the box: search it numerically.
    grid_x, grid_y = np.meshgrid(np.linspace(*box[0], 101), np.linspace(*box[1], 101))
    values = _surface_terms(grid_x.ravel(), grid_y.ravel()) @ coefficients
    start = int(np.argmin(values))
    best = scipy.optimize.minimize(surface, [grid_x.ravel()[start], grid_y.ravel()[start]],
                                   method="L-BFGS-B", bounds=box)
    x_star, y_star = best.x
    at_edge = any(min(v - lo, hi - v) <= 1e-6 * max(1.0, hi - lo)
                  for v, (lo, hi) in zip(best.x, box))
    return {"coefficients": [float(c) for c in coefficients], "log_params": float(x_star),
            "sparsity": float(-math.expm1(-y_star)), "loss": float(best.fun),
            "at_edge": bool(at_edge)}


def _stationary_point(coefficients: np.ndarray) -> tuple[float, float] | None:
    """The minimum of the quadratic surface when its Hessian is positive definite."""
    _, cx, cy, cxx, cxy, cyy = coefficients
    hessian = np.array([[2 * cxx, cxy], [cxy, 2 * cyy]])
    if np.any(np.linalg.eigvalsh(hessian) <= 0):
        return None
    x_star, y_star = np.linalg.solve(hessian, [-cx, -cy])
    return float(x_star), float(y_star)


def isoflop_analysis(columns: dict[str, np.ndarray]) -> dict:
    """Per-budget optima and the power law N*(C) = k C^a across budgets."""
    has_sparsity = "S" in columns and len(np.unique(columns["S"])) > 1
    shared = None
    if has_sparsity and "N_active" in columns:
        shared = estimate_shared_fraction(columns["N"], columns["N_active"], columns["S"])
    budgets = []
    for flops in np.unique(columns["C"]):
        at_budget = np.isclose(columns["C"], flops, rtol=1e-6)
        log_n, loss = np.log(columns["N"][at_budget]), columns["loss"][at_budget]
        row = {"flops": float(flops), "n_points": int(at_budget.sum())}
        if has_sparsity:
            sparsity = columns["S"][at_budget]
            if row["n_points"] < MIN_POINTS_SURFACE or len(np.unique(sparsity)) < 2 or len(np.unique(log_n)) < 2:
                continue
            surface = fit_surface(log_n, sparsity, loss)
            row.update(params=math.exp(surface["log_params"]), sparsity=surface["sparsity"],
                       loss=surface["loss"], surface=surface["coefficients"],
                       at_edge=surface["at_edge"])
            if shared is not None:
                row["params_active"] = float(active_params(row["params"], row["sparsity"], shared))
        else:
            if row["n_points"] < MIN_POINTS_PARABOLA or len(np.unique(log_n)) < 3:
                continue
            parabola = fit_parabola(log_n, loss)
            if parabola is None:
                continue
            row.update(params=math.exp(parabola["log_params"]), loss=parabola["loss"],
                       parabola=parabola["coefficients"], vertex_inside=parabola["inside"])
        budgets.append(row)
    return {"budgets": budgets, "shared_fraction": shared,
            "params_exponent": _power_law([b["flops"] for b in budgets], [b["params"] for b in budgets])}


def _power_law(flops: list[float], params: list[float]) -> dict | None:
    if len(flops) < 2:
        return None
    exponent, log_coefficient = np.polyfit(np.log(flops), np.log(params), 1)
    return {"exponent": float(exponent), "coefficient": float(math.exp(log_coefficient))}
