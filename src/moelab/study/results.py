"""Results of a study folder, computed from its run folders alone.

``find_runs`` reads every complete run under ``DIR/runs`` (its ``summary.json``, the eval lines
of ``metrics.jsonl``, its ``config.yaml`` and, when the run scored zero-shot tasks
(``train.eval_tasks``), its ``tasks.json``); ``aggregate`` turns them into the per-arm seed
statistics and the per-criterion comparisons (paired and Welch) that ``results.json``,
``results.csv`` and the report show.
Nothing here trains or reads anything but those files (and ``plan.json`` for arm descriptions
and runs that are missing).
"""

from __future__ import annotations

import csv
import io
import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

import numpy as np
import yaml

from moelab.accounting import CRITERIA
from moelab.errors import MoelabError
from moelab.study.arms import LADDER_RUNGS, MOE_ARM, dense_arm_name
from moelab.runs.tokens import format_token_count, parse_token_count
from moelab.runs import is_complete, read_failures
from moelab.runs.families import count_family_tokens, planned_branch_steps
from moelab.train.run_folder import RunFolder
from moelab.train.summary import RunSummary
from moelab.study.plan import run_name
from moelab.study.stats import compare, summarize
from moelab.study.zero_shot import zero_shot_result
from moelab.tasks import read_run_tasks

# Per-run numbers copied from summary.json into results.json / results.csv.
RUN_FIELDS = (
    "best_val_loss", "best_val_bpb", "best_val_step", "final_val_loss", "final_val_bpb",
    "tokens", "steps", "tokens_per_s", "wall_time_s", "collapse",
)
# Per-arm numbers summarised over seeds (mean, std, n).
SEED_STATISTICS = ("best_val_loss", "best_val_bpb", "final_val_loss", "tokens_per_s", "wall_time_s")
# Sizes, identical for every seed of an arm.
SIZE_FIELDS = ("active_params", "total_params", "non_embedding_params", "flops_per_token_6n",
               "flops_per_token_full")
# Routing diagnostics (per layer in summary.json), averaged over layers then seeds.
ROUTING_KEYS = (
    "busiest_fraction", "usage_variance_scaled", "routing_entropy", "load_entropy",
    "effective_experts", "mean_log_z", "mean_z_sq",
)
_SEED_FOLDER = re.compile(r"^seed(\d+)$")


@dataclass
class RunRecord:
    """One complete run folder, read back."""

    arm: str
    seed: int
    budget: Optional[int]
    run_dir: Path
    """Relative to the study folder, so a moved folder reports the same."""
    summary: RunSummary
    evals: list[dict] = field(default_factory=list)
    config: dict = field(default_factory=dict)
    tasks: dict = field(default_factory=dict)
    """Task name -> its entry in the run's tasks.json; {} when the run scored none."""

    @property
    def name(self) -> str:
        return run_name(self.arm, self.seed, self.budget)


def find_runs(study_dir: Path) -> list[RunRecord]:
    """Every complete run under ``DIR/runs/[<budget>/]<arm>/seed<k>/``."""
    records = []
    runs_root = study_dir / "runs"
    for summary_path in sorted(runs_root.rglob("summary.json")):
        run_dir = summary_path.parent
        parts = run_dir.relative_to(runs_root).parts
        match = _SEED_FOLDER.match(parts[-1])
        if len(parts) not in (2, 3) or not match or not is_complete(run_dir):
            continue
        budget = parse_token_count(parts[0]) if len(parts) == 3 else None
        records.append(read_run(study_dir, run_dir, parts[-2], int(match.group(1)), budget))
    return records


def read_run(study_dir: Path, run_dir: Path, arm: str, seed: int, budget: Optional[int]) -> RunRecord:
    summary = RunFolder(run_dir).summary()
    evals = []
    metrics_path = run_dir / "metrics.jsonl"
    if metrics_path.is_file():
        for number, line in enumerate(metrics_path.read_text("utf-8").splitlines(), start=1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except ValueError:
                raise MoelabError(f"{metrics_path} line {number} is not valid JSON") from None
            if record.get("kind") == "eval":
                evals.append(record)
    config_path = run_dir / "config.yaml"
    config = yaml.safe_load(config_path.read_text("utf-8")) if config_path.is_file() else {}
    return RunRecord(arm, seed, budget, run_dir.relative_to(study_dir), summary, evals,
                     config or {}, read_run_tasks(run_dir))


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text("utf-8"))
    except ValueError:
        raise MoelabError(f"{path} is not valid JSON") from None


def read_plan(study_dir: Path) -> dict:
    path = study_dir / "plan.json"
    return _read_json(path) if path.is_file() else {}


# --------------------------------------------------------------------------------------------
# Aggregation
# --------------------------------------------------------------------------------------------


def aggregate(study_dir: Path, records: list[RunRecord]) -> dict:
    """The content of results.json: per-arm statistics and gaps (per budget in a sweep)."""
    plan = read_plan(study_dir)
    arm_names = _arm_order([arm["name"] for arm in plan.get("arms", [])], {r.arm for r in records})
    kind = plan.get("kind") or ("ablation" if set(arm_names) <= set(LADDER_RUNGS) else "study")
    budgets = sorted({r.budget for r in records if r.budget is not None})
    groups = [_budget_group(arm_names, [r for r in records if r.budget == b], b)
              for b in budgets] or [_budget_group(arm_names, records, None)]
    complete = {r.name for r in records}
    results = {
        "kind": kind,
        "study_dir": study_dir.resolve().name,
        "seeds": sorted({r.seed for r in records}),
        "criteria": [c for c in CRITERIA if dense_arm_name(c) in arm_names],
        "arms": groups[-1]["arms"],  # the largest budget of a sweep
        "gaps": groups[-1]["gaps"],
        "budgets": groups if budgets else [],
        "missing_runs": [run["name"] for run in plan.get("runs", []) if run["name"] not in complete],
        "failed_runs": read_failures(study_dir),
    }
    if "zero_shot" in groups[-1]:  # only studies whose runs scored tasks: others stay as they were
        results["zero_shot"] = groups[-1]["zero_shot"]
    family = budget_family_tokens(plan, records)
    if family:  # only wsd budget families: other studies stay as they were
        results["budget_family"] = family
    return json_safe(results)


def budget_family_tokens(plan: dict, records: list[RunRecord]) -> dict:
    """Under a wsd budget family (plan.json names each branch's source and step): the tokens
    the complete runs trained, against one run per budget from scratch; {} without branches."""
    branch_steps = planned_branch_steps(plan)
    if not branch_steps:
        return {}

    def tokens(record: RunRecord) -> tuple[str, int, int]:
        total, steps = record.summary.tokens or 0, record.summary.steps or 1
        return record.name, total, record.summary.tokens_per_step or total // steps

    trained, separate = count_family_tokens(branch_steps, map(tokens, records))
    return {"branches": len(branch_steps), "tokens_trained": trained,
            "tokens_one_run_per_budget": separate}


def _arm_order(planned: list[str], present: set[str]) -> list[str]:
    """The plan's order, then the usual one (moe, dense arms, ladder rungs), then the rest."""
    preferred = [*planned, MOE_ARM, *(dense_arm_name(c) for c in CRITERIA), *LADDER_RUNGS]
    ordered = [arm for arm in dict.fromkeys(preferred) if arm in present]
    return ordered + sorted(present - set(ordered))


def _budget_group(arm_names: list[str], records: list[RunRecord], budget: Optional[int]) -> dict:
    arms = {}
    for arm in arm_names:
        arm_records = sorted((r for r in records if r.arm == arm), key=lambda r: r.seed)
        if arm_records:
            arms[arm] = arm_result(arm, arm_records)
    gaps = {}
    for criterion in CRITERIA:
        dense_arm = dense_arm_name(criterion)
        if MOE_ARM in arms and dense_arm in arms:
            # Paired by seed number within this budget: the same seed, the same data order.
            gaps[criterion] = compare(
                criterion, MOE_ARM, dense_arm,
                _by_seed(arms[MOE_ARM], "best_val_loss"), _by_seed(arms[dense_arm], "best_val_loss"),
            ).to_dict()
    group = {"arms": arms, "gaps": gaps}
    zero_shot = zero_shot_result(arm_names, records)
    if zero_shot:
        group["zero_shot"] = zero_shot
    if budget is not None:
        group = {"tokens": budget, "label": format_token_count(budget), **group}
    return group


def _by_seed(arm: dict, key: str) -> dict[int, float]:
    return {run["seed"]: run[key] for run in arm["runs"] if run.get(key) is not None}


def arm_result(arm: str, records: list[RunRecord]) -> dict:
    """Seed statistics, sizes, routing and the per-run numbers of one arm (run files only)."""
    first = records[0].summary
    runs = [
        {"seed": r.seed, "run_dir": r.run_dir.as_posix(),
         **{k: getattr(r.summary, k) for k in RUN_FIELDS}}
        for r in records
    ]
    result = {
        "description": describe_model(records[0].config),
        "criterion": _criterion_of(arm),
        **{key: getattr(first, key) for key in SIZE_FIELDS},
        "model": (records[0].config.get("model") or {}),
    }
    for key in SEED_STATISTICS:
        result[key] = summarize([run[key] for run in runs if run.get(key) is not None]).to_dict()
    result["routing"] = routing_result(records)
    result["collapsed_runs"] = sum(bool(r.summary.collapse) for r in records)
    result["runs"] = runs
    return result


def _criterion_of(arm: str) -> Optional[str]:
    return arm[len("dense_"):] if arm.startswith("dense_") and arm[len("dense_"):] in CRITERIA else None


def describe_model(config: dict) -> str:
    model = config.get("model") or {}
    moe = model.get("moe")
    if moe:
        shared = (f" + {moe['num_shared_experts']} shared" if moe.get("num_shared_experts")
                  else "")
        return (f"MoE, {moe.get('num_experts')} experts of {moe.get('d_expert')}, "
                f"top-{moe.get('top_k')}{shared}")
    return f"dense, d_ff={model.get('d_ff')}"


def routing_result(records: list[RunRecord]) -> dict:
    """Final routing diagnostics: mean over layers, then mean over seeds; the worst layer too."""
    per_run = [r.summary.routing for r in records]
    if not any(per_run):
        return {}
    result = {}
    for key in ROUTING_KEYS:
        layer_means = [np.mean([layer[key] for layer in layers]) for layers in per_run
                       if layers and all(key in layer for layer in layers)]
        if layer_means:
            result[key] = float(np.mean(layer_means))
    busiest = [max(layer["busiest_fraction"] for layer in layers) for layers in per_run
               if layers and all("busiest_fraction" in layer for layer in layers)]
    if busiest:
        result["max_busiest_fraction"] = float(max(busiest))
    dead = [[layer["dead_experts"] for layer in layers] for layers in per_run
            if layers and all("dead_experts" in layer for layer in layers)]
    if dead and len({len(layers) for layers in dead}) == 1:
        # Dead experts (load < 1 % of the mean, ``RoutingStats.summary``) of each layer, mean
        # over seeds, and their sum over layers.
        result["dead_experts_per_layer"] = np.mean(dead, axis=0).tolist()
        result["dead_experts"] = float(sum(result["dead_experts_per_layer"]))
    loads = [layer_loads(layers) for layers in per_run]
    if all(load is not None for load in loads):
        result["expert_load"] = np.mean(loads, axis=0).tolist()  # (layers, experts)
    return result


def layer_loads(layers: list[dict]) -> Optional[list[list[float]]]:
    """Per-layer expert load shares c_i / sum c, when the run recorded them."""
    rows = []
    for layer in layers:
        counts = layer.get("expert_load")
        if not counts:
            return None
        total = float(sum(counts))
        rows.append([c / total if total else 0.0 for c in counts])
    return rows


def json_safe(value: Any) -> Any:
    """NaN and infinities become null (JSON has no NaN)."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    return value


# --------------------------------------------------------------------------------------------
# results.csv
# --------------------------------------------------------------------------------------------

CSV_COLUMNS = ("budget_tokens", "arm", "criterion", "seed", *RUN_FIELDS, *SIZE_FIELDS, "run_dir")


def results_csv(results: dict) -> str:
    """One row per run, every budget. ``budget_tokens`` is the ``--budgets`` value a run belongs
    to (empty in a single-budget study); ``tokens`` is what the run trained."""
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=CSV_COLUMNS, lineterminator="\n")
    writer.writeheader()
    for group in results["budgets"] or [{"tokens": None, "arms": results["arms"]}]:
        for arm, result in group["arms"].items():
            for run in result["runs"]:
                writer.writerow({
                    "budget_tokens": group["tokens"],
                    "arm": arm, "criterion": result["criterion"] or "",
                    **{k: result.get(k) for k in SIZE_FIELDS},
                    **{k: run.get(k) for k in CSV_COLUMNS if k in run},
                })
    return out.getvalue()
