"""``--until-resolved``: where each comparison stopped, why, and its repeated interval at every
look; results.json's ``sequential``.

The design and the rounds run are plan.json's record (``moelab.study.rounds``); every look is
recomputed here from the folder's complete runs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional

from moelab.report import format_number, markdown_table
from moelab.report.analysis import Analysis, Findings
from moelab.stats.sequential import METHOD
from moelab.study.folder import StudyFolder
from moelab.study.rounds import (
    RECORD_KEY, ComparisonRounds, SequentialRecord, analyse, read_sequential,
)


@dataclass
class RoundsRecord:
    """The design plan.json keeps, and every planned comparison read look by look."""

    design: SequentialRecord
    comparisons: list[ComparisonRounds]

    def results_entries(self) -> dict:
        """results.json's ``sequential``."""
        record = self.design
        return {RECORD_KEY: {
            "method": METHOD, "alpha": record.alpha, "threshold": record.threshold,
            "alpha_per_comparison": record.alpha_per_comparison, "looks": record.looks,
            "rounds_run": record.rounds_run,
            "comparisons": [_comparison_json(c) for c in self.comparisons],
        }}


def _comparison_json(c: ComparisonRounds) -> dict:
    return {
        "budget": c.budget, "criterion": c.criterion, "moe_arm": c.moe_arm,
        "dense_arm": c.dense_arm,
        "stopped_at_round": None if c.outcome.stopped_at is None else c.outcome.stopped_at + 1,
        "reason": c.outcome.reason,
        "looks": [{"round": look.look + 1, "n": look.n, "gap": _finite(look.mean),
                   "low": _finite(look.low), "high": _finite(look.high)}
                  for look in c.outcome.looks],
    }


def compute(folder: StudyFolder, findings: Findings) -> Optional[RoundsRecord]:
    design = read_sequential(folder.plan)
    return None if design is None else RoundsRecord(design, analyse(design, folder.runs))


def render(record: Optional[RoundsRecord], folder: StudyFolder, findings: Findings) -> str:
    """Where each comparison stopped, why, and its interval at every look."""
    if record is None:
        return ""
    design, comparisons = record.design, record.comparisons
    rows = []
    for c in comparisons:
        name = _name(c)
        for look in c.outcome.looks:
            stop = look.look == c.outcome.stopped_at
            rows.append([name, f"{look.look + 1} ({look.n} seeds)", format_number(look.mean),
                         f"[{_bound(look.low)}, {_bound(look.high)}]",
                         (c.outcome.reason or "") if stop else ""])
    table = markdown_table(["comparison (dense - moe)", "round", "gap", "repeated 95% interval",
                            "stopped"], rows, "llrrl")
    summary = []
    for c in comparisons:
        stopped_at, final = c.outcome.stopped_at, c.outcome.final
        if c.outcome.reason is None or stopped_at is None or final is None:
            summary.append(f"- {_name(c)}: still open after round {design.rounds_run}")
        else:
            summary.append(f"- {_name(c)}: stopped at round {stopped_at + 1} "
                           f"({final.n} seeds): {c.outcome.reason}")
    return "\n".join([
        "## Seeds until resolved\n",
        f"Method: {METHOD}. Seeds per look: {', '.join(str(n) for n in design.looks)} (fixed "
        f"before the first run); two-sided alpha {design.alpha:g}, split over "
        f"{design.comparisons} comparisons ({design.alpha_per_comparison:.3g} each); "
        f"practical threshold {design.threshold:g} nats/token. A comparison stops when its "
        "repeated interval excludes 0 (resolved) or lies inside +- the threshold (smaller than "
        "threshold); the intervals of all looks hold together, so stopping on them keeps the "
        f"error rate. Rounds run: {design.rounds_run}.\n",
        *summary, "", table, "",
        "The fixed-sample tests of the other sections (paired t, Holm) do not account for this "
        "optional stopping: read the decisions from this section.\n",
    ])


def _name(c: ComparisonRounds) -> str:
    return c.criterion + ("" if c.budget is None else f" @ {c.budget:,} tokens")


def _finite(value: float) -> Optional[float]:
    return value if math.isfinite(value) else None


def _bound(value: float) -> str:
    return format_number(value) if math.isfinite(value) else "∞" if value > 0 else "-∞"


ANALYSIS: Analysis[StudyFolder, RoundsRecord] = Analysis(
    "rounds", compute, render, record_type=RoundsRecord)
