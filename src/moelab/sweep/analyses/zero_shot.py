"""Downstream accuracy against sparsity, from results.csv's zero-shot columns.

Two questions, per task. (Abnar et al. 2025, §4 and App. D.3, find with in-context few-shot
tasks that at equal pretraining loss most tasks do not depend on S, and that reading
comprehension favours denser models; moelab's tasks are its own small zero-shot set, not theirs.)

- **at equal loss, within cells**: each sparse run minus its (size, budget) cell's dense run of
  the same seed, dacc = b·dL + c·S over the pairs by least squares without intercept (dL the
  pair's difference of final val loss; best val loss in a results.csv without that column).
  c is what sparsity adds to accuracy beyond what its loss predicts, b one slope per nat shared
  by the cells. The runs are clustered: the same seed's runs share the data order and, in a
  wsd sweep, the budgets of one (size, S, seed) are cooldown branches of one trunk, so the
  standard errors are clustered by (size, seed), which holds every pair that shares a trunk or a
  dense partner (CR1, t with G - 1 df, ``moelab.stats.regression``). A pooled fit over the runs
  would compare cells with each other (sparser cells pretrain lower, bigger ones score higher
  than their loss says) and count each trunk several times; it is not made. The tasks' c are
  one Holm family, and c's word comes from ``moelab.stats.verdicts``. A sweep without dense runs
  to pair with has no equal-loss effect, and the record says why;
- **at equal FLOPs** (FLOPs-budget sweeps): per budget and S, the mean accuracy over the runs of
  the size with the lowest mean loss at that budget and sparsity (the IsoFLOP optimum among the
  sizes tried), with a 95 % t interval over its seeds, and its difference from dense.

Each run's accuracy also has its Wilson 95 % interval over the task's items (the median
half-width is reported). A task separates something when c's verdict is separated after Holm
or b's interval excludes 0 (accuracy follows the loss within cells); when neither, the task
cannot separate anything at this scale, and the analysis says so (``separates``).

Written as ``zero_shot.json`` (a record per task); the report shows each run's accuracies beside
each task's chance level, then these. The findings page on downstream accuracy reads the same
functions (``moelab.findings.zero_shot_sparsity``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

import numpy as np

from moelab.report import format_number, markdown_table
from moelab.report.analysis import Analysis, Findings
from moelab.scaling.fit_record import OMIT_NONE
from moelab.stats.intervals import mean_interval, t_interval, t_p_value, wilson_interval
from moelab.stats.multiple import ADJUSTMENT, holm
from moelab.stats.power import min_detectable_gap
from moelab.stats.regression import clustered_least_squares
from moelab.stats.verdicts import Difference, difference_verdict
from moelab.sweep.analyses.common import joined
from moelab.sweep.analyses.dense_pairs import fit_blocker, pairs_with_dense
from moelab.sweep.folder import SweepFolder
from moelab.sweep.results_csv import ResultRow, ResultsTable, task_column
from moelab.tasks import TASK_NAMES, load_task

SEPARATED = ("rises with S", "falls with S")
"""c's verdict words when it is separated after Holm (``difference_verdict``'s ahead/behind)."""
CLUSTER_UNIT = "(size, seed)"


@dataclass
class Coefficient:
    """A least-squares coefficient with its 95 % t interval (and, for c, its test)."""

    value: float
    """The estimate."""
    ci: list[float]
    """Its 95 % t interval."""
    se: Optional[float] = field(default=None, metadata=OMIT_NONE)
    """Its standard error (clustered in the paired fit); None in files older than the errors."""
    df: Optional[int] = field(default=None, metadata=OMIT_NONE)
    """Degrees of freedom of the interval (clusters - 1 in the paired fit)."""
    p: Optional[float] = field(default=None, metadata=OMIT_NONE)
    """c only: the two-sided p of the t test against 0."""
    p_holm: Optional[float] = field(default=None, metadata=OMIT_NONE)
    """c only: p adjusted by Holm over the tasks' c."""
    mdd: Optional[float] = field(default=None, metadata=OMIT_NONE)
    """c only: the smallest true c detected with 80 % power (two-sided 5 % t test)."""


@dataclass
class EqualLossFit:
    """dacc = b·dL + c·S over the pairs (each sparse run minus its cell's dense run of the same
    seed), errors clustered by (size, seed). A file of an older analysis holds a pooled fit over
    the runs instead (``mean`` set, ``pairs`` absent), which the report no longer reads."""

    loss: Coefficient
    """b: accuracy per nat of val loss, within cells."""
    sparsity: Coefficient
    """c: accuracy per unit S at equal loss, within cells."""
    mean: Optional[Coefficient] = field(default=None, metadata=OMIT_NONE)
    """Older files only: the pooled fit's accuracy at the runs' mean loss and S = 0."""
    pairs: Optional[int] = field(default=None, metadata=OMIT_NONE)
    """Sparse runs paired with their cell's dense run of the same seed; absent in older files."""
    clusters: Optional[int] = field(default=None, metadata=OMIT_NONE)
    """(size, seed) clusters of the standard errors."""
    higher_pairs: Optional[int] = field(default=None, metadata=OMIT_NONE)
    """Pairs whose sparse run scored above its dense partner: a count of signs, not a test."""
    family: Optional[str] = field(default=None, metadata=OMIT_NONE)
    """The Holm family c is adjusted in, in words."""
    verdict: Optional[str] = field(default=None, metadata=OMIT_NONE)
    """c's word (``moelab.stats.verdicts.difference_verdict``): rises with S, falls with S, not
    separated or undetermined."""

    @property
    def pooled(self) -> bool:
        """Whether this is an older analysis's pooled fit over the runs."""
        return self.pairs is None


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
    """The paired fit within cells; None when the runs support none (``equal_loss_missing``)."""
    equal_flops: Optional[list[EqualFlopsAccuracy]]
    """None for a token-budget sweep."""
    separates: bool
    """c separated after Holm or b's interval excludes 0; False without an equal-loss fit."""
    equal_loss_missing: Optional[str] = field(default=None, metadata=OMIT_NONE)
    """Why there is no equal-loss fit (no dense run to pair with, too few clusters, ...)."""


ZeroShotRecord = dict[str, TaskAccuracy]
"""zero_shot.json: each scored task's record."""


@dataclass(frozen=True)
class ScoredRun:
    """One run's cell, seed, sparsity, val loss and accuracy on one task."""

    size: str
    budget: str
    seed: str
    sparsity: float
    loss: float
    accuracy: float


@dataclass(frozen=True)
class DensePair(ScoredRun):
    """A sparse run minus its (size, budget) cell's dense run of the same seed: its cell, seed
    and sparsity, and the differences of loss and accuracy."""

    @property
    def cluster(self) -> tuple[str, str]:
        """(size, seed): the pairs that share a wsd trunk (across budgets) or a dense partner."""
        return (self.size, self.seed)


def task_items(task: str) -> int:
    """The number of items of a shipped task (every run scores all of them)."""
    return len(load_task(task))


def scored_runs(rows: list[ResultRow], task: str) -> list[ScoredRun]:
    """The runs that scored ``task``, each with its final val loss (best where results.csv has
    no final loss): the weights the task scored."""
    return [ScoredRun(row.size, row.budget, row.seed, row.S,
                      row.best_val_loss if row.final_val_loss is None else row.final_val_loss,
                      row.zero_shot[task]) for row in rows if task in row.zero_shot]


def paired_with_dense(runs: list[ScoredRun]) -> list[DensePair]:
    """Every sparse run minus its cell's dense run of the same seed (a sparse run whose cell has
    no dense run of its seed is left out)."""
    return [DensePair(run.size, run.budget, run.seed, run.sparsity, run.loss - partner.loss,
                      run.accuracy - partner.accuracy)
            for run, partner in pairs_with_dense(runs, lambda r: r.sparsity)]


def missing_equal_loss(runs: list[ScoredRun], pairs: list[DensePair]) -> str | None:
    """Why the pairs support no equal-loss fit, in words; None when they do."""
    if not any(run.sparsity == 0 for run in runs):
        return ("no dense run (S = 0) to pair the sparse runs with; a pooled fit over the runs "
                "would compare cells with each other, so none is made")
    if not pairs:
        return "no sparse run has a dense run of its (size, budget) cell and seed"
    design = np.array([[pair.loss, pair.sparsity] for pair in pairs])
    return fit_blocker(design, [pair.cluster for pair in pairs], CLUSTER_UNIT)


def equal_loss_fit(pairs: list[DensePair]) -> EqualLossFit:
    """dacc = b·dL + c·S without intercept over ``pairs``, CR1 clustered by (size, seed): b
    and c with se, df = G - 1 and 95 % t intervals; c with its p and minimum detectable value
    (its Holm p and verdict are set over the tasks, ``adjust_over_tasks``). The pairs must
    support a fit (``missing_equal_loss`` is None)."""
    clusters = [pair.cluster for pair in pairs]
    design = np.array([[pair.loss, pair.sparsity] for pair in pairs])
    y = np.array([pair.accuracy for pair in pairs])
    fit = clustered_least_squares(design, y, clusters)
    b, c = (float(value) for value in fit.values)
    b_se, c_se = (float(se) for se in fit.standard_errors)
    detectable = min_detectable_gap(c_se, fit.df)
    return EqualLossFit(
        loss=Coefficient(value=b, ci=list(t_interval(b, b_se, fit.df)), se=b_se, df=fit.df),
        sparsity=Coefficient(value=c, ci=list(t_interval(c, c_se, fit.df)), se=c_se, df=fit.df,
                             p=t_p_value(c, c_se, fit.df),
                             mdd=None if np.isnan(detectable) else detectable),
        pairs=len(pairs), clusters=len(set(clusters)),
        higher_pairs=sum(pair.accuracy > 0 for pair in pairs))


def adjust_over_tasks(fits: list[EqualLossFit]) -> None:
    """Holm over the tasks' c (the family the report tests), then c's verdict in each fit."""
    tested = [fit for fit in fits if fit.sparsity.p is not None]
    family = f"{ADJUSTMENT} over the {len(tested)} tasks' c"
    for fit, adjusted in zip(tested, holm([fit.sparsity.p for fit in tested])):
        fit.sparsity.p_holm = float(adjusted)
    for fit in fits:
        c = fit.sparsity
        fit.family = family
        difference = Difference(c.value, (c.ci[0], c.ci[1]), c.p_holm, family)
        fit.verdict = difference_verdict(difference, ahead=SEPARATED[0],
                                         behind=SEPARATED[1]).word


def zero_shot_analysis(results: ResultsTable,
                       items: dict[str, int] | None = None) -> dict[str, TaskAccuracy] | None:
    """Per task with a zero_shot_<task> column: the paired equal-loss fit (Holm over the tasks'
    c), the equal-FLOPs table (FLOPs budgets only) and whether the task separates anything;
    None without such columns. ``items``: each task's item count (default: the shipped task
    file's)."""
    tasks = [task for task in TASK_NAMES if results.has_column(task_column(task))
             and any(task in row.zero_shot for row in results.rows)]
    if not tasks:
        return None
    analysis = {task: _task_analysis(results.rows, task, (items or {}).get(task) or task_items(task))
                for task in tasks}
    adjust_over_tasks([result.equal_loss for result in analysis.values()
                       if result.equal_loss is not None])
    for result in analysis.values():
        result.separates = _separates(result.equal_loss)
    return analysis


def _task_analysis(rows: list[ResultRow], task: str, items: int) -> TaskAccuracy:
    runs = scored_runs(rows, task)
    accuracy = np.array([run.accuracy for run in runs])
    half_widths = [_wilson_half_width(a, items) for a in accuracy]
    pairs = paired_with_dense(runs)
    missing = missing_equal_loss(runs, pairs)
    return TaskAccuracy(items=items, runs=len(runs),
                        accuracy_range=[float(accuracy.min()), float(accuracy.max())],
                        median_wilson_half_width=float(np.median(half_widths)),
                        equal_loss=None if missing else equal_loss_fit(pairs),
                        equal_flops=_equal_flops([r for r in rows if task in r.zero_shot], task),
                        separates=False, equal_loss_missing=missing)


def _separates(fit: EqualLossFit | None) -> bool:
    """The spread of runs alone is no test: binomial noise over a hundred runs spans several
    Wilson half-widths. A task separates models when accuracy follows S (c's verdict, after
    Holm) or the loss within cells (b's interval)."""
    if fit is None or fit.pooled:
        return False
    return fit.verdict in SEPARATED or _excludes_zero(fit.loss.ci)


def _wilson_half_width(accuracy: float, items: int) -> float:
    low, high = wilson_interval(round(accuracy * items), items)
    return (high - low) / 2


def _excludes_zero(ci: list[float] | None) -> bool:
    return ci is not None and (ci[0] > 0 or ci[1] < 0)


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


def _coefficient_text(c: Coefficient) -> str:
    return f"{c.value:+.3f} [{c.ci[0]:+.3f}, {c.ci[1]:+.3f}]"


def _equal_loss_row(task: str, result: TaskAccuracy) -> list[str]:
    fit = result.equal_loss
    row = [task, str(result.runs), str(result.items),
           f"{result.accuracy_range[0]:.3f}-{result.accuracy_range[1]:.3f}",
           f"±{result.median_wilson_half_width:.3f}"]
    if fit is None or fit.pooled:
        return row + ["–"] * 7
    c = fit.sparsity
    return row + [f"{fit.pairs} ({fit.clusters})", _coefficient_text(fit.loss),
                  _coefficient_text(c),
                  "–" if c.p_holm is None else f"{c.p:.2g} ({c.p_holm:.2g})",
                  f"**{fit.verdict}**", "–" if c.mdd is None else f"{c.mdd:.3f}",
                  "yes" if result.separates else "**no**"]


def _equal_loss_notes(analysis: dict[str, TaskAccuracy]) -> str:
    """What the table cannot say: an older file's pooled fit, a task without a fit and why,
    and the tasks that separate nothing."""
    text = ""
    pooled = [task for task, r in analysis.items() if r.equal_loss and r.equal_loss.pooled]
    if pooled:
        text += (f"\n**zero_shot.json holds an older analysis's pooled fit over the runs** "
                 f"({', '.join(pooled)}): it compares cells with each other and counts each wsd "
                 "trunk several times, so it is not shown; `moelab report DIR` with the run "
                 "folders recomputes the file within cells.\n")
    reasons: dict[str, list[str]] = {}
    for task, result in analysis.items():
        if result.equal_loss is None and result.equal_loss_missing:
            reasons.setdefault(result.equal_loss_missing, []).append(task)
    for reason, tasks in reasons.items():
        text += f"\nNo equal-loss effect for {', '.join(tasks)}: {reason}.\n"
    silent = [task for task, r in analysis.items()
              if r.equal_loss and not r.equal_loss.pooled and not r.separates]
    if silent:
        text += (f"\n**{', '.join(silent)}: nothing separated at this scale**: c is not "
                 "separated after Holm and b's 95 % interval includes 0, so these runs do not "
                 "show accuracy following either the loss within cells or the sparsity.\n")
    if any(r.equal_loss and r.equal_loss.verdict == "not separated" for r in analysis.values()):
        text += ("\nWhere c is not separated, 'accuracy does not depend on S' is neither "
                 "confirmed nor refuted: no equivalence margin was set in advance, and a c "
                 "smaller than the detectable one (80 % power, two-sided 5 % t test) would go "
                 "unseen.\n")
    return text


def zero_shot_analysis_text(analysis: dict[str, TaskAccuracy]) -> str:
    """Accuracy against S at equal loss (within cells, paired to dense) and at equal FLOPs, per
    task, and whether the tasks separate anything at all."""
    family = next((r.equal_loss.family for r in analysis.values()
                   if r.equal_loss and r.equal_loss.family), None)
    text = ("### Accuracy against sparsity\n\n"
            "At equal loss, within cells: each sparse run minus its (size, budget) cell's dense "
            "run of the same seed, dacc = b·dL + c·S over the pairs by least squares without "
            "intercept, dL the pair's difference of final val loss (c: what sparsity adds beyond "
            "what its loss predicts; b one slope shared by the cells); 95 % intervals with "
            f"errors clustered by {CLUSTER_UNIT}, t with clusters - 1 df"
            + (f"; {family}, c's verdict at its adjusted p" if family else "")
            + ". A pooled fit over the runs would compare cells with each other and count the "
              "runs that share a seed's trunk as independent. At equal FLOPs: at each FLOPs "
              "budget the lowest-loss size of each sparsity, its accuracy over its seeds with a "
              "95 % interval (`zero_shot.json`).\n\n")
    rows = [_equal_loss_row(task, result) for task, result in analysis.items()]
    text += markdown_table(["task", "runs", "items", "accuracy range", "Wilson half-width",
                            "pairs (clusters)", "b (per nat of dL)", "c (per unit S)",
                            "p (Holm)", "c: verdict", "detectable c", "separates"], rows,
                           "lrrrrrrrrlrl")
    text += _equal_loss_notes(analysis)
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
