"""S* under a wall-clock budget: which sparsity is best for T seconds on the machine that
trained the sweep? moelab's own question (paper B counts cost in FLOPs and names memory and
communication cost as a limitation, §6.1).

A sweep reads it off its identified law and its measured throughput model
(``moelab.sweep.analyses.optima``, stored in optima.json); a sweep that identifies no law form
gives none (its analysis.json says so). The word is that analysis's rule: an S* whose 95 %
interval is wider than ``UNDETERMINED_WIDTH`` is "undetermined on this hardware".
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


def _one(results: ResultsRoot, sweep: str) -> WallClock:
    status = results.json(f"sweeps/{sweep}/analysis.json")["status"]
    if status.get("optima") != "computed":
        return WallClock(sweep, status["law"], None, None, None,
                         "not read: no law form is identified")
    three = results.json(f"sweeps/{sweep}/optima.json")["three"]
    point, ci = three["by_seconds"]["optimum"], three["by_seconds"]["ci"]["sparsity"]
    interval = (float(ci[0]), float(ci[1]))
    word = ("undetermined on this hardware" if interval[1] - interval[0] > UNDETERMINED_WIDTH
            else "measured")
    return WallClock(sweep, status["law"], float(three["seconds"]), float(point["sparsity"]),
                     interval, word)


def compute(results: ResultsRoot, findings: Findings) -> list[WallClock]:
    return [_one(results, sweep) for sweep in SWEEPS]


def _line(w: WallClock) -> str:
    if w.sparsity is None or w.ci is None or w.seconds is None:
        return f"- `{w.sweep}` (law: {w.law_status}): **{w.word}**, so no wall-clock S*.\n"
    return (f"- `{w.sweep}` (law: {w.law_status}): S* for the runs' median training time "
            f"({w.seconds:.0f} s) is {w.sparsity:.3f} [{w.ci[0]:.3f}, {w.ci[1]:.3f}]: "
            f"**{w.word}** (an interval wider than {UNDETERMINED_WIDTH:g} spans most of "
            "[0, 1]).\n")


def render(record: list[WallClock] | None, results: ResultsRoot, findings: Findings) -> str:
    if not record:
        return ""
    return ("## S* under a wall-clock budget\n\n"
            "From each sweep's identified law and the throughput model fitted to its own runs' "
            "timings (`optima.json`, three.by_seconds):\n\n"
            + "".join(_line(w) for w in record))


ANALYSIS: Analysis[ResultsRoot, list[WallClock]] = Analysis("wall_clock", compute, render)


def summary(record: list[WallClock]) -> str:
    return "S* under a wall-clock budget: " + "; ".join(
        f"`{w.sweep}` **{w.word}**" for w in record) + "."
