"""The token-budget sweep (``--budgets``): per budget and criterion the gap and its verdict,
one Holm family over every budget and criterion, and the gap against the budget. Shown for a
study with budgets."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import numpy as np

from moelab.report import (
    format_number, format_p_value, markdown_table, new_figure, save_figure,
)
from moelab.report.analysis import Analysis, Findings, figure_path
from moelab.report.axes import format_count_tick, label_ticks
from moelab.study.analyses.shared import (
    CRITERION_LABELS, CRITERION_TEXT, GAP_LABEL, family, figure_block, tests_used,
)
from moelab.study.analyses.statistics import results_of
from moelab.study.folder import StudyFolder
from moelab.study.results import BudgetFamilyTokens, BudgetResults, StudyResults


def compute(folder: StudyFolder, findings: Findings) -> Optional[StudyResults]:
    results = results_of(findings)
    return results if results.budgets and not results.is_ablation else None


def render(results: Optional[StudyResults], folder: StudyFolder, findings: Findings) -> str:
    if results is None:
        return ""
    criteria = results.criteria
    rows = []
    for group in results.budgets:
        row = [group.label or ""]
        for criterion in criteria:
            g = group.gaps.get(criterion)
            row.append(f"{g.gap:+.4f}: {g.verdict}; p {format_p_value(g.p_value)}, "
                       f"adjusted {format_p_value(g.p_adjusted)}; min detectable "
                       f"{format_number(g.min_detectable_gap)}" if g else "–")
        rows.append(row)
    table = markdown_table(["tokens", *(CRITERION_TEXT[c] for c in criteria)], rows)
    drawn = (gap_vs_tokens_figure(results.budgets, figure_path(folder.root, "gaps_vs_tokens.png"))
             if len(results.budgets) > 1 else None)
    return ("## Budget sweep\n\n" + _budget_runs_text(results.budget_family) +
            "Gap = dense − MoE best val loss; seeds are paired within each budget. Every "
            f"budget's and criterion's test is one family, {family(results.gaps)}: the "
            "verdicts use the adjusted p.\n\n" + table + "\n"
            + figure_block("Gap against the token budget", folder, drawn, level=3))


def _budget_runs_text(budget_family: Optional[BudgetFamilyTokens]) -> str:
    if budget_family is None:
        return "Each budget is a separate set of runs with its own full schedule. "
    saved = 1 - budget_family.tokens_trained / budget_family.tokens_one_run_per_budget
    return ("Under `train.schedule: wsd` each arm and seed is one budget family: its largest "
            "budget's run is trained in full and each smaller budget's run is a cooldown branch "
            f"from it ({budget_family.branches} branches, plan.json), the same run as a separate "
            f"wsd run of that budget. The complete runs trained "
            f"{budget_family.tokens_trained:,} tokens against "
            f"{budget_family.tokens_one_run_per_budget:,} for one run per budget "
            f"({saved:.0%} fewer). ")


def gap_vs_tokens_figure(budget_groups: list[BudgetResults], path: Path) -> Optional[Path]:
    """Gap per criterion against the token budget, with 95 % CI bands."""
    criteria = sorted({c for group in budget_groups for c in group.gaps})
    if not criteria:
        return None
    fig, ax = new_figure()
    for criterion in criteria:
        rows = [(g.tokens, g.gaps[criterion]) for g in budget_groups if criterion in g.gaps]
        tokens = np.array([t for t, _ in rows], dtype=float)
        gap = np.array([r.gap for _, r in rows])
        line, = ax.plot(tokens, gap, marker="o", label=CRITERION_LABELS.get(criterion, criterion))
        low = np.array([r.ci_low if r.ci_low is not None else r.gap for _, r in rows])
        high = np.array([r.ci_high if r.ci_high is not None else r.gap for _, r in rows])
        ax.fill_between(tokens, low, high, color=line.get_color(), alpha=0.2)
    ax.axhline(0.0, color="black", linewidth=0.8)
    ax.set_xscale("log")
    budgets = [group.tokens for group in budget_groups if group.tokens is not None]
    label_ticks(ax.xaxis, budgets, format_count_tick)
    ax.set_xlabel("training tokens (budget of each run)")
    ax.set_ylabel(GAP_LABEL)
    used = tests_used(g for group in budget_groups for g in group.gaps.values())
    ax.set_title(f"Gap against the token budget (unadjusted 95 % CI, {used})")
    ax.grid(alpha=0.3)
    ax.legend()
    return save_figure(fig, path)


ANALYSIS: Analysis[StudyFolder, StudyResults] = Analysis("budgets", compute, render)
