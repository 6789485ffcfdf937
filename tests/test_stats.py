"""Seed statistics and Welch comparisons against scipy and hand computation; budgets; tables."""

from __future__ import annotations

import math
import statistics

import pytest
from scipy import stats as scipy_stats

from moelab.errors import MoelabError
from moelab.report import format_mean_std, markdown_table
from moelab.study.budgets import format_token_count, parse_budget_list, parse_token_count
from moelab.study.stats import summarize, verdict, welch_gap

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
    gap = welch_gap("active", "moe", "dense_active", [1.0], [1.2, 1.3])
    assert math.isnan(gap.p_value) and math.isnan(gap.ci_low)
    assert gap.verdict == "not testable at n=1/2 (needs 2+ seeds per arm)"


@pytest.mark.parametrize("dense", [DENSE_ACTIVE, DENSE_TOTAL, [1.5790, 1.5701, 1.5850]])
def test_welch_gap_matches_scipy(dense):
    gap = welch_gap("c", "moe", "dense", MOE, dense)
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
    gap = welch_gap("active", "moe", "dense_active", [1.0, 2.0, 3.0], [3.0, 5.0, 7.0, 9.0])
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
    assert gap.verdict == "MoE better"  # the interval [0.10, 7.90] excludes 0


def test_verdicts_follow_the_test():
    assert welch_gap("active", "moe", "d", MOE, DENSE_ACTIVE).verdict == "MoE better"
    assert welch_gap("total", "moe", "d", MOE, DENSE_TOTAL).verdict == "dense better"
    assert verdict(0.01, 0.2, 3, 3) == "not significant at n=3"
    assert verdict(0.01, math.nan, 3, 3) == "not testable at n=3 (no seed variance)"


def test_zero_variance_arms_claim_nothing():
    gap = welch_gap("active", "moe", "dense", [1.0, 1.0], [2.0, 2.0])
    assert gap.gap == 1.0 and gap.verdict.startswith("not testable")


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
