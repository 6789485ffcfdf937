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

Written as ``zero_shot.json`` (a record per task); the report shows each run's accuracies beside
each task's chance level, then these.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

import numpy as np

from moelab.report import format_number, markdown_table
from moelab.report.analysis import Analysis, Findings
from moelab.scaling.fit_record import OMIT_NONE
from moelab.stats.intervals import mean_interval, t_interval, wilson_interval
from moelab.stats.regression import least_squares
from moelab.sweep.analyses.common import joined
from moelab.sweep.folder import SweepFolder
from moelab.sweep.results_csv import ResultRow, ResultsTable, task_column
from moelab.tasks import TASK_NAMES, load_task



@dataclass
class Coefficient:
    """A least-squares coefficient with its 95 % t interval."""

    value: float
    """The estimate."""
    ci: list[float]
    """Its 95 % t interval."""
    se: Optional[float] = field(default=None, metadata=OMIT_NONE)
    """None in files older than the standard errors."""
    df: Optional[int] = field(default=None, metadata=OMIT_NONE)
    """Degrees of freedom of the interval."""


@dataclass
class EqualLossFit:
    """accuracy = mean + loss (loss - mean loss) + sparsity S over every run."""

    mean: Coefficient
    """Accuracy at the runs' mean loss and S = 0."""
    loss: Coefficient
    """Accuracy per nat of best val loss."""
    sparsity: Coefficient
    """Accuracy per unit S at equal loss."""


@dataclass
class EqualFlopsAccuracy:
    """At one FLOPs budget and S: the accuracy of the size with the lowest mean loss."""

    flops: float
    """The FLOPs budget."""
    sparsity: float
    """The sparsity S."""
    size: str
    """The size with the lowest mean loss there."""
    seeds: int
    """Its seeds."""
    accuracy: float
    """The mean over the size's seeds."""
    ci: Optional[list[float]]
    """95 % t interval over the seeds; None with one seed."""
    minus_dense: Optional[float] = field(default=None, metadata=OMIT_NONE)
    """Accuracy minus the budget's dense accuracy (sparse rows of a budget with a dense one)."""


@dataclass
class TaskAccuracy:
    """One zero-shot task against sparsity (``moelab.sweep.analyses.zero_shot``)."""

    items: int
    """Items of the task each run scored."""
    runs: int
    """Runs that scored it."""
    accuracy_range: list[float]
    """The lowest and highest accuracy of any run."""
    median_wilson_half_width: float
    """The median over runs of the Wilson 95 % interval's half-width: one run's binomial noise."""
    equal_loss: Optional[EqualLossFit]
    """None with fewer than 4 runs or one sparsity."""
    equal_flops: Optional[list[EqualFlopsAccuracy]]
    """None for a token-budget sweep."""
    separates: bool
    """Whether accuracy follows the loss or S beyond the items' binomial noise."""


ZeroShotRecord = dict[str, TaskAccuracy]
"""zero_shot.json: each scored task's record."""


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


def zero_shot_section(folder: SweepFolder, results: ResultsTable) -> str:
    """Each run's zero-shot accuracies (results.csv's zero_shot_* columns, from the runs'
    tasks.json) beside each task's chance level; nothing when no run scored tasks."""
    tasks = [task for task in TASK_NAMES if results.has_column(task_column(task))]
    if not tasks:
        return ""
    chance = folder.task_chance
    body = [[r.size, r.budget, str(r.S), r.seed] + [
        format_number(r.zero_shot[t]) if t in r.zero_shot else "" for t in tasks]
        for r in results.rows]
    names = [f"{task} (chance {format_number(chance[task])})" if task in chance else task
             for task in tasks]
    return ("## Zero-shot tasks\n\nAccuracy of each run's final weights on the tasks it scored "
            "(`train.eval_tasks`; each run's `tasks.json`, docs/training.md \"Zero-shot tasks\").\n\n"
            + markdown_table(["size", "budget", "S", "seed", *names], body,
                             "llrr" + "r" * len(tasks)))


def zero_shot_analysis_text(analysis: dict[str, TaskAccuracy]) -> str:
    """Accuracy against S at equal loss and at equal FLOPs, per task, and whether the tasks
    separate anything at all."""
    text = ("### Accuracy against sparsity\n\n"
            "Per task: accuracy = a + b (loss - mean loss) + c S over every run, by least "
            "squares (c: what sparsity adds beyond what its loss predicts, at equal loss), and "
            "at each FLOPs budget the lowest-loss size of each sparsity, its accuracy over its "
            "seeds (at equal FLOPs); 95 % intervals (`zero_shot.json`).\n\n")
    rows = []
    for task, result in analysis.items():
        fit = result.equal_loss

        def coefficient(c: Coefficient | None) -> str:
            return "–" if c is None else f"{c.value:+.3f} [{c.ci[0]:+.3f}, {c.ci[1]:+.3f}]"

        rows.append([task, str(result.runs), str(result.items),
                     f"{result.accuracy_range[0]:.3f}-{result.accuracy_range[1]:.3f}",
                     f"±{result.median_wilson_half_width:.3f}",
                     coefficient(fit.loss if fit else None),
                     coefficient(fit.sparsity if fit else None), "yes" if result.separates else "**no**"])
    text += markdown_table(["task", "runs", "items", "accuracy range", "Wilson half-width",
                            "b (per nat of loss)", "c (per unit S)", "separates"], rows,
                           "lrrrrrrl")
    silent = [task for task, result in analysis.items() if not result.separates]
    if silent:
        text += (f"\n**{', '.join(silent)} cannot separate anything at this scale**: accuracy "
                 "follows neither the loss nor the sparsity beyond the items' binomial noise, "
                 "so these runs say nothing about sparsity downstream.\n")
    for task, result in analysis.items():
        if result.equal_flops:
            table = [[f"{r.flops:.3g}", f"{r.sparsity:g}", r.size, str(r.seeds),
                      f"{r.accuracy:.3f}" + (f" [{r.ci[0]:.3f}, {r.ci[1]:.3f}]" if r.ci else ""),
                      f"{r.minus_dense:+.3f}" if r.minus_dense is not None else ""]
                     for r in result.equal_flops]
            text += (f"\n{task} at equal FLOPs:\n\n"
                     + markdown_table(["C", "S", "lowest-loss size", "seeds", "accuracy",
                                       "minus dense"], table, "rrlrrr"))
    return text + "\n"


def compute(folder: SweepFolder, findings: Findings) -> ZeroShotRecord | None:
    return None if folder.results is None else zero_shot_analysis(folder.results)


def render(record: ZeroShotRecord | None, folder: SweepFolder, findings: Findings) -> str:
    if folder.results is None:
        return ""
    return joined(zero_shot_section(folder, folder.results),
                  zero_shot_analysis_text(record) if record else "")


ANALYSIS: Analysis[SweepFolder, ZeroShotRecord] = Analysis(
    "zero_shot", compute, render, file="zero_shot.json", record_type=ZeroShotRecord)
