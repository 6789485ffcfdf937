"""The forms a prediction extrapolates with: a fitted law, or the IsoFLOP parabolas.

Each forecaster fits the sweep's runs once (``fit``), refits them under bootstrap weights
(``refit``: one parameter set per replicate), predicts the loss of target cells from a parameter
set (``predict``) and gives the in-sample prediction of each of the sweep's own grid points
(``fitted_points``: its residuals against the point means are the form's misfit).

- ``LawForecaster``: one of ``moelab.scaling.laws`` (chinchilla or a sparsity form), fitted as
  ``moelab fit`` fits it (summed Huber loss of log residuals from the law's start grid); the
  replicates refit from the full fit's best basins.
- ``ParabolaForecaster``: Hoffmann et al.'s approach 2 carried to a budget not trained. Per
  FLOPs budget C and sparsity S, loss = L*(C, S) + k (log N - log N*(C, S))^2 through every size
  (weighted by the replicate's draws); across budgets log N* and log L* are lines in log C and
  the curvature k is their mean, so a new budget's parabola is read off the lines. It needs
  FLOPs budgets, >= 2 of them, >= 3 sizes per budget and sparsity, and predicts only the
  sparsities it was fitted at.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from moelab.errors import MoelabError
from moelab.scaling.fitting import fit_law, refit_weighted
from moelab.scaling.laws import Law, get_law, log_features
from moelab.scaling.prediction_data import SweepRuns, inflated_deviations, point_means

PARABOLA = "isoflop-parabola"


@dataclass(frozen=True)
class Targets:
    """The cells a prediction is for, as arrays: total and active parameters, tokens, sparsity
    and the budget (C for a FLOPs sweep, D for a tokens one)."""

    N: np.ndarray
    N_active: np.ndarray
    D: np.ndarray
    S: np.ndarray
    budget: np.ndarray


class LawForecaster:
    def __init__(self, law_name: str, max_starts: int | None = None):
        self.law: Law = get_law(law_name)
        self.name = self.law.name
        self.formula = self.law.formula
        self.max_starts = max_starts
        self.num_params = self.law.num_params

    def fit(self, runs: SweepRuns) -> np.ndarray:
        self._fit = fit_law(self.law, runs.columns(), max_starts=self.max_starts)
        return self._fit.theta

    def refit(self, runs: SweepRuns, weights_Rn: np.ndarray) -> list[np.ndarray]:
        columns = runs.with_loss(inflated_deviations(runs)).columns()
        thetas = refit_weighted(self._fit, columns, weights_Rn).bootstrap_thetas
        return [] if thetas is None else list(thetas)

    def predict(self, theta: Any, targets: Targets) -> np.ndarray:
        columns = {"N": targets.N, "D": targets.D, "S": targets.S}
        features = log_features(self.law, columns)
        with np.errstate(all="ignore"):
            return np.exp(self.law.predict_log_loss(theta, features))

    def fitted_points(self, theta: np.ndarray, runs: SweepRuns) -> tuple[np.ndarray, np.ndarray]:
        """(point means, the fit's loss at each point), points in ``point_means``'s order."""
        points, means, _ = point_means(runs)
        first = [int(np.flatnonzero(runs.point == p)[0]) for p in points]
        mean_D = np.array([runs.D[runs.point == p].mean() for p in points])
        targets = Targets(N=runs.N[first], N_active=runs.N_active[first], D=mean_D,
                          S=runs.S[first], budget=runs.budget[first])
        return means, self.predict(theta, targets)


class ParabolaForecaster:
    name = PARABOLA
    formula = ("per C and S: L = L*(C, S) + k (log N - log N*(C, S))^2; "
               "log N* and log L* linear in log C, k their budgets' mean")

    def __init__(self) -> None:
        self.num_params = 3  # per budget and sparsity: what each point's residual is fitted with

    def fit(self, runs: SweepRuns) -> dict:
        check_parabola_sweep(runs)
        return self._solve(runs, np.ones(len(runs)))

    def refit(self, runs: SweepRuns, weights_Rn: np.ndarray) -> list[dict]:
        adjusted = runs.with_loss(inflated_deviations(runs))
        return [self._solve(adjusted, weights) for weights in weights_Rn]

    def _solve(self, runs: SweepRuns, weights: np.ndarray) -> dict:
        """S -> (log C per budget, log N*, log L*, k): each budget's parabola, then the lines."""
        solved = {}
        for sparsity in sorted(set(runs.S.tolist())):
            rows = []
            for budget in runs.budgets():
                mask = (runs.S == sparsity) & (runs.budget == budget)
                rows.append((np.log(budget), *_parabola(np.log(runs.N[mask]), runs.loss[mask],
                                                         weights[mask])))
            solved[sparsity] = np.array(rows)
        return solved

    def predict(self, params: Any, targets: Targets) -> np.ndarray:
        out = np.full(len(targets.N), np.nan)
        for i, (n, s, c) in enumerate(zip(targets.N, targets.S, targets.budget)):
            rows = params.get(float(s))
            if rows is None:
                continue
            out[i] = _parabola_at(rows, np.log(c), np.log(n))
        return out

    def fitted_points(self, params: dict, runs: SweepRuns) -> tuple[np.ndarray, np.ndarray]:
        points, means, _ = point_means(runs)
        first = [int(np.flatnonzero(runs.point == p)[0]) for p in points]
        fitted = []
        for i in first:
            rows = params[float(runs.S[i])]
            row = rows[np.argmin(np.abs(rows[:, 0] - np.log(runs.budget[i])))]
            fitted.append(_vertex_form(row, np.log(runs.N[i])))
        return means, np.array(fitted)

    def optimum(self, params: dict, flops: float) -> tuple[float, float, float]:
        """(S*, N*, L*) at ``flops``: the sparsity of lowest extrapolated L*, and its N*."""
        best = (np.nan, np.nan, np.inf)
        for sparsity, rows in params.items():
            log_n_star, log_l_star, _ = _extrapolated(rows, np.log(flops))
            if np.isfinite(log_l_star) and np.exp(log_l_star) < best[2]:
                best = (sparsity, float(np.exp(log_n_star)), float(np.exp(log_l_star)))
        return best


def check_parabola_sweep(runs: SweepRuns) -> None:
    if runs.budget_kind != "C":
        raise MoelabError(f"the {PARABOLA} form needs FLOPs budgets (C...); this sweep's "
                          "budgets are token counts")
    if len(runs.budgets()) < 2:
        raise MoelabError(f"the {PARABOLA} form needs >= 2 FLOPs budgets to extrapolate; "
                          f"this sweep has {len(runs.budgets())}")
    for sparsity in set(runs.S.tolist()):
        for budget in runs.budgets():
            sizes = set(runs.N[(runs.S == sparsity) & (runs.budget == budget)].tolist())
            if len(sizes) < 3:
                raise MoelabError(f"the {PARABOLA} form needs >= 3 sizes per budget and "
                                  f"sparsity; C={budget:g}, S={sparsity:g} has {len(sizes)}")


def _parabola(log_n: np.ndarray, loss: np.ndarray, weights: np.ndarray) -> tuple[float, float, float]:
    """(log N*, log L*, k) of loss = c0 + c1 x + c2 x^2 by weighted least squares; NaN vertex
    when it opens downward (no minimum) or too few distinct drawn sizes remain."""
    keep = weights > 0
    if len(set(log_n[keep].tolist())) < 3:
        return np.nan, np.nan, np.nan
    c2, c1, c0 = np.polyfit(log_n[keep], loss[keep], 2, w=np.sqrt(weights[keep]))
    if c2 <= 0:
        return np.nan, np.nan, float(c2)
    x_star = -c1 / (2 * c2)
    l_star = c0 - c1 * c1 / (4 * c2)
    return float(x_star), float(np.log(l_star)) if l_star > 0 else np.nan, float(c2)


def _vertex_form(row: np.ndarray, log_n: float) -> float:
    _, x_star, log_l_star, k = row
    return float(np.exp(log_l_star) + k * (log_n - x_star) ** 2)


def _extrapolated(rows: np.ndarray, log_c: float) -> tuple[float, float, float]:
    if not np.all(np.isfinite(rows)):
        return np.nan, np.nan, np.nan
    log_cs = rows[:, 0]
    x_star = np.polyval(np.polyfit(log_cs, rows[:, 1], 1), log_c)
    log_l_star = np.polyval(np.polyfit(log_cs, rows[:, 2], 1), log_c)
    return float(x_star), float(log_l_star), float(rows[:, 3].mean())


def _parabola_at(rows: np.ndarray, log_c: float, log_n: float) -> float:
    x_star, log_l_star, k = _extrapolated(rows, log_c)
    return float(np.exp(log_l_star) + k * (log_n - x_star) ** 2)


def forecaster(form: str, max_starts: int | None = None) -> LawForecaster | ParabolaForecaster:
    if form == PARABOLA:
        return ParabolaForecaster()
    return LawForecaster(form, max_starts=max_starts)
