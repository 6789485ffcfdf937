"""The dense-vs-MoE comparison of one fairness criterion: a ``Gap``.

The gap is ``dense - moe`` in best validation loss, so a positive gap means the MoE is better.
Both tests of ``moelab.stats.t_tests`` sit side by side (paired t on the per-seed differences,
Welch's t on the arms as independent samples); the verdict uses the paired test when both arms
have exactly the same seeds, Welch's otherwise (a missing or failed run), and names the test it
used. A report that makes several tests (budgets x criteria, adjacent rungs, tasks) treats them
as one family: ``adjust_family`` gives each its Holm-adjusted p, and the verdict uses that one.
Power is that of ``moelab.stats.power``: the minimum detectable gap (power 0.8 at the observed
spread and n) and the seeds a gap would need.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from collections.abc import Mapping, Sequence

from moelab.stats.intervals import ALPHA
from moelab.stats.multiple import family_label, holm
from moelab.stats.power import min_detectable_gap, seeds_needed
from moelab.stats.t_tests import (
    NOT_WRITTEN, PairedTest, WelchTest, paired_difference, welch_test,
)

REFERENCE_GAP = 0.02
"""nats/token: a gap worth resolving in the paper's setting, for the 'seeds needed' figure."""
TEST_NAMES = {"paired": "paired t", "welch": "Welch t"}


def paired_test(moe_by_seed: Mapping[int, float], dense_by_seed: Mapping[int, float],
                alpha: float = ALPHA) -> PairedTest:
    """dense - moe (of a loss: positive means the MoE is better)."""
    return paired_difference(dense_by_seed, moe_by_seed, alpha)


@dataclass
class Gap:
    """dense - moe best val loss for one criterion (positive: MoE better), both tests, power.

    ``gap``, ``ci_low``, ``ci_high`` and ``p_value`` are those of ``test``, the one the verdict
    used. A statistic that cannot be computed is NaN here, and None in a study's results
    (``moelab.study.results.json_safe``), as in results.json.
    """

    criterion: str
    """The matching criterion: active or total (or compute, for moe_compute)."""
    moe_arm: str
    """The MoE arm compared."""
    dense_arm: str
    """The dense arm matched to it on the criterion."""
    test: str
    """The test the verdict used: paired (seeds match) or welch."""
    gap: float
    """mean(dense) - mean(MoE) best val loss: positive means the MoE is better."""
    ci_low: float
    """Lower end of the gap's 95 % confidence interval."""
    ci_high: float
    """Upper end of the gap's 95 % confidence interval."""
    p_value: float
    """The raw p of ``test``."""
    p_adjusted: float
    """``p_value`` adjusted over the report's family of tests (``adjust_family``); the verdict
    uses it. Alone (``compare``), a family of one: the raw p."""
    adjustment: str
    """How ``p_adjusted`` was adjusted, e.g. 'Holm, 8 tests'."""
    n_moe: int
    """MoE runs counted."""
    n_dense: int
    """Dense runs counted."""
    outcome: str
    """'MoE better', 'dense better', 'not significant' or 'not testable', at ``p_adjusted``."""
    verdict: str
    """outcome with its test in words, e.g. 'MoE better (paired t, n=6)' (docs/verdicts.md)."""
    min_detectable_gap: float
    """The smallest gap the test would detect with power 0.8 at its spread."""
    seeds_needed: list[dict]
    """[{"gap", "seeds"}] for the observed gap and REFERENCE_GAP, at the test's spread."""
    paired: PairedTest
    """The paired t-test on the per-seed differences."""
    welch: WelchTest
    """Welch's t-test on the arms as independent samples."""
    detail: str = field(default="", repr=False, metadata=NOT_WRITTEN)
    """The verdict's parenthesis, e.g. 'paired t, n=6' (bookkeeping: the verdict holds it)."""


def compare(criterion: str, moe_arm: str, dense_arm: str, moe_by_seed: Mapping[int, float],
            dense_by_seed: Mapping[int, float], alpha: float = ALPHA) -> Gap:
    """Both tests on {seed: best val loss} of the two arms; paired when the seeds match."""
    paired = paired_test(moe_by_seed, dense_by_seed, alpha)
    welch = welch_test(list(moe_by_seed.values()), list(dense_by_seed.values()), alpha)
    use_paired = bool(moe_by_seed) and set(moe_by_seed) == set(dense_by_seed)
    chosen: PairedTest | WelchTest
    if use_paired:
        test, chosen, n_label = "paired", paired, f"n={paired.n_pairs}"
        mde = min_detectable_gap(paired.standard_error, paired.n_pairs - 1, alpha=alpha)
        spread = paired.std_diff
        untestable = ("needs 2+ paired seeds" if paired.n_pairs < 2
                      else "the per-seed differences do not vary")
    else:
        test, chosen = "welch", welch
        n_label = (f"n={welch.n_moe}" if welch.n_moe == welch.n_dense
                   else f"n={welch.n_moe}/{welch.n_dense}")
        mde = min_detectable_gap(welch.standard_error, welch.df, alpha=alpha)
        # Unpaired, a dense - moe difference of two independent runs has this spread.
        spread = math.sqrt(welch.std_moe**2 + welch.std_dense**2)
        untestable = ("needs 2+ seeds per arm" if min(welch.n_moe, welch.n_dense) < 2
                      else "no seed variance")
    outcome = decide(chosen.gap, chosen.p_value, alpha)
    detail = f"{TEST_NAMES[test]}, {n_label}"
    if outcome == "not testable":  # no usable spread: no power either
        detail, mde, spread = f"{detail}: {untestable}", math.nan, math.nan
    needed = [{"gap": gap, "seeds": seeds_needed(gap, spread, alpha=alpha)}
              for gap in (abs(chosen.gap), REFERENCE_GAP)]
    return Gap(
        criterion, moe_arm, dense_arm, test, chosen.gap, chosen.ci_low, chosen.ci_high,
        chosen.p_value, chosen.p_value, family_label(0 if math.isnan(chosen.p_value) else 1),
        welch.n_moe, welch.n_dense, outcome, f"{outcome} ({detail})", mde, needed, paired,
        welch, detail,
    )


def decide(gap: float, p_value: float, alpha: float = ALPHA) -> str:
    """'MoE better' / 'dense better' only when the test rejects equality at ``alpha``."""
    if math.isnan(p_value):
        return "not testable"
    if p_value < alpha:
        return "MoE better" if gap > 0 else "dense better"
    return "not significant"


def adjust_family(gaps: Sequence[Gap], alpha: float = ALPHA) -> list[Gap]:
    """The gaps as one family of tests: each with its Holm-adjusted p and the verdict at it."""
    adjusted = holm([g.p_value for g in gaps])
    label = family_label(sum(not math.isnan(p) for p in adjusted))
    result = []
    for g, p_adjusted in zip(gaps, adjusted):
        outcome = decide(g.gap, p_adjusted, alpha)
        result.append(replace(g, p_adjusted=p_adjusted, adjustment=label, outcome=outcome,
                              verdict=f"{outcome} ({g.detail})"))
    return result
