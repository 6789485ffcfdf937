"""Efficiency leverage in a study of several budgets: the compute a dense arm needs to reach the
MoE's loss, over the MoE's compute (``moelab.scaling.leverage_budgets``), in training FLOPs and
in measured training seconds, each with a 95 % percentile interval over seeds resampled within
every arm and budget.

FLOPs: a run's 6 N_active x its tokens (6 N for a dense arm). Seconds: the mean over an arm's
seeds at one budget of tokens / tokens per second, the training time on the machine that ran
it (both arms must have run on comparable machines for the ratio to mean anything; the report
says so). The MoE arm is ``moe``; each dense arm (matched on active or total parameters) is a
curve of mean best val loss against log compute, piecewise linear between its budgets, read at
the MoE's mean loss; a loss outside the dense budgets is "beyond", never a number.

Shown for a study run with ``--budgets`` (two budgets or more) whose dense arm's mean loss falls
with compute; any other study has no section. Stored in no file: results.json is the
statistics' record, unchanged.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Optional

import numpy as np

from moelab.report.analysis import Analysis, Findings
from moelab.scaling import leverage_budgets
from moelab.scaling.leverage_budgets import ArmLosses, StudyLeverage
from moelab.study.analyses.statistics import results_of
from moelab.study.arms import MOE_ARM
from moelab.study.folder import StudyFolder
from moelab.study.results import ArmResult, BudgetResults


@dataclass
class LeverageRecord:
    flops: Optional[StudyLeverage]
    seconds: Optional[StudyLeverage]


def training_flops(arm: ArmResult) -> Optional[float]:
    """6 N_active x tokens of a run of ``arm`` at its budget (None without either)."""
    if not arm.tokens or arm.flops_per_token_6n is None:
        return None
    return float(arm.flops_per_token_6n) * arm.tokens


def training_seconds(arm: ArmResult) -> Optional[float]:
    """The mean over the arm's runs of tokens / tokens per second (None without speeds)."""
    times = [run.tokens / run.tokens_per_s for run in arm.runs
             if run.tokens and run.tokens_per_s]
    return float(np.mean(times)) if times else None


def arm_losses(budgets: Sequence[BudgetResults], arm_name: str,
               cost: Callable[[ArmResult], Optional[float]]) -> dict[float, dict[int, float]]:
    """{the arm's cost at a budget: {seed: best val loss}} over the budgets that ran it."""
    losses: dict[float, dict[int, float]] = {}
    for budget in budgets:
        arm = budget.arms.get(arm_name)
        cost_value = cost(arm) if arm is not None else None
        if arm is not None and cost_value is not None:
            by_seed = arm.by_seed("best_val_loss")
            if by_seed:
                losses[cost_value] = by_seed
    return losses


def leverage(budgets: Sequence[BudgetResults], cost: Callable[[ArmResult], Optional[float]],
             unit: str, replicates: int = 2000) -> Optional[StudyLeverage]:
    """The MoE's leverage against every dense arm, its compute counted by ``cost``."""
    names = {name for budget in budgets for name, arm in budget.arms.items() if arm.criterion}
    dense: dict[str, ArmLosses] = {name: arm_losses(budgets, name, cost) for name in sorted(names)}
    moe = arm_losses(budgets, MOE_ARM, cost)
    return leverage_budgets.compute(dense, MOE_ARM, moe, unit=unit, replicates=replicates)


def compute(folder: StudyFolder, findings: Findings) -> Optional[LeverageRecord]:
    results = results_of(findings)
    if results.is_ablation or len(results.budgets) < 2:
        return None
    record = LeverageRecord(leverage(results.budgets, training_flops, "FLOPs"),
                            leverage(results.budgets, training_seconds, "seconds"))
    return record if record.flops or record.seconds else None


def render(record: Optional[LeverageRecord], folder: StudyFolder, findings: Findings) -> str:
    if record is None:
        return ""
    flops = leverage_budgets.render(record.flops)
    seconds = leverage_budgets.render(record.seconds).replace(
        "## Efficiency leverage\n\n", "### In measured training seconds\n\n"
        "The same, with each arm's budget counted as its runs' mean training time (tokens / "
        "tokens per second, on the machines that ran them: a ratio of times measured on "
        "different or shared machines is not a ratio of costs). ", 1)
    if not flops:
        return seconds.replace("### In measured", "## Efficiency leverage\n\n### In measured", 1)
    return flops + ("\n" + seconds if seconds else "")


ANALYSIS: Analysis[StudyFolder, LeverageRecord] = Analysis("leverage", compute, render)
