"""The per-cell lr check on cpu-isoflop's two smaller budgets (isoflop_lr.json, written by
experiments/isoflop_lr.py from a `--lr-grid` sweep and its shared-lr twin): which lr each
size x sparsity family chose on its selection seed, how much the reporting runs moved, the
IsoFLOP minima and the fixed-N S* on both sides.

A family (size, S) is the unit of the test: its two budgets share one wsd trunk and its seeds
share the family's lr, so each family's mean change over its runs is one value; per size, a t
over its families' means where it has two or more that changed, Holm over the sizes tested,
verdict words by rule (``moelab.stats.verdicts``). The minima and the fixed-N sign sums are the
ones the sweep's own analyses stored in the file; the sums' words are given again by rule for
the seeds their brackets resample.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from moelab.findings.source import ResultsRoot
from moelab.report import markdown_table
from moelab.report.analysis import Analysis, Findings
from moelab.stats.intervals import mean_interval, summarize, t_p_value
from moelab.stats.multiple import family_label, holm
from moelab.stats.verdicts import Difference, difference_verdict, trend_verdict

FILE = "isoflop_lr.json"
SHARED_LR = 0.01


@dataclass(frozen=True)
class SizeChange:
    """One size's families whose own lr differs from the shared one, and their runs' change."""

    size: str
    families: int
    runs: int
    run_mean: float
    run_low: float
    run_high: float
    family_mean: float
    ci: tuple[float, float] | None
    """95 % t interval over the families' mean changes (None with fewer than 2)."""
    p: float
    p_holm: float
    verdict: str


@dataclass(frozen=True)
class Minimum:
    flops: float
    sparsity: float
    shared: tuple[float, float, float]
    """(L*, interval low, interval high) at the shared lr."""
    tuned: tuple[float, float, float]
    supported: tuple[bool, bool]
    """Whether the shared and the tuned vertex are well supported (no warning of the fit)."""


@dataclass(frozen=True)
class SignSum:
    claim: str
    side: str
    statistic: int
    interval: tuple[float, float]
    pairs: int
    undetermined_pairs: int
    verdict: str


@dataclass(frozen=True)
class IsoflopLrCheck:
    families: int
    chosen: dict[float, int]
    """{lr: families that chose it}."""
    lr_grid: list[float]
    at_lowest: list[str]
    """The families whose chosen lr is the grid's lowest (their best lr may be lower still)."""
    margins: list[float]
    """Per family, the next-best lr's selection loss minus the chosen one's."""
    sizes: list[SizeChange]
    family: str
    minima: list[Minimum]
    fixed_cells: dict[str, tuple[str, str]]
    """{budget/size: (S* shared, S* tuned)}, as the fixed-size analysis words them."""
    sign_sums: list[SignSum]


def _family(cell: str) -> str:
    """'C1.08e+12/s3/S0.750-E4k1' -> 's3/S0.750-E4k1': the two budgets share one trunk."""
    return cell.split("/", 1)[1]


def _size_changes(record: dict) -> tuple[list[SizeChange], str]:
    lrs, per_run = record["lrs"], record["loss_change"]["per_run"]
    by_family: dict[str, list[float]] = {}
    for run, change in per_run.items():
        cell = run.rsplit("/", 1)[0]
        if lrs[cell] != SHARED_LR:
            by_family.setdefault(_family(cell), []).append(float(change))
    sizes = sorted({family.split("/")[0] for family in by_family})
    raw = []
    for size in sizes:
        groups = [v for family, v in sorted(by_family.items()) if family.split("/")[0] == size]
        means = [float(np.mean(v)) for v in groups]
        runs = np.concatenate(groups)
        summary, interval = summarize(means), mean_interval(means)
        p = (t_p_value(summary.mean, summary.std / math.sqrt(summary.n), summary.n - 1)
             if summary.n > 1 else None)
        raw.append((size, len(groups), runs, summary.mean,
                    (interval.low, interval.high) if interval else None,
                    math.nan if p is None else p))
    adjusted = holm([r[5] for r in raw])
    family = family_label(sum(not math.isnan(r[5]) for r in raw))
    return [SizeChange(size, n, len(runs), float(runs.mean()), float(runs.min()),
                       float(runs.max()), mean, ci, p, p_holm, difference_verdict(
                           Difference(mean, ci, None if math.isnan(p_holm) else p_holm, family),
                           ahead="worse at its own lr", behind="better at its own lr").word)
            for (size, n, runs, mean, ci, p), p_holm in zip(raw, adjusted)], family


def _margins(selection: dict[str, dict[str, float]]) -> list[float]:
    margins = []
    for losses in selection.values():
        ordered = sorted(losses.values())
        margins.append(ordered[1] - ordered[0])
    return margins


def _minima(record: dict) -> list[Minimum]:
    def triple(m: dict) -> tuple[float, float, float]:
        return float(m["loss"]), float(m["loss_ci"][0]), float(m["loss_ci"][1])
    return [Minimum(float(s["flops"]), float(s["sparsity"]), triple(s), triple(t),
                    (bool(s["well_supported"]), bool(t["well_supported"])))
            for s, t in zip(record["isoflop_minima"]["shared"], record["isoflop_minima"]["tuned"])]


def _sign_sum(trend: dict, side: str, seeds: int) -> SignSum:
    """The stored trend statistic, its word given again by rule for the seeds it resamples."""
    interval = (float(trend["interval"][0]), float(trend["interval"][1]))
    return SignSum(trend["claim"], side, int(trend["statistic"]), interval, int(trend["pairs"]),
                   int(trend["undetermined_pairs"]),
                   trend_verdict(float(trend["statistic"]), interval, seeds=seeds).word)


def _seeds(record: dict) -> int:
    return len({run.rsplit("/", 1)[1] for run in record["loss_change"]["per_run"]})


def compute(results: ResultsRoot, findings: Findings) -> IsoflopLrCheck:
    record = results.json(FILE)
    selection: dict[str, dict[str, float]] = record["selection"]
    chosen_by_family = {_family(cell): float(lr) for cell, lr in record["lrs"].items()}
    grid = sorted({float(lr) for losses in selection.values() for lr in losses})
    chosen = {lr: sum(v == lr for v in chosen_by_family.values()) for lr in grid}
    sizes, family = _size_changes(record)
    fixed = record["fixed_size"]
    cells = {cell: (fixed["shared"]["cells"][cell], fixed["tuned"]["cells"][cell])
             for cell in fixed["shared"]["cells"]}
    return IsoflopLrCheck(
        len(chosen_by_family), chosen, grid,
        sorted(f for f, lr in chosen_by_family.items() if lr == grid[0]),
        _margins(selection), sizes, family, _minima(record), cells,
        [_sign_sum(fixed[side][key], side, _seeds(record))
         for key in ("rises_with_size", "falls_with_budget") for side in ("shared", "tuned")])


def _loss(triple: tuple[float, float, float]) -> str:
    return f"{triple[0]:.4f} [{triple[1]:.4f}, {triple[2]:.4f}]"


def _minimum_rows(record: IsoflopLrCheck) -> list[list[str]]:
    rows = []
    for flops in sorted({m.flops for m in record.minima}):
        cells = []
        for m in sorted((m for m in record.minima if m.flops == flops), key=lambda m: m.sparsity):
            shared, tuned = (_loss(m.shared) + ("" if m.supported[0] else " †"),
                             _loss(m.tuned) + ("" if m.supported[1] else " †"))
            cells.append(f"{shared}, same" if shared == tuned else f"{shared} / {tuned}")
        rows.append([f"{flops:.3g}", *cells])
    return rows


def _size_rows(record: IsoflopLrCheck) -> list[list[str]]:
    return [[s.size, str(s.families), str(s.runs), f"{s.run_mean:+.3f}",
             f"{s.run_low:+.3f} to {s.run_high:+.3f}",
             f"{s.family_mean:+.3f}" + (f" [{s.ci[0]:+.3f}, {s.ci[1]:+.3f}]" if s.ci else ""),
             "–" if math.isnan(s.p) else f"{s.p:.2g}",
             "–" if math.isnan(s.p_holm) else f"{s.p_holm:.2g}", f"**{s.verdict}**"]
            for s in record.sizes]


def _choices(record: IsoflopLrCheck) -> str:
    chosen = ", ".join(f"{count} of {record.families} chose {lr:g}"
                       for lr, count in record.chosen.items())
    margins = np.array(record.margins)
    return (f"Each family's lr from {{{', '.join(f'{lr:g}' for lr in record.lr_grid)}}}, "
            f"chosen on its selection seed: {chosen}. The {len(record.at_lowest)} at the grid's "
            f"lowest lr ({', '.join(record.at_lowest)}) have only an upper bound: their best lr "
            "may be lower still. The chosen lr's selection loss beat the next best by a median "
            f"of {np.median(margins):.3f} nats (range {margins.min():.3f} to "
            f"{margins.max():.3f}).\n\n")


def _fixed_n(record: IsoflopLrCheck) -> str:
    changed = [[cell, shared, tuned] for cell, (shared, tuned) in record.fixed_cells.items()
               if shared != tuned]
    sums = [[s.claim, s.side, f"{s.statistic:+d} [{s.interval[0]:+.0f}, {s.interval[1]:+.0f}]",
             str(s.pairs), str(s.undetermined_pairs), f"**{s.verdict}**"]
            for s in record.sign_sums]
    return (f"S* at fixed total parameters, shared then tuned: {len(changed)} of "
            f"{len(record.fixed_cells)} cells differ:\n\n"
            + markdown_table(["cell", "shared", "tuned"], changed, "lll")
            + "\nThe pre-set sign sums over ordered pairs of cells (pairs with both S* at the "
              "same edge count 0) with their bootstrap bracket; with 2 seeds a bracket is not a "
              "95 % interval (docs/verdicts.md), so no trend gets a direction:\n\n"
            + markdown_table(["claim", "lr", "sum [bracket]", "pairs", "both at the edge",
                              "verdict"], sums, "llrrrl"))


def render(record: IsoflopLrCheck | None, results: ResultsRoot, findings: Findings) -> str:
    if record is None:
        return ""
    sparsities = sorted({m.sparsity for m in record.minima})
    return ("## The per-cell lr check (cpu-isoflop's two smaller budgets)\n\n"
            + _choices(record)
            + "The reporting runs (seeds 0 and 1) of the families whose lr changed: each run's "
              f"loss at its own lr minus at {SHARED_LR:g} (negative: better at its own lr), and "
              f"per size the mean over its families ({record.family} over the sizes with two or "
              "more such families):\n\n"
            + markdown_table(["size", "families", "runs", "mean change", "range",
                              "family mean [95 % CI]", "p", "p (Holm)", "verdict"],
                             _size_rows(record), "lrrrrrrrl")
            + "\nThe IsoFLOP minimum L* with its bootstrap interval, shared / tuned (2 seeds: "
              "the intervals are a rough spread, not 95 % intervals; †: the fit warns that the "
              "vertex is poorly supported, e.g. outside the sizes sampled):\n\n"
            + markdown_table(["C", *(f"S = {s:g}" for s in sparsities)], _minimum_rows(record),
                             "l" + "l" * len(sparsities))
            + "\n" + _fixed_n(record))


ANALYSIS: Analysis[ResultsRoot, IsoflopLrCheck] = Analysis("isoflop_lr", compute, render)
