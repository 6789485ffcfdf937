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

import numpy as np

from moelab.stats.intervals import mean_interval, t_interval, wilson_interval
from moelab.stats.regression import least_squares
from moelab.sweep.analysis_records import Coefficient, EqualFlopsAccuracy, EqualLossFit, TaskAccuracy
from moelab.sweep.results_csv import ResultRow, ResultsTable, task_column
from moelab.tasks import TASK_NAMES, load_task


def task_items(task: str) -> int:
    """The number of items of a shipped task (every run scores all of them)."""
    return len(load_task(task))


def zero_shot_analysis(results: ResultsTable,
                       items: dict[str, int] | None = None) -> dict[str, TaskAccuracy] | None:
    """Per task with a zero_shot_<task> column: the equal-loss regression, the equal-FLOPs table
    (FLOPs budgets only) and whether the task separates anything; None without such columns.
    ``items``: each task's item count (default: the shipped task file's)."""
    tasks = [task for task in TASK_NAMES if results.has_column(task_column(task))
             and any(task in row.zero_shot for row in results.rows)]
    if not tasks:
        return None
    return {task: _task_analysis(results.rows, task, (items or {}).get(task) or task_items(task))
            for task in tasks}


def _task_analysis(rows: list[ResultRow], task: str, items: int) -> TaskAccuracy:
    scored = [row for row in rows if task in row.zero_shot]
    accuracy = np.array([row.zero_shot[task] for row in scored])
    loss = np.array([row.best_val_loss for row in scored])
    sparsity = np.array([row.S for row in scored])
    half_widths = [_wilson_half_width(a, items) for a in accuracy]
    equal_loss = equal_loss_fit(accuracy, loss, sparsity)
    equal_flops = _equal_flops(scored, task)
    # The spread of runs alone is no test: binomial noise over a hundred runs spans several
    # Wilson half-widths. A task separates models when accuracy follows loss or S.
    separates = equal_loss is not None and any(_excludes_zero(c.ci)
                                               for c in (equal_loss.sparsity, equal_loss.loss))
    return TaskAccuracy(items=items, runs=len(scored),
                        accuracy_range=[float(accuracy.min()), float(accuracy.max())],
                        median_wilson_half_width=float(np.median(half_widths)),
                        equal_loss=equal_loss, equal_flops=equal_flops, separates=bool(separates))


def _wilson_half_width(accuracy: float, items: int) -> float:
    low, high = wilson_interval(round(accuracy * items), items)
    return (high - low) / 2


def _excludes_zero(ci: list[float] | None) -> bool:
    return ci is not None and (ci[0] > 0 or ci[1] < 0)


def equal_loss_fit(accuracy, loss, sparsity) -> EqualLossFit | None:
    """Least squares of accuracy (or any per-run number) on (1, loss - mean, S): coefficients
    with 95 % t intervals, and each one's standard error and degrees of freedom."""
    if len(accuracy) < 4 or np.ptp(sparsity) == 0:
        return None
    design = np.column_stack([np.ones_like(loss), loss - loss.mean(), sparsity])
    fit = least_squares(design, accuracy)
    return EqualLossFit(*(Coefficient(value=float(value), se=float(se), df=fit.df,
                                      ci=list(t_interval(value, se, fit.df)))
                          for value, se in zip(fit.values, fit.standard_errors)))


def _equal_flops(rows: list[ResultRow], task: str) -> list[EqualFlopsAccuracy] | None:
    """Per FLOPs budget and S: the accuracy of the lowest-loss size, over its seeds."""
    if any(row.C_budget is None for row in rows):
        return None
    cells: dict[tuple, dict[str, list[tuple[float, float]]]] = {}
    for row in rows:
        cells.setdefault((row.C_budget, row.S), {}).setdefault(row.size, []).append(
            (row.best_val_loss, row.zero_shot[task]))
    table = []
    for (budget, sparsity), by_size in sorted(cells.items()):
        size, runs = min(by_size.items(), key=lambda item: np.mean([r[0] for r in item[1]]))
        values = np.array([accuracy for _, accuracy in runs])
        table.append(EqualFlopsAccuracy(flops=budget, sparsity=sparsity, size=size,
                                        seeds=len(values), accuracy=float(values.mean()),
                                        ci=_listed(mean_interval(values))))
    dense = {cell.flops: cell for cell in table if cell.sparsity == 0.0}
    for cell in table:
        if cell.flops in dense and cell.sparsity > 0:
            cell.minus_dense = cell.accuracy - dense[cell.flops].accuracy
    return table


def _listed(interval) -> list[float] | None:
    """An interval as results JSON holds it: a list, or None."""
    return None if interval is None else list(interval)
