"""Validation loss over training: each arm's seed mean with a band of one std, against tokens
and against training compute, at the budget the report leads with."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

from moelab.report import discard_figure, new_figure, save_figure
from moelab.report.analysis import Analysis, Findings, figure_path
from moelab.report.axes import format_axis, format_count_tick, format_flops_tick, loss_label
from moelab.study.analyses.shared import (
    eval_curve, figure_block, final_runs_by_arm, plot_band, tokens_per_param_caption,
)
from moelab.study.analyses.statistics import results_of
from moelab.study.folder import CompleteRun, StudyFolder


def compute(folder: StudyFolder, findings: Findings) -> dict[str, list[CompleteRun]]:
    return final_runs_by_arm(results_of(findings), folder)


def render(runs_by_arm: Optional[dict[str, list[CompleteRun]]], folder: StudyFolder,
           findings: Findings) -> str:
    if runs_by_arm is None:
        return ""
    drawn = val_loss_figure(runs_by_arm, figure_path(folder.root, "val_loss.png"))
    caption = tokens_per_param_caption(results_of(findings).arms) if drawn else ""
    return figure_block("Validation loss", folder, drawn) + caption


def val_loss_figure(runs_by_arm: dict[str, list[CompleteRun]], path: Path) -> Optional[Path]:
    """Validation loss per arm (the seed mean, a band of one std) against training tokens and,
    beside it, against training compute: arms matched on parameters spend different FLOPs per
    token (dense_total ~1.5x the MoE's), so equal tokens are not equal cost."""
    fig, (by_tokens, by_flops) = new_figure(ncols=2, width_in=5.5)
    drew = False
    for arm, runs in runs_by_arm.items():
        tokens, mean, std = eval_curve(runs, lambda row: row.get("val_loss"))
        if tokens.size:
            label = f"{arm} (n={len(runs)})"
            plot_band(by_tokens, tokens, mean, std, label)
            flops_per_token = _flops_per_token(runs)
            if flops_per_token is not None:
                plot_band(by_flops, tokens * flops_per_token, mean, std, label)
            drew = True
    by_tokens.set_xlabel("training tokens")
    format_axis(by_tokens.xaxis, format_count_tick)
    by_flops.set_xlabel("training compute (FLOPs, 6 N_active per token)")
    format_axis(by_flops.xaxis, format_flops_tick, max_ticks=4)
    for ax in (by_tokens, by_flops):
        ax.set_ylabel(loss_label())
        ax.grid(alpha=0.3)
    by_tokens.set_title("against tokens")
    by_flops.set_title("against training compute")
    fig.suptitle("Validation loss (mean over seeds, band: ±1 std)")
    if not drew:
        discard_figure(fig)
        return None
    by_tokens.legend()
    return save_figure(fig, path)


def _flops_per_token(runs: list[CompleteRun]) -> Optional[float]:
    """The arm's training FLOPs per token (6 N_active, as the arms table), None when a run's
    summary predates the count or the seeds disagree (they share one config)."""
    counts = {run.summary.flops_per_token_6n for run in runs}
    count = counts.pop() if len(counts) == 1 else None
    return float(count) if count is not None else None


ANALYSIS: Analysis[StudyFolder, dict[str, list[CompleteRun]]] = Analysis(
    "val_loss", compute, render)
