"""What a study's results.json holds, as dataclasses; and results.csv.

``moelab.study.aggregate`` builds a ``StudyResults`` from the study folder; the report's
analyses (``moelab.study.analyses``) and the terminal table read it by attribute. It becomes a
dict only at the JSON boundary (``StudyResults.to_dict``), with the keys in the order
results.json has always had them, and NaN already turned into None (``json_safe``: JSON has no
NaN) so that what the report reads is what results.json says.
"""

from __future__ import annotations

import csv
import dataclasses
import io
import math
from dataclasses import dataclass, field
from typing import Any, Optional

from moelab.codec import from_json, to_json
from moelab.errors import MoelabError
from moelab.numerics import Machine
from moelab.study.rungs import RungStep
from moelab.stats.intervals import Summary
from moelab.study.gaps import Gap
from moelab.study.zero_shot import TaskResult

# Per-run numbers copied from summary.json into results.json / results.csv.
RUN_FIELDS = (
    "best_val_loss", "best_val_bpb", "best_val_step", "final_val_loss", "final_val_bpb",
    "tokens", "steps", "tokens_per_s", "wall_time_s", "collapse",
)
# Per-arm numbers summarised over seeds (mean, std, n).
SEED_STATISTICS = ("best_val_loss", "best_val_bpb", "final_val_loss", "tokens_per_s", "wall_time_s")
# Sizes, identical for every seed of an arm.
SIZE_FIELDS = ("active_params", "total_params", "non_embedding_params", "flops_per_token_6n",
               "flops_per_token_kaplan")
# Routing diagnostics (per layer in summary.json), averaged over layers then seeds.
ROUTING_KEYS = (
    "busiest_fraction", "usage_variance_scaled", "routing_entropy", "load_entropy",
    "effective_experts", "mean_log_z", "mean_z_sq", "max_violation", "load_p90",
)


@dataclass
class RunResult:
    """One run of an arm: the numbers of its summary.json that results.json repeats."""

    seed: int
    """The run's seed (train.seed)."""
    run_dir: str
    """The run folder, relative to the study folder."""
    best_val_loss: Optional[float]
    """summary.json's: the lowest validation loss, nats per token."""
    best_val_bpb: Optional[float]
    """summary.json's: bits per byte at that evaluation."""
    best_val_step: Optional[int]
    """summary.json's: the step of that evaluation."""
    final_val_loss: Optional[float]
    """summary.json's: validation loss at the last step."""
    final_val_bpb: Optional[float]
    """summary.json's: bits per byte at the last step."""
    tokens: Optional[int]
    """summary.json's: training tokens trained."""
    steps: Optional[int]
    """summary.json's: optimizer steps trained."""
    tokens_per_s: Optional[float]
    """summary.json's: training tokens per second of training time."""
    wall_time_s: Optional[float]
    """summary.json's: wall-clock seconds of the whole run."""
    collapse: bool
    """summary.json's: whether some layer's routing collapsed at the final evaluation."""
    machine: Optional[Machine] = field(default=None, metadata={"omit_none": True})
    """The machine the run trained on (moelab.numerics); not written for a run older than it."""


_NOT_RECORDED = {"omit_none": True}
"""A routing number's metadata: None when the runs did not record it, and then not written."""


@dataclass
class RoutingResult:
    """An arm's final routing diagnostics: mean over layers, then over seeds (``ROUTING_KEYS``),
    and the worst layer. None: the runs did not record it (every field, for a dense arm); it is
    not written, so a dense arm's routing is {}."""

    busiest_fraction: Optional[float] = field(default=None, metadata=_NOT_RECORDED)
    """max_i c_i / sum c: 1/E balanced, 1 collapsed onto one expert."""
    usage_variance_scaled: Optional[float] = field(default=None, metadata=_NOT_RECORDED)
    """E^2 x the variance of the loads c_i / sum c: 0 balanced, E - 1 collapsed."""
    routing_entropy: Optional[float] = field(default=None, metadata=_NOT_RECORDED)
    """Mean per-token router entropy over log E (1 = uniform)."""
    load_entropy: Optional[float] = field(default=None, metadata=_NOT_RECORDED)
    """Entropy (nats) of the loads c_i / sum c."""
    effective_experts: Optional[float] = field(default=None, metadata=_NOT_RECORDED)
    """exp(load_entropy): E when balanced, 1 when collapsed."""
    mean_log_z: Optional[float] = field(default=None, metadata=_NOT_RECORDED)
    """Mean logsumexp of the router logits."""
    mean_z_sq: Optional[float] = field(default=None, metadata=_NOT_RECORDED)
    """Mean of its square (what the z-loss penalises)."""
    max_violation: Optional[float] = field(default=None, metadata=_NOT_RECORDED)
    """MaxVio, max load / mean load - 1 (``moelab.moe.routing.LoadBalance``)."""
    load_p90: Optional[float] = field(default=None, metadata=_NOT_RECORDED)
    """The 90th percentile over experts of load / mean load."""
    max_busiest_fraction: Optional[float] = field(default=None, metadata=_NOT_RECORDED)
    """The worst layer's busiest_fraction over every seed."""
    dead_experts_per_layer: Optional[list[float]] = field(default=None, metadata=_NOT_RECORDED)
    """Experts whose load is under 1 % of the mean, per layer (first layer first), mean over
    seeds."""
    dead_experts: Optional[float] = field(default=None, metadata=_NOT_RECORDED)
    """Their sum over layers."""
    expert_load: Optional[list[list[float]]] = field(default=None, metadata=_NOT_RECORDED)
    """(layers, experts): each expert's share c_i / sum c of the token-slots, mean over seeds."""

    @property
    def recorded(self) -> bool:
        """Whether the runs recorded any routing (MoE runs do; dense runs have none)."""
        return any(value is not None for value in _field_values(self))


@dataclass
class ArmResult:
    """One arm: seed statistics, sizes, routing and the per-run numbers (run files only)."""

    description: str
    """The arm's model in words, e.g. 'MoE, 4 experts of 128, top-2' or 'dense, d_ff=256'."""
    criterion: Optional[str]
    """The fairness criterion a dense arm is matched on; None for the MoE and ladder rungs."""
    active_params: Optional[int]
    """Parameters one token uses (``moelab.accounting``)."""
    total_params: Optional[int]
    """Every parameter, all experts and the embeddings included."""
    non_embedding_params: Optional[int]
    """total_params less the token embedding (and an untied head)."""
    flops_per_token_6n: Optional[int]
    """6 x active_params, the FLOPs per token the laws count."""
    flops_per_token_kaplan: Optional[int]
    """Kaplan et al.'s FLOPs per token, attention over the context included."""
    model: dict
    """The ``model`` section of the arm's config, as its config.yaml holds it."""
    best_val_loss: Summary
    """The runs' best validation loss over seeds (the statistic the gaps compare)."""
    best_val_bpb: Summary
    """The runs' best bits per byte over seeds."""
    final_val_loss: Summary
    """The runs' last-step validation loss over seeds."""
    tokens_per_s: Summary
    """The runs' training tokens per second over seeds."""
    wall_time_s: Summary
    """The runs' wall-clock seconds over seeds."""
    routing: RoutingResult
    """Routing diagnostics over layers and seeds; {} for a dense arm."""
    collapsed_runs: int
    """Runs whose routing collapsed (summary.json's collapse)."""
    runs: list[RunResult]
    """Each run's numbers, by seed."""

    @property
    def tokens(self) -> Optional[int]:
        """Training tokens of a run of this arm (every seed trains the same budget)."""
        return next((run.tokens for run in self.runs if run.tokens), None)

    def by_seed(self, key: str) -> dict[int, float]:
        """{seed: the run's ``key``} over the runs that have it."""
        return {run.seed: getattr(run, key) for run in self.runs if getattr(run, key) is not None}


@dataclass
class BudgetResults:
    """The arms, gaps and zero-shot results of one token budget (the only one outside a sweep)."""

    tokens: Optional[int] = field(metadata={"omit_none": True})
    """The budget; None (and not written, nor its label) in a study without ``--budgets``."""
    label: Optional[str] = field(metadata={"omit_none": True})
    """The budget's label, e.g. 409.6K (left out with tokens)."""
    arms: dict[str, ArmResult]
    """Arm name -> its results at this budget."""
    gaps: dict[str, Gap]
    """Criterion -> the MoE against that criterion's dense arm, paired by seed."""
    zero_shot: dict[str, TaskResult] = field(default_factory=dict, metadata={"omit_empty": True})
    """Task -> its result; {} (not written) when the runs scored no tasks."""
    rung_steps: list[RungStep] = field(default_factory=list, metadata={"omit_empty": True})
    """The routing ladder's adjacent rungs, paired (``moelab.study.rungs``); [] (not written)
    in a study."""


@dataclass
class BudgetFamilyTokens:
    """Under a wsd budget family: the tokens the complete runs trained, against one run per
    budget from scratch."""

    branches: int
    """Cooldown branches among the complete runs."""
    tokens_trained: int
    """Tokens the complete runs trained (a branch only after its branch point)."""
    tokens_one_run_per_budget: int
    """Tokens they would train as one run per budget from scratch."""


@dataclass
class StudyResults:
    """results.json: a study's (or the routing ladder's) statistics, from its run folders."""

    kind: str
    """'study' or 'ablation'."""
    study_dir: str
    """The study folder's name."""
    seeds: list[int]
    """The seeds the runs used, ascending."""
    criteria: list[str]
    """The criteria that have a dense arm, in ``moelab.accounting.CRITERIA`` order."""
    final: BudgetResults = field(metadata={"written_as": ("arms", "gaps", "zero_shot",
                                                           "rung_steps")})
    """The largest budget of a sweep, the only one otherwise: what the report leads with.
    results.json holds its arms, gaps, zero_shot and rung_steps at the top level (``to_dict``),
    not this key."""
    budgets: list[BudgetResults]
    """Every budget, smallest first; [] in a study without ``--budgets``."""
    missing_runs: list[str]
    """Planned runs without a complete result."""
    failed_runs: dict[str, str]
    """Run name -> the error its last attempt raised (failures.json)."""
    budget_family: Optional[BudgetFamilyTokens] = None
    """Under a wsd budget family only."""

    @property
    def arms(self) -> dict[str, ArmResult]:
        return self.final.arms

    @property
    def gaps(self) -> dict[str, Gap]:
        return self.final.gaps

    @property
    def zero_shot(self) -> dict[str, TaskResult]:
        return self.final.zero_shot

    @property
    def rung_steps(self) -> list[RungStep]:
        return self.final.rung_steps

    @property
    def is_ablation(self) -> bool:
        return self.kind == "ablation"

    def results_entries(self) -> dict:
        """results.json's keys of the statistics (the ``--tune-lr`` and ``--until-resolved``
        records follow them: ``moelab.study.analyses``)."""
        return self.to_dict()

    def to_dict(self) -> dict:
        """The content of results.json (without the records of ``--tune-lr`` and
        ``--until-resolved``)."""
        record = {
            "kind": self.kind, "study_dir": self.study_dir, "seeds": list(self.seeds),
            "criteria": list(self.criteria), "arms": to_json(self.arms),
            "gaps": to_json(self.gaps), "budgets": to_json(self.budgets),
            "missing_runs": list(self.missing_runs), "failed_runs": dict(self.failed_runs),
        }
        if self.zero_shot:
            record["zero_shot"] = to_json(self.zero_shot)
        if self.rung_steps:  # only the ladder: a study's results.json stays as it was
            record["rung_steps"] = to_json(self.rung_steps)
        if self.budget_family is not None:  # only wsd budget families: others stay as they were
            record["budget_family"] = to_json(self.budget_family)
        return record


def json_safe(value: Any) -> Any:
    """NaN and infinities become None (JSON has no NaN), in dicts, lists and dataclasses alike;
    a dataclass comes back as a copy of its own type (itself when nothing changed)."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        changed = {}
        for f in dataclasses.fields(value):
            if not f.init:
                continue
            old = getattr(value, f.name)
            new = json_safe(old)
            if new is not old:
                changed[f.name] = new
        return dataclasses.replace(value, **changed) if changed else value
    return value


def _field_names(obj: Any) -> list[str]:
    return [f.name for f in dataclasses.fields(obj)]


def _field_values(obj: Any) -> list[Any]:
    return [getattr(obj, f.name) for f in dataclasses.fields(obj)]


# --------------------------------------------------------------------------------------------
# results.csv
# --------------------------------------------------------------------------------------------

CSV_COLUMNS = ("budget_tokens", "arm", "criterion", "seed", *RUN_FIELDS, *SIZE_FIELDS, "run_dir")
CSV_COLUMN_DOCS = {
    "budget_tokens": ("int or empty",
                      "The --budgets value the run belongs to; empty in a single-budget study."),
    "arm": ("str", "The arm the run belongs to (moe, dense_active, dense_total, ...)."),
}
"""The type and meaning of the columns that are no field of ``RunResult`` or ``ArmResult``
(docs/reference/outputs.md)."""
MACHINE_CSV_COLUMNS = ("cpu", "cpu_capability", "torch_version", "blas", "threads", "numerics")
"""After CSV_COLUMNS when some run recorded its machine: its CPU model, torch's kernel set,
torch and BLAS versions, torch threads and train.numerics (empty for an older run)."""


def results_csv(results: StudyResults) -> str:
    """One row per run, every budget. ``budget_tokens`` is the ``--budgets`` value a run belongs
    to (empty in a single-budget study); ``tokens`` is what the run trained."""
    out = io.StringIO()
    groups = results.budgets or [results.final]
    recorded = any(run.machine for group in groups for arm in group.arms.values()
                   for run in arm.runs)
    writer = csv.DictWriter(out, fieldnames=CSV_COLUMNS + (MACHINE_CSV_COLUMNS if recorded else ()),
                            lineterminator="\n")
    writer.writeheader()
    for group in groups:
        for arm, result in group.arms.items():
            for run in result.runs:
                writer.writerow({
                    "budget_tokens": group.tokens,
                    "arm": arm, "criterion": result.criterion or "",
                    **{key: getattr(result, key) for key in SIZE_FIELDS},
                    **{key: getattr(run, key) for key in CSV_COLUMNS if hasattr(run, key)},
                    **_machine_cells(run.machine),
                })
    return out.getvalue()


def _machine_cells(machine: Optional[Machine]) -> dict[str, Any]:
    if machine is None:
        return {}
    return {"cpu": machine.cpu, "cpu_capability": machine.capability,
            "torch_version": machine.torch, "blas": machine.blas, "threads": machine.threads,
            "numerics": machine.numerics}


# A stored results.json read back
# --------------------------------------------------------------------------------------------


@dataclass
class ResultsRun:
    """A run as a results.json lists it: what pooling reads of it."""

    seed: int
    best_val_loss: Optional[float] = None
    tokens: Optional[int] = None
    steps: Optional[int] = None


@dataclass
class ResultsArm:
    model: Any = None
    runs: list[ResultsRun] = field(default_factory=list)


@dataclass
class ResultsBudget:
    arms: dict[str, ResultsArm]
    tokens: Optional[int] = None


@dataclass
class ResultsFile:
    """What a reader of a stored results.json needs of it: its arms' runs per budget (pooling,
    the docs' claims; ``codec.from_json``: other keys are ignored)."""

    arms: dict[str, ResultsArm]
    kind: Optional[str] = None
    criteria: Any = None
    budgets: list[ResultsBudget] = field(default_factory=list)


def read_results_json(name: str, results: Any) -> ResultsFile:
    """A study's results.json (already parsed) as typed records; a one-line error naming
    ``name`` when it is not one."""
    if not isinstance(results, dict) or not isinstance(results.get("arms"), dict):
        raise MoelabError(f"{name} is not a study's results.json: it has no 'arms'")
    try:
        return from_json(ResultsFile, results)
    except (ValueError, TypeError, AttributeError) as exc:
        raise MoelabError(f"{name} is not a study's results.json ({exc})") from None
