"""Granularity and shared experts at one sparsity: each cell paired by seed against its
reference, one Holm family (a sweep grid with ``granularities`` or ``shared_experts``).

The family is fixed by the grid before any loss is read: at each size, budget and sparsity,
(1) every cell against the reference cell, the coarsest G without shared experts, and (2) every
cell with shared experts against the cell of the same G without them. Each test is a paired t
on the per-seed differences (the same seed shares the data order and validation windows); the
Holm adjustment runs over every test of the sweep. Verdict words by rule
(``moelab.stats.verdicts``): ``lower`` / ``higher`` only where the Holm-adjusted p < 0.05,
``not separated`` otherwise, ``undetermined`` without two paired seeds.

One analysis of the sweep report (``ANALYSES``), written to granularity.json.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from moelab.report.analysis import Analysis, Findings
from moelab.report.markdown import format_number, markdown_table
from moelab.stats.intervals import ALPHA
from moelab.stats.multiple import family_label, holm
from moelab.stats.t_tests import paired_difference
from moelab.stats.verdicts import Difference, difference_verdict
from moelab.sweep.folder import SweepFolder
from moelab.sweep.results_csv import ResultRow

CellKey = tuple[str, str, float, float, int]
"""(size, budget, S, G, shared experts)."""


@dataclass
class GranularityCell:
    """One (size, budget, S, G, shared) of the sweep: its seeds' best val losses."""

    size: str
    """The grid's size label."""
    budget: str
    """The budget's label."""
    S: float
    """Sparsity of the routed experts."""
    G: float
    """Granularity d_ff / d_expert."""
    shared: int
    """Shared experts per MoE layer."""
    E: int
    """Routed experts (results.csv's E)."""
    k: int
    """Routed experts per token."""
    losses: dict[int, float] = field(default_factory=dict)
    """Best val loss by seed."""

    @property
    def mean(self) -> float:
        return float(np.mean(list(self.losses.values())))

    @property
    def label(self) -> str:
        shared = f" + {self.shared} shared" if self.shared else ""
        return f"G = {self.G:g}: {self.E}-choose-{self.k}{shared}"


@dataclass
class GranularityTest:
    """One pre-set comparison: ``cell`` minus ``reference``, paired by seed."""

    size: str
    """The grid's size label."""
    budget: str
    """The budget's label."""
    S: float
    """The sparsity both cells have."""
    cell: str
    """The cell compared, by its label."""
    reference: str
    """The cell it is compared with."""
    kind: str
    """"against the reference" (coarsest G, no shared) or "shared against none" (same G)."""
    difference: float
    """Mean best val loss of cell minus reference, paired by seed (negative: cell is better)."""
    ci: list[float]
    """Its 95 % paired t interval."""
    p: float
    """The raw p of the paired t-test."""
    p_holm: float = math.nan
    """p adjusted by Holm over the family; the verdict uses it."""
    seeds: int = 0
    """Seeds both cells have."""
    verdict: str = ""
    """The verdict in words (docs/verdicts.md)."""


@dataclass
class GranularityRecord:
    """granularity.json: the sweep's expert splits at one sparsity and the pre-set comparisons
    between them."""

    cells: list[GranularityCell]
    """Each (size, budget, S, G, shared) of the sweep."""
    tests: list[GranularityTest]
    """The pre-set comparisons, one Holm family."""
    family: str
    """The Holm family, e.g. "Holm, 3 tests"."""


def _cells(rows: list[ResultRow]) -> dict[CellKey, GranularityCell]:
    cells: dict[CellKey, GranularityCell] = {}
    for row in rows:
        if row.S == 0.0 or row.G is None:
            continue  # a dense run has no expert split
        shared = row.shared_experts or 0
        key = (row.size, row.budget, row.S, row.G, shared)
        cell = cells.setdefault(key, GranularityCell(row.size, row.budget, row.S, row.G, shared,
                                                     row.E, row.k or 1))
        cell.losses[int(row.seed)] = row.best_val_loss
    return cells


def _planned_pairs(cells: dict[CellKey, GranularityCell]) -> list[tuple[CellKey, CellKey, str]]:
    """The family, from the cells' keys alone (no loss is read here)."""
    pairs = []
    for group in sorted({key[:3] for key in cells}):
        keys = sorted(key for key in cells if key[:3] == group)
        reference = min((key for key in keys if key[4] == 0), key=lambda key: key[3], default=None)
        if reference is None:
            continue
        pairs += [(key, reference, "against the reference") for key in keys if key != reference]
        pairs += [(key, (*key[:4], 0), "shared against none") for key in keys
                  if key[4] > 0 and (*key[:4], 0) in cells and (*key[:4], 0) != reference]
    return pairs


def granularity_record(rows: list[ResultRow]) -> GranularityRecord | None:
    """The cells and the pre-set family of paired tests; None for a sweep without two cells
    of one sparsity that differ in G or shared experts."""
    cells = _cells(rows)
    pairs = _planned_pairs(cells)
    if not pairs:
        return None
    tests = []
    for key, reference_key, kind in pairs:
        cell, reference = cells[key], cells[reference_key]
        paired = paired_difference(cell.losses, reference.losses)
        tests.append(GranularityTest(
            size=cell.size, budget=cell.budget, S=cell.S, cell=cell.label,
            reference=reference.label, kind=kind, difference=paired.gap,
            ci=[paired.ci_low, paired.ci_high], p=paired.p_value, seeds=paired.n_pairs))
    family = family_label(sum(not math.isnan(t.p) for t in tests))
    for test, adjusted in zip(tests, holm([test.p for test in tests])):
        test.p_holm = adjusted
        test.verdict = verdict(test.difference, test.ci, adjusted, family)
    return GranularityRecord(cells=sorted(cells.values(), key=lambda c: (c.size, c.budget, c.S,
                                                                          c.G, c.shared)),
                             tests=tests, family=family_label(sum(not math.isnan(t.p)
                                                                   for t in tests)))


def verdict(difference: float, ci: list[float], p_holm: float, family: str,
            alpha: float = ALPHA) -> str:
    """The word the rule gives (docs/verdicts.md): lower or higher, not separated, undetermined."""
    return difference_verdict(Difference(difference, (ci[0], ci[1]), p_holm, family),
                              alpha=alpha, ahead="higher", behind="lower").word


def render_section(record: GranularityRecord | None) -> str:
    """The report's section: the cells' mean losses, then the family of paired tests."""
    if record is None:
        return ""
    cell_rows = [[c.size, c.budget, f"{c.S:g}", c.label, str(len(c.losses)), format_number(c.mean)]
                 for c in record.cells]
    test_rows = [[t.size, f"{t.S:g}", f"{t.cell} minus {t.reference}",
                  f"{t.difference:+.4f} [{t.ci[0]:+.4f}, {t.ci[1]:+.4f}]", _p(t.p), _p(t.p_holm),
                  t.verdict] for t in record.tests]
    return ("## Granularity and shared experts\n\n"
            "At each sparsity, G (E and k times G, experts G times narrower) and shared experts "
            "(s of the k·G active experts used by every token) at the same total and active "
            "parameters. Best val loss, mean over seeds:\n\n"
            + markdown_table(["size", "budget", "S", "cell", "seeds", "loss"], cell_rows,
                             "lllrrr")
            + "\nEach cell minus its reference, paired by seed (95 % t interval); the family, "
            f"set by the grid's cells alone, never by a loss, is every test below ({record.family})."
            " A verdict says lower or higher only where the Holm-adjusted p < 0.05.\n\n"
            + markdown_table(["size", "S", "pair", "difference [95 % CI]", "p", "p (Holm)",
                              "verdict"], test_rows, "llllrrl"))


def _p(value: float) -> str:
    return "" if math.isnan(value) else f"{value:.2g}"


def compute(folder: SweepFolder, findings: Findings) -> GranularityRecord | None:
    return granularity_record(folder.rows) if folder.results is not None else None


def render(record: GranularityRecord | None, folder: SweepFolder, findings: Findings) -> str:
    return render_section(record)


ANALYSIS: Analysis[SweepFolder, GranularityRecord] = Analysis(
    "granularity", compute, render, file="granularity.json", record_type=GranularityRecord)
