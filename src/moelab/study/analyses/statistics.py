"""The study's statistics: each arm's seed statistics, sizes and routing, and the MoE against
each dense arm (paired and Welch), at every budget: the core of results.json and results.csv.

Computed by ``moelab.study.aggregate`` (the gaps of every budget and criterion one Holm family,
the zero-shot comparisons another, the ladder's steps a third, so they are computed together);
the sections that show them (arms, comparisons, budgets, ladder, zero-shot, routing,
throughput) read this record. It renders nothing itself.
"""

from __future__ import annotations

from typing import Optional

from moelab.report.analysis import Analysis, Findings
from moelab.study.aggregate import aggregate
from moelab.study.folder import StudyFolder
from moelab.study.results import StudyResults


def compute(folder: StudyFolder, findings: Findings) -> StudyResults:
    return aggregate(folder)


def render(record: Optional[StudyResults], folder: StudyFolder, findings: Findings) -> str:
    return ""


ANALYSIS: Analysis[StudyFolder, StudyResults] = Analysis(
    "statistics", compute, render, record_type=StudyResults)


def results_of(findings: Findings) -> StudyResults:
    """The statistics every later analysis reads (computed first, never None)."""
    results = findings.record(ANALYSIS)
    assert results is not None, "the statistics are the registry's first analysis"
    return results
