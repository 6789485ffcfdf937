"""The sweep analysis as typed records: what ``analysis`` finds and ``report`` renders.

Each record is one of the sweep folder's JSON files, its fields in the file's key order, turned
into plain JSON only at the file boundary (``moelab.codec``: ``to_json`` when written,
``from_json`` when read back), so the files stay as they were and a reader finds every field by
its name. The law maths' own records inside them (a fit as ``moelab fit --json`` writes it, a
form's checks, an optimum with its intervals, a throughput model) are the typed records of
``moelab.scaling``.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Optional

from moelab.codec import to_json
from moelab.scaling.fixed_size import FixedSizeAnalysis
from moelab.scaling.form_tests import FormChoice, FormSS, LackOfFit, PureError
from moelab.scaling.forms import FormCheck, FormCriteria, FormOutcome
from moelab.scaling.isoflop import IsoflopAnalysis
from moelab.scaling.isoflop_sparsity import SparsityOptima
from moelab.scaling.optimal import FlopsCurvePoint, ParamsCurvePoint, SecondsCurvePoint, ThreeOptima
from moelab.scaling.fit_record import OMIT_NONE, LawFit
from moelab.scaling.throughput import ShapeThroughput, ThroughputModel, ThroughputModelRecord


@dataclass(kw_only=True)
class SweepFit(LawFit):
    """fit.json: the chosen form's fit (``moelab fit --json``'s record) and the keys the sweep
    adds, so that ``moelab optimal DIR/fit.json`` reads it as any FIT.json."""

    shared_fraction: Optional[float] = None
    source: Optional[str] = None
    columns: Optional[dict[str, str]] = None

    @classmethod
    def of(cls, fit: LawFit, **sweep_keys) -> SweepFit:
        return cls(**{f.name: getattr(fit, f.name) for f in fields(fit)}, **sweep_keys)


@dataclass
class GridRecord:
    """grid.json as the analysis and the report read it (``folder.read_grid``)."""

    name: str
    base: str
    sizes: list[dict]
    sparsities: list[float]
    top_k: int
    mode: str
    flops_budgets: list[float]
    token_budgets: list[float]
    seeds: list[int]
    holdout: str

    @classmethod
    def from_dict(cls, record: dict) -> GridRecord:
        return cls(**{f.name: record[f.name] for f in fields(cls)})

    def describe(self) -> str:
        budgets = (", ".join(f"{b:.3g} FLOPs" for b in self.flops_budgets)
                   or ", ".join(f"{int(b):,} tokens" for b in self.token_budgets))
        sparsities = ", ".join(f"{s:g}" for s in self.sparsities)
        seeds = ("seed " if len(self.seeds) == 1 else "seeds ") + ", ".join(map(str, self.seeds))
        return (f"{len(self.sizes)} sizes ({', '.join(s['name'] for s in self.sizes)}) x "
                f"{len(self.sparsities)} sparsities ({sparsities}, top-{self.top_k}, "
                f"{self.mode}) x {len(self.flops_budgets or self.token_budgets)} budgets "
                f"({budgets}), {seeds}, base config {self.base!r}")


@dataclass
class AnalysisStatus:
    """What was and was not computed, and why (analysis.json's ``status``); a step that did not
    run has no entry."""

    results: Optional[str] = field(default=None, metadata=OMIT_NONE)
    """Set only when results.csv has no complete runs (and then alone)."""
    law: Optional[str] = field(default=None, metadata=OMIT_NONE)
    """chosen, no_form_identified, one_sparsity or too_few_points."""
    throughput: Optional[str] = field(default=None, metadata=OMIT_NONE)
    optima: Optional[str] = field(default=None, metadata=OMIT_NONE)
    """computed, no_law, one_sparsity or no_sparsity_term."""
    seconds: Optional[str] = field(default=None, metadata=OMIT_NONE)


@dataclass(kw_only=True)
class FormSummary(FormOutcome):
    """A form's checks in forms.json: its fit's parameters and intervals instead of the fits."""

    params: Optional[dict[str, float]] = field(default=None, metadata=OMIT_NONE)
    ci: Optional[dict[str, list[float]]] = field(default=None, metadata=OMIT_NONE)

    @classmethod
    def of(cls, check: FormCheck) -> FormSummary:
        outcome = {f.name: getattr(check, f.name) for f in fields(FormOutcome)}
        if check.fit is None:
            return cls(**outcome)
        return cls(**outcome, params=check.fit.params, ci=check.fit.ci)


@dataclass
class FormsRecord:
    """forms.json: every form's checks (``moelab.scaling.forms``) without the bootstrap
    replicates; ``chosen`` is None when no form passes."""

    chosen: Optional[str]
    criteria: FormCriteria
    forms: list[FormSummary]


@dataclass
class ComputeDeviation:
    """How far each run's actual compute C = 6 N_active D is off the budget it was planned for."""

    tolerance: float
    max_abs: float
    per_run: dict[str, float]
    off_budget_runs: dict[str, float]
    """The runs more than ``tolerance`` off."""


@dataclass
class IsoflopRecord:
    """isoflop.json (FLOPs-budget sweeps): the analysis of all points and of each sparsity,
    read and written by ``moelab.codec``."""

    all_points: IsoflopAnalysis
    per_sparsity: dict[float, IsoflopAnalysis]
    """A parabola analysis of each sparsity's runs on their own."""
    surface: bool
    """A surface in (log N, S) per budget (several sparsities), else a parabola in log N."""
    compute_deviation: ComputeDeviation
    sparsity_optima: Optional[SparsityOptima] = field(default=None, metadata={"omit_none": True})
    """N*, L* per budget and sparsity, S*(C) and its trend with C, read off the IsoFLOP minima
    without a law (``moelab.scaling.isoflop_sparsity``); None when too few cells have one."""


@dataclass
class ThroughputRecord:
    """throughput.json: per (N, S) the median tokens/s of its runs, and the throughput model
    fitted to every run (None with the reason in ``model_problem``)."""

    source: str
    rows: list[ShapeThroughput]
    runs: int
    devices: list[str]
    model: Optional[ThroughputModelRecord]
    model_problem: Optional[str]

    def fitted_model(self) -> ThroughputModel | None:
        """The stored throughput model, or None."""
        return self.model.model() if self.model else None


@dataclass(kw_only=True)
class OptimaRecord:
    """optima.json: S*(C), S*(N) and, with a throughput model, S*(T) and the three optima at
    the sweep's median training time. Each curve point is an optimum with its intervals
    (``moelab.scaling.optimal.with_intervals``) and where it was solved."""

    shared_fraction: Optional[float]
    flops_for_fixed_params: float
    """The compute S*(N) is solved at: the sweep's median."""
    vs_flops: list[FlopsCurvePoint]
    vs_params: list[ParamsCurvePoint]
    vs_seconds: Optional[list[SecondsCurvePoint]] = None
    three: Optional[ThreeOptima] = None
    seconds_reference: Optional[float] = field(default=None, metadata=OMIT_NONE)
    """The sweep's median training time (set with the seconds optima)."""
    top_k: Optional[int] = field(default=None, metadata=OMIT_NONE)


@dataclass
class FormTestCheck:
    """One form against the pure error: its fit's residuals and held-out errors, or why it was
    skipped (too few points for it)."""

    law: str
    num_params: int
    skipped: Optional[str] = field(default=None, metadata=OMIT_NONE)
    ss: Optional[float] = field(default=None, metadata=OMIT_NONE)
    """Residual sum of squares of log loss; None when skipped."""
    holdout_mae: Optional[dict[str, Optional[float]]] = field(default=None, metadata=OMIT_NONE)
    """Mean absolute error on each held-out set (``HOLDOUTS``); None where the holdout leaves
    too few points."""
    lack_of_fit: Optional[LackOfFit] = field(default=None, metadata={"omit_with": "ss"})

    def fitted(self) -> FormSS | None:
        return None if self.ss is None else FormSS(self.law, self.num_params, self.ss)


@dataclass
class CountChecks:
    """The forms with N counted one way (total or non-embedding), and the F tests' choice."""

    forms: list[FormTestCheck]
    selection: Optional[FormChoice]
    """None when no form could be fitted."""


@dataclass(kw_only=True)
class SparsityDelta:
    """Loss at S minus dense at one size and token budget, over the seeds."""

    size: str
    budget: str
    D: float
    sparsity: float
    E: Optional[int] = field(default=None, metadata=OMIT_NONE)
    """None in files older than grids of several E."""
    delta: float
    ci: list[float]
    seeds: list[int]
    """The runs behind each mean: [at S, dense]."""


@dataclass
class ExpertPair:
    """At one size, budget and S, the runs of two E compared seed by seed (more E minus fewer)."""

    size: str
    budget: str
    sparsity: float
    E: list[int]
    seeds: int
    difference: float
    ci: list[float]


@dataclass
class SparsityDeltas:
    seed_std: float
    """The pooled std of a point's seeds."""
    df: int
    deltas: list[SparsityDelta]
    expert_pairs: Optional[list[ExpertPair]] = field(default=None, metadata=OMIT_NONE)
    """None in files older than grids of several E."""


@dataclass
class FormTestsRecord:
    """form_tests.json: the forms against the seeds' noise (sweeps with replicated points) and
    the loss at S minus dense at fixed N and D (token-budget sweeps), either or both."""

    pure_error: Optional[PureError] = field(default=None, metadata=OMIT_NONE)
    holdouts: Optional[list[str]] = field(default=None, metadata=OMIT_NONE)
    by_count: Optional[dict[str, CountChecks]] = field(default=None, metadata=OMIT_NONE)
    """By how N is counted: "total" and, where results.csv has it, "non_embedding"."""
    sparsity_deltas: Optional[SparsityDeltas] = field(default=None, metadata=OMIT_NONE)


@dataclass
class Coefficient:
    """A least-squares coefficient with its 95 % t interval."""

    value: float
    ci: list[float]
    se: Optional[float] = field(default=None, metadata=OMIT_NONE)
    """None in files older than the standard errors."""
    df: Optional[int] = field(default=None, metadata=OMIT_NONE)


@dataclass
class EqualLossFit:
    """accuracy = mean + loss (loss - mean loss) + sparsity S over every run."""

    mean: Coefficient
    loss: Coefficient
    sparsity: Coefficient


@dataclass
class EqualFlopsAccuracy:
    """At one FLOPs budget and S: the accuracy of the size with the lowest mean loss."""

    flops: float
    sparsity: float
    size: str
    seeds: int
    accuracy: float
    """The mean over the size's seeds."""
    ci: Optional[list[float]]
    """95 % t interval over the seeds; None with one seed."""
    minus_dense: Optional[float] = field(default=None, metadata=OMIT_NONE)
    """Accuracy minus the budget's dense accuracy (sparse rows of a budget with a dense one)."""


@dataclass
class TaskAccuracy:
    """One zero-shot task against sparsity (``moelab.sweep.zero_shot``)."""

    items: int
    runs: int
    accuracy_range: list[float]
    median_wilson_half_width: float
    equal_loss: Optional[EqualLossFit]
    """None with fewer than 4 runs or one sparsity."""
    equal_flops: Optional[list[EqualFlopsAccuracy]]
    """None for a token-budget sweep."""
    separates: bool
    """Whether accuracy follows the loss or S beyond the items' binomial noise."""


@dataclass
class FixedSizeRecord(FixedSizeAnalysis):
    """fixed_size.json: the analysis of ``moelab.scaling.fixed_size`` and the grid's mode."""

    mode: str = "fixed_total"
    """The grid's ``mode``: fixed_total (N fixed across S) or fixed_expert (N_active fixed)."""


@dataclass
class FinetuneEstimate:
    """One fine-tuning effect with its 95 % t interval, two-sided p, minimum detectable value and,
    when it was tested, Holm's p: a coefficient of the clustered equal-loss fit (``se``, ``df``
    set) or a cell's mean difference from dense over its pairs (``pairs`` set; no interval, p or
    detectable value with a single pair)."""

    pairs: Optional[int] = field(default=None, metadata=OMIT_NONE)
    value: Optional[float] = None
    se: Optional[float] = field(default=None, metadata=OMIT_NONE)
    df: Optional[int] = field(default=None, metadata=OMIT_NONE)
    ci: Optional[list[float]] = None
    p: Optional[float] = None
    mdd: Optional[float] = None
    p_holm: Optional[float] = field(default=None, metadata=OMIT_NONE)


@dataclass
class FinetuneEqualLoss:
    """dy = b dL + c S over the pairs: b per nat of pretraining loss, c per unit S."""

    loss: FinetuneEstimate
    sparsity: FinetuneEstimate


@dataclass
class FinetuneMetric:
    """One metric over every fine-tuned run: its range, the equal-loss fit (None with too few
    clusters) and whether S separates anything at equal loss."""

    range: list[float]
    equal_loss: Optional[FinetuneEqualLoss]
    separates: bool = False


@dataclass
class FinetuneCellMetric:
    minus_dense: FinetuneEstimate


@dataclass
class FinetuneCell:
    """A (budget, size, S) cell: sparse minus dense over its seed pairs."""

    budget: str
    size: str
    sparsity: float
    pairs: int
    pretraining_minus_dense: FinetuneEstimate
    finetune_val_loss: FinetuneCellMetric
    finetune_gain: FinetuneCellMetric


@dataclass
class FinetuneRecord:
    """finetune.json (``moelab.sweep.finetune``). A file of an older analysis has no ``cells``
    (and may lack the counts): the report then asks for `moelab report DIR` to redo it."""

    runs: int
    pretraining_loss: Optional[str] = None
    pairs: Optional[int] = None
    clusters: Optional[int] = None
    cluster_unit: Optional[str] = None
    tests: Optional[int] = None
    basis: Optional[str] = None
    metrics: dict[str, FinetuneMetric] = field(default_factory=dict)
    cells: Optional[list[FinetuneCell]] = None


@dataclass
class SweepAnalysis:
    """Everything the analysis of a sweep folder found: analysis.json's settings and status,
    and the records of the files beside it (None where the results support none)."""

    bootstrap_replicates: int
    max_starts: Optional[int]
    columns: dict[str, str]
    """How results.csv's columns map to the law's (N is the total parameter count)."""
    status: AnalysisStatus = field(default_factory=AnalysisStatus)
    n_points: Optional[int] = None
    """The runs in results.csv; None when it has none yet."""
    shared_fraction: Optional[float] = None
    """The runs' share of parameters outside the experts; None when every run is dense."""
    fit: Optional[SweepFit] = None
    """fit.json: the chosen form's fit."""
    holdout_fit: Optional[LawFit] = None
    """fit_holdout.json: the same form refitted without the held-out points."""
    forms: Optional[FormsRecord] = None
    isoflop: Optional[IsoflopRecord] = None
    throughput: Optional[ThroughputRecord] = None
    optima: Optional[OptimaRecord] = None
    form_tests: Optional[FormTestsRecord] = None
    """form_tests.json: the forms against the pure error of the seeds, N total and
    non-embedding, held out at the largest S and D, and the loss at S minus dense at fixed N
    and D (``moelab.sweep.law_checks``)."""
    zero_shot: Optional[dict[str, TaskAccuracy]] = None
    """zero_shot.json: accuracy against S at equal loss and at equal FLOPs, per task
    (``moelab.sweep.zero_shot``); None when no run scored tasks."""
    finetune: Optional[FinetuneRecord] = None
    """finetune.json: the fine-tuned loss and the gain against S at equal pretraining loss and
    per budget (``moelab.sweep.finetune``); None when no run was fine-tuned."""
    fixed_size: Optional[FixedSizeRecord] = None
    """fixed_size.json: S* per (size, budget) cell read off the runs and the trend tests of S*
    along N and C (``moelab.scaling.fixed_size``); None when no cell has two sparsities."""

    def settings_dict(self) -> dict:
        """analysis.json."""
        record = {"bootstrap_replicates": self.bootstrap_replicates,
                  "max_starts": self.max_starts, "columns": self.columns,
                  "status": to_json(self.status)}
        if self.n_points is not None:
            record.update(n_points=self.n_points, shared_fraction=self.shared_fraction)
        return record
