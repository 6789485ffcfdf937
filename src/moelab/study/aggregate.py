"""A study's results, computed from its run folders alone.

``aggregate`` turns a study folder's complete runs (``moelab.study.folder``) into the per-arm seed
statistics and the per-criterion comparisons (paired and Welch) that results.json,
results.csv and the report show. The gaps of every budget and criterion are one family of
tests, the zero-shot comparisons another: each verdict uses its Holm-adjusted p. Nothing here
trains or reads a file: the folder was read once, by the command (``StudyFolder``), with its
``plan.json`` (the arm order and the runs that are missing) and its failures.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Optional

import numpy as np

from moelab.config import ModelConfig, to_dict
from moelab.runs.families import count_family_tokens, planned_branch_steps
from moelab.study.arms import COMPARED_ARMS, COMPUTE_ARM, LADDER_RUNGS, MOE_ARM, STUDY_CRITERIA
from moelab.runs.tokens import format_token_count
from moelab.study.folder import CompleteRun, StudyFolder
from moelab.study.results import (
    ROUTING_KEYS, RUN_FIELDS, SEED_STATISTICS, SIZE_FIELDS, ArmResult, BudgetFamilyTokens,
    BudgetResults, RoutingResult, RunResult, StudyResults, json_safe,
)
from moelab.study.rungs import adjust_steps, rung_steps
from moelab.stats.intervals import summarize
from moelab.study.gaps import adjust_family, compare
from moelab.study.zero_shot import adjust_comparisons, zero_shot_result


def aggregate(folder: StudyFolder) -> StudyResults:
    """Per-arm statistics and gaps (per budget in a sweep), NaN-free as results.json holds them."""
    records = folder.runs
    arm_names = _arm_order(folder.planned_arms, {r.arm for r in records})
    kind = folder.kind or ("ablation" if set(arm_names) <= set(LADDER_RUNGS) else "study")
    budgets = sorted({r.budget for r in records if r.budget is not None})
    groups = adjust_families(
        [budget_results(arm_names, [r for r in records if r.budget == b], b) for b in budgets]
        or [budget_results(arm_names, records, None)])
    complete = {r.name for r in records}
    return json_safe(StudyResults(
        kind=kind,
        study_dir=folder.name,
        seeds=sorted({r.seed for r in records}),
        criteria=[c for c, pair in COMPARED_ARMS.items() if set(pair) <= set(arm_names)],
        final=groups[-1],  # the largest budget of a sweep
        budgets=groups if budgets else [],
        missing_runs=[name for name in folder.planned_runs if name not in complete],
        failed_runs=dict(folder.failures),
        budget_family=budget_family_tokens(folder.plan, records),
    ))


def adjust_families(groups: list[BudgetResults]) -> list[BudgetResults]:
    """The gaps of every budget and criterion as one family of tests, the zero-shot comparisons
    of every budget, task and criterion another, the ladder's steps a third: each with its
    Holm-adjusted p and verdict."""
    gap_keys = [(i, criterion) for i, group in enumerate(groups) for criterion in group.gaps]
    gaps = dict(zip(gap_keys, adjust_family([groups[i].gaps[c] for i, c in gap_keys])))
    task_keys = [(i, task, criterion) for i, group in enumerate(groups)
                 for task, result in group.zero_shot.items() for criterion in result.comparisons]
    comparisons = dict(zip(task_keys, adjust_comparisons(
        [groups[i].zero_shot[task].comparisons[c] for i, task, c in task_keys])))
    step_keys = [(i, k) for i, group in enumerate(groups) for k in range(len(group.rung_steps))]
    steps = dict(zip(step_keys, adjust_steps([groups[i].rung_steps[k] for i, k in step_keys])))
    return [dataclasses.replace(
        group,
        gaps={c: gaps[i, c] for c in group.gaps},
        rung_steps=[steps[i, k] for k in range(len(group.rung_steps))],
        zero_shot={task: dataclasses.replace(result, comparisons={
            c: comparisons[i, task, c] for c in result.comparisons})
            for task, result in group.zero_shot.items()},
    ) for i, group in enumerate(groups)]


def budget_family_tokens(plan: dict, records: list[CompleteRun]) -> Optional[BudgetFamilyTokens]:
    """Under a wsd budget family (plan.json names each branch's source and step): the tokens
    the complete runs trained, against one run per budget from scratch; None without branches."""
    branch_steps = planned_branch_steps(plan)
    if not branch_steps:
        return None

    def tokens(record: CompleteRun) -> tuple[str, int, int]:
        total, steps = record.summary.tokens or 0, record.summary.steps or 1
        return record.name, total, record.summary.tokens_per_step or total // steps

    trained, separate = count_family_tokens(branch_steps, map(tokens, records))
    return BudgetFamilyTokens(len(branch_steps), trained, separate)


def _arm_order(planned: list[str], present: set[str]) -> list[str]:
    """The plan's order, then the usual one (moe, dense arms, ladder rungs), then the rest."""
    preferred = [*planned, MOE_ARM, *(dense for _, dense in COMPARED_ARMS.values()), COMPUTE_ARM,
                 *LADDER_RUNGS]
    ordered = [arm for arm in dict.fromkeys(preferred) if arm in present]
    return ordered + sorted(present - set(ordered))


def budget_results(arm_names: list[str], records: list[CompleteRun],
                   budget: Optional[int]) -> BudgetResults:
    """The arms present among ``records`` and the MoE against each dense arm."""
    arms = {}
    for arm in arm_names:
        arm_records = sorted((r for r in records if r.arm == arm), key=lambda r: r.seed)
        if arm_records:
            arms[arm] = arm_result(arm, arm_records)
    gaps = {}
    for criterion, (moe_arm, dense_arm) in COMPARED_ARMS.items():
        if moe_arm in arms and dense_arm in arms:
            # Paired by seed number within this budget: the same seed, the same data order.
            gaps[criterion] = compare(criterion, moe_arm, dense_arm,
                                      arms[moe_arm].by_seed("best_val_loss"),
                                      arms[dense_arm].by_seed("best_val_loss"))
    label = format_token_count(budget) if budget is not None else None
    steps = rung_steps({arm: result.by_seed("best_val_loss") for arm, result in arms.items()})
    return BudgetResults(budget, label, arms, gaps, zero_shot_result(arm_names, records), steps)


def arm_result(arm: str, records: list[CompleteRun]) -> ArmResult:
    """Seed statistics, sizes, routing and the per-run numbers of one arm (run files only)."""
    first = records[0].summary
    runs = [RunResult(seed=r.seed, run_dir=r.run_dir.as_posix(), machine=r.summary.machine,
                      **{key: getattr(r.summary, key) for key in RUN_FIELDS}) for r in records]
    model = records[0].config.model
    statistics: dict[str, Any] = {
        key: summarize([getattr(run, key) for run in runs if getattr(run, key) is not None])
        for key in SEED_STATISTICS}
    return ArmResult(
        description=describe_model(model),
        criterion=_criterion_of(arm),
        **{key: getattr(first, key) for key in SIZE_FIELDS},
        model=to_dict(model),
        **statistics,
        routing=routing_result(records),
        collapsed_runs=sum(bool(r.summary.collapse) for r in records),
        runs=runs,
    )


def _criterion_of(arm: str) -> Optional[str]:
    """The criterion a ``dense_<criterion>`` arm is matched on, ``compute`` for the
    equal-compute MoE; None for any other arm."""
    if arm == COMPUTE_ARM:
        return "compute"
    criterion = arm.removeprefix("dense_")
    return criterion if arm.startswith("dense_") and criterion in STUDY_CRITERIA else None


def describe_model(model: ModelConfig) -> str:
    """The arm's FFN in a few words: 'MoE, 4 experts of 344, top-2' or 'dense, d_ff=688'."""
    moe = model.moe
    if moe is not None:
        shared = f" + {moe.num_shared_experts} shared" if moe.num_shared_experts else ""
        return f"MoE, {moe.num_experts} experts of {moe.d_expert}, top-{moe.top_k}{shared}"
    return f"dense, d_ff={model.d_ff}"


def routing_result(records: list[CompleteRun]) -> RoutingResult:
    """Final routing diagnostics: mean over layers, then mean over seeds; the worst layer too."""
    per_run = [r.summary.routing for r in records]
    if not any(per_run):
        return RoutingResult()
    means: dict[str, Any] = {}
    for key in ROUTING_KEYS:
        layer_means = [np.mean([layer[key] for layer in layers]) for layers in per_run
                       if layers and all(key in layer for layer in layers)]
        if layer_means:
            means[key] = float(np.mean(layer_means))
    result = RoutingResult(**means)
    busiest = [max(layer["busiest_fraction"] for layer in layers) for layers in per_run
               if layers and all("busiest_fraction" in layer for layer in layers)]
    if busiest:
        result.max_busiest_fraction = float(max(busiest))
    dead = [[layer["dead_experts"] for layer in layers] for layers in per_run
            if layers and all("dead_experts" in layer for layer in layers)]
    if dead and len({len(layers) for layers in dead}) == 1:
        # Dead experts (load < 1 % of the mean, ``RoutingStats.summary``) of each layer, mean
        # over seeds, and their sum over layers.
        result.dead_experts_per_layer = np.mean(dead, axis=0).tolist()
        result.dead_experts = float(sum(result.dead_experts_per_layer))
    loads = [layer_loads(layers) for layers in per_run]
    recorded = [load for load in loads if load is not None]
    if len(recorded) == len(loads):
        result.expert_load = np.mean(recorded, axis=0).tolist()  # (layers, experts)
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
