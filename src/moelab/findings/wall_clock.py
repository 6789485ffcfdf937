"""S* under a wall-clock budget: which sparsity is best for T seconds on the machine that
trained the sweep? moelab's own question (paper B counts cost in FLOPs and names memory and
communication cost as a limitation, §6.1).

A sweep reads it off its identified law and its measured throughput model
(``moelab.sweep.analyses.optima``, stored in optima.json); a sweep that identifies no law form
gives none (its analysis.json says so). An S* at the search's edge gets the optimum rule's
word (docs/verdicts.md: the edge is not tested against its neighbour, so "best at the edge, not
separated") and no interval; an interior one the sweep analysis's rule: a 95 % interval wider
than ``UNDETERMINED_WIDTH`` is "undetermined on this hardware".
"""

from __future__ import annotations

from dataclasses import dataclass

from moelab.findings.source import ResultsRoot
from moelab.report.analysis import Analysis, Findings
from moelab.sweep.analyses.optima import UNDETERMINED_WIDTH

SWEEPS = ("cpu", "cpu-isoflop")


@dataclass(frozen=True)
class WallClock:
    sweep: str
    law_status: str
    seconds: float | None
    sparsity: float | None
    ci: tuple[float, float] | None
    word: str
    at_edge: bool = False
    edge_share: float | None = None
    """The share of bootstrap replicates whose S* also sits at an edge of the search."""


def _one(results: ResultsRoot, sweep: str) -> WallClock:
    status = results.json(f"sweeps/{sweep}/analysis.json")["status"]
    if status.get("optima") != "computed":
        return WallClock(sweep, status["law"], None, None, None,
                         "not read: no law form is identified")
    three = results.json(f"sweeps/{sweep}/optima.json")["three"]
    by_seconds = three["by_seconds"]
    point, ci = by_seconds["optimum"], by_seconds["ci"]["sparsity"]
    interval = (float(ci[0]), float(ci[1]))
    at_edge = bool(point.get("at_boundary"))
    if at_edge:
        word = "best at the edge, not separated"
    else:
        word = ("undetermined on this hardware" if interval[1] - interval[0] > UNDETERMINED_WIDTH
                else "measured")
    share = by_seconds.get("bootstrap_at_boundary")
    return WallClock(sweep, status["law"], float(three["seconds"]), float(point["sparsity"]),
                     interval, word, at_edge, None if share is None else float(share))


def compute(results: ResultsRoot, findings: Findings) -> list[WallClock]:
    return [_one(results, sweep) for sweep in SWEEPS]


def _line(w: WallClock) -> str:
    if w.sparsity is None or w.ci is None or w.seconds is None:
        return f"- `{w.sweep}` (law: {w.law_status}): **{w.word}**, so no wall-clock S*.\n"
    budget = (f"- `{w.sweep}` (law: {w.law_status}): at the median of its runs' training times "
              f"at their shapes' measured speeds ({w.seconds:.0f} s), ")
    if w.at_edge:
        share = "" if w.edge_share is None else f"; {w.edge_share:.0%} of the replicates also do"
        return (budget + f"S* sits at the edge of the search ({w.sparsity:g}{share}): "
                f"**{w.word}**, and no interval is given for it.\n")
    return (budget + f"S* is {w.sparsity:.3f} [{w.ci[0]:.3f}, {w.ci[1]:.3f}]: **{w.word}** (an "
            f"interval wider than {UNDETERMINED_WIDTH:g} spans most of [0, 1]).\n")


def render(record: list[WallClock] | None, results: ResultsRoot, findings: Findings) -> str:
    if not record:
        return ""
    return ("## S* under a wall-clock budget\n\n"
            "From each sweep's identified law and the throughput model fitted to its own runs' "
            "timings (`optima.json`, three.by_seconds), on the machine that trained the "
            "sweep (the sweep's files do not name its CPU):\n\n"
            + "".join(_line(w) for w in record))


ANALYSIS: Analysis[ResultsRoot, list[WallClock]] = Analysis("wall_clock", compute, render)


def summary(record: list[WallClock]) -> str:
    return "S* under a wall-clock budget: " + "; ".join(
        f"`{w.sweep}` **{w.word}**" for w in record) + "."
