"""Fitting a law: summed Huber loss of log residuals, L-BFGS from every start of a grid, keep the best.

The recipe of Hoffmann et al. (2022) as replicated by Besiroglu et al. (2024):

    minimise  sum_i Huber_delta( log L_i - LSE_j(term_ij(theta)) ),  delta = 1e-3,

from every start of the law's grid. All starts run at once (``optimize.batched_lbfgs``, analytic
gradients); the few best end points are then polished with scipy's L-BFGS-B at tight tolerances,
so the reported optimum is a converged scipy solution.

Bootstrap: resample the points with replacement (as integer weights on the points), and refit
every replicate from the ``BOOTSTRAP_STARTS`` best distinct end points of the full fit (the basins
that matter), all replicates in one batch. 95 % intervals are the 2.5 and 97.5 percentiles.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import scipy.optimize
import scipy.special

from moelab.errors import MoelabError
from moelab.scaling.laws import Law, log_features
from moelab.scaling.optimize import batched_lbfgs

HUBER_DELTA = 1e-3
POLISH_CANDIDATES = 3
"""Best distinct end points of the batched run that scipy's L-BFGS-B polishes."""
MAX_STARTS = 100_000
"""All starts run as one batch; beyond this the L-BFGS histories alone need gigabytes."""
BOOTSTRAP_STARTS = 16
"""Starts per bootstrap replicate: the best distinct end points of the full fit."""


@dataclass
class FitResult:
    law: Law
    theta: np.ndarray
    """Best fitted parameters in log space (law.param_names order)."""
    objective: float
    """Summed Huber loss at theta."""
    n_points: int
    num_starts: int
    basin_thetas: np.ndarray = field(repr=False)
    """(K, P) best distinct end points of the start grid, best first (bootstrap starts)."""
    bootstrap_thetas: np.ndarray | None = field(default=None, repr=False)
    """(R, P) one fitted theta per bootstrap replicate."""

    @property
    def params(self) -> dict[str, float]:
        return self.law.natural_params(self.theta)

    def bootstrap_params(self) -> list[dict[str, float]]:
        if self.bootstrap_thetas is None:
            return []
        return [self.law.natural_params(theta) for theta in self.bootstrap_thetas]


class HuberObjective:
    """Summed (optionally weighted) Huber loss of log residuals, batched over parameter rows."""

    def __init__(self, law: Law, features: dict[str, np.ndarray], loss: np.ndarray,
                 delta: float = HUBER_DELTA):
        design_JPn = law.design(features)
        num_terms, num_params, num_points = design_JPn.shape
        # (P, J*n), term-major so that reductions over terms run over contiguous rows of n:
        # terms_SJn = theta_SP @ this, one BLAS call for every start.
        self.design_P_Jn = np.ascontiguousarray(
            design_JPn.transpose(1, 0, 2).reshape(num_params, num_terms * num_points))
        self.design_Jn_P = np.ascontiguousarray(self.design_P_Jn.T)
        self.num_terms = num_terms
        self.num_points = num_points
        self.log_loss = np.log(loss)
        self.delta = delta

    def __call__(self, theta_SP: np.ndarray, weights_Sn: np.ndarray | None = None):
        """(f_S, g_SP) for parameter rows theta_SP with optional per-row point weights."""
        num_rows = theta_SP.shape[0]
        terms_SJn = (theta_SP @ self.design_P_Jn).reshape(num_rows, self.num_terms, self.num_points)
        peak_Sn = terms_SJn.max(axis=1)
        exp_SJn = np.exp(terms_SJn - peak_Sn[:, None], out=terms_SJn)
        sum_Sn = exp_SJn.sum(axis=1)
        residual_Sn = self.log_loss - peak_Sn - np.log(sum_Sn)
        huber_Sn = scipy.special.huber(self.delta, residual_Sn)
        # d huber / d prediction = -clip(residual); d prediction / d term_j = softmax_j
        dpred_Sn = -np.clip(residual_Sn, -self.delta, self.delta)
        if weights_Sn is not None:
            huber_Sn *= weights_Sn
            dpred_Sn *= weights_Sn
        exp_SJn *= (dpred_Sn / sum_Sn)[:, None]  # now d objective / d term
        return huber_Sn.sum(axis=1), exp_SJn.reshape(num_rows, -1) @ self.design_Jn_P


def fit_law(law: Law, columns: dict[str, np.ndarray], *, max_starts: int | None = None,
            starts: np.ndarray | None = None) -> FitResult:
    """Fit ``law`` to raw columns (N, D, loss, and S for the sparsity law) from its start grid."""
    _check_enough_points(law, len(columns["loss"]))
    check_num_starts(max_starts)
    objective = HuberObjective(law, log_features(law, columns), columns["loss"])
    if starts is not None:
        starts_SP = np.asarray(starts, dtype=np.float64)
    else:  # None: the law's default grid (all of Chinchilla's, a seeded subset of the sparsity grid)
        starts_SP = law.start_grid() if max_starts is None else law.start_grid(max_starts)
    batch = batched_lbfgs(lambda x, rows: objective(x), starts_SP)
    candidates = _distinct_best(batch.x, batch.fun, max(POLISH_CANDIDATES, BOOTSTRAP_STARTS))
    polished = [_polish(objective, theta) for theta in candidates[:POLISH_CANDIDATES]]
    best_theta, best_f = min(polished, key=lambda pair: pair[1])
    batch_best = float(objective(candidates[:1])[0][0])
    if batch_best < best_f:  # polishing never makes things worse
        best_theta, best_f = candidates[0], batch_best
    basins = np.vstack([best_theta[None], candidates])
    return FitResult(law=law, theta=best_theta, objective=float(best_f),
                     n_points=len(columns["loss"]), num_starts=len(starts_SP), basin_thetas=basins)


def bootstrap(fit: FitResult, columns: dict[str, np.ndarray], num_replicates: int,
              seed: int = 0, polish: bool = True) -> FitResult:
    """Refit ``num_replicates`` resamples (with replacement) of the points; fills bootstrap_thetas.

    Each replicate's best end point is polished as the main fit's is (scipy L-BFGS-B at tight
    tolerances, on the replicate's weights): the batched runs stop at a loose tolerance, and
    a replicate left short of its own optimum would be a wrong draw for ``moelab optimal``,
    which reuses single replicates. ``polish=False`` keeps the batched end points."""
    if num_replicates <= 0:
        raise MoelabError(f"--bootstrap {num_replicates} is invalid: must be a positive count")
    law = fit.law
    objective = HuberObjective(law, log_features(law, columns), columns["loss"])
    num_points = objective.num_points
    rng = np.random.default_rng(seed)
    picks_Rn = rng.integers(0, num_points, size=(num_replicates, num_points))
    weights_Rn = np.stack([np.bincount(p, minlength=num_points) for p in picks_Rn]).astype(np.float64)
    starts_KP = fit.basin_thetas[:BOOTSTRAP_STARTS]
    num_starts = len(starts_KP)
    # Row r * K + k is replicate r from start k.
    weights_Sn = np.repeat(weights_Rn, num_starts, axis=0)
    x0_SP = np.tile(starts_KP, (num_replicates, 1))
    batch = batched_lbfgs(lambda x, rows: objective(x, weights_Sn[rows]), x0_SP)
    fun_RK = batch.fun.reshape(num_replicates, num_starts)
    best_k = np.argmin(np.where(np.isfinite(fun_RK), fun_RK, np.inf), axis=1)
    thetas = batch.x.reshape(num_replicates, num_starts, -1)[np.arange(num_replicates), best_k]
    if polish:
        thetas = np.stack([_polish(objective, theta, weights)[0]
                           for theta, weights in zip(thetas, weights_Rn)])
    fit.bootstrap_thetas = thetas
    return fit


def replicates_short_of_optimum(fit: FitResult, columns: dict[str, np.ndarray], seed: int = 0,
                                tolerance: float = 1e-6) -> float:
    """The share of ``fit``'s bootstrap replicates that a tight polish (``_polish``) lowers by
    more than ``tolerance`` (relative) on their own resample: the replicates that stopped short.
    The resamples are redrawn as ``bootstrap`` drew them (pass its ``seed``)."""
    thetas = fit.bootstrap_thetas
    if thetas is None or not len(thetas):
        return math.nan
    objective = HuberObjective(fit.law, log_features(fit.law, columns), columns["loss"])
    rng = np.random.default_rng(seed)
    num_points = objective.num_points
    picks_Rn = rng.integers(0, num_points, size=(len(thetas), num_points))
    short = 0
    for theta, picks in zip(thetas, picks_Rn):
        weights = np.bincount(picks, minlength=num_points).astype(np.float64)
        before = float(objective(theta[None], weights[None])[0][0])
        after = _polish(objective, theta, weights)[1]
        short += after < before - tolerance * max(abs(before), 1e-12)
    return short / len(thetas)


def check_num_starts(max_starts: int | None) -> None:
    """``--starts K``: None (the law's default grid) or 1..MAX_STARTS."""
    if max_starts is not None and not 1 <= max_starts <= MAX_STARTS:
        raise MoelabError(f"--starts {max_starts} is invalid: allowed 1..{MAX_STARTS:,}")


def percentile_interval(values, level: float = 0.95) -> tuple[float, float]:
    """The central ``level`` percentile interval of bootstrap values (2.5 and 97.5 % at 0.95)."""
    tail = 100.0 * (1.0 - level) / 2.0
    values = np.asarray(values, dtype=np.float64)
    with np.errstate(invalid="ignore"):
        bounds = np.percentile(values, [tail, 100.0 - tail])
    # Interpolating between two infinite replicates gives inf - inf = nan: the bound is that
    # infinity, which the nearest order statistic is.
    nearest = np.percentile(values, [tail, 100.0 - tail], method="nearest")
    low, high = np.where(np.isnan(bounds) & ~np.isnan(nearest), nearest, bounds)
    return float(low), float(high)


def _check_enough_points(law: Law, num_points: int) -> None:
    if num_points <= law.num_params:
        raise MoelabError(
            f"{num_points} data points are too few for the {law.name} law: it has "
            f"{law.num_params} parameters, so at least {law.num_params + 1} points are needed"
        )


def _distinct_best(x_SP: np.ndarray, f_S: np.ndarray, count: int) -> np.ndarray:
    """Up to ``count`` end points, best first, skipping near-duplicates of better ones."""
    order = np.argsort(np.where(np.isfinite(f_S), f_S, np.inf))
    chosen: list[np.ndarray] = []
    for index in order:
        if not np.isfinite(f_S[index]):
            break
        if all(np.max(np.abs(x_SP[index] - other)) > 1e-3 for other in chosen):
            chosen.append(x_SP[index])
            if len(chosen) == count:
                break
    return np.array(chosen)


def _polish(objective: HuberObjective, theta: np.ndarray,
            weights_n: np.ndarray | None = None) -> tuple[np.ndarray, float]:
    """scipy L-BFGS-B from theta at tight tolerances (on the points' ``weights_n``, if any)."""
    weights = None if weights_n is None else weights_n[None]

    def fun(x: np.ndarray):
        f, g = objective(x[None], weights)
        return float(f[0]), g[0]

    result = scipy.optimize.minimize(fun, theta, jac=True, method="L-BFGS-B",
                                     options={"ftol": 1e-15, "gtol": 1e-12, "maxiter": 2_000})
    return result.x, float(result.fun)
