"""The ladder's adjacent rungs: each rung against the one it changes, paired by seed, Holm
over the steps (``moelab.study.rungs``); shown for a ladder only."""

from __future__ import annotations

from typing import Optional

from moelab.report import format_p_value, markdown_table
from moelab.report.analysis import Analysis, Findings
from moelab.study.analyses.shared import adjustment, family, interval, p_value, signed
from moelab.study.analyses.statistics import results_of
from moelab.study.folder import StudyFolder
from moelab.study.rungs import RungStep


def compute(folder: StudyFolder, findings: Findings) -> Optional[list[RungStep]]:
    results = results_of(findings)
    return results.rung_steps if results.is_ablation and results.rung_steps else None


def render(steps: Optional[list[RungStep]], folder: StudyFolder, findings: Findings) -> str:
    """Each rung against the one it changes, paired by seed, Holm over the steps."""
    if not steps:
        return ""
    rows = [[f"{s.earlier} → {s.later}", signed(s.difference), interval(s),
             p_value(s), format_p_value(s.p_adjusted), str(s.n_pairs), s.verdict]
            for s in steps]
    steps_by_name = {f"{s.earlier} → {s.later}": s for s in steps}
    return (
        "## Adjacent rungs\n\nDifference = earlier − later rung's best validation loss, per "
        "seed, then the paired t-test on those differences: positive means the later rung (the "
        "one change) is better. The steps are one family of tests, and a rung is named better "
        f"only when its p, adjusted over them ({family(steps_by_name)}), is < 0.05.\n\n"
        + markdown_table(["step", "difference", "paired 95 % CI", "paired p",
                          f"p ({adjustment(steps_by_name)})", "pairs", "verdict"],
                         rows, "lrrrrrl")
    )


ANALYSIS: Analysis[StudyFolder, list[RungStep]] = Analysis("rung_steps", compute, render)
