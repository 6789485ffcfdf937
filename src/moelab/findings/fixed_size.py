"""Paper B's finding (a) on CPU: at a fixed total size and compute, is the loss's best sparsity
interior and bounded? And, with the experts' size fixed instead, does any sparse model beat its
dense one?

Two stored sweeps answer it (each at one budget, 1.08e12 FLOPs, seeds 2-4; a sweep's seeds
are paired: they share the data order): cpu-fixedn holds each size's total parameters fixed
while S grows (experts narrow as E grows), cpu-expertn holds the experts' width fixed (total
parameters grow with E). Every difference is a paired t over the seeds; each sweep's tests are
one Holm family, and the words come from ``moelab.stats.verdicts``.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass

from moelab.findings.source import ResultsRoot
from moelab.report import markdown_table
from moelab.report.analysis import Analysis, Findings
from moelab.stats.intervals import mean_interval, summarize, t_p_value
from moelab.stats.multiple import holm
from moelab.stats.verdicts import Difference, Verdict, difference_verdict, optimum_verdict
from moelab.sweep.folder import read_results

FIXED_TOTAL, FIXED_EXPERT = "sweeps/cpu-fixedn", "sweeps/cpu-expertn"
LossBySeed = dict[str, float]


@dataclass(frozen=True)
class PairedDifference:
    """Loss at ``S`` minus loss at ``reference``, paired by seed, with Holm's p in its family."""

    size: str
    S: float
    reference: float
    estimate: float
    ci: tuple[float, float]
    p: float
    p_holm: float
    verdict: Verdict


@dataclass(frozen=True)
class SizeOptimum:
    size: str
    sparsities: list[float]
    mean_loss: list[float]
    best: float
    verdict: Verdict


@dataclass(frozen=True)
class FixedSize:
    family: str
    optima: list[SizeOptimum]
    rises: list[PairedDifference]
    versus_dense: list[PairedDifference]
    expert_family: str


def _cells(results: ResultsRoot, sweep: str) -> dict[str, dict[float, LossBySeed]]:
    table = read_results(results.root / sweep)
    if table is None:
        raise ValueError(f"{sweep} has no results")
    cells: dict[str, dict[float, LossBySeed]] = defaultdict(dict)
    for row in table.rows:
        cells[row.size].setdefault(row.S, {})[row.seed] = row.best_val_loss
    return cells


def _paired(size: str, at: LossBySeed, reference: LossBySeed, S: float,
            reference_S: float) -> tuple[PairedDifference, float]:
    seeds = sorted(at.keys() & reference.keys())
    values = [at[s] - reference[s] for s in seeds]
    summary, interval = summarize(values), mean_interval(values)
    p = t_p_value(summary.mean, summary.std / math.sqrt(summary.n), summary.n - 1)
    raw = math.nan if p is None else p
    ci = (interval.low, interval.high) if interval else (math.nan, math.nan)
    return PairedDifference(size, S, reference_S, summary.mean, ci, raw, math.nan,
                            Verdict("undetermined", "not adjusted")), raw


def _adjusted(tests: list[PairedDifference], family: str, ahead: str,
              behind: str) -> list[PairedDifference]:
    adjusted = holm([t.p for t in tests])
    return [PairedDifference(t.size, t.S, t.reference, t.estimate, t.ci, t.p, p,
                             difference_verdict(Difference(t.estimate, t.ci, p, family),
                                                ahead=ahead, behind=behind))
            for t, p in zip(tests, adjusted)]


def _neighbour_rises(cells: dict[str, dict[float, LossBySeed]]) -> list[PairedDifference]:
    """Per size, the loss at each grid neighbour of the best S minus the loss at the best."""
    rises = []
    for size, by_s in sorted(cells.items()):
        grid = sorted(by_s)
        best = min(grid, key=lambda s: summarize(list(by_s[s].values())).mean)
        i = grid.index(best)
        for j in (i - 1, i + 1):
            if 0 <= j < len(grid):
                rises.append(_paired(size, by_s[grid[j]], by_s[best], grid[j], best)[0])
    return rises


def best_sparsities(cells: dict[str, dict[float, LossBySeed]], sweep: str
                    ) -> tuple[str, list[SizeOptimum], list[PairedDifference]]:
    """Each size's best S on its grid with its optimum word: the loss at each neighbour of the
    best minus the loss at the best, paired by seed, all sizes' tests one Holm family."""
    rises_raw = _neighbour_rises(cells)
    family = f"Holm over the {len(rises_raw)} neighbour tests of {sweep}"
    rises = _adjusted(rises_raw, family, "rises", "falls")
    optima = []
    for size, by_s in sorted(cells.items()):
        grid = sorted(by_s)
        means = [summarize(list(by_s[s].values())).mean for s in grid]
        best = grid[means.index(min(means))]
        around = {t.S: t for t in rises if t.size == size}
        below = around.get(grid[grid.index(best) - 1]) if grid.index(best) > 0 else None
        above = around.get(grid[grid.index(best) + 1]) if best != grid[-1] else None
        optima.append(SizeOptimum(size, grid, means, best, optimum_verdict(
            grid, grid.index(best), _as_difference(below), _as_difference(above))))
    return family, optima, rises


def compute(results: ResultsRoot, findings: Findings) -> FixedSize:
    family, optima, rises = best_sparsities(_cells(results, FIXED_TOTAL), "cpu-fixedn")
    expert_cells = _cells(results, FIXED_EXPERT)
    versus = [_paired(size, by_s[s], by_s[0.0], s, 0.0)[0]
              for size, by_s in sorted(expert_cells.items()) for s in sorted(by_s) if s > 0]
    expert_family = f"Holm over the {len(versus)} sparse-vs-dense tests of cpu-expertn"
    # loss at S minus dense: negative is the sparse model ahead
    versus = _adjusted(versus, expert_family, "dense ahead", "sparse ahead")
    return FixedSize(family, optima, rises, versus, expert_family)


def _as_difference(test: PairedDifference | None) -> Difference | None:
    return None if test is None else Difference(test.estimate, test.ci, test.p_holm, "")


def _difference_rows(tests: list[PairedDifference]) -> list[list[str]]:
    return [[t.size, f"{t.S:g} − {t.reference:g}", f"{t.estimate:+.4f}",
             f"[{t.ci[0]:+.4f}, {t.ci[1]:+.4f}]", f"{t.p:.2g}", f"{t.p_holm:.2g}",
             f"**{t.verdict.word}**"] for t in tests]


HEADERS = ["size", "S − S'", "loss difference", "95 % CI", "p", "p (Holm)", "verdict"]


def render(record: FixedSize | None, results: ResultsRoot, findings: Findings) -> str:
    if record is None:
        return ""
    optima = [[o.size, " / ".join(f"{m:.4f}" for m in o.mean_loss), f"{o.best:g}",
               f"**{o.verdict.word}**", o.verdict.rule] for o in record.optima]
    grid = " / ".join(f"{s:g}" for s in record.optima[0].sparsities)
    return ("## At fixed total parameters (cpu-fixedn)\n\n"
            f"Mean best validation loss over seeds 2-4 at S = {grid}, and where the best S sits "
            "(docs/verdicts.md: bounded only when the loss rises significantly on both sides):\n\n"
            + markdown_table(["size", "mean loss per S", "best S", "verdict", "why"], optima,
                             "lrrll")
            + f"\nThe neighbour tests behind the verdicts ({record.family}); positive: the loss "
              "at the neighbour is higher than at the best S:\n\n"
            + markdown_table(HEADERS, _difference_rows(record.rises), "llrrrrl")
            + "\n## With the experts' width fixed (cpu-expertn)\n\n"
              f"Loss at each sparse point minus the dense model of the same active size (the "
              f"sparse totals are 1.8-7.8x larger; {record.expert_family}); negative: the "
              "sparse model is lower:\n\n"
            + markdown_table(HEADERS, _difference_rows(record.versus_dense), "llrrrrl"))


ANALYSIS: Analysis[ResultsRoot, FixedSize] = Analysis("fixed_size", compute, render)


def summary(record: FixedSize) -> str:
    optima = ", ".join(f"{o.size} {o.verdict.word} (best S {o.best:g})" for o in record.optima)
    separated = [t for t in record.versus_dense if t.verdict.word != "not separated"]
    versus = (f"{len(separated)} of {len(record.versus_dense)} sparse points separated from "
              f"dense" if separated else
              f"no sparse point separated from dense ({record.expert_family})")
    return (f"At a fixed total size (cpu-fixedn, no dense point; S also narrows the experts): "
            f"{optima}. With the experts' width fixed (cpu-expertn, totals growing with S): "
            f"{versus}.")
