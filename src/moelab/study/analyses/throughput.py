"""Training throughput per arm, relative to ``dense_active``: secondary context, not a claim."""

from __future__ import annotations

from typing import Optional

from moelab.report import format_mean_std, format_number, markdown_table
from moelab.report.analysis import Analysis, Findings
from moelab.study.analyses.statistics import results_of
from moelab.study.folder import StudyFolder
from moelab.study.results import ArmResult


def compute(folder: StudyFolder, findings: Findings) -> dict[str, ArmResult]:
    return results_of(findings).arms


def render(arms: Optional[dict[str, ArmResult]], folder: StudyFolder, findings: Findings) -> str:
    if arms is None:
        return ""
    reference = next((a for a in ("dense_active", *arms) if a in arms), None)
    reference_speed = arms[reference].tokens_per_s.mean if reference else None
    rows = []
    for arm, r in arms.items():
        speed = r.tokens_per_s.mean
        ratio = speed / reference_speed if speed and reference_speed else None
        rows.append([arm, format_mean_std(speed, r.tokens_per_s.std, 0),
                     format_number(ratio, 2), format_mean_std(r.wall_time_s.mean,
                                                              r.wall_time_s.std, 1)])
    return (
        "## Throughput\n\nSecondary context, not a claim: training tokens/s as measured on the "
        f"machine that ran each arm (shared machines are noisy). Relative to `{reference}`.\n\n"
        + markdown_table(["arm", "tokens/s (mean ± std)", "relative", "wall time s"], rows, "lrrr")
    )


ANALYSIS: Analysis[StudyFolder, dict[str, ArmResult]] = Analysis("throughput", compute, render)
