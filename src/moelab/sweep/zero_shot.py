"""Downstream accuracy against sparsity, from results.csv's zero-shot columns.

Two questions, per task. (Abnar et al. 2025, §4 and App. D.3, find with in-context few-shot
tasks that at equal pretraining loss most tasks do not depend on S, and that reading
comprehension favours denser models; moelab's tasks are its own small zero-shot set, not theirs.)

- **at equal loss**: accuracy = a + b (loss - mean loss) + c S over every run, by least squares;
  c is what sparsity adds to accuracy beyond what its loss predicts, with a 95 % t interval
  (b says whether accuracy tracks the loss at all);
- **at equal FLOPs** (FLOPs-budget sweeps): per budget and S, the mean accuracy over the runs of
  the size with the lowest mean loss at that budget and sparsity (the IsoFLOP optimum among the
  sizes tried), with a 95 % t interval over its seeds, and its difference from dense.

Each run's accuracy also has its Wilson 95 % interval over the task's items (the median
half-width is reported); when neither c nor b excludes 0, accuracy follows neither the loss nor
the sparsity, the task cannot separate anything at this scale, and the analysis says so
(``separates``).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import scipy.stats

from moelab.tasks import TASK_NAMES, load_task


def task_items(task: str) -> int:
    """The number of items of a shipped task (every run scores all of them)."""
    return len(load_task(task))


def wilson_interval(accuracy: float, items: int) -> list[float]:
    interval = scipy.stats.binomtest(round(accuracy * items), items).proportion_ci(method="wilson")
    return [float(interval.low), float(interval.high)]


def zero_shot_analysis(rows: list[dict[str, str]], header: list[str],
                       items: dict[str, int] | None = None) -> dict | None:
    """Per task with a zero_shot_<task> column: the equal-loss regression, the equal-FLOPs table
    (FLOPs budgets only) and whether the task separates anything; None without such columns.
    ``items``: each task's item count (default: the shipped task file's)."""
    tasks = [task for task in TASK_NAMES if f"zero_shot_{task}" in header
             and any(row.get(f"zero_shot_{task}") for row in rows)]
    if not tasks:
        return None
    return {task: _task_analysis(rows, task, (items or {}).get(task) or task_items(task))
            for task in tasks}


def _task_analysis(rows: list[dict[str, str]], task: str, items: int) -> dict:
    scored = [row for row in rows if row.get(f"zero_shot_{task}")]
    accuracy = np.array([float(row[f"zero_shot_{task}"]) for row in scored])
    loss = np.array([float(row["best_val_loss"]) for row in scored])
    sparsity = np.array([float(row["S"]) for row in scored])
    half_widths = [np.diff(wilson_interval(a, items))[0] / 2 for a in accuracy]
    equal_loss = equal_loss_fit(accuracy, loss, sparsity)
    equal_flops = _equal_flops(scored, task)
    # The spread of runs alone is no test: binomial noise over a hundred runs spans several
    # Wilson half-widths. A task separates models when accuracy follows loss or S.
    separates = equal_loss is not None and any(_excludes_zero(equal_loss[k]["ci"])
                                               for k in ("sparsity", "loss"))
    return {"items": items, "runs": len(scored),
            "accuracy_range": [float(accuracy.min()), float(accuracy.max())],
            "median_wilson_half_width": float(np.median(half_widths)), "equal_loss": equal_loss,
            "equal_flops": equal_flops, "separates": bool(separates)}


def _excludes_zero(ci: list[float] | None) -> bool:
    return ci is not None and (ci[0] > 0 or ci[1] < 0)


def equal_loss_fit(accuracy, loss, sparsity) -> dict | None:
    """Least squares of accuracy (or any per-run number) on (1, loss - mean, S): coefficients
    with 95 % t intervals, and each one's standard error and degrees of freedom."""
    if len(accuracy) < 4 or np.ptp(sparsity) == 0:
        return None
    design = np.column_stack([np.ones_like(loss), loss - loss.mean(), sparsity])
    coefficients, *_ = np.linalg.lstsq(design, accuracy, rcond=None)
    df = len(accuracy) - 3
    residual = accuracy - design @ coefficients
    variance = float(residual @ residual) / df
    errors = np.sqrt(np.diag(variance * np.linalg.inv(design.T @ design)))
    quantile = float(scipy.stats.t.ppf(0.975, df))
    return {name: {"value": float(value), "ci": [float(value - quantile * se), float(value + quantile * se)],
                   "se": float(se), "df": df}
            for name, value, se in zip(("mean", "loss", "sparsity"), coefficients, errors)}


def _equal_flops(rows: list[dict[str, str]], task: str) -> list[dict] | None:
    """Per FLOPs budget and S: the accuracy of the lowest-loss size, over its seeds."""
    if any(not row.get("C_budget") for row in rows):
        return None
    cells: dict[tuple, dict[str, list[tuple[float, float]]]] = {}
    for row in rows:
        key = (float(row["C_budget"]), float(row["S"]))
        cells.setdefault(key, {}).setdefault(row["size"], []).append(
            (float(row["best_val_loss"]), float(row[f"zero_shot_{task}"])))
    table: list[dict[str, Any]] = []
    for (budget, sparsity), by_size in sorted(cells.items()):
        size, runs = min(by_size.items(), key=lambda item: np.mean([r[0] for r in item[1]]))
        values = np.array([accuracy for _, accuracy in runs])
        table.append({"flops": budget, "sparsity": sparsity, "size": size, "seeds": len(values),
                      "accuracy": float(values.mean()), "ci": mean_interval(values)})
    dense = {row["flops"]: row for row in table if row["sparsity"] == 0.0}
    for entry in table:
        if entry["flops"] in dense and entry["sparsity"] > 0:
            entry["minus_dense"] = entry["accuracy"] - dense[entry["flops"]]["accuracy"]
    return table


def mean_interval(values: np.ndarray) -> list[float] | None:
    if len(values) < 2:
        return None
    half = float(scipy.stats.t.ppf(0.975, len(values) - 1) * values.std(ddof=1) / math.sqrt(len(values)))
    return [float(values.mean() - half), float(values.mean() + half)]
