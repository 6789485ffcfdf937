"""How the dense − MoE gap moves from one budget of cpu-budgets to the next, seed by seed.

The slope over all budgets (``budgets``) cannot see a rise that levels off or turns; here each
step between adjacent budgets is one test: the per-seed gap at the larger budget minus at the
smaller (a seed's budgets share its initialisation and data order, so they are paired by seed).
The steps were added after a hand reading saw the gap "fall": they are post hoc, and join the
page's one Holm family (``budget_family``) with the gaps and the slopes.
"""

from __future__ import annotations

from dataclasses import dataclass

from moelab.findings.budget_family import page_family, step_key, step_tests
from moelab.findings.source import ResultsRoot
from moelab.report import markdown_table
from moelab.report.analysis import Analysis, Findings
from moelab.stats.verdicts import Difference, Verdict, difference_verdict


@dataclass(frozen=True)
class GapStep:
    criterion: str
    smaller: str
    larger: str
    n: int
    change: float
    """Mean over seeds of (gap at the larger budget − gap at the smaller)."""
    ci: tuple[float, float]
    p: float
    p_holm: float
    verdict: Verdict


def compute(results: ResultsRoot, findings: Findings) -> list[GapStep]:
    family = page_family(results)
    adjusted = family.adjusted()
    steps = []
    for key, t in step_tests(results).items():
        p_holm = adjusted[step_key(key)]
        steps.append(GapStep(*key, t.n_pairs, t.gap, (t.ci_low, t.ci_high), t.p_value, p_holm,
                             difference_verdict(Difference(t.gap, (t.ci_low, t.ci_high), p_holm,
                                                           family.label),
                                                ahead="gap grows", behind="gap shrinks")))
    return steps


def render(steps: list[GapStep] | None, results: ResultsRoot, findings: Findings) -> str:
    if not steps:
        return ""
    rows = [[s.criterion, f"{s.smaller} → {s.larger}", str(s.n), f"{s.change:+.3f}",
             f"[{s.ci[0]:+.3f}, {s.ci[1]:+.3f}]", f"{s.p:.2g}", f"{s.p_holm:.2g}",
             f"**{s.verdict.word}**"] for s in steps]
    return ("## The gap from one budget to the next\n\n"
            "Post hoc (added after a hand reading saw the gap fall): each seed's gap (dense − "
            "MoE) at the larger budget minus at the smaller, paired by seed; p adjusted by Holm "
            "over the page's family (the gaps table's); the verdict by rule:\n\n"
            + markdown_table(["criterion", "step", "n", "change", "95 % CI", "p", "p (Holm)",
                              "verdict"], rows, "llrrrrrl"))


ANALYSIS: Analysis[ResultsRoot, list[GapStep]] = Analysis("budget_steps", compute, render)
