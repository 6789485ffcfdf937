"""The section of a sweep run with ``--lr-grid``: each cell's lr, its mean loss at every lr of
the grid on the selection seeds, and the choices at the grid's edge (``moelab.sweep.tuning``
plans the selection; the folder reads the choices off the selection runs)."""

from __future__ import annotations

from typing import Optional

from moelab.report import format_number, markdown_table
from moelab.report.analysis import Analysis, Findings
from moelab.runs.lr_grid import SELECTION_FOLDER, LrChoice
from moelab.sweep.analyses.common import no_record
from moelab.sweep.folder import LR_SELECTION_KEY, SweepFolder


def render(record: None, folder: SweepFolder, findings: Findings) -> str:
    """Each cell's lr, its mean loss at every lr, the edge flags; "" without a selection."""
    selection = folder.plan.get(LR_SELECTION_KEY)
    if not selection or folder.lr_choices is None:
        return ""
    return lr_selection_text(selection, folder.lr_choices)


def lr_selection_text(selection: dict, choices: dict[str, LrChoice]) -> str:
    """The section: plan.json's record of the selection and each cell's choice."""
    grid = [float(lr) for lr in selection["grid"]]
    rows = []
    for cell, choice in sorted(choices.items()):
        chosen = "–" if choice.lr is None else f"{choice.lr:g}"
        edge = f"{choice.edge} edge" if choice.edge else ""
        rows.append([cell, *[_loss(choice.means.get(lr)) for lr in grid], chosen, edge])
    table = markdown_table(["cell", *[f"lr {lr:g}" for lr in grid], "chosen", "flag"], rows,
                           "l" + "r" * (len(grid) + 1) + "l")
    return "\n".join([
        "## Learning rate per cell\n",
        f"Each cell (per {selection.get('per', 'budget')}) trained at its own peak lr, the lowest "
        f"mean best validation loss over the selection seeds "
        f"{', '.join(str(s) for s in selection['seeds'])}, which no result of this report uses "
        f"(selection runs in `{SELECTION_FOLDER}/lr<X>/runs/`). A choice at the grid's edge may "
        "lie beyond it: that cell's loss is an upper bound of its tuned loss. Warmup and every "
        "other setting stay the grid's.\n", table, ""])


def _loss(value: Optional[float]) -> str:
    return "–" if value is None else format_number(value)


ANALYSIS: Analysis[SweepFolder, None] = Analysis("lr_selection", no_record, render)
