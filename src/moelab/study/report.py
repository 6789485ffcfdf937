"""results.json, results.csv, figures/ and report.md of a study folder, from its run files.

``write_outputs(folder)`` is all ``moelab report DIR`` does, and the last step of every study:
the report can always be rebuilt, and it only prints numbers read from the run folders, which
the command read once (``StudyFolder``). The report is the registry of analyses
(``moelab.study.analyses.ANALYSES``) computed and rendered in order. Wording is tied to the
statistics: a difference is claimed only when the test the verdict used (paired t when the arms
share their seeds, Welch's t otherwise) supports it.
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

from moelab.fileio import atomic_write_json, atomic_write_text, remove_stale_temporaries
from moelab.report.analysis import Findings, compute_all, render_all
from moelab.study.analyses import ANALYSES
from moelab.study.analyses.statistics import results_of
from moelab.study.folder import StudyFolder
from moelab.study.results import StudyResults, results_csv


@runtime_checkable
class StoredInResults(Protocol):
    """A record that results.json holds: its keys there, in the file's order."""

    def results_entries(self) -> dict[str, Any]: ...


def write_outputs(folder: StudyFolder) -> StudyResults:
    """Compute every analysis of ``folder`` and write every output file; return the results."""
    root = folder.root
    # What a killed report left; its writer holds the folder's lock, so none is being written.
    remove_stale_temporaries(root, root / "figures")
    findings = compute_all(ANALYSES, folder)
    results = results_of(findings)
    atomic_write_json(root / "results.json", results_json(findings))
    atomic_write_text(root / "results.csv", results_csv(results))
    atomic_write_text(root / "report.md", render_report(folder, findings))
    return results


def results_json(findings: Findings) -> dict[str, Any]:
    """results.json: the keys of every record it holds, in registry order. A record is its
    analysis's own when the analysis names its ``record_type``; the sections that only show a
    part of the statistics name none, so each key is written once."""
    record: dict[str, Any] = {}
    for analysis in ANALYSES:
        found = findings.get(analysis.name)
        if analysis.record_type is not None and isinstance(found, StoredInResults):
            record.update(found.results_entries())
    return record


def render_report(folder: StudyFolder, findings: Findings) -> str:
    """report.md: its title, then every analysis's section in registry order (drawing their
    figures into figures/)."""
    results = results_of(findings)
    title = "Routing-stability ladder" if results.is_ablation else "Dense vs MoE study"
    return "\n".join([f"# {title}: {results.study_dir}\n", *render_all(ANALYSES, folder, findings)])
