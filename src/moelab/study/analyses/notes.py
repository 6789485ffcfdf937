"""The report's closing notes: where every number comes from, how to rebuild it, and how the
verdicts of a few seeds are to be read."""

from __future__ import annotations

from typing import Optional

from moelab.report.analysis import Analysis, Findings
from moelab.study.analyses.statistics import results_of
from moelab.study.folder import StudyFolder
from moelab.study.results import StudyResults


def compute(folder: StudyFolder, findings: Findings) -> StudyResults:
    return results_of(findings)


def render(results: Optional[StudyResults], folder: StudyFolder, findings: Findings) -> str:
    if results is None:
        return ""
    files = "`metrics.jsonl`, `config.yaml`" + (", `tasks.json`" if results.zero_shot else "")
    notes = [
        f"Every number above is read from the run folders (`runs/…/summary.json`, "
        f"{files}); `moelab report DIR` rebuilds this file from them.",
        "Standard deviations are over seeds (ddof = 1).",
    ]
    if not results.is_ablation:
        # The zero-shot section names its own family: this line is the same with or without it.
        notes.append("The tests of the loss gaps (every budget and criterion) are one family: "
                     "each verdict is at α = 0.05 on the "
                     "Holm-adjusted p (the intervals are each test's own 95 %); with few seeds, "
                     "'not significant' means 'not shown', not 'equal' (the minimum detectable "
                     "gap says how large a gap could go unseen).")
    return "## Notes\n\n" + "\n".join(f"- {note}" for note in notes) + "\n"


ANALYSIS: Analysis[StudyFolder, StudyResults] = Analysis("notes", compute, render)
