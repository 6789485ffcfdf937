"""Calibration by rollout: leave out a sweep's largest budget, predict its cells from the
smaller budgets (``prediction.predict``), and score the prediction against the runs left out
(``prediction_score.score``). Each left-out point is one cell; its measured mean is over the
seeds the sweep trained there, and its interval is for that many seeds."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from moelab.errors import MoelabError
from moelab.scaling.prediction import Extrapolation, TargetCell, predict
from moelab.scaling.prediction_data import SweepRuns
from moelab.scaling.prediction_score import MeasuredRun, Score, score


@dataclass
class Rollout:
    sweep: str
    form: str
    held_out_budget: float
    budgets_fitted: list[float]
    cells: int
    score: Score | None
    error: str | None = None
    """Why the form could not predict this sweep (too few points, no FLOPs budgets...)."""


def held_out_cells(runs: SweepRuns) -> tuple[list[TargetCell], list[MeasuredRun]]:
    """The largest budget's points as target cells (their mean tokens), and its runs."""
    largest = max(runs.budgets())
    cells, measured = [], []
    for point in sorted(set(runs.point[runs.budget == largest].tolist())):
        mask = runs.point == point
        i = int(np.flatnonzero(mask)[0])
        cells.append(TargetCell(label=point, size=str(runs.size[i]), params_total=float(runs.N[i]),
                                params_active=float(runs.N_active[i]), sparsity=float(runs.S[i]),
                                budget=largest, tokens=float(runs.D[mask].mean())))
    for j in np.flatnonzero(runs.budget == largest):
        measured.append(MeasuredRun(run=str(runs.run[j]), total_params=float(runs.N[j]),
                                    active_params=float(runs.N_active[j]), tokens=float(runs.D[j]),
                                    flops=_nominal_flops(runs, int(j)), loss=float(runs.loss[j])))
    return cells, measured


def _nominal_flops(runs: SweepRuns, i: int) -> float:
    # Matching is on the cell's nominal budget; a run's own compute can miss it by its step rounding.
    return float(runs.budget[i]) if runs.budget_kind == "C" else 6.0 * runs.N_active[i] * runs.D[i]


def rollout(runs: SweepRuns, form: str, *, sweep: str, bootstrap: int, seed: int = 0,
            max_starts: int | None = None) -> Rollout:
    if len(runs.budgets()) < 3:
        raise MoelabError(f"{sweep} has {len(runs.budgets())} budgets: a rollout needs >= 3")
    largest = max(runs.budgets())
    train = runs.subset(runs.budget < largest)
    cells, measured = held_out_cells(runs)
    result = Rollout(sweep=sweep, form=form, held_out_budget=largest,
                     budgets_fitted=train.budgets(), cells=len(cells), score=None)
    seeds = max(1, round(len(measured) / max(len(cells), 1)))
    try:
        prediction = predict(train, form, cells, flops=[], seeds=seeds, bootstrap=bootstrap,
                             seed=seed, max_starts=max_starts, source=sweep)
    except MoelabError as exc:
        result.error = str(exc)
        return result
    result.score = score(prediction, measured, source=sweep)
    return result


def extrapolation(result: Rollout) -> Extrapolation | None:
    """The error beyond the predicted sd in a rollout, as a prediction's extrapolation term."""
    s = result.score
    if s is None:
        return None
    cells = [c for c in s.cells if c.error is not None and c.sd is not None]
    if not cells:
        return None
    rms_error = float(np.sqrt(np.mean([c.error ** 2 for c in cells if c.error is not None])))
    rms_sd = float(np.sqrt(np.mean([c.sd ** 2 for c in cells if c.sd is not None])))
    return Extrapolation(held_out_budget=result.held_out_budget,
                         ratio=result.held_out_budget / max(result.budgets_fitted),
                         cells=len(cells), rms_error=rms_error, rms_predicted_sd=rms_sd,
                         sd=float(np.sqrt(max(rms_error ** 2 - rms_sd ** 2, 0.0))))
