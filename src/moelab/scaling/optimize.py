"""Batched L-BFGS: thousands of independent small minimisations advanced together in numpy.

The law fits start L-BFGS from every point of a grid (4,500 starts for Chinchilla). One scipy
call per start spends most of its time in Python overhead for a 5-parameter problem; here every
start keeps its own L-BFGS history and its own backtracking (Armijo) line search, but the
objective and gradient of all still-running starts are computed in one vectorised call.

The starts never interact: the two-loop recursion, step sizes and stopping tests are all per
start (row). Rows stop when their gradient is tiny or their objective stops improving.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

# fun(x_SP, rows_S) -> (f_S, g_SP): objective and gradient of the given rows of the problem.
BatchedObjective = Callable[[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]]


@dataclass
class BatchResult:
    x: np.ndarray
    """(S, P) final points."""
    fun: np.ndarray
    """(S,) final objective values."""
    iterations: np.ndarray
    """(S,) iterations run per start."""


def batched_lbfgs(
    fun: BatchedObjective,
    x0_SP: np.ndarray,
    *,
    history: int = 10,
    max_iter: int = 500,
    ftol: float = 1e-9,
    gtol: float = 1e-10,
    armijo_c: float = 1e-4,
    max_backtracks: int = 40,
) -> BatchResult:
    """Minimise S independent problems from the rows of x0_SP.

    A row stops when max |g| <= gtol, when an accepted step improves f by no more than
    ftol * max(|f|, 1e-30) (relative, like scipy's ``ftol``), or when no step satisfies Armijo.
    """
    # Starts far from any optimum overflow harmlessly (their rows are rejected or reset below).
    with np.errstate(all="ignore"):
        return _run(fun, np.array(x0_SP, dtype=np.float64), history, max_iter, ftol, gtol,
                    armijo_c, max_backtracks)


def _run(fun, x, history, max_iter, ftol, gtol, armijo_c, max_backtracks) -> BatchResult:
    num_starts, num_params = x.shape
    all_rows = np.arange(num_starts)
    f, g = fun(x, all_rows)
    s_hist = np.zeros((num_starts, history, num_params))
    y_hist = np.zeros((num_starts, history, num_params))
    rho_hist = np.zeros((num_starts, history))  # 0 marks an empty or rejected slot
    iterations = np.zeros(num_starts, dtype=np.int64)
    active = np.isfinite(f) & (np.abs(g).max(axis=1) > gtol)

    for it in range(max_iter):
        rows = np.flatnonzero(active)
        if rows.size == 0:
            break
        slot_order = [(it - 1 - j) % history for j in range(history)]  # newest first
        direction = -_two_loop(g[rows], s_hist[rows], y_hist[rows], rho_hist[rows], slot_order)
        slope = np.einsum("sp,sp->s", g[rows], direction)
        bad = ~(slope < 0)  # not a descent direction: forget the history, use steepest descent
        if bad.any():
            rho_hist[rows[bad]] = 0.0
            norm = np.linalg.norm(g[rows[bad]], axis=1, keepdims=True)
            direction[bad] = -g[rows[bad]] / np.maximum(norm, 1.0)
            slope[bad] = np.einsum("sp,sp->s", g[rows[bad]], direction[bad])

        x_new, f_new, g_new, accepted = _backtrack(
            fun, x[rows], f[rows], direction, slope, rows, armijo_c, max_backtracks
        )
        step = x_new - x[rows]
        grad_change = g_new - g[rows]
        curvature = np.einsum("sp,sp->s", step, grad_change)
        slot = it % history
        # Keep a pair only with safely positive curvature (L-BFGS needs s.y > 0).
        keep_pair = accepted & np.isfinite(curvature) & (
            curvature > np.maximum(1e-12 * np.einsum("sp,sp->s", grad_change, grad_change), 1e-200))
        s_hist[rows, slot] = np.where(keep_pair[:, None], step, 0.0)
        y_hist[rows, slot] = np.where(keep_pair[:, None], grad_change, 0.0)
        rho_hist[rows, slot] = np.where(keep_pair, 1.0 / np.where(keep_pair, curvature, 1.0), 0.0)

        improvement = f[rows] - f_new
        x[rows], f[rows], g[rows] = x_new, f_new, g_new
        iterations[rows] += 1
        converged = (
            ~accepted
            | (np.abs(g_new).max(axis=1) <= gtol)
            | (improvement <= ftol * np.maximum(np.abs(f_new), 1e-30))
        )
        active[rows[converged]] = False
    return BatchResult(x=x, fun=f, iterations=iterations)


def _two_loop(g_SP, s_SMP, y_SMP, rho_SM, slot_order) -> np.ndarray:
    """H^-1 g by the L-BFGS two-loop recursion, per row; rows without history get a scaled g."""
    q = g_SP.copy()
    alphas = {}
    for slot in slot_order:
        alphas[slot] = rho_SM[:, slot] * np.einsum("sp,sp->s", s_SMP[:, slot], q)
        q -= alphas[slot][:, None] * y_SMP[:, slot]
    newest = _newest_valid_pair(rho_SM, slot_order)
    has_pair = newest >= 0
    rows = np.arange(len(g_SP))
    s_new = s_SMP[rows, np.maximum(newest, 0)]
    y_new = y_SMP[rows, np.maximum(newest, 0)]
    yy = np.einsum("sp,sp->s", y_new, y_new)
    gamma = np.where(has_pair, np.einsum("sp,sp->s", s_new, y_new) / np.where(has_pair, yy, 1.0), 0.0)
    # Without curvature information take a step of length at most 1 (the scale of the grid).
    gamma = np.where(has_pair, gamma, 1.0 / np.maximum(np.linalg.norm(g_SP, axis=1), 1.0))
    r = gamma[:, None] * q
    for slot in reversed(slot_order):
        beta = rho_SM[:, slot] * np.einsum("sp,sp->s", y_SMP[:, slot], r)
        r += s_SMP[:, slot] * (alphas[slot] - beta)[:, None]
    return r


def _newest_valid_pair(rho_SM: np.ndarray, slot_order) -> np.ndarray:
    newest = np.full(len(rho_SM), -1)
    for slot in reversed(slot_order):  # oldest first, so the newest valid slot wins
        newest = np.where(rho_SM[:, slot] != 0.0, slot, newest)
    return newest


def _backtrack(fun, x_SP, f_S, direction_SP, slope_S, rows, armijo_c, max_backtracks):
    """Per-row backtracking from step 1, halving until the Armijo condition holds."""
    step_size = np.ones(len(rows))
    x_new, f_new = x_SP.copy(), f_S.copy()
    g_new = np.zeros_like(x_SP)
    accepted = np.zeros(len(rows), dtype=bool)
    pending = np.arange(len(rows))
    for _ in range(max_backtracks):
        trial_x = x_SP[pending] + step_size[pending, None] * direction_SP[pending]
        trial_f, trial_g = fun(trial_x, rows[pending])
        sufficient_S = f_S[pending] + armijo_c * step_size[pending] * slope_S[pending]
        ok = np.isfinite(trial_f) & (trial_f <= sufficient_S)
        done = pending[ok]
        x_new[done], f_new[done], g_new[done] = trial_x[ok], trial_f[ok], trial_g[ok]
        accepted[done] = True
        pending = pending[~ok]
        if pending.size == 0:
            break
        step_size[pending] *= 0.5
    # Rows whose line search failed stay where they were (their gradient is needed unchanged).
    if pending.size:
        _, g_stay = fun(x_SP[pending], rows[pending])
        g_new[pending] = g_stay
    return x_new, f_new, g_new, accepted
