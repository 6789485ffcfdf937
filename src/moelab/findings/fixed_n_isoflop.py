"""Paper B's findings (a) and (c) on the IsoFLOP sweep: at a fixed total size and compute, where
is the best sparsity, does it rise with the size (a), and does it fall with the budget (c)?

cpu-isoflop's ``fixed_total`` sizes keep their total parameters across S, so each (size, budget)
cell is one curve of loss against S (``moelab.scaling.fixed_size``, stored in its
fixed_size.json): S* is the sparsity of lowest mean final loss, a bound at the grid's top, and
each trend is a sum of pair signs over cells. The words come from ``moelab.stats.verdicts``:
with 2 seeds the sum's bracket spans 3 draws, no interval to read.
"""

from __future__ import annotations

from dataclasses import dataclass

from moelab.findings.source import ResultsRoot
from moelab.report import markdown_table
from moelab.report.analysis import Analysis, Findings
from moelab.stats.verdicts import Verdict, trend_verdict

SWEEP = "sweeps/cpu-isoflop"


@dataclass(frozen=True)
class Cell:
    size: str
    params: float
    budget: str
    s_star: str
    """As the analysis prints it: '0.5 [0.5, 0.75]' or 'S* ≥ 0.875, unbounded'."""


@dataclass(frozen=True)
class SignTrend:
    claim: str
    statistic: int
    interval: tuple[float, float]
    pairs: int
    tied_at_edge: int
    per_group: dict[str, int]
    verdict: Verdict


@dataclass(frozen=True)
class FixedNOnIsoflop:
    seeds: list[str]
    sparsities: list[float]
    sizes: list[str]
    budgets: list[str]
    cells: list[Cell]
    with_size: SignTrend
    with_budget: SignTrend


def _trend(record: dict, seeds: int) -> SignTrend:
    low, high = record["interval"]
    return SignTrend(record["claim"], int(record["statistic"]), (float(low), float(high)),
                     int(record["pairs"]), int(record["undetermined_pairs"]),
                     {k: int(v) for k, v in record["per_group"].items()},
                     trend_verdict(float(record["statistic"]), (float(low), float(high)),
                                   seeds=seeds))


def compute(results: ResultsRoot, findings: Findings) -> FixedNOnIsoflop:
    stored = results.json(f"{SWEEP}/fixed_size.json")
    cells = [Cell(c["size"], float(c["params"][0]), c["budget"], c["text"])
             for c in stored["cells"]]
    sizes = sorted({c.size for c in cells}, key=lambda s: min(c.params for c in cells
                                                              if c.size == s))
    budgets = sorted({c.budget for c in cells}, key=lambda b: float(b.lstrip("C")))
    seeds = len(stored["seeds"])
    return FixedNOnIsoflop(list(stored["seeds"]), list(stored["sparsities"]), sizes, budgets,
                           cells, _trend(stored["rises_with_size"], seeds),
                           _trend(stored["falls_with_budget"], seeds))


def _trend_sentence(trend: SignTrend, along: str) -> str:
    groups = ", ".join(f"{v:+d} at {k}" for k, v in trend.per_group.items())
    return (f"- **{trend.claim}**: **{trend.verdict.word}** ({trend.verdict.rule}). Sum of pair "
            f"signs {trend.statistic:+d} [{trend.interval[0]:+g}, {trend.interval[1]:+g}] over "
            f"{trend.pairs} pairs of cells along {along} ({trend.tied_at_edge} with both S* at "
            f"the grid's edge count 0); per {'budget' if along == 'N' else 'size'}: {groups}.\n")


def render(record: FixedNOnIsoflop | None, results: ResultsRoot, findings: Findings) -> str:
    if record is None:
        return ""
    text = {(c.budget, c.size): c.s_star.replace("S* ", "") for c in record.cells}
    rows = [[budget.lstrip("C"), *(text[budget, size] for size in record.sizes)]
            for budget in record.budgets]
    grid = " / ".join(f"{s:g}" for s in record.sparsities)
    return ("## At fixed total parameters on the IsoFLOP sweep (cpu-isoflop)\n\n"
            f"S* per (budget, size): the S of lowest mean final validation loss over seeds "
            f"{', '.join(record.seeds)} at S = {grid}, with the bracket of the 3 draws of 2 "
            f"seeds (each seed alone, both); at the grid's largest S it is a bound "
            f"(`{SWEEP}/fixed_size.json`):\n\n"
            + markdown_table(["budget (FLOPs)", *record.sizes], rows, "l" + "r" * len(record.sizes))
            + "\n" + _trend_sentence(record.with_size, "N")
            + _trend_sentence(record.with_budget, "C")
            + "\nWith 2 seeds a bracket is the range of three numbers, not a 95 % interval "
              "(docs/verdicts.md), so neither trend gets a direction here, whatever its sign. "
              "Embeddings are 31-73 % of these models' parameters, and under `fixed_total` the "
              "experts narrow as S grows, so S, the inactive share and granularity move "
              "together along both axes. Every run trained at the sweep's shared lr 0.01, which "
              "the per-cell lr check ([the compute-optimal page](compute-optimal-sparsity.md)) "
              "found too high for s3's sparse runs at the two smaller budgets: s3's cells there "
              "(its one interior S* among them) carry that artefact, and the largest budget "
              "was not rechecked.\n")


ANALYSIS: Analysis[ResultsRoot, FixedNOnIsoflop] = Analysis("fixed_n_isoflop", compute, render)
