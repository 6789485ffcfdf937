"""The routing ladder's steps: each rung against the one it changes, paired by seed.

A step is a rung and the rung it adds one change to (``LADDER_STEPS``): the difference is
``earlier[s] - later[s]`` in best validation loss over the seeds both have (positive: the later
rung is better), with the paired t-test the study's gaps use (``moelab.stats.t_tests``). The
steps of a ladder are one family of tests: each verdict uses its Holm-adjusted p.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Optional

import numpy as np

from moelab.stats.multiple import family_label, holm
from moelab.stats.t_tests import paired_difference
from moelab.study.gaps import decide

LADDER_STEPS = (
    ("naive_top1", "top1_lb"),  # + Switch load balancing
    ("top1_lb", "top2_lb"),  # top-2
    ("top2_lb", "top2_lb_z"),  # + router z-loss
    ("top2_lb_z", "top2_global_lb_z"),  # balancing counted over the whole step
    ("top2_lb_z", "top2_bias_z"),  # aux-loss-free bias instead of the balancing loss
)
"""(earlier, later): the later rung is the earlier one with one change."""


@dataclass
class RungStep:
    """earlier - later best val loss, paired by seed (positive: the later rung is better)."""

    earlier: str
    """The earlier rung of the routing ladder."""
    later: str
    """The rung after it."""
    difference: float
    """Mean over paired seeds of earlier - later best val loss."""
    ci_low: Optional[float]
    """Lower end of its 95 % paired t interval."""
    ci_high: Optional[float]
    """Upper end of its 95 % paired t interval."""
    p_value: Optional[float]
    """The raw p of the paired t-test."""
    p_adjusted: Optional[float]
    """Holm over the ladder's steps; the verdict uses it."""
    adjustment: str
    """How p_adjusted was adjusted, e.g. 'Holm, 4 tests'."""
    n_pairs: int
    """Seeds both rungs have."""
    std_diff: Optional[float]
    """Sample standard deviation of the per-seed differences."""
    outcome: str
    """'<later> better', '<earlier> better', 'not significant' or 'not testable'."""
    verdict: str
    """outcome with its test in words (docs/verdicts.md)."""


def rung_steps(losses_by_rung: Mapping[str, Mapping[int, float]]) -> list[RungStep]:
    """Every step of ``LADDER_STEPS`` whose two rungs have runs, as one Holm family."""
    steps = []
    for earlier, later in LADDER_STEPS:
        if earlier in losses_by_rung and later in losses_by_rung:
            paired = paired_difference(losses_by_rung[earlier], losses_by_rung[later])
            steps.append(RungStep(earlier, later, paired.gap, paired.ci_low, paired.ci_high,
                                  paired.p_value, paired.p_value, "", paired.n_pairs,
                                  paired.std_diff, "", ""))
    return adjust_steps(steps)


def adjust_steps(steps: list[RungStep]) -> list[RungStep]:
    """The steps as one family of tests: each with its Holm-adjusted p and the verdict at it."""
    adjusted = holm([step.p_value for step in steps])
    label = family_label(sum(not np.isnan(p) for p in adjusted))
    result = []
    for step, p_adjusted in zip(steps, adjusted):
        outcome = _outcome(step, p_adjusted)
        result.append(replace(step, p_adjusted=p_adjusted, adjustment=label, outcome=outcome,
                              verdict=f"{outcome} (paired t, n={step.n_pairs})"))
    return result


def _outcome(step: RungStep, p_adjusted: float) -> str:
    # decide() names the side a positive difference favours 'MoE better': here the later rung.
    outcome = decide(step.difference, p_adjusted)
    sides = {"MoE better": f"{step.later} better", "dense better": f"{step.earlier} better"}
    return sides.get(outcome, outcome)
