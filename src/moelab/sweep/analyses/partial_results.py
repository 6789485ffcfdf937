"""Whether the report is partial: results.csv's runs and finetunes against plan.json's (the
section, and the CLI's exit code); with no results at all, the line that says so."""

from __future__ import annotations

from dataclasses import dataclass

from moelab.report.analysis import Analysis, Findings
from moelab.sweep.analyses.common import no_record
from moelab.sweep.folder import SweepFolder
from moelab.sweep.results_csv import ResultRow

NO_RESULTS = "No results to analyse yet (results.csv has no complete runs).\n"


@dataclass(frozen=True)
class Completeness:
    """How much of its plan a sweep's results.csv holds: what every table and fit reads."""

    runs: int
    planned_runs: int
    finetunes: int
    planned_finetunes: int

    @property
    def complete(self) -> bool:
        return self.runs >= self.planned_runs and self.finetunes >= self.planned_finetunes

    def describe(self) -> str:
        counts = [f"{self.runs} of {self.planned_runs} planned runs"]
        if self.planned_finetunes:
            counts.append(f"{self.finetunes} of {self.planned_finetunes} planned finetunes")
        return " and ".join(counts)


def completeness(rows: list[ResultRow], plan: dict) -> Completeness:
    """plan.json's runs and finetunes against the rows of results.csv that hold them; a folder
    without plan.json ({}) counts as complete."""
    return Completeness(len(rows), len(plan.get("runs", [])),
                        sum(1 for row in rows if row.finetune_val_loss is not None),
                        len(plan.get("finetunes", [])))


def partial_results_text(rows: list[ResultRow], plan: dict) -> str:
    """A section saying the report is partial, with the counts, when results.csv holds fewer
    runs or finetunes than plan.json planned (failed, or not trained); "" when complete."""
    counts = completeness(rows, plan)
    if counts.complete:
        return ""
    return ("## Partial results\n\n**This report is partial**: it reads " + counts.describe()
            + "; the others failed (`failures.json` gives each one's error) or were not "
            "trained, and every table and fit below leaves them out. Train them again with the "
            "same `moelab sweep-sparsity` command.\n")


def render(record: None, folder: SweepFolder, findings: Findings) -> str:
    text = partial_results_text(folder.rows, folder.plan)
    if folder.results is None:  # the report ends here: every later analysis renders nothing
        return "\n".join([text, NO_RESULTS])
    return text


ANALYSIS: Analysis[SweepFolder, None] = Analysis("partial_results", no_record, render)
