"""What each rung of the stability ladder buys in loss: top-2 over top-1 among them.

``moelab ablate-routing`` trains six rungs of one MoE on the same seeds; each rung is tested
against the rung it adds one change to (``moelab.study.rungs``: earlier − later best validation
loss, paired by seed, positive when the change helps), the steps of one ladder a Holm family.
Two stored ladders: cpu-ablation (8 experts, lr 0.03 = 3x the demo's, two micro batches a
step, seeds 1-4; chosen on a pilot seed so that naive top-1 could collapse) and the demo's
shape (4 experts, lr 0.01, seeds 0-2). The expert width is fixed, so top-2 rungs also have
more active parameters than top-1 rungs, and they renormalise their two weights where top-1
weights its expert by the router probability: the top-2 step changes k, the weighting rule and
the active parameters together. cpu-ablation's steps are read at the family the two post hoc
balancing tests of ``ladder_routing`` enlarged.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from moelab.findings.ladder_routing import STUDY_LOSSES, ablation_family
from moelab.findings.source import ResultsRoot, arm_losses
from moelab.report import markdown_table
from moelab.report.analysis import Analysis, Findings
from moelab.stats.verdicts import Difference, Verdict, difference_verdict
from moelab.study.rungs import rung_steps

LADDERS = {"cpu-ablation": ("studies/cpu-ablation-seeds1-4.json",
                            "8 experts, lr 0.03 = 3x the demo's, two micro batches a step: chosen "
                            "on a pilot seed so that naive top-1 could collapse"),
           "demo": ("studies/demo-ladder-seeds0-2.json",
                    "the demo's 4 experts and lr 0.01, one micro batch a step")}


@dataclass(frozen=True)
class Step:
    earlier: str
    later: str
    difference: float
    ci: tuple[float, float] | None
    p: float | None
    p_holm: float | None
    n: int
    active_ratio: float
    """The later rung's active parameters over the earlier's."""
    verdict: Verdict


@dataclass(frozen=True)
class Ladder:
    preset: str
    file: str
    settings: str
    seeds: list[int]
    family: str
    steps: list[Step]


def _number(value: float | None) -> float | None:
    return None if value is None or math.isnan(value) else float(value)


def _ladder(preset: str, file: str, settings: str, results: ResultsRoot) -> Ladder:
    stored = results.json(file)
    arms = stored["arms"]
    losses = {rung: arm_losses(arms, rung) for rung in arms}
    steps = rung_steps(losses)
    tested = sum(_number(s.p_value) is not None for s in steps)
    family = f"Holm over the ladder's {tested} testable steps"
    enlarged: dict[str, float] = {}
    if file == STUDY_LOSSES:  # the post hoc balancing tests joined this family
        joined = ablation_family(results)
        family, enlarged = joined.label, joined.adjusted()
    rows = []
    for s in steps:
        low, high = _number(s.ci_low), _number(s.ci_high)
        ci = None if low is None or high is None else (low, high)
        p_holm = _number(enlarged.get(f"{s.earlier} → {s.later}", s.p_adjusted))
        rows.append(Step(s.earlier, s.later, s.difference, ci, _number(s.p_value), p_holm,
                         s.n_pairs, arms[s.later]["active_params"] / arms[s.earlier]["active_params"],
                         difference_verdict(Difference(s.difference, ci, p_holm, family),
                                            ahead="later rung ahead",
                                            behind="earlier rung ahead")))
    return Ladder(preset, file, settings, [int(s) for s in stored["seeds"]], family, rows)


def compute(results: ResultsRoot, findings: Findings) -> list[Ladder]:
    return [_ladder(preset, file, settings, results)
            for preset, (file, settings) in LADDERS.items()]


def _p(value: float | None) -> str:
    return "–" if value is None else f"{value:.2g}"


def render(ladders: list[Ladder] | None, results: ResultsRoot, findings: Findings) -> str:
    if not ladders:
        return ""
    parts = ["## What each rung buys in loss\n\n"
             "Earlier − later rung's best validation loss (nats/token), paired by seed "
             "(positive: the later rung is lower); p adjusted by Holm over each ladder's "
             "testable steps (cpu-ablation's with the two post hoc balancing tests below); "
             "the verdict by rule (docs/verdicts.md). 'active x' is the later "
             "rung's active parameters over the earlier's: the expert width is fixed, so top-2 "
             "also computes with more parameters, and it renormalises its two weights where "
             "top-1 weights by the router probability. A step whose two rungs train identically "
             "(the global-batch rung with one micro batch a step) has no spread and no test.\n"]
    for ladder in ladders:
        rows = [[f"`{s.earlier}` → `{s.later}`", str(s.n), f"{s.difference:+.3f}",
                 "–" if s.ci is None else f"[{s.ci[0]:+.3f}, {s.ci[1]:+.3f}]", _p(s.p),
                 _p(s.p_holm), f"{s.active_ratio:.2f}", f"**{s.verdict.word}**"]
                for s in ladder.steps]
        parts.append(f"\n`{ladder.preset}` ({ladder.settings}), seeds {ladder.seeds[0]}-"
                     f"{ladder.seeds[-1]} (`{ladder.file}`):\n\n"
                     + markdown_table(["step", "n", "earlier − later", "95 % CI", "p",
                                       "p (Holm)", "active x", "verdict"], rows, "lrrrrrrl"))
    return "".join(parts)


ANALYSIS: Analysis[ResultsRoot, list[Ladder]] = Analysis("ladder_steps", compute, render)
