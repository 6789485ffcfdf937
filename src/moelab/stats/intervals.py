"""Confidence intervals: a mean over seeds, an estimate with a standard error, a binomial
proportion; and the seed summary they start from.

t intervals are ``estimate +- t(1 - alpha/2, df) x standard error``; the two-sided p of the
same t statistic is ``t_p_value``. A proportion's interval is Wilson's score interval (Wilson
1927), which stays inside [0, 1] and keeps its coverage near 0 and 1 where the normal
approximation does not.

numpy and scipy only: no torch, nothing else of moelab.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import NamedTuple, Optional
from collections.abc import Sequence

import numpy as np
from scipy import stats

CONFIDENCE = 0.95
ALPHA = 1 - CONFIDENCE


class Interval(NamedTuple):
    """A confidence interval; unpacks as ``low, high`` (and is written to JSON as a list)."""

    low: float
    high: float

    def excludes(self, value: float = 0.0) -> bool:
        return value < self.low or value > self.high


@dataclass
class Summary:
    """Mean and sample standard deviation (ddof=1; NaN for a single seed) over seeds."""

    mean: float
    """Mean over the seeds (null when there are none)."""
    std: float
    """Sample standard deviation, ddof 1 (null for a single seed)."""
    n: int
    """Seeds counted."""


def summarize(values: Sequence[float] | np.ndarray) -> Summary:
    values_N = np.asarray(values, dtype=float)
    if values_N.size == 0:
        return Summary(math.nan, math.nan, 0)
    std = float(values_N.std(ddof=1)) if values_N.size > 1 else math.nan
    return Summary(float(values_N.mean()), std, int(values_N.size))


def t_quantile(df: float, alpha: float = ALPHA) -> float:
    """The two-sided critical value t(1 - alpha/2, df)."""
    return float(stats.t.ppf(1 - alpha / 2, df))


def t_interval(estimate: float, standard_error: float, df: float,
               alpha: float = ALPHA) -> Interval:
    """``estimate +- t(1 - alpha/2, df) x standard_error``."""
    half_width = t_quantile(df, alpha) * standard_error
    return Interval(float(estimate - half_width), float(estimate + half_width))


def t_p_value(estimate: float, standard_error: float, df: float) -> Optional[float]:
    """Two-sided p of ``estimate / standard_error`` against t with ``df`` degrees of freedom;
    None without a positive standard error (no test)."""
    if not standard_error > 0:
        return None
    return float(2 * stats.t.sf(abs(estimate / standard_error), df))


def mean_interval(values: Sequence[float] | np.ndarray,
                  alpha: float = ALPHA) -> Optional[Interval]:
    """The t interval of the mean over seeds, ``mean +- t(1 - alpha/2, n-1) sd / sqrt(n)``;
    None for fewer than 2 values."""
    summary = summarize(values)
    if summary.n < 2:
        return None
    # t x sd, then / sqrt(n): the order the stored reports were computed in (last bits).
    half_width = t_quantile(summary.n - 1, alpha) * summary.std / math.sqrt(summary.n)
    return Interval(summary.mean - half_width, summary.mean + half_width)


def wilson_interval(successes: int, trials: int, confidence: float = CONFIDENCE) -> Interval:
    """Wilson's score interval of a binomial proportion ``successes / trials``."""
    interval = stats.binomtest(successes, trials).proportion_ci(confidence, method="wilson")
    return Interval(float(interval.low), float(interval.high))
