"""Every law form the sweep's columns can hold, in one model-selection table: held-out error,
lack of fit against the pure error of replicate seeds, and parameter count
(``moelab.scaling.form_table``). Abnar et al.'s eq. 6 and its reduced forms, Chinchilla's law,
and the MoE forms beyond them (``clark``, ``granularity``, ``joint``; ``moelab.scaling.laws``),
each fitted without the grid's held-out points, with N the total parameter count.

Written as ``form_table.json`` for a sweep of two sparsities or more whose holdout leaves points
both out and in (the table's held-out error needs both); any other sweep has no table and the
report no section. A form the columns cannot identify has a row that says why. The lack-of-fit
column needs replicate seeds (–, without them). The MoE forms read E (the routed experts,
results.csv's ``E``), N_active and, where every run has one, G; where a sweep's E is fixed by S
(one top-k), Clark's Ê and the sparsity law's 1 − S carry the same information, so the table
compares two parametrisations of one axis, not two axes.
"""

from __future__ import annotations

from typing import Optional

import numpy as np

from moelab.report.analysis import Analysis, Findings
from moelab.scaling import form_table
from moelab.scaling.form_table import FormTable
from moelab.scaling.laws import CHINCHILLA, MOE_FORMS, SPARSITY_FORMS
from moelab.sweep.analyses.common import several_sparsities
from moelab.sweep.folder import SweepFolder

FORM_NAMES = tuple(law.name for law in (*SPARSITY_FORMS, CHINCHILLA, *MOE_FORMS))
"""The table's rows, in this order: Abnar et al.'s forms richest first, Chinchilla, the MoE
forms."""


def sweep_columns(folder: SweepFolder) -> dict[str, np.ndarray]:
    """The law's columns (N = N_total, N_active, D, S, loss) and results.csv's E, and G when
    every run has one (a dense run has no expert split)."""
    columns = dict(folder.law_columns())
    columns["E"] = np.array([float(row.E) for row in folder.rows])
    if folder.rows and all(row.G is not None for row in folder.rows):
        columns["G"] = np.array([float(row.G or 0.0) for row in folder.rows])
    return columns


def compute(folder: SweepFolder, findings: Findings) -> Optional[FormTable]:
    if folder.results is None or folder.settings is None or not several_sparsities(folder):
        return None
    return form_table.compute(sweep_columns(folder), FORM_NAMES, folder.grid.holdout,
                              max_starts=folder.settings.max_starts)


def render(record: Optional[FormTable], folder: SweepFolder, findings: Findings) -> str:
    return form_table.render(record)


ANALYSIS: Analysis[SweepFolder, FormTable] = Analysis(
    "form_table", compute, render, file="form_table.json", record_type=FormTable)
