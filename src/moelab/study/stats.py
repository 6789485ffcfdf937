"""Seed statistics and the dense-vs-MoE comparison of one fairness criterion.

The gap is ``dense - moe`` in best validation loss, so a positive gap means the MoE is better.
Two tests sit side by side:

- paired t on the per-seed differences ``dense[s] - moe[s]``: the arms of one seed share the
  data order and the validation windows, so the seed's own luck cancels in the difference;
  p-value from ``scipy.stats.ttest_rel``, interval ``mean ± t(0.975, n-1) sd / sqrt(n)``;
- Welch's t on the two arms as independent samples: Welch-Satterthwaite degrees of freedom
  (the arms may have different seed variances), p-value from ``scipy.stats.ttest_ind``.

The verdict uses the paired test when both arms have exactly the same seeds, Welch's otherwise
(a missing or failed run), and names the test it used. Each interval excludes 0 exactly when its
raw p < 0.05. A report that makes several tests (budgets x criteria, adjacent rungs, tasks)
treats them as one family: ``adjust_family`` gives each its Holm-adjusted p, and the verdict
uses that one. Power is that of a two-sided t-test with a noncentral t statistic: the minimum
detectable gap (power 0.8 at the observed spread and n) and the seeds a gap would need.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Optional

import numpy as np
from scipy import optimize, stats

CONFIDENCE = 0.95
ALPHA = 1 - CONFIDENCE
POWER = 0.8
REFERENCE_GAP = 0.02
"""nats/token: a gap worth resolving in the paper's setting, for the 'seeds needed' figure."""
MAX_SEEDS = 100_000
"""seeds_needed gives up (None) beyond this."""
TEST_NAMES = {"paired": "paired t", "welch": "Welch t"}
ADJUSTMENT = "Holm"
"""The multiple-comparison adjustment of a family of tests (``holm``)."""
# A spread this small relative to the losses is floating-point residue (e.g. arms that differ by
# the same constant in every seed), not seed noise: the test is then not testable, not infinite.
NEGLIGIBLE_SPREAD = 1e-12


@dataclass
class Summary:
    """Mean and sample standard deviation (ddof=1; NaN for a single seed) over seeds."""

    mean: float
    std: float
    n: int

    def to_dict(self) -> dict:
        return asdict(self)


def summarize(values: Sequence[float]) -> Summary:
    values_N = np.asarray(values, dtype=float)
    if values_N.size == 0:
        return Summary(math.nan, math.nan, 0)
    std = float(values_N.std(ddof=1)) if values_N.size > 1 else math.nan
    return Summary(float(values_N.mean()), std, int(values_N.size))


def _no_spread(std: float, values: Sequence[float]) -> bool:
    scale = float(np.mean(np.abs(values))) if len(values) else 0.0
    return not std > NEGLIGIBLE_SPREAD * max(scale, 1.0)


# --------------------------------------------------------------------------------------------
# The two tests
# --------------------------------------------------------------------------------------------


@dataclass
class PairedTest:
    """Paired t on the per-seed differences of the seeds both arms have (dense - moe for the
    loss, ``paired_test``; moe - dense for a zero-shot accuracy)."""

    gap: float
    ci_low: float
    ci_high: float
    p_value: float
    n_pairs: int
    std_diff: float
    differences: list[dict] = field(default_factory=list)
    """[{"seed", "diff"}] per paired seed."""

    @property
    def standard_error(self) -> float:
        return self.std_diff / math.sqrt(self.n_pairs) if self.n_pairs else math.nan


def paired_test(moe_by_seed: Mapping[int, float], dense_by_seed: Mapping[int, float],
                alpha: float = ALPHA) -> PairedTest:
    """dense - moe (of a loss: positive means the MoE is better)."""
    return paired_difference(dense_by_seed, moe_by_seed, alpha)


def paired_difference(first_by_seed: Mapping[int, float], second_by_seed: Mapping[int, float],
                      alpha: float = ALPHA) -> PairedTest:
    """Paired t on ``first[s] - second[s]`` over the seeds both have."""
    seeds = sorted(first_by_seed.keys() & second_by_seed.keys())
    first = [first_by_seed[s] for s in seeds]
    second = [second_by_seed[s] for s in seeds]
    diffs = summarize(np.subtract(first, second))
    differences = [{"seed": s, "diff": a - b} for s, a, b in zip(seeds, first, second)]
    result = PairedTest(diffs.mean, math.nan, math.nan, math.nan, diffs.n, diffs.std, differences)
    if diffs.n >= 2 and not _no_spread(diffs.std, first + second):
        half_width = stats.t.ppf(1 - alpha / 2, diffs.n - 1) * result.standard_error
        result.ci_low, result.ci_high = diffs.mean - half_width, diffs.mean + half_width
        result.p_value = float(stats.ttest_rel(first, second).pvalue)
    return result


def mean_interval(values: Sequence[float], alpha: float = ALPHA) -> tuple[float, float]:
    """The t interval of the mean over seeds, mean ± t(1 - alpha/2, n-1) sd / sqrt(n); NaN for
    fewer than 2 values."""
    summary = summarize(values)
    if summary.n < 2:
        return math.nan, math.nan
    half_width = stats.t.ppf(1 - alpha / 2, summary.n - 1) * summary.std / math.sqrt(summary.n)
    return summary.mean - half_width, summary.mean + half_width


@dataclass
class WelchTest:
    """Welch's t on the two arms as independent samples."""

    gap: float
    ci_low: float
    ci_high: float
    p_value: float
    df: float
    n_moe: int
    n_dense: int
    standard_error: float = math.nan
    std_moe: float = math.nan
    std_dense: float = math.nan


def welch_test(moe_values: Sequence[float], dense_values: Sequence[float],
               alpha: float = ALPHA) -> WelchTest:
    moe, dense = summarize(moe_values), summarize(dense_values)
    result = WelchTest(dense.mean - moe.mean, math.nan, math.nan, math.nan, math.nan, moe.n,
                       dense.n, std_moe=moe.std, std_dense=dense.std)
    if moe.n < 2 or dense.n < 2:
        return result
    var_moe, var_dense = moe.std**2 / moe.n, dense.std**2 / dense.n
    standard_error = math.sqrt(var_moe + var_dense)
    if _no_spread(standard_error, [*moe_values, *dense_values]):
        return result
    result.standard_error = standard_error
    result.df = (var_moe + var_dense) ** 2 / (
        var_moe**2 / (moe.n - 1) + var_dense**2 / (dense.n - 1))
    half_width = stats.t.ppf(1 - alpha / 2, result.df) * standard_error
    result.ci_low, result.ci_high = result.gap - half_width, result.gap + half_width
    result.p_value = float(stats.ttest_ind(dense_values, moe_values, equal_var=False).pvalue)
    return result


# --------------------------------------------------------------------------------------------
# Power
# --------------------------------------------------------------------------------------------


def t_test_power(gap: float, standard_error: float, df: float, alpha: float = ALPHA) -> float:
    """Chance that a two-sided t-test at ``alpha`` rejects when the true gap is ``gap``:
    P(|T| > t_crit) with T noncentral t of ``df`` and noncentrality gap / standard_error."""
    critical = stats.t.ppf(1 - alpha / 2, df)
    noncentrality = gap / standard_error
    # The lower tail P(T < -t_crit) as the upper tail of the mirrored statistic: scipy's
    # nct.cdf returns NaN far out in that tail, where nct.sf returns 0.
    return float(stats.nct.sf(critical, df, noncentrality)
                 + stats.nct.sf(critical, df, -noncentrality))


def min_detectable_gap(standard_error: float, df: float, power: float = POWER,
                       alpha: float = ALPHA) -> float:
    """The smallest |gap| the test detects with ``power`` (NaN when it cannot be computed)."""
    if not (standard_error > 0 and df > 0 and math.isfinite(standard_error)):
        return math.nan

    def shortfall(gap: float) -> float:
        return t_test_power(gap, standard_error, df, alpha) - power

    upper = standard_error * (stats.t.ppf(1 - alpha / 2, df) + 3.0)
    while shortfall(upper) < 0:  # heavy tails at df ~ 1 need a wider bracket
        upper *= 2
    # Power rises with |gap| from alpha at 0, so the root is unique.
    return float(optimize.brentq(shortfall, 0.0, upper, xtol=standard_error * 1e-12))


def seeds_needed(gap: float, std_diff: float, power: float = POWER,
                 alpha: float = ALPHA) -> Optional[int]:
    """The smallest number of paired seeds n >= 2 whose paired t-test detects ``gap`` with
    ``power`` when the per-seed differences have standard deviation ``std_diff``.

    None when no n up to MAX_SEEDS does, or when gap or spread is zero or unknown.
    """
    if not (std_diff > 0 and math.isfinite(std_diff) and gap != 0 and math.isfinite(gap)):
        return None

    def enough(n: int) -> bool:
        return t_test_power(abs(gap), std_diff / math.sqrt(n), n - 1, alpha) >= power

    # Power grows with n, so double to bracket the answer, then bisect.
    low, high = 1, 2
    while not enough(high):
        if high >= MAX_SEEDS:
            return None
        low, high = high, min(2 * high, MAX_SEEDS)
    while high - low > 1:
        middle = (low + high) // 2
        low, high = (low, middle) if enough(middle) else (middle, high)
    return high


# --------------------------------------------------------------------------------------------
# The comparison of one criterion
# --------------------------------------------------------------------------------------------


@dataclass
class Gap:
    """dense - moe best val loss for one criterion (positive: MoE better), both tests, power.

    ``gap``, ``ci_low``, ``ci_high`` and ``p_value`` are those of ``test``, the one the verdict
    used. A statistic that cannot be computed is NaN here, and None in a study's results
    (``moelab.study.results.json_safe``), as in results.json.
    """

    criterion: str
    moe_arm: str
    dense_arm: str
    test: str
    gap: float
    ci_low: float
    ci_high: float
    p_value: float
    """The raw p of ``test``."""
    p_adjusted: float
    """``p_value`` adjusted over the report's family of tests (``adjust_family``); the verdict
    uses it. Alone (``compare``), a family of one: the raw p."""
    adjustment: str
    """How ``p_adjusted`` was adjusted, e.g. 'Holm, 8 tests'."""
    n_moe: int
    n_dense: int
    outcome: str
    """'MoE better', 'dense better', 'not significant' or 'not testable', at ``p_adjusted``."""
    verdict: str
    min_detectable_gap: float
    seeds_needed: list[dict]
    """[{"gap", "seeds"}] for the observed gap and REFERENCE_GAP, at the test's spread."""
    paired: PairedTest
    welch: WelchTest
    detail: str = field(default="", repr=False)
    """The verdict's parenthesis, e.g. 'paired t, n=6' (bookkeeping: the verdict holds it)."""

    def to_dict(self) -> dict:
        record = asdict(self)
        record.pop("detail")
        for key in ("standard_error", "std_moe", "std_dense"):  # bookkeeping, not results
            record["welch"].pop(key)
        return record


def compare(criterion: str, moe_arm: str, dense_arm: str, moe_by_seed: Mapping[int, float],
            dense_by_seed: Mapping[int, float], alpha: float = ALPHA) -> Gap:
    """Both tests on {seed: best val loss} of the two arms; paired when the seeds match."""
    paired = paired_test(moe_by_seed, dense_by_seed, alpha)
    welch = welch_test(list(moe_by_seed.values()), list(dense_by_seed.values()), alpha)
    use_paired = bool(moe_by_seed) and set(moe_by_seed) == set(dense_by_seed)
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


# --------------------------------------------------------------------------------------------
# Several tests at once
# --------------------------------------------------------------------------------------------


def holm(p_values: Sequence[Optional[float]]) -> list[float]:
    """Holm's step-down adjusted p-values, in the order given.

    Sorted ascending, the i-th smallest (i = 0, 1, ...) of m p-values becomes
    ``min(1, max over j <= i of (m - j) p_(j))``: the running maximum keeps the adjusted values
    in the order of the raw ones, and tied raw p-values get the same adjusted one. A test that
    could not be made (NaN or None) is not one of the m and stays NaN. Rejecting where the
    adjusted p < alpha controls the chance of any false rejection at alpha (Holm 1979).
    """
    raw = [math.nan if p is None else float(p) for p in p_values]
    tested = sorted((i for i, p in enumerate(raw) if not math.isnan(p)), key=raw.__getitem__)
    adjusted, running = [math.nan] * len(raw), 0.0
    for rank, index in enumerate(tested):
        running = max(running, min(1.0, (len(tested) - rank) * raw[index]))
        adjusted[index] = running
    return adjusted


def family_label(tests: int) -> str:
    """How a family's p-values were adjusted, as the report names it: 'Holm, 8 tests'."""
    return f"{ADJUSTMENT}, {tests} test{'s' if tests != 1 else ''}"


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
