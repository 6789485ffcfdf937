"""``--tune-lr``: each arm's lr, chosen on the selection seeds, with the table it was chosen
from (arm x lr x selection seed); results.json's ``lr_selection``.

The choices were read from the selection runs' folders with the study folder
(``StudyFolder.lr_choices``); plan.json's record names the grid, the seeds and the arms that
take a partner's lr untuned (``moelab.study.tuning``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from moelab.codec import from_json, to_json
from moelab.report import format_number, markdown_table
from moelab.report.analysis import Analysis, Findings
from moelab.runs.lr_grid import SELECTION_FOLDER, LrChoice, SelectionRecord
from moelab.study.analyses.statistics import results_of
from moelab.study.folder import StudyFolder
from moelab.study.tuning import RECORD_KEY


@dataclass
class StudySelection(SelectionRecord):
    """A study's selection record: the arms that take a partner's lr untuned, too."""

    shared: dict[str, str] = field(default_factory=dict)
    """Untuned arm -> the arm whose lr it takes (``SHARED_LR``)."""


@dataclass
class LrTuningRecord:
    """The selection as plan.json records it, each arm's choice, and the seeds that report."""

    selection: StudySelection
    choices: dict[str, LrChoice]
    reporting_seeds: list[int]
    planned_arms: list[str]

    def results_entries(self) -> dict:
        """results.json's ``lr_selection``: every arm's table and choice, which seeds chose and
        which report."""
        selection = self.selection
        return {RECORD_KEY: {
            "grid": selection.grid, "selection_seeds": selection.seeds,
            "reporting_seeds": list(self.reporting_seeds), "metric": selection.metric,
            "shared": selection.shared,
            "arms": {unit: to_json(choice) for unit, choice in self.choices.items()}}}


def compute(folder: StudyFolder, findings: Findings) -> Optional[LrTuningRecord]:
    if folder.lr_choices is None:
        return None
    return LrTuningRecord(from_json(StudySelection, folder.plan[RECORD_KEY]), folder.lr_choices,
                          results_of(findings).seeds, folder.planned_arms)


def render(record: Optional[LrTuningRecord], folder: StudyFolder, findings: Findings) -> str:
    """The selection table (arm x lr x selection seed), each arm's lr, the edge flags, and
    which seeds chose and which report."""
    if record is None:
        return ""
    selection, choices = record.selection, record.choices
    grid, seeds = selection.grid, selection.seeds
    rows = []
    for unit, choice in choices.items():
        for lr in grid:
            cells = [_loss(choice.losses.get(lr, {}).get(seed)) for seed in seeds]
            mean = choice.means.get(lr)
            mark = " (chosen)" if lr == choice.lr else ""
            rows.append([unit, f"{lr:g}{mark}", *cells, _loss(mean)])
    table = markdown_table(["arm", "lr", *[f"seed {s}" for s in seeds], "mean"], rows,
                           "ll" + "r" * (len(seeds) + 1))
    reporting = ", ".join(str(s) for s in record.reporting_seeds)
    lines = ["## Learning rate per arm\n",
             f"Each arm's peak lr was chosen from the grid {', '.join(f'{lr:g}' for lr in grid)} "
             f"by the lowest mean best validation loss over the selection seeds "
             f"{', '.join(str(s) for s in seeds)}; the runs of every other section used the "
             f"reporting seeds {reporting}, which chose nothing. "
             f"Selection runs: `{SELECTION_FOLDER}/lr<X>/runs/`; a missing loss (–) is a run that "
             "failed or is not complete, and its lr could not be chosen.\n", table, ""]
    for unit, choice in choices.items():
        chosen = "none (no lr has every selection seed)" if choice.lr is None else f"{choice.lr:g}"
        edge = (f" **at the grid's {choice.edge} lr: the best lr may lie beyond the grid; "
                "read this arm's loss as an upper bound of its tuned loss**" if choice.edge else "")
        lines.append(f"- {unit}: lr {chosen}{edge}")
    for untuned, partner in selection.shared.items():
        if partner in choices and untuned in record.planned_arms:
            lines.append(f"- {untuned}: not tuned, it takes {partner}'s lr (the same model and "
                         "recipe, trained on more tokens)")
    lines.append("\nWarmup, head tying, batch size and every other setting stay shared by all "
                 "arms.\n")
    return "\n".join(lines)


def _loss(value: Optional[float]) -> str:
    return "–" if value is None else format_number(value)


ANALYSIS: Analysis[StudyFolder, LrTuningRecord] = Analysis(
    "lr_tuning", compute, render, record_type=LrTuningRecord)
