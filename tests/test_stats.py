"""Seed statistics, the paired and Welch comparisons and their power, against scipy and hand
computation; budgets; tables."""

from __future__ import annotations

import math
import statistics

import pytest
from scipy import stats as scipy_stats

from moelab.codec import to_json
from moelab.errors import MoelabError
from moelab.report import format_mean_std, markdown_table
from moelab.runs.tokens import format_token_count, parse_budget_list, parse_token_count
import numpy as np

from moelab.stats.intervals import summarize
from moelab.stats.multiple import holm
from moelab.stats.power import min_detectable_gap, seeds_needed
from moelab.stats.t_tests import welch_test
from moelab.study.gaps import adjust_family, compare, decide, paired_test

# The paper's three-seed numbers are summaries only; these are fixed made-up seeds around them.
MOE = [1.5770, 1.5788, 1.5806]
DENSE_ACTIVE = [1.6533, 1.6545, 1.6557]
DENSE_TOTAL = [1.5583, 1.5608, 1.5633]


def test_summarize_matches_the_statistics_module():
    summary = summarize(MOE)
    assert summary.n == 3
    assert summary.mean == pytest.approx(statistics.mean(MOE), abs=1e-15)
    assert summary.std == pytest.approx(statistics.stdev(MOE), rel=1e-12)  # ddof = 1


def test_single_seed_has_no_std_and_no_test():
    assert math.isnan(summarize([1.0]).std)
    gap = compare("active", "moe", "dense_active", {0: 1.0}, {0: 1.2, 1: 1.3})
    assert gap.test == "welch" and math.isnan(gap.p_value) and math.isnan(gap.ci_low)
    assert gap.verdict == "not testable (Welch t, n=1/2: needs 2+ seeds per arm)"
    assert math.isnan(gap.min_detectable_gap)


@pytest.mark.parametrize("dense", [DENSE_ACTIVE, DENSE_TOTAL, [1.5790, 1.5701, 1.5850]])
def test_welch_gap_matches_scipy(dense):
    gap = welch_test(MOE, dense)
    reference = scipy_stats.ttest_ind(dense, MOE, equal_var=False)
    interval = reference.confidence_interval(0.95)
    assert gap.gap == pytest.approx(statistics.mean(dense) - statistics.mean(MOE), abs=1e-12)
    assert gap.p_value == pytest.approx(reference.pvalue, rel=1e-9)
    assert gap.df == pytest.approx(reference.df, rel=1e-9)
    assert (gap.ci_low, gap.ci_high) == pytest.approx((interval.low, interval.high), rel=1e-9)
    assert (gap.p_value < 0.05) == (gap.ci_low > 0 or gap.ci_high < 0)


def test_welch_interval_by_hand():
    # moe: mean 2, var 1 (n=3); dense: mean 6, var 20/3 (n=4).
    # se^2 = 1/3 + (20/3)/4 = 2;  df = 2^2 / ((1/3)^2/2 + (5/3)^2/3) = 216/53.
    gap = welch_test([1.0, 2.0, 3.0], [3.0, 5.0, 7.0, 9.0])
    assert gap.gap == 4.0
    assert gap.df == pytest.approx(216 / 53, rel=1e-12)
    half_width = scipy_stats.t.ppf(0.975, 216 / 53) * math.sqrt(2.0)
    # A printed t table: t_{0.975,4} = 2.776 and t_{0.975,5} = 2.571 bracket df = 4.075.
    assert 2.571 * math.sqrt(2.0) < half_width < 2.776 * math.sqrt(2.0)
    assert (gap.ci_low, gap.ci_high) == pytest.approx((4 - half_width, 4 + half_width), rel=1e-12)
    # Two-sided p of t = gap / se = 4 / sqrt(2) with df = 216/53, from the t distribution itself.
    t = 4.0 / math.sqrt(2.0)
    assert gap.p_value == pytest.approx(2 * scipy_stats.t.sf(t, 216 / 53), rel=1e-12)
    # The printed table again, with 4 < df < 5: t_{0.975,df} < t_{0.975,4} = 2.776 < t = 2.828
    # < t_{0.99,5} = 3.365 < t_{0.99,df}, so 0.02 < p < 0.05.
    assert 0.02 < gap.p_value < 0.05
    assert decide(gap.gap, gap.p_value) == "MoE better"  # the interval [0.10, 7.90] excludes 0


def test_verdicts_follow_the_test():
    assert decide(0.01, 0.2) == "not significant"
    assert decide(0.01, math.nan) == "not testable"
    assert decide(-0.01, 0.01) == "dense better"
    # Unpaired (the dense seeds are other numbers): Welch's verdicts.
    moe, active, total = (dict(zip(seeds, values)) for seeds, values in (
        ((0, 1, 2), MOE), ((3, 4, 5), DENSE_ACTIVE), ((3, 4, 5), DENSE_TOTAL)))
    assert compare("active", "moe", "d", moe, active).verdict == "MoE better (Welch t, n=3)"
    assert compare("total", "moe", "d", moe, total).verdict == "dense better (Welch t, n=3)"


def test_zero_variance_arms_claim_nothing():
    gap = compare("active", "moe", "dense", {0: 1.0, 1: 1.0}, {2: 2.0, 3: 2.0})
    assert gap.gap == 1.0 and gap.verdict == "not testable (Welch t, n=2: no seed variance)"


# --------------------------------------------------------------------------------------------
# Paired test, power, the choice of test
# --------------------------------------------------------------------------------------------

# Five seeds of each arm (made-up numbers): the seeds differ much more than the arms, and
# dense - moe = 0.03, 0.01, 0.04, 0.02, 0.05.
PAIRED_MOE = {10: 1.60, 11: 1.65, 12: 1.58, 13: 1.70, 14: 1.62}
PAIRED_DENSE = {10: 1.63, 11: 1.66, 12: 1.62, 13: 1.72, 14: 1.67}


def test_paired_test_matches_ttest_rel_and_a_hand_computation():
    paired = paired_test(PAIRED_MOE, PAIRED_DENSE)
    seeds = sorted(PAIRED_MOE)
    dense, moe = [PAIRED_DENSE[s] for s in seeds], [PAIRED_MOE[s] for s in seeds]
    reference = scipy_stats.ttest_rel(dense, moe)
    assert paired.p_value == pytest.approx(reference.pvalue, rel=1e-9)
    interval = reference.confidence_interval(0.95)
    assert (paired.ci_low, paired.ci_high) == pytest.approx((interval.low, interval.high), rel=1e-9)
    # By hand: d = 0.03, 0.01, 0.04, 0.02, 0.05 has mean 0.03 and sample variance
    # (0 + 4 + 1 + 1 + 4) e-4 / 4 = 2.5e-4, so sd = 0.0158 and se = sd / sqrt(5) = 0.00707.
    std = math.sqrt(2.5e-4)
    standard_error = std / math.sqrt(5)
    assert (paired.gap, paired.std_diff, paired.n_pairs) == (
        pytest.approx(0.03, abs=1e-12), pytest.approx(std, rel=1e-9), 5)
    t = 0.03 / standard_error  # 4.243
    assert paired.p_value == pytest.approx(2 * scipy_stats.t.sf(t, 4), rel=1e-9)
    # A printed t table: t_{0.975,4} = 2.776; t_{0.995,4} = 4.604 > t > t_{0.99,4} = 3.747,
    # so 0.01 < p < 0.02.
    assert 0.01 < paired.p_value < 0.02
    half_width = 2.776 * standard_error
    assert (paired.ci_low, paired.ci_high) == pytest.approx(
        (0.03 - half_width, 0.03 + half_width), abs=1e-5)
    assert [d["seed"] for d in paired.differences] == seeds
    assert [d["diff"] for d in paired.differences] == pytest.approx([0.03, 0.01, 0.04, 0.02, 0.05])


def test_paired_is_used_when_the_seeds_match_and_welch_when_not():
    paired = compare("active", "moe", "dense_active", PAIRED_MOE, PAIRED_DENSE)
    assert paired.test == "paired" and paired.verdict == "MoE better (paired t, n=5)"
    # Unpaired the seed noise is not cancelled: Welch does not see the same gap.
    assert paired.welch.p_value > 0.05
    assert (paired.gap, paired.p_value) == (paired.paired.gap, paired.paired.p_value)
    missing_one = {s: v for s, v in PAIRED_DENSE.items() if s != 12}
    unpaired = compare("active", "moe", "dense_active", PAIRED_MOE, missing_one)
    assert unpaired.test == "welch" and unpaired.verdict == "not significant (Welch t, n=5/4)"
    assert unpaired.p_value == unpaired.welch.p_value
    assert unpaired.paired.n_pairs == 4  # still shown, on the seeds both arms have


@pytest.mark.parametrize("moe, dense, why", [
    ({0: 1.0}, {0: 1.1}, "needs 2+ paired seeds"),
    # Every seed differs by the same 0.1 (up to floating-point residue): no spread to test.
    ({0: 1.0, 1: 1.1, 2: 1.3}, {0: 1.1, 1: 1.2, 2: 1.4}, "the per-seed differences do not vary"),
])
def test_untestable_pairs_give_nan_and_say_why(moe, dense, why):
    gap = compare("active", "moe", "dense_active", moe, dense)
    assert gap.test == "paired" and gap.verdict == f"not testable (paired t, n={len(moe)}: {why})"
    assert math.isnan(gap.ci_low) and math.isnan(gap.p_value) and math.isnan(gap.min_detectable_gap)
    assert [needed["seeds"] for needed in gap.seeds_needed] == [None, None]


def _power(gap, std, n, df):
    """Two-sided t-test power at alpha 0.05 from scipy's noncentral t, written out here."""
    critical = scipy_stats.t.ppf(0.975, df)
    noncentrality = gap / (std / math.sqrt(n))
    # P(T > t_crit) + P(T < -t_crit), the second as 1 - P(T > -t_crit): nct.cdf itself
    # returns NaN far out in the lower tail.
    upper = scipy_stats.nct.sf(critical, df, noncentrality)
    return upper + 1 - scipy_stats.nct.sf(-critical, df, noncentrality)


@pytest.mark.parametrize("std, n", [(0.01, 3), (0.004, 5), (0.02, 10)])
def test_min_detectable_gap_has_power_08(std, n):
    mde = min_detectable_gap(std / math.sqrt(n), n - 1)
    assert _power(mde, std, n, n - 1) == pytest.approx(0.8, abs=1e-6)
    assert _power(0.9 * mde, std, n, n - 1) < 0.8
    # The normal approximation (z_0.975 + z_0.8) se = 2.80 se is a lower bound for small n.
    assert mde > 2.80 * std / math.sqrt(n)


@pytest.mark.parametrize("gap, std", [(0.02, 0.01), (0.05, 0.01), (0.01, 0.02), (0.3, 0.01)])
def test_seeds_needed_is_the_first_n_with_power_08(gap, std):
    first = next(n for n in range(2, 500) if _power(gap, std, n, n - 1) >= 0.8)
    assert seeds_needed(gap, std) == first
    assert seeds_needed(-gap, std) == first


def test_seeds_needed_without_a_spread_or_a_gap_is_none():
    assert seeds_needed(0.0, 0.01) is None
    assert seeds_needed(0.02, 0.0) is None
    assert seeds_needed(0.02, math.nan) is None
    assert seeds_needed(1e-6, 1.0) is None  # beyond MAX_SEEDS


def test_comparison_reports_power_at_the_observed_spread():
    gap = compare("active", "moe", "dense_active", PAIRED_MOE, PAIRED_DENSE)
    std = math.sqrt(2.5e-4)
    assert gap.min_detectable_gap == pytest.approx(min_detectable_gap(std / math.sqrt(5), 4), rel=1e-9)
    assert gap.seeds_needed == [{"gap": pytest.approx(0.03), "seeds": seeds_needed(0.03, std)},
                                {"gap": 0.02, "seeds": seeds_needed(0.02, std)}]
    record = to_json(gap)  # bookkeeping fields (welch's standard error, stds; detail) left out
    assert "detail" not in record
    assert set(record["paired"]) == {"gap", "ci_low", "ci_high", "p_value", "n_pairs", "std_diff",
                                     "differences"}
    assert set(record["welch"]) == {"gap", "ci_low", "ci_high", "p_value", "df", "n_moe", "n_dense"}


@pytest.mark.parametrize("text, tokens", [
    ("40.5M", 40_500_000), ("426.3M", 426_300_000), ("0.1M", 100_000), ("1B", 10**9),
    ("500k", 500_000), ("1e6", 1_000_000), ("123456", 123_456), (" 2K ", 2_000),
])
def test_parse_token_count(text, tokens):
    assert parse_token_count(text) == tokens


@pytest.mark.parametrize("bad", ["", "M", "abc", "-1M", "0", "1.5", "1.0000001K", "nanM", "infB"])
def test_bad_token_counts_name_the_value(bad):
    with pytest.raises(MoelabError, match="token budget .* is invalid"):
        parse_token_count(bad)


def test_budget_lists_and_labels():
    assert parse_budget_list("426.3M,40.5M,40.5M") == [40_500_000, 426_300_000]
    assert [format_token_count(t) for t in (40_500_000, 426_300_000, 10**9, 1234, 1_234_567)] == [
        "40.5M", "426.3M", "1B", "1.234K", "1.234567M"
    ]


def test_markdown_table_and_formats():
    table = markdown_table(["arm", "loss"], [["moe", "1.5"], ["a|b", "2"]], "lr")
    assert table.splitlines() == ["| arm | loss |", "|---|---:|", "| moe | 1.5 |", "| a\\|b | 2 |"]
    assert format_mean_std(1.57881, 0.00204) == "1.5788 ± 0.0020"
    assert format_mean_std(1.5, math.nan) == "1.5000"


# --------------------------------------------------------------------------------------------
# Holm's adjustment, by hand
# --------------------------------------------------------------------------------------------


def test_holm_by_hand_with_the_running_maximum():
    # m = 4. Sorted: 0.005, 0.01, 0.03, 0.04 -> 4 x 0.005 = 0.02, 3 x 0.01 = 0.03,
    # 2 x 0.03 = 0.06, 1 x 0.04 = 0.04 raised to the 0.06 before it (the running maximum keeps
    # the adjusted p-values in the raw ones' order). Returned in the order given.
    assert holm([0.01, 0.04, 0.03, 0.005]) == pytest.approx([0.03, 0.06, 0.06, 0.02], abs=1e-15)


def test_holm_by_hand_with_ties_a_cap_and_an_untestable_test():
    # NaN and None are no tests: m = 4. Sorted: 0.02, 0.02, 0.3, 0.5 -> 4 x 0.02 = 0.08,
    # 3 x 0.02 = 0.06 raised to 0.08 (tied raw p-values, one adjusted p), 2 x 0.3 = 0.6, and
    # 1 x 0.5 raised to 0.6. Capped at 1: 2 x 0.6 = 1.2 becomes 1, and 0.7 is raised to it.
    adjusted = holm([0.5, 0.02, None, 0.3, 0.02, math.nan])
    assert adjusted[:2] + adjusted[3:5] == pytest.approx([0.6, 0.08, 0.6, 0.08], abs=1e-15)
    assert math.isnan(adjusted[2]) and math.isnan(adjusted[5])
    assert holm([0.7, 0.6]) == [1.0, 1.0]
    assert holm([]) == [] and holm([0.03]) == [0.03]


def test_holm_rejects_what_its_step_down_procedure_rejects():
    # The procedure itself: walk the sorted p-values, reject p_(i) while p_(i) < alpha / (m - i),
    # stop at the first that is not. The adjusted p < alpha exactly for the rejected ones.
    rng = np.random.default_rng(0)
    for _ in range(200):
        p_values = list(rng.uniform(0, 0.1, size=rng.integers(1, 9)))
        order = sorted(range(len(p_values)), key=p_values.__getitem__)
        rejected = set()
        for rank, index in enumerate(order):
            if p_values[index] >= 0.05 / (len(p_values) - rank):
                break
            rejected.add(index)
        adjusted = holm(p_values)
        assert {i for i, p in enumerate(adjusted) if p < 0.05} == rejected


def test_a_family_judges_each_gap_at_its_adjusted_p():
    # Three paired gaps of 3 seeds, differences 0.10/0.11/0.12 (raw p 0.0028), 0.02/0.035/0.045
    # (0.044) and 0.01/-0.02/0.02 (0.58). Alone the first two are significant; as one family of
    # 3, Holm gives 3 x 0.0028 = 0.0083 and 2 x 0.044 = 0.088: only the first stays.
    moe = {0: 1.00, 1: 1.01, 2: 0.99}
    differences = {"a": (0.10, 0.11, 0.12), "b": (0.02, 0.035, 0.045), "c": (0.01, -0.02, 0.02)}
    gaps = [compare(name, "moe", "dense", moe, {s: moe[s] + d for s, d in enumerate(diffs)})
            for name, diffs in differences.items()]
    raw = [g.p_value for g in gaps]
    for g, diffs in zip(gaps, differences.values()):
        reference = scipy_stats.ttest_1samp(diffs, 0.0).pvalue
        assert g.p_value == pytest.approx(reference, rel=1e-6)  # the losses round a little
        assert g.p_adjusted == g.p_value and g.adjustment == "Holm, 1 test"
    assert [g.outcome for g in gaps] == ["MoE better", "MoE better", "not significant"]
    family = adjust_family(gaps)
    assert [g.p_adjusted for g in family] == pytest.approx(
        [3 * raw[0], 2 * raw[1], max(2 * raw[1], raw[2])], rel=1e-12)
    assert {g.adjustment for g in family} == {"Holm, 3 tests"}
    assert [g.p_value for g in family] == raw  # the raw p is kept beside the adjusted one
    assert [g.outcome for g in family] == ["MoE better", "not significant", "not significant"]
    assert [g.verdict for g in family] == [f"{o} (paired t, n=3)" for o in (
        "MoE better", "not significant", "not significant")]
