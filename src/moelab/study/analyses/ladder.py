"""The routing-stability ladder (``moelab ablate-routing``): each rung's loss, collapses and
final routing diagnostics; shown for a ladder only."""

from __future__ import annotations

from typing import Optional

from moelab.report import format_count, format_mean_std, format_number, markdown_table
from moelab.report.analysis import Analysis, Findings
from moelab.study.analyses.shared import format_tokens_per_param
from moelab.study.analyses.statistics import results_of
from moelab.study.arms import LADDER_DESCRIPTIONS
from moelab.study.folder import StudyFolder
from moelab.study.results import ArmResult, RoutingResult


def compute(folder: StudyFolder, findings: Findings) -> Optional[dict[str, ArmResult]]:
    results = results_of(findings)
    return results.arms if results.is_ablation else None


def render(arms: Optional[dict[str, ArmResult]], folder: StudyFolder, findings: Findings) -> str:
    if arms is None:
        return ""
    rows = []
    for rung, r in arms.items():
        routing, loss = r.routing, r.best_val_loss
        rows.append([
            rung, LADDER_DESCRIPTIONS.get(rung, r.description), format_count(r.active_params),
            format_tokens_per_param(r),
            f"{format_mean_std(loss.mean, loss.std)} (n={loss.n})",
            f"{r.collapsed_runs}/{loss.n}",
            format_number(routing.max_busiest_fraction, 3),
            format_number(routing.routing_entropy, 3),
            format_number(routing.mean_log_z, 3),
            format_number(routing.max_violation, 3),
            format_dead_experts(routing),
        ])
    return (
        "## Ladder\n\nSame base model, budget and seeds; only the routing changes. Collapse is the "
        "training engine's flag (one expert takes more than `train.collapse_threshold` of the "
        "token-slots in some layer); busiest fraction is the worst layer at the end, routing "
        "entropy (÷ log E), log-z and MaxVio (max load / mean load − 1) are means over layers "
        "and seeds; dead experts (load under 1 % of the mean) are per layer, first layer "
        "first, mean over seeds.\n\n"
        + markdown_table(["rung", "routing", "active params", "tokens/param (total / active)",
                          "best val loss (mean ± std)", "collapsed runs", "busiest fraction",
                          "routing entropy", "mean log-z", "MaxVio", "dead experts per layer"],
                         rows, "llrrrrrrrrr")
    )


def format_dead_experts(routing: RoutingResult) -> str:
    """Dead experts of each layer (mean over seeds), e.g. ``0 / 1 / 0.33 / 0``; '–' when the
    runs did not record them."""
    per_layer = routing.dead_experts_per_layer
    if per_layer is None:
        return "–"
    return " / ".join(f"{value:.2f}".rstrip("0").rstrip(".") for value in per_layer)


ANALYSIS: Analysis[StudyFolder, dict[str, ArmResult]] = Analysis("ladder", compute, render)
