"""The sweep analysis as typed records: what ``analysis`` finds and ``report`` renders.

Each record is one of the sweep folder's JSON files, its fields in the file's key order, turned
into a dict only at the file boundary (``to_dict`` when written, ``from_dict`` when read back), so
the files stay as they were and a reader finds every field by its name. The law maths' own
records inside them (a fit as ``moelab fit --json`` writes it, an IsoFLOP analysis, an optimum with
its intervals, a throughput model) stay the plain records of ``moelab.scaling``.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Optional

from moelab.scaling.throughput import ThroughputModel


@dataclass
class LawFit:
    """A law fitted to the sweep's points: the record ``moelab fit --json`` writes
    (``moelab.scaling.summary.fit_columns``), and in fit.json the keys the sweep adds
    (``source`` set), so that ``moelab optimal DIR/fit.json`` reads it as any FIT.json."""

    law: str
    params: dict[str, float]
    objective: float
    n_points: int
    num_starts: int
    theta: dict[str, float]
    derived: dict[str, float]
    ci: dict[str, list[float]]
    """95 % intervals by parameter name; empty without bootstrap resamples."""
    holdout: Optional[dict]
    """How well the fit predicts the held-out points (``heldout_error``), or None."""
    bootstrap: Optional[dict]
    shared_fraction: Optional[float] = None
    source: Optional[str] = None
    columns: Optional[dict[str, str]] = None

    @property
    def replicas(self) -> list[dict[str, float]]:
        """The bootstrap fits' parameters (empty without resamples)."""
        return self.bootstrap["params"] if self.bootstrap else []

    def to_dict(self) -> dict:
        names = [f.name for f in fields(self)]
        if self.source is None:  # fit_holdout.json: the fit's record alone
            names = names[:names.index("shared_fraction")]
        return {name: getattr(self, name) for name in names}

    @classmethod
    def from_dict(cls, record: dict) -> LawFit:
        return cls(**{f.name: record.get(f.name) for f in fields(cls)})


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

    results: Optional[str] = None
    """Set only when results.csv has no complete runs (and then alone)."""
    law: Optional[str] = None
    """chosen, no_form_identified, one_sparsity or too_few_points."""
    throughput: Optional[str] = None
    optima: Optional[str] = None
    """computed, no_law, one_sparsity or no_sparsity_term."""
    seconds: Optional[str] = None

    def to_dict(self) -> dict:
        return {f.name: getattr(self, f.name) for f in fields(self)
                if getattr(self, f.name) is not None}

    @classmethod
    def from_dict(cls, record: dict) -> AnalysisStatus:
        return cls(**{f.name: record[f.name] for f in fields(cls) if f.name in record})


@dataclass
class FormsRecord:
    """forms.json: every form's checks (``moelab.scaling.forms``) without the bootstrap
    replicates; ``chosen`` is None when no form passes."""

    chosen: Optional[str]
    criteria: dict
    forms: list[dict]

    def to_dict(self) -> dict:
        return {"chosen": self.chosen, "criteria": self.criteria, "forms": self.forms}

    @classmethod
    def from_dict(cls, record: dict) -> FormsRecord:
        return cls(record["chosen"], record["criteria"], record["forms"])


@dataclass
class ComputeDeviation:
    """How far each run's actual compute C = 6 N_active D is off the budget it was planned for."""

    tolerance: float
    max_abs: float
    per_run: dict[str, float]
    off_budget_runs: dict[str, float]
    """The runs more than ``tolerance`` off."""

    def to_dict(self) -> dict:
        return {"tolerance": self.tolerance, "max_abs": self.max_abs, "per_run": self.per_run,
                "off_budget_runs": self.off_budget_runs}


@dataclass
class IsoflopRecord:
    """isoflop.json (FLOPs-budget sweeps): the analysis of all points and of each sparsity."""

    all_points: dict
    per_sparsity: dict
    surface: bool
    """A surface in (log N, S) per budget (several sparsities), else a parabola in log N."""
    compute_deviation: ComputeDeviation
    sparsity_optima: Optional[dict] = None
    """N*, L* per budget and sparsity, S*(C) and its trend with C, read off the IsoFLOP minima
    without a law (``moelab.scaling.isoflop_sparsity``); None when too few cells have one."""

    def to_dict(self) -> dict:
        record = {"all_points": self.all_points, "per_sparsity": self.per_sparsity,
                  "surface": self.surface, "compute_deviation": self.compute_deviation.to_dict()}
        if self.sparsity_optima is not None:
            record["sparsity_optima"] = self.sparsity_optima
        return record

    @classmethod
    def from_dict(cls, record: dict) -> IsoflopRecord:
        return cls(record["all_points"], record["per_sparsity"], record["surface"],
                   ComputeDeviation(**record["compute_deviation"]), record.get("sparsity_optima"))


@dataclass
class ThroughputRecord:
    """throughput.json: per (N, S) the median tokens/s of its runs, and the throughput model
    fitted to every run (None with the reason in ``model_problem``)."""

    source: str
    rows: list[dict]
    runs: int
    devices: list[str]
    model: Optional[dict]
    """``ThroughputModel.to_dict()``."""
    model_problem: Optional[str]

    def to_dict(self) -> dict:
        return {"source": self.source, "rows": self.rows, "runs": self.runs,
                "devices": self.devices, "model": self.model, "model_problem": self.model_problem}

    @classmethod
    def from_dict(cls, record: dict) -> ThroughputRecord:
        return cls(record["source"], record["rows"], record["runs"], record["devices"],
                   record.get("model"), record.get("model_problem"))

    def fitted_model(self) -> ThroughputModel | None:
        """The stored throughput model, or None."""
        if not self.model:
            return None
        stored = self.model
        return ThroughputModel(stored["coefficients"], stored["bootstrap"]["coefficients"],
                               stored.get("tokens_per_step"), stored["n_rows"], stored["source"])


@dataclass
class OptimaRecord:
    """optima.json: S*(C), S*(N) and, with a throughput model, S*(T) and the three optima at
    the sweep's median training time. Each curve point is an optimum with its intervals
    (``moelab.scaling.optimal.with_intervals``) and where it was solved."""

    shared_fraction: Optional[float]
    flops_for_fixed_params: float
    """The compute S*(N) is solved at: the sweep's median."""
    vs_flops: list[dict]
    vs_params: list[dict]
    vs_seconds: Optional[list[dict]] = None
    three: Optional[dict] = None
    seconds_reference: Optional[float] = None
    """The sweep's median training time (set with the seconds optima)."""
    top_k: Optional[int] = None

    def to_dict(self) -> dict:
        record = {"shared_fraction": self.shared_fraction,
                  "flops_for_fixed_params": self.flops_for_fixed_params,
                  "vs_flops": self.vs_flops, "vs_params": self.vs_params,
                  "vs_seconds": self.vs_seconds, "three": self.three}
        if self.seconds_reference is not None:
            record.update(seconds_reference=self.seconds_reference, top_k=self.top_k)
        return record

    @classmethod
    def from_dict(cls, record: dict) -> OptimaRecord:
        return cls(**{f.name: record.get(f.name) for f in fields(cls)})


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
    fit: Optional[LawFit] = None
    """fit.json: the chosen form's fit."""
    holdout_fit: Optional[LawFit] = None
    """fit_holdout.json: the same form refitted without the held-out points."""
    forms: Optional[FormsRecord] = None
    isoflop: Optional[IsoflopRecord] = None
    throughput: Optional[ThroughputRecord] = None
    optima: Optional[OptimaRecord] = None
    form_tests: Optional[dict] = None
    """form_tests.json: the forms against the pure error of the seeds, N total and
    non-embedding, held out at the largest S and D, and the loss at S minus dense at fixed N
    and D (``moelab.sweep.law_checks``)."""
    zero_shot: Optional[dict] = None
    """zero_shot.json: accuracy against S at equal loss and at equal FLOPs, per task
    (``moelab.sweep.zero_shot``); None when no run scored tasks."""
    finetune: Optional[dict] = None
    """finetune.json: the fine-tuned loss and the gain against S at equal pretraining loss and
    per budget (``moelab.sweep.finetune``); None when no run was fine-tuned."""
    fixed_size: Optional[dict] = None
    """fixed_size.json: S* per (size, budget) cell read off the runs and the trend tests of S*
    along N and C (``moelab.scaling.fixed_size``); None when no cell has two sparsities."""

    def settings_dict(self) -> dict:
        """analysis.json."""
        record = {"bootstrap_replicates": self.bootstrap_replicates,
                  "max_starts": self.max_starts, "columns": self.columns,
                  "status": self.status.to_dict()}
        if self.n_points is not None:
            record.update(n_points=self.n_points, shared_fraction=self.shared_fraction)
        return record
