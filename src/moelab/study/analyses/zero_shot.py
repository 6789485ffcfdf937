"""Zero-shot tasks: each arm's accuracy over seeds and the paired MoE - dense differences, one
Holm family over every task and criterion (``moelab.study.zero_shot``); nothing for a study
whose runs scored no tasks."""

from __future__ import annotations

from typing import Optional

from moelab.report import format_mean_std, format_number, format_p_value, markdown_table
from moelab.report.analysis import Analysis, Findings
from moelab.study.analyses.shared import (
    CRITERION_TEXT, adjustment, family, interval, p_value, signed,
)
from moelab.study.analyses.statistics import results_of
from moelab.study.folder import StudyFolder
from moelab.study.zero_shot import TaskResult


def compute(folder: StudyFolder, findings: Findings) -> Optional[dict[str, TaskResult]]:
    return results_of(findings).zero_shot or None


def render(zero_shot: Optional[dict[str, TaskResult]], folder: StudyFolder,
           findings: Findings) -> str:
    """Accuracy per task and arm over seeds, and the paired MoE - dense differences."""
    if not zero_shot:
        return ""
    arm_rows, difference_rows = [], []
    for task, result in zero_shot.items():
        for arm, r in result.arms.items():
            accuracy = r.accuracy
            arm_rows.append([
                task, arm, f"{format_mean_std(accuracy.mean, accuracy.std)} "
                           f"(n={accuracy.n})",
                interval(r), format_number(r.chance),
            ])
        for criterion, c in result.comparisons.items():
            difference_rows.append([
                task, CRITERION_TEXT[criterion], f"{c.moe_arm} vs {c.dense_arm}",
                signed(c.difference), interval(c), p_value(c),
                format_p_value(c.p_adjusted), str(c.n_pairs), c.verdict,
            ])
    section = (
        "## Zero-shot tasks\n\nScored by every run on its final weights as training ended "
        "(`train.eval_tasks`; docs/training.md, 'Zero-shot tasks'). Accuracy is the mean over "
        "seeds ± std, with the 95 % t interval of that mean over seeds: the spread of seeds, "
        "not the Wilson interval over the items that each run's tasks.json also holds.\n\n"
        + markdown_table(["task", "arm", "accuracy (mean ± std)", "95 % CI over seeds",
                          "chance"], arm_rows, "llrrr")
    )
    if difference_rows:
        comparisons = {(task, criterion): c for task, result in zero_shot.items()
                       for criterion, c in result.comparisons.items()}
        section += (
            "\nDifference = MoE − dense accuracy, per seed, then the paired t-test on those "
            "differences as for the loss: positive means the MoE is better, and a winner is "
            "named only when p, adjusted for every task's and criterion's test "
            f"({family(comparisons)}), is < 0.05.\n\n"
            + markdown_table(["task", "criterion", "arms", "difference", "paired 95 % CI",
                              "paired p", f"p ({adjustment(comparisons)})", "pairs",
                              "verdict"], difference_rows, "lllrrrrrl")
        )
    return section


ANALYSIS: Analysis[StudyFolder, dict[str, TaskResult]] = Analysis("zero_shot", compute, render)
