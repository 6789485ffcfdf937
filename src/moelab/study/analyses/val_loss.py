"""Validation loss over training: each arm's seed mean with a band of one std, against tokens
and against training compute, and each compared pair's gap on its own scale, at the budget the
report leads with."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Optional

import numpy as np

from moelab.report import discard_figure, new_figure, save_figure
from moelab.report.analysis import Analysis, Findings, figure_path
from moelab.report.axes import (
    LOSS_UNIT, format_axis, format_count_tick, format_flops_tick, loss_label,
)
from moelab.study.analyses.shared import (
    CRITERION_LABELS, eval_curve, figure_block, final_runs_by_arm, plot_band,
    tokens_per_param_caption,
)
from moelab.study.analyses.statistics import results_of
from moelab.study.folder import CompleteRun, StudyFolder


def compute(folder: StudyFolder, findings: Findings) -> dict[str, list[CompleteRun]]:
    return final_runs_by_arm(results_of(findings), folder)


def render(runs_by_arm: Optional[dict[str, list[CompleteRun]]], folder: StudyFolder,
           findings: Findings) -> str:
    if runs_by_arm is None:
        return ""
    results = results_of(findings)
    pairs = {criterion: (g.moe_arm, g.dense_arm) for criterion, g in results.gaps.items()}
    drawn = val_loss_figure(runs_by_arm, figure_path(folder.root, "val_loss.png"), pairs)
    caption = tokens_per_param_caption(results.arms) if drawn else ""
    return figure_block("Validation loss", folder, drawn) + caption


def val_loss_figure(runs_by_arm: dict[str, list[CompleteRun]], path: Path,
                    pairs: Optional[dict[str, tuple[str, str]]] = None) -> Optional[Path]:
    """Validation loss per arm (the seed mean, a band of one std) against training tokens and,
    beside it, against training compute: arms matched on parameters spend different FLOPs per
    token (dense_total ~1.5x the MoE's), so equal tokens are not equal cost. With ``pairs``
    (criterion -> (MoE arm, dense arm)) a third panel draws each gap over training on its own
    scale: a gap of 0.02 is a line's width on the loss axes."""
    pairs = {c: arms for c, arms in (pairs or {}).items()
             if all(runs_by_arm.get(arm) for arm in arms)}
    fig, axes = new_figure(ncols=3 if pairs else 2, width_in=5.5)
    by_tokens, by_flops = axes[0], axes[1]
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
    if pairs:
        _gap_panel(axes[2], runs_by_arm, pairs)
    return save_figure(fig, path)


def _gap_panel(ax, runs_by_arm: dict[str, list[CompleteRun]],
               pairs: dict[str, tuple[str, str]]) -> None:
    """dense − MoE validation loss over training per criterion, paired within each seed."""
    for criterion, (moe_arm, dense_arm) in pairs.items():
        tokens, mean, std, seeds = paired_gap_curve(runs_by_arm[moe_arm], runs_by_arm[dense_arm])
        if tokens.size:
            plot_band(ax, tokens, mean, std,
                      f"{CRITERION_LABELS.get(criterion, criterion)} (n={seeds} pairs)")
    ax.axhline(0.0, color="black", linewidth=0.8)
    ax.set_xlabel("training tokens")
    format_axis(ax.xaxis, format_count_tick)
    ax.set_ylabel(f"dense − MoE validation loss\n({LOSS_UNIT}; >0: MoE better)")
    ax.set_title("the gaps, on their own scale")
    ax.grid(alpha=0.3)
    ax.legend()


def paired_gap_curve(moe_runs: list[CompleteRun], dense_runs: list[CompleteRun]
                     ) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    """Tokens, mean and std over seeds of dense − MoE validation loss, each seed's difference
    taken at the evals both its runs logged, at the steps every seed shares; and the number
    of seeds (pairs)."""
    dense_by_seed = {run.seed: run for run in dense_runs}
    by_step: dict[int, list[float]] = defaultdict(list)
    tokens_at: dict[int, float] = {}
    pairs = [(run, dense_by_seed[run.seed]) for run in moe_runs if run.seed in dense_by_seed]
    for moe_run, dense_run in pairs:
        dense_loss = {row["step"]: row.get("val_loss") for row in dense_run.evals}
        for row in moe_run.evals:
            moe_loss, other = row.get("val_loss"), dense_loss.get(row["step"])
            if moe_loss is not None and other is not None:
                by_step[row["step"]].append(other - moe_loss)
                tokens_at[row["step"]] = row.get("tokens", row["step"])
    steps = sorted(s for s, gaps in by_step.items() if len(gaps) == len(pairs))
    gaps = [np.array(by_step[s]) for s in steps]
    return (np.array([tokens_at[s] for s in steps], dtype=float),
            np.array([g.mean() for g in gaps]),
            np.array([g.std(ddof=1) if g.size > 1 else 0.0 for g in gaps]), len(pairs))


def _flops_per_token(runs: list[CompleteRun]) -> Optional[float]:
    """The arm's training FLOPs per token (6 N_active, as the arms table), None when a run's
    summary predates the count or the seeds disagree (they share one config)."""
    counts = {run.summary.flops_per_token_6n for run in runs}
    count = counts.pop() if len(counts) == 1 else None
    return float(count) if count is not None else None


ANALYSIS: Analysis[StudyFolder, dict[str, list[CompleteRun]]] = Analysis(
    "val_loss", compute, render)
