"""Fine-tuning against sparsity, from results.csv's finetune columns (a grid with ``finetune``).

moelab's own stage, not Abnar et al.'s (paper B evaluates pretraining loss, few-shot tasks and
chain-of-thought prompting, and fine-tunes nothing). Its anchors are Artetxe et al. 2021 (arXiv
2112.10684) and ST-MoE (Zoph et al. 2022, arXiv 2202.08906), which report that MoEs fine-tune
worse than their pretraining suggests. Every run's final weights are fine-tuned by one recipe
on the same new text, and two numbers are read per run: the fine-tuned val loss on the text's
held-out part (``finetune_val_loss``) and the improvement over the weights before fine-tuning
(``finetune_gain`` = ``finetune_source_val_loss`` - ``finetune_val_loss``).

**Within cells, paired to dense.** A cell is one (size, budget): at a FLOPs budget its runs
share the total parameters N (fixed_total) and the training compute, at a token budget the
tokens. Each sparse run is paired with its cell's own dense run of the same seed, and every
effect is a difference sparse - dense within the pair, so what differs between sizes and
budgets (and a slope of fine-tuned loss on pretraining loss that differs between them) does not
enter. For each metric y:

- **per cell and S** (equal FLOPs and N, or equal tokens): the mean over seeds of
  y(S) - y(dense), with a 95 % t interval and a two-sided p over the pairs (the seeds of one
  cell are separate families, so the pairs are independent);
- **at equal pretraining loss**: over every pair, dy = b dL + c S by least squares without an
  intercept (a dense run paired with itself is 0), dL the pair's difference of final
  pretraining val loss; c per unit S is what sparsity does to y beyond what its pretraining
  loss predicts, b one slope shared by the cells (the within-cell differences span a few
  hundredths of a nat).

**Errors clustered by wsd family.** The budgets of one (size, S, seed) are cooldown branches of
one trunk, and every pair of a (size, seed) shares its dense family, so the pairs of one
(size, seed) are not independent: the equal-loss fit's standard errors are cluster-robust over
(size, seed) clusters (the CR1 sandwich, G / (G - 1) x (n - 1) / (n - k)), its intervals and p
from t with G - 1 degrees of freedom (a pooled OLS over runs would count each trunk several
times).

**One family of tests.** The p of every test the report makes -- c for each metric and every
cell's difference for each metric -- is adjusted together by Holm's step-down (Holm 1979):
the family is fixed by the grid, not by which tests came out small. Where an interval includes
0 nothing separates the sparsities; the analysis then gives the minimum detectable difference:
the true effect that this many runs would detect at the 5 % level four times out of five, by the
exact power of the t-test at that standard error and degrees of freedom (noncentral t,
``moelab.stats.power.min_detectable_gap``, as the study's gaps).

Written as ``finetune.json`` (``FinetuneRecord``); the report's section says each effect in
words.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Optional

import numpy as np

from moelab.errors import MoelabError
from moelab.report import markdown_table
from moelab.report.analysis import Analysis, Findings
from moelab.scaling.fit_record import OMIT_NONE
from moelab.stats.intervals import mean_interval, t_interval, t_p_value
from moelab.stats.multiple import holm
from moelab.stats.power import min_detectable_gap
from moelab.stats.regression import clustered_least_squares
from moelab.sweep.analyses.dense_pairs import fit_blocker, pairs_with_dense
from moelab.sweep.folder import SweepFolder
from moelab.sweep.results_csv import ResultRow, ResultsTable


@dataclass
class FinetuneEstimate:
    """One fine-tuning effect with its 95 % t interval, two-sided p, minimum detectable value and,
    when it was tested, Holm's p: a coefficient of the clustered equal-loss fit (``se``, ``df``
    set) or a cell's mean difference from dense over its pairs (``pairs`` set; no interval, p or
    detectable value with a single pair)."""

    pairs: Optional[int] = field(default=None, metadata=OMIT_NONE)
    """Pairs behind a cell's mean difference."""
    value: Optional[float] = None
    """The estimate."""
    se: Optional[float] = field(default=None, metadata=OMIT_NONE)
    """Its clustered standard error."""
    df: Optional[int] = field(default=None, metadata=OMIT_NONE)
    """Degrees of freedom of its interval."""
    ci: Optional[list[float]] = None
    """Its 95 % t interval."""
    p: Optional[float] = None
    """Its two-sided p."""
    mdd: Optional[float] = None
    """The smallest true effect detected with 80 % power (two-sided 5 % t test)."""
    p_holm: Optional[float] = field(default=None, metadata=OMIT_NONE)
    """p adjusted by Holm over the record's tests."""


@dataclass
class FinetuneEqualLoss:
    """dy = b dL + c S over the pairs: b per nat of pretraining loss, c per unit S."""

    loss: FinetuneEstimate
    """b: the metric per nat of pretraining loss."""
    sparsity: FinetuneEstimate
    """c: the metric per unit S at equal pretraining loss."""


@dataclass
class FinetuneMetric:
    """One metric over every fine-tuned run: its range, the equal-loss fit (None with too few
    clusters) and whether S separates anything at equal loss."""

    range: list[float]
    """The lowest and highest value over the runs."""
    equal_loss: Optional[FinetuneEqualLoss]
    """The effect of S at equal pretraining loss; null with too few clusters."""
    separates: bool = False
    """S's interval at equal loss excludes 0."""


@dataclass
class FinetuneCellMetric:
    """One fine-tuning metric of a cell: sparse minus dense over its pairs."""

    minus_dense: FinetuneEstimate
    """Sparse minus dense over the cell's pairs."""


@dataclass
class FinetuneCell:
    """A (budget, size, S) cell: sparse minus dense over its seed pairs."""

    budget: str
    """The budget's label."""
    size: str
    """The grid's size label."""
    sparsity: float
    """The sparse S."""
    pairs: int
    """Seeds with both a sparse and a dense finetune."""
    pretraining_minus_dense: FinetuneEstimate
    """Pretraining loss, sparse minus dense."""
    finetune_val_loss: FinetuneCellMetric
    """The fine-tuned loss, sparse minus dense."""
    finetune_gain: FinetuneCellMetric
    """The fine-tuning gain, sparse minus dense."""


@dataclass
class FinetuneRecord:
    """finetune.json (``moelab.sweep.analyses.finetune``). A file of an older analysis has no ``cells``
    (and may lack the counts): the report then asks for `moelab report DIR` to redo it."""

    runs: int
    """Runs with a complete finetune."""
    pretraining_loss: Optional[str] = None
    """The pretraining loss the equal-loss fit holds fixed (final_val_loss)."""
    pairs: Optional[int] = None
    """Sparse runs paired with their cell's dense run of the same seed."""
    clusters: Optional[int] = None
    """Clusters of the clustered standard errors."""
    cluster_unit: Optional[str] = None
    """What a cluster is, in words."""
    tests: Optional[int] = None
    """Tests in the Holm family."""
    basis: Optional[str] = None
    """flops or tokens: the kind of budget the cells are at."""
    metrics: dict[str, FinetuneMetric] = field(default_factory=dict)
    """Per metric (finetune_val_loss, finetune_gain), over every fine-tuned run."""
    cells: Optional[list[FinetuneCell]] = None
    """Each (budget, size, S) cell against dense."""


METRICS = ("finetune_val_loss", "finetune_gain")
"""ResultRow fields, and the names finetune.json gives them."""
PRETRAINING_LOSS = "final_val_loss"
"""The pretraining loss a finetune is read against: the final weights' (those fine-tuned)."""
CLUSTER_UNIT = "size and seed (the dense family every pair of the size shares, and the sparse ones)"


def _metric(row: ResultRow, metric: str) -> float:
    """A run's value of PRETRAINING_LOSS or a metric in METRICS (a complete finetune has both)."""
    value = getattr(row, metric)
    if value is None:  # a hand-edited results.csv: moelab writes both with the finetune
        raise MoelabError(f"results.csv: the run {row.run} has no {metric}: rerun moelab report "
                          "to rebuild the file from the run folders")
    return value


@dataclass(frozen=True)
class Pair:
    """A sparse run and its cell's dense run of the same seed: the differences sparse - dense."""

    size: str
    budget: str
    sparsity: float
    seed: str
    pretraining: float
    """Sparse minus dense final pretraining val loss."""
    metrics: dict[str, float]
    """Sparse minus dense, per metric."""

    @property
    def cluster(self) -> tuple[str, str]:
        return (self.size, self.seed)


def minimum_detectable(se: float, df: int) -> float | None:
    """The smallest true effect detected with 80 % power by a two-sided 5 % t test (exact
    noncentral-t power); None where it cannot be computed (no spread)."""
    detectable = min_detectable_gap(se, df)
    return None if math.isnan(detectable) else detectable


def finetune_analysis(results: ResultsTable) -> FinetuneRecord | None:
    """Both metrics per cell and at equal pretraining loss, Holm over every test (module
    docstring); None without fine-tuned runs."""
    tuned = [row for row in results.rows if row.finetune_val_loss is not None]
    if not tuned or not all(results.has_column(column) for column in METRICS):
        return None
    pairs = paired_with_dense(tuned)
    metrics = {}
    for metric in METRICS:
        values = np.array([_metric(row, metric) for row in tuned])
        metrics[metric] = FinetuneMetric(range=[float(values.min()), float(values.max())],
                                         equal_loss=clustered_equal_loss_fit(pairs, metric))
    cells = _cells(pairs)
    tests = _adjust_family(metrics, cells)
    for result in metrics.values():
        fit = result.equal_loss
        result.separates = bool(fit is not None and _excludes_zero(fit.sparsity.ci))
    flops = all(row.C_budget is not None for row in tuned)
    return FinetuneRecord(runs=len(tuned), pretraining_loss=PRETRAINING_LOSS, pairs=len(pairs),
                          clusters=len({pair.cluster for pair in pairs}),
                          cluster_unit=CLUSTER_UNIT, tests=tests,
                          basis="flops" if flops else "tokens", metrics=metrics, cells=cells)


def paired_with_dense(rows: list[ResultRow]) -> list[Pair]:
    """Every sparse run with its (size, budget) cell's dense run of the same seed (a sparse run
    whose cell has no dense run of its seed is left out)."""
    return [Pair(row.size, row.budget, row.S, row.seed,
                 _metric(row, PRETRAINING_LOSS) - _metric(partner, PRETRAINING_LOSS),
                 {m: _metric(row, m) - _metric(partner, m) for m in METRICS})
            for row, partner in pairs_with_dense(rows, lambda r: r.S)]


def clustered_equal_loss_fit(pairs: list[Pair], metric: str) -> FinetuneEqualLoss | None:
    """dy = b dL + c S over the pairs, cluster-robust over (size, seed): b ("loss") and c
    ("sparsity") with se, df = G - 1, p, a 95 % t interval and the minimum detectable value;
    None with fewer than 3 clusters or no spread in S or dL."""
    design = np.array([[pair.pretraining, pair.sparsity] for pair in pairs]).reshape(-1, 2)
    if fit_blocker(design, [pair.cluster for pair in pairs], CLUSTER_UNIT) is not None:
        return None
    y = np.array([pair.metrics[metric] for pair in pairs])
    coefficients = clustered_least_squares(design, y, [pair.cluster for pair in pairs])
    df = coefficients.df
    loss, sparsity = (
        FinetuneEstimate(value=float(value), se=float(se), df=df, ci=list(t_interval(value, se, df)),
                         p=t_p_value(value, se, df), mdd=minimum_detectable(float(se), df))
        for value, se in zip(coefficients.values, coefficients.standard_errors))
    return FinetuneEqualLoss(loss=loss, sparsity=sparsity)


def _excludes_zero(ci: list[float] | None) -> bool:
    return ci is not None and (ci[0] > 0 or ci[1] < 0)


def _cells(pairs: list[Pair]) -> list[FinetuneCell]:
    """Per (size, budget, S): the pairs' mean differences from dense, each with its interval,
    p and minimum detectable difference; the pretraining loss's difference beside them."""
    grouped: dict[tuple, list[Pair]] = {}
    for pair in pairs:
        grouped.setdefault((pair.budget, pair.size, pair.sparsity), []).append(pair)
    cells = []
    for (budget, size, sparsity), members in sorted(grouped.items(), key=_cell_order):
        by_metric = {metric: FinetuneCellMetric(_paired_mean(
            np.array([p.metrics[metric] for p in members]))) for metric in METRICS}
        cells.append(FinetuneCell(
            budget=budget, size=size, sparsity=sparsity, pairs=len(members),
            pretraining_minus_dense=_paired_mean(np.array([p.pretraining for p in members])),
            **by_metric))
    return cells


def _cell_order(item) -> tuple:
    (budget, size, sparsity), _ = item
    try:
        value = float(budget.lstrip("CD").rstrip("KMG"))
    except ValueError:
        value = math.inf
    return (value, budget, size, sparsity)


def _paired_mean(differences: np.ndarray) -> FinetuneEstimate:
    """The mean difference with its 95 % t interval, two-sided p and minimum detectable
    difference (no interval or p with fewer than two pairs)."""
    mean = float(differences.mean())
    record = FinetuneEstimate(pairs=len(differences), value=mean)
    interval = mean_interval(differences)
    if interval is not None:  # two or more pairs
        se = float(differences.std(ddof=1) / math.sqrt(len(differences)))
        df = len(differences) - 1
        record.ci = list(interval)
        record.mdd = minimum_detectable(se, df)
        record.p = t_p_value(mean, se, df)
    return record


def _adjust_family(metrics: dict[str, FinetuneMetric], cells: list[FinetuneCell]) -> int:
    """Holm over every fine-tuning test the report makes; each tested estimate gains
    ``p_holm``. Returns the number of tests."""
    records = [result.equal_loss.sparsity for result in metrics.values()
               if result.equal_loss is not None]
    records += [getattr(cell, metric).minus_dense for cell in cells for metric in METRICS]
    tested = [record for record in records if record.p is not None]
    for record, adjusted in zip(tested, holm([record.p for record in tested])):
        record.p_holm = adjusted
    return len(tested)


FINETUNE_LABELS = {"finetune_val_loss": "fine-tuned val loss", "finetune_gain": "gain"}


def finetune_analysis_text(analysis: FinetuneRecord) -> str:
    """The fine-tuned loss and the gain against S: every effect within a (size, budget) cell,
    paired to the cell's dense run of the same seed; at equal pretraining loss with errors
    clustered by (size, seed); Holm over every test; what nothing separates is said in words,
    with the minimum detectable difference (``moelab.sweep.analyses.finetune``)."""
    if analysis.cells is None:  # finetune.json of an older analysis: `moelab report DIR` redoes it
        return ("## Fine-tuning against sparsity\n\nfinetune.json is from an older analysis; "
                "`moelab report DIR` recomputes it.\n")
    equal = ("equal FLOPs and total parameters" if analysis.basis == "flops"
             else "equal tokens")
    text = ("## Fine-tuning against sparsity\n\n"
            f"Every run's final weights fine-tuned by the grid's one recipe ({analysis.runs} "
            "finetunes, runs/finetune/): the fine-tuned val loss on the new text's held-out part "
            "and the gain (the weights' loss there before fine-tuning minus after); moelab's own "
            "stage (anchored on Artetxe et al. 2021 and ST-MoE, Zoph et al. 2022), not paper B's. "
            f"Each sparse run is paired with its cell's (size, budget: {equal}) dense run of the "
            f"same seed ({analysis.pairs} pairs), and every effect is sparse minus dense. At "
            "equal pretraining loss: dy = b dL + c S over the pairs without intercept, dL the "
            "pair's difference of final pretraining val loss; c per unit S with its 95 % "
            f"interval, errors clustered by {analysis.cluster_unit} ({analysis.clusters} "
            f"clusters, t with {(analysis.clusters or 0) - 1} df). Holm over all "
            f"{analysis.tests} fine-tuning tests of this section (`finetune.json`).\n\n")
    rows, silent = [], []
    for metric, result in analysis.metrics.items():
        fit = result.equal_loss
        if fit is None:
            rows.append([FINETUNE_LABELS[metric], "–", "–", "–", "–", "–"])
            continue
        loss, sparsity = fit.loss, fit.sparsity
        rows.append([FINETUNE_LABELS[metric], _coefficient_text(loss),
                     _coefficient_text(sparsity), _p_pair(sparsity), f"±{sparsity.mdd:.3f}",
                     "yes" if result.separates else "**no**"])
        if not result.separates:
            silent.append(f"{FINETUNE_LABELS[metric]} (an effect smaller than "
                          f"{sparsity.mdd:.3f} per unit S would go unseen)")
    text += markdown_table(["metric", "b (per nat of pretraining loss)", "c (per unit S)",
                            "p (Holm)", "detectable c", "S separates"], rows, "lrrrrl")
    if any(result.equal_loss is None for result in analysis.metrics.values()):
        text += ("\nThe equal-loss fit needs at least 4 pairs in 3 or more (size, seed) "
                 "clusters: too few here.\n")
    if silent:
        text += ("\n**At equal pretraining loss nothing separates the sparsities** for "
                 + "; ".join(silent) + ": the interval of c includes 0.\n")
    table = []
    for cell in analysis.cells:
        line = [cell.budget, cell.size, f"{cell.sparsity:g}", str(cell.pairs),
                _minus_dense_text(cell.pretraining_minus_dense)]
        for metric in FINETUNE_LABELS:
            record = getattr(cell, metric).minus_dense
            line.append(_minus_dense_text(record) + (f", p {_p_pair(record)}"
                                                     if record.p is not None else ""))
        table.append(line)
    text += (f"\nPer cell and S, at {equal}: the mean over seeds of sparse minus dense, paired "
             "by seed, with its 95 % t interval, p and Holm's p (where an interval includes 0 "
             "nothing separates it from dense; ± is its minimum detectable difference):\n\n")
    text += markdown_table(["budget", "size", "S", "pairs", "pretraining loss minus dense",
                            "fine-tuned loss minus dense", "gain minus dense"], table, "llrrrrr")
    return text + "\n"


def _p_pair(record: FinetuneEstimate) -> str:
    """'0.018 (0.21)': raw p and Holm's."""
    if record.p is None:
        return "–"
    return f"{record.p:.2g} ({record.p_holm:.2g})"


def _coefficient_text(coefficient: FinetuneEstimate) -> str:
    assert coefficient.ci is not None  # a fitted coefficient always has its interval
    low, high = coefficient.ci
    return f"{coefficient.value:+.3f} [{low:+.3f}, {high:+.3f}]"


def _minus_dense_text(record: FinetuneEstimate | None) -> str:
    if record is None or record.value is None:
        return ""
    text = f"{record.value:+.4f}"
    if record.ci:
        low, high = record.ci
        text += f" [{low:+.4f}, {high:+.4f}]"
        if low <= 0 <= high and record.mdd is not None:
            text += f" n.s. (±{record.mdd:.4f})"
    return text


def compute(folder: SweepFolder, findings: Findings) -> FinetuneRecord | None:
    return None if folder.results is None else finetune_analysis(folder.results)


def render(record: FinetuneRecord | None, folder: SweepFolder, findings: Findings) -> str:
    return "" if record is None or folder.results is None else finetune_analysis_text(record)


ANALYSIS: Analysis[SweepFolder, FinetuneRecord] = Analysis(
    "finetune", compute, render, file="finetune.json", record_type=FinetuneRecord)
