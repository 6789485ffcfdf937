"""The study's arms: what each is matched on, its FFN, sizes, training FLOPs, tokens per
parameter and loss over seeds; shown for a dense-vs-MoE study (the ladder has its own table)."""

from __future__ import annotations

from typing import Optional

from moelab.report import format_count, format_mean_std, markdown_table
from moelab.report.analysis import Analysis, Findings
from moelab.study.analyses.shared import CRITERION_TEXT, format_tokens_per_param
from moelab.study.analyses.statistics import results_of
from moelab.study.folder import StudyFolder
from moelab.study.results import ArmResult


def compute(folder: StudyFolder, findings: Findings) -> Optional[dict[str, ArmResult]]:
    results = results_of(findings)
    return None if results.is_ablation else results.arms


def render(arms: Optional[dict[str, ArmResult]], folder: StudyFolder, findings: Findings) -> str:
    if arms is None:
        return ""
    rows = []
    for arm, r in arms.items():
        loss = r.best_val_loss
        rows.append([
            arm, CRITERION_TEXT.get(r.criterion, "–") if r.criterion else "(the MoE)",
            r.description, format_count(r.active_params), format_count(r.total_params),
            format_count(r.flops_per_token_6n), format_count(r.tokens),
            _training_flops(r), format_tokens_per_param(r),
            f"{format_mean_std(loss.mean, loss.std)} (n={loss.n})",
            format_mean_std(r.best_val_bpb.mean, r.best_val_bpb.std),
        ])
    return "## Arms\n\n" + markdown_table(
        ["arm", "criterion", "FFN", "active params", "total params", "FLOPs/token (6N)",
         "tokens", "training FLOPs (6N x tokens)", "tokens/param (total / active)",
         "best val loss (mean ± std)", "bits/byte"], rows, "lllrrrrrrrr")


def _training_flops(arm: ArmResult) -> str:
    """6 x active parameters x the tokens every seed of the arm trained."""
    if not arm.tokens or arm.flops_per_token_6n is None:
        return "–"
    return f"{arm.flops_per_token_6n * arm.tokens:.3g}"


ANALYSIS: Analysis[StudyFolder, dict[str, ArmResult]] = Analysis("arms", compute, render)
