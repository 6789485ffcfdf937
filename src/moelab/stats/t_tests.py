"""Two samples of seeds compared by a t-test: paired on the seeds both have, or Welch's on the
two as independent samples.

- paired t on the per-seed differences ``first[s] - second[s]``: runs of one seed share the
  data order and the validation windows, so the seed's own luck cancels in the difference;
  p-value from ``scipy.stats.ttest_rel``, interval ``mean +- t(1 - alpha/2, n-1) sd / sqrt(n)``;
- Welch's t: Welch-Satterthwaite degrees of freedom (the samples may have different seed
  variances), p-value from ``scipy.stats.ttest_ind``.

Each interval excludes 0 exactly when its p < alpha. A test whose spread is floating-point
residue is not testable: NaN interval and p.

numpy and scipy only: no torch, nothing else of moelab.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from collections.abc import Mapping, Sequence

import numpy as np
from scipy import stats

from moelab.stats.intervals import ALPHA, summarize, t_quantile

NOT_WRITTEN = {"json": False}
"""Field metadata: a value kept for computing, left out when the record is written as JSON
(``moelab.codec``'s ``json`` key; a plain dict, so this package imports nothing of moelab's)."""

# A spread this small relative to the values is floating-point residue (e.g. samples that
# differ by the same constant in every seed), not seed noise: the test is then not testable,
# not infinite.
NEGLIGIBLE_SPREAD = 1e-12


def _no_spread(std: float, values: Sequence[float]) -> bool:
    scale = float(np.mean(np.abs(values))) if len(values) else 0.0
    return not std > NEGLIGIBLE_SPREAD * max(scale, 1.0)


@dataclass
class PairedTest:
    """Paired t on the per-seed differences of the seeds both samples have."""

    gap: float
    """Mean of the per-seed differences (first - second; in a study, dense - MoE)."""
    ci_low: float
    """Lower end of its 95 % t interval."""
    ci_high: float
    """Upper end of its 95 % t interval."""
    p_value: float
    """Two-sided p of the paired t-test (null when untestable)."""
    n_pairs: int
    """Seeds both samples have."""
    std_diff: float
    """Sample standard deviation of the differences."""
    differences: list[dict] = field(default_factory=list)
    """[{"seed", "diff"}] per paired seed."""

    @property
    def standard_error(self) -> float:
        return self.std_diff / math.sqrt(self.n_pairs) if self.n_pairs else math.nan


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
        half_width = t_quantile(diffs.n - 1, alpha) * result.standard_error
        result.ci_low, result.ci_high = diffs.mean - half_width, diffs.mean + half_width
        result.p_value = float(stats.ttest_rel(first, second).pvalue)
    return result


@dataclass
class WelchTest:
    """Welch's t on two samples as independent: ``gap`` is mean(second) - mean(first), named
    for the study's use (``welch_test(moe, dense)``: dense - moe)."""

    gap: float
    """mean(dense) - mean(MoE)."""
    ci_low: float
    """Lower end of its 95 % interval."""
    ci_high: float
    """Upper end of its 95 % interval."""
    p_value: float
    """Two-sided p of Welch's t-test."""
    df: float
    """Welch-Satterthwaite degrees of freedom."""
    n_moe: int
    """MoE runs."""
    n_dense: int
    """Dense runs."""
    # Bookkeeping for the power computation, not results: never written to JSON.
    standard_error: float = field(default=math.nan, metadata=NOT_WRITTEN)
    std_moe: float = field(default=math.nan, metadata=NOT_WRITTEN)
    std_dense: float = field(default=math.nan, metadata=NOT_WRITTEN)


def welch_test(moe_values: Sequence[float], dense_values: Sequence[float],
               alpha: float = ALPHA) -> WelchTest:
    """Welch's t of ``mean(dense) - mean(moe)``."""
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
    half_width = t_quantile(result.df, alpha) * standard_error
    result.ci_low, result.ci_high = result.gap - half_width, result.gap + half_width
    result.p_value = float(stats.ttest_ind(dense_values, moe_values, equal_var=False).pvalue)
    return result
