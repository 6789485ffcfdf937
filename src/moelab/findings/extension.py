"""The extension past cpu-isoflop's edge, as mean losses: cpu-fixedn (fixed total, experts
narrowing as S grows) and cpu-expertn (fixed expert width, N growing with S), s0-s2 at
1.08e12 FLOPs, S up to 0.9375, seeds 2-4, mean final validation loss per point.

The dense point is trained once, in cpu-expertn, and shared by both families (the same dense
model is the S = 0 end of each). The tests and verdicts on these runs are the page's other
analyses (``moelab.findings.fixed_size``); this table only sets the means side by side.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

import numpy as np

from moelab.findings.source import ResultsRoot
from moelab.report import format_count, markdown_table
from moelab.report.analysis import Analysis, Findings
from moelab.sweep.folder import read_results

FAMILIES = (("fixed N", "sweeps/cpu-fixedn"), ("fixed N_active", "sweeps/cpu-expertn"))
DENSE_FROM = "sweeps/cpu-expertn"


@dataclass(frozen=True)
class FamilyRow:
    family: str
    sweep: str
    size: str
    params: float
    """The dense model's total parameters (the size's name in both families)."""
    means: dict[float, float]
    """{S: mean final val loss over the seeds}, the dense point included."""


@dataclass(frozen=True)
class ExtensionMeans:
    seeds: list[str]
    sparsities: list[float]
    rows: list[FamilyRow]


def _means(results: ResultsRoot, sweep: str) -> tuple[dict[str, dict[float, float]],
                                                      dict[str, float], set[str]]:
    table = read_results(results.root / sweep)
    if table is None:
        raise ValueError(f"{sweep} has no results")
    losses: dict[str, dict[float, list[float]]] = defaultdict(lambda: defaultdict(list))
    params: dict[str, float] = {}
    for row in sorted(table.rows, key=lambda r: r.S):
        if row.final_val_loss is None:
            raise ValueError(f"{sweep}/results.csv: {row.run} has no final_val_loss")
        losses[row.size][row.S].append(row.final_val_loss)
        params.setdefault(row.size, row.N_total)
    means = {size: {s: float(np.mean(v)) for s, v in by_s.items()} for size, by_s in losses.items()}
    return means, params, {row.seed for row in table.rows}


def compute(results: ResultsRoot, findings: Findings) -> ExtensionMeans:
    dense_means, dense_params, seeds = _means(results, DENSE_FROM)
    rows = []
    for family, sweep in FAMILIES:
        means, _, _ = _means(results, sweep)
        for size in sorted(means, key=lambda s: dense_params[s]):
            rows.append(FamilyRow(family, sweep, size, dense_params[size],
                                  {0.0: dense_means[size][0.0], **means[size]}))
    grid = sorted({s for row in rows for s in row.means})
    return ExtensionMeans(sorted(seeds), grid, rows)


def render(record: ExtensionMeans | None, results: ResultsRoot, findings: Findings) -> str:
    if record is None:
        return ""
    cells = []
    for row in record.rows:
        name = f"{row.family} (`{row.sweep.split('/')[-1]}`)"
        cells.append([name, f"{row.size} ({format_count(row.params)})",
                      *(f"{row.means[s]:.3f}" if s in row.means else "–"
                        for s in record.sparsities)])
    headers = ["family", "size (dense N)", *("dense" if s == 0 else f"S = {s:g}"
                                             for s in record.sparsities)]
    return ("## Both extensions side by side\n\n"
            f"Mean final validation loss over seeds {', '.join(record.seeds)}; the dense point "
            f"is `{DENSE_FROM.split('/')[-1]}`'s, shared by both families ('–': not in the "
            "family's grid):\n\n"
            + markdown_table(headers, cells, "ll" + "r" * len(record.sparsities)))


ANALYSIS: Analysis[ResultsRoot, ExtensionMeans] = Analysis("extension_means", compute, render)
