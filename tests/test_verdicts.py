"""Verdict words by rule (moelab.stats.verdicts) on constructed cases, the p-values from scipy
and Holm's adjustment written out by hand."""

import math

import numpy as np
import pytest
from scipy import stats

from moelab.stats.verdicts import (
    Difference, Family, difference_verdict, optimum_verdict, share_of_replicates, trend_verdict,
)


def paired(differences, family="a family of 1 test", p_factor=1.0):
    """A Difference from per-seed differences: scipy's one-sample t, its 95 % interval, and p
    multiplied by ``p_factor`` (a hand Holm)."""
    d = np.asarray(differences, dtype=float)
    result = stats.ttest_1samp(d, 0.0)
    half = stats.t.ppf(0.975, len(d) - 1) * d.std(ddof=1) / math.sqrt(len(d))
    return Difference(d.mean(), (d.mean() - half, d.mean() + half),
                      min(1.0, result.pvalue * p_factor), family)


def test_clear_gap_is_ahead_or_behind():
    assert difference_verdict(paired([0.10, 0.11, 0.09, 0.12])).word == "ahead"
    assert difference_verdict(paired([-0.10, -0.11, -0.09, -0.12])).word == "behind"
    assert difference_verdict(paired([0.1, 0.11, 0.09]), ahead="MoE ahead").word == "MoE ahead"


def test_holm_can_take_ahead_away():
    """Raw p about 0.02: ahead alone, not separated once Holm multiplies it by 4 (a family of 4
    whose other tests are larger)."""
    d = [0.02, 0.05, 0.01, 0.04, 0.03, -0.005]
    raw = stats.ttest_1samp(d, 0.0).pvalue
    assert 0.01 < raw < 0.05
    assert difference_verdict(paired(d)).word == "ahead"
    verdict = difference_verdict(paired(d, "Holm over 4 tests", p_factor=4))
    assert verdict.word == "not separated" and "Holm over 4 tests" in verdict.rule


def test_family_adjusts_by_hand_holm():
    family = Family("the recipe factorial", {"a": 0.01, "b": 0.04, "c": 0.03, "d": None})
    adjusted = family.adjusted()
    # sorted 0.01, 0.03, 0.04 over m = 3: 0.03, max(0.03, 0.06), max(0.06, 0.04) = 0.06
    assert adjusted["a"] == pytest.approx(0.03)
    assert adjusted["c"] == pytest.approx(0.06)
    assert adjusted["b"] == pytest.approx(0.06)
    assert math.isnan(adjusted["d"])
    assert family.label == "Holm over the 3 tests of the recipe factorial"


def test_equivalence_needs_the_whole_interval_inside_the_margin():
    tight = paired([0.001, -0.001, 0.0005, -0.0004, 0.0002, 0.0])
    assert difference_verdict(tight, margin=0.01).word == "equivalent"
    assert difference_verdict(tight).word == "not separated"  # no margin: no equivalence claim
    wide = paired([0.02, -0.03, 0.01, -0.01])
    assert difference_verdict(wide, margin=0.01).word == "not separated"


def test_no_interval_is_undetermined():
    one_seed = Difference(0.05, None, None, "none")
    assert difference_verdict(one_seed).word == "undetermined"
    no_spread = Difference(0.05, (math.nan, math.nan), math.nan, "none")
    assert difference_verdict(no_spread).word == "undetermined"


def test_optimum_at_either_edge_is_unbounded_only_when_the_neighbour_is_worse():
    grid = [0.0, 0.25, 0.5, 0.75]
    rise = paired([0.1, 0.1, 0.12])
    verdict = optimum_verdict(grid, 3, rise, None)
    assert verdict.word == "at the upper edge" and "≥ 0.75" in verdict.rule
    assert optimum_verdict(grid, 0, None, rise).word == "at the lower edge"
    # the best mean at the edge, but not separated from (or not tested against) its neighbour
    flat = optimum_verdict(grid, 3, paired([0.02, -0.01, 0.03]), None)
    assert flat.word == "best at the edge, not separated" and "not located" in flat.rule
    untested = optimum_verdict(grid, 0, None, None)
    assert untested.word == "best at the edge, not separated" and "not tested" in untested.rule


def test_interior_optimum_is_bounded_only_when_both_sides_rise():
    grid = [0.0, 0.5, 0.75, 0.875]
    rises = paired([0.03, 0.04, 0.035, 0.05])
    flat = paired([0.01, -0.02, 0.015, 0.0])  # the s1 case: flat past the optimum
    assert optimum_verdict(grid, 2, rises, rises).word == "bounded"
    verdict = optimum_verdict(grid, 2, rises, flat)
    assert verdict.word == "interior, not bounded" and "above" in verdict.rule
    assert optimum_verdict(grid, 2, rises, None).word == "interior, not bounded"
    # a loss that falls past the best point (a negative rise) bounds nothing either
    assert optimum_verdict(grid, 1, paired([-0.03, -0.04, -0.05]), rises).word == \
        "interior, not bounded"


def test_optimum_needs_three_points_and_a_valid_index():
    assert optimum_verdict([0.0, 0.5], 1, None, None).word == "undetermined"
    with pytest.raises(ValueError, match="best=4"):
        optimum_verdict([0.0, 0.5, 0.75], 4, None, None)


def test_trend_words():
    x = np.arange(6.0)
    y = 0.5 * x + np.array([0.01, -0.02, 0.0, 0.02, -0.01, 0.0])
    fit = stats.linregress(x, y)
    half = stats.t.ppf(0.975, len(x) - 2) * fit.stderr
    interval = (fit.slope - half, fit.slope + half)
    assert trend_verdict(fit.slope, interval).word == "rises"
    assert trend_verdict(-fit.slope, (-interval[1], -interval[0])).word == "falls"
    assert trend_verdict(fit.slope, interval, p_adjusted=0.2, family="Holm over 9").word == \
        "undetermined"
    assert trend_verdict(0.001, (-0.004, 0.006), margin=0.01).word == "flat"
    assert trend_verdict(0.001, (-0.004, 0.016), margin=0.01).word == "undetermined"
    assert trend_verdict(0.1, None).word == "undetermined"
    # a slope through optima at a grid's edge, or resampling 2 seeds, is read as nothing
    assert trend_verdict(fit.slope, interval, edge_values=2).word == "undetermined"
    assert trend_verdict(fit.slope, interval, seeds=2).word == "undetermined"


def test_shares_need_three_seeds():
    assert share_of_replicates(1.0, 2) is None
    assert share_of_replicates(0.7, 3) == "70% of resamples"
