"""How the dense − MoE gap moves from one budget of cpu-budgets to the next, seed by seed.

The slope over all budgets (``budgets``) cannot see a rise that levels off or turns; here each
step between adjacent budgets is one test: the per-seed gap at the larger budget minus at the
smaller (a seed's budgets share its initialisation and data order, so they are paired by seed),
Holm over every step of both criteria.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

from moelab.findings.budgets import _tokens_label
from moelab.findings.source import ResultsRoot, SeedLosses
from moelab.report import markdown_table
from moelab.report.analysis import Analysis, Findings
from moelab.stats.multiple import holm
from moelab.stats.t_tests import paired_difference
from moelab.stats.verdicts import Difference, Verdict, difference_verdict

FILE = "studies/cpu-budgets.json"
CRITERIA = {"matched active": "dense_active", "matched total": "dense_total"}


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


def _gaps(group: dict, dense: str) -> SeedLosses:
    """{seed: dense − MoE best validation loss} at one budget."""
    losses = {arm: {int(r["seed"]): float(r["best_val_loss"]) for r in group["arms"][arm]["runs"]}
              for arm in ("moe", dense)}
    return {seed: losses[dense][seed] - moe for seed, moe in losses["moe"].items()}


def compute(results: ResultsRoot, findings: Findings) -> list[GapStep]:
    groups = sorted(results.json(FILE)["budgets"], key=lambda g: int(g["tokens"]))
    keys, tests = [], []
    for criterion, dense in CRITERIA.items():
        for smaller, larger in itertools.pairwise(groups):
            keys.append((criterion, _tokens_label(int(smaller["tokens"])),
                         _tokens_label(int(larger["tokens"]))))
            tests.append(paired_difference(_gaps(larger, dense), _gaps(smaller, dense)))
    family = f"Holm over the {len(tests)} steps"
    return [GapStep(*key, t.n_pairs, t.gap, (t.ci_low, t.ci_high), t.p_value, p_holm,
                    difference_verdict(Difference(t.gap, (t.ci_low, t.ci_high), p_holm, family),
                                       ahead="gap grows", behind="gap shrinks"))
            for key, t, p_holm in zip(keys, tests, holm([t.p_value for t in tests]))]


def render(steps: list[GapStep] | None, results: ResultsRoot, findings: Findings) -> str:
    if not steps:
        return ""
    rows = [[s.criterion, f"{s.smaller} → {s.larger}", str(s.n), f"{s.change:+.3f}",
             f"[{s.ci[0]:+.3f}, {s.ci[1]:+.3f}]", f"{s.p:.2g}", f"{s.p_holm:.2g}",
             f"**{s.verdict.word}**"] for s in steps]
    return ("## The gap from one budget to the next\n\n"
            "Each seed's gap (dense − MoE) at the larger budget minus at the smaller, paired by "
            f"seed; p adjusted by Holm over the {len(steps)} steps; the verdict by rule:\n\n"
            + markdown_table(["criterion", "step", "n", "change", "95 % CI", "p", "p (Holm)",
                              "verdict"], rows, "llrrrrrl"))


ANALYSIS: Analysis[ResultsRoot, list[GapStep]] = Analysis("budget_steps", compute, render)
