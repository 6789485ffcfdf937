"""Budget families: the runs of a plan that differ only in their token budget, trained as one
warmup-stable-decay run and its cooldown branches (``moelab.train.budgets``).

Under ``train.schedule: wsd`` every step before a budget's decay has the same lr whatever the
budget, so the largest budget's run is trained in full, keeping a checkpoint at each smaller
budget's decay start, and each smaller budget branches from there: each run folder ends as a
separate run of its budget would (the same losses, bit for bit), for the tokens of the largest
budget plus the cooldowns. Under cosine the lr differs at every step, so every budget trains
from scratch.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace

from moelab.config import to_dict
from moelab.errors import MoelabError
from moelab.runs.spec import Branch, RunSpec
from moelab.train.budgets import wsd_budget_family


def as_budget_family(group: list[RunSpec]) -> list[RunSpec]:
    """``group`` (runs whose configs differ only in train.max_tokens) as a wsd budget family;
    unchanged under cosine or for a single run."""
    if len(group) < 2 or group[0].config.train.schedule != "wsd":
        return group
    _check_only_budgets_differ(group)
    family = wsd_budget_family(group[0].config, [spec.config.train.max_tokens for spec in group])
    member_of = {member.budget: member for member in family.runs}
    full_name = next(spec.name for spec in group
                     if spec.config.train.max_tokens == family.full.budget)
    specs = []
    for spec in group:
        member = member_of[spec.config.train.max_tokens]
        branch = None if member.branches_from is None else Branch(full_name, member.decay_start_step)
        specs.append(replace(spec, config=member.config, branch=branch))
    return specs


def planned_branch_steps(plan: dict, key: str = "name") -> dict[str, int]:
    """The branch step of each branch in a plan.json record, by the runs' ``key``."""
    return {run[key]: run["branch"]["step"] for run in plan.get("runs", [])
            if isinstance(run.get("branch"), dict)}


def count_family_tokens(branch_steps: dict[str, int],
                        runs: Iterable[tuple[str, int, int]]) -> tuple[int, int]:
    """(tokens trained, tokens one run per budget from scratch would) of ``runs``, each (name,
    its tokens, its tokens per step): a branch trains only the steps after its branch step."""
    trained = separate = 0
    for name, tokens, tokens_per_step in runs:
        separate += tokens
        trained += tokens - branch_steps.get(name, 0) * tokens_per_step
    return trained, separate


def _check_only_budgets_differ(group: list[RunSpec]) -> None:
    def without_budget(spec: RunSpec) -> dict:
        config = to_dict(spec.config)
        config["train"].pop("max_tokens")
        return config

    first = without_budget(group[0])
    for spec in group[1:]:
        if without_budget(spec) != first:  # a planner's bug, never a user's input
            raise MoelabError(f"runs {group[0].name} and {spec.name} differ in more than "
                              "train.max_tokens: they cannot share a budget family")

