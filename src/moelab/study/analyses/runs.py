"""The planned runs without a complete result (in no statistic), and each failed run's
error."""

from __future__ import annotations

from typing import Optional

from moelab.report.analysis import Analysis, Findings
from moelab.study.analyses.statistics import results_of
from moelab.study.folder import StudyFolder
from moelab.study.results import StudyResults


def compute(folder: StudyFolder, findings: Findings) -> Optional[StudyResults]:
    results = results_of(findings)
    return results if results.missing_runs or results.failed_runs else None


def render(results: Optional[StudyResults], folder: StudyFolder, findings: Findings) -> str:
    if results is None:
        return ""
    lines = []
    if results.missing_runs:
        lines.append("Planned runs without a complete result (not in any statistic): "
                     + ", ".join(f"`{name}`" for name in results.missing_runs) + ".")
    for name, error in results.failed_runs.items():
        lines.append(f"- `{name}` failed: {error}")
    return "## Incomplete runs\n\n" + "\n".join(lines) + "\n"


ANALYSIS: Analysis[StudyFolder, StudyResults] = Analysis("runs", compute, render)
