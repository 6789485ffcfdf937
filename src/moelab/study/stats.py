"""Seed statistics and the dense-vs-MoE comparison of one fairness criterion.

The gap is ``dense - moe`` in best validation loss, so a positive gap means the MoE is better.
Its 95 % confidence interval uses Welch's t with Welch-Satterthwaite degrees of freedom (the
arms may have different seed variances), and the p-value is scipy's Welch t-test; the two agree:
the interval excludes 0 exactly when p < 0.05.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Sequence

import numpy as np
from scipy import stats

CONFIDENCE = 0.95


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


@dataclass
class Gap:
    """dense - moe best val loss for one criterion (positive: MoE better)."""

    criterion: str
    moe_arm: str
    dense_arm: str
    gap: float
    ci_low: float
    ci_high: float
    p_value: float
    df: float
    n_moe: int
    n_dense: int
    verdict: str

    def to_dict(self) -> dict:
        return asdict(self)


def welch_gap(
    criterion: str, moe_arm: str, dense_arm: str,
    moe_values: Sequence[float], dense_values: Sequence[float], alpha: float = 1 - CONFIDENCE,
) -> Gap:
    """The gap, its Welch confidence interval and t-test, and a verdict the numbers support."""
    moe, dense = summarize(moe_values), summarize(dense_values)
    gap = dense.mean - moe.mean
    ci_low = ci_high = p_value = df = math.nan
    if moe.n >= 2 and dense.n >= 2:
        var_moe, var_dense = moe.std**2 / moe.n, dense.std**2 / dense.n
        standard_error = math.sqrt(var_moe + var_dense)
        if standard_error > 0:
            df = (var_moe + var_dense) ** 2 / (
                var_moe**2 / (moe.n - 1) + var_dense**2 / (dense.n - 1)
            )
            half_width = stats.t.ppf(1 - alpha / 2, df) * standard_error
            ci_low, ci_high = gap - half_width, gap + half_width
            p_value = float(stats.ttest_ind(dense_values, moe_values, equal_var=False).pvalue)
    return Gap(
        criterion, moe_arm, dense_arm, gap, ci_low, ci_high, p_value, df, moe.n, dense.n,
        verdict(gap, p_value, moe.n, dense.n, alpha),
    )


def verdict(gap: float, p_value: float, n_moe: int, n_dense: int, alpha: float = 0.05) -> str:
    """'MoE better' / 'dense better' only when Welch's test rejects equality at ``alpha``."""
    n = f"n={n_moe}" if n_moe == n_dense else f"n={n_moe}/{n_dense}"
    if math.isnan(p_value):
        if n_moe < 2 or n_dense < 2:
            return f"not testable at {n} (needs 2+ seeds per arm)"
        return f"not testable at {n} (no seed variance)"
    if p_value < alpha:
        return "MoE better" if gap > 0 else "dense better"
    return f"not significant at {n}"
