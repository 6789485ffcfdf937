"""Verdict words by rule: the one vocabulary every generated finding uses.

A finding's word ("ahead", "not separated", "at the edge", "bounded", ...) is computed here from
an interval, a p-value adjusted over a named family of tests, and the grid an optimum was
searched on; it is never typed. A sentence that needs a word these rules cannot give cannot be
generated. docs/verdicts.md states the rules for a reader:

- **A difference** (``difference_verdict``) is *ahead* or *behind* only when the test's p,
  adjusted over its family (Holm), is below alpha; it is *equivalent within ±m* only when its
  whole interval lies inside a margin m fixed before looking (a minimum detectable gap is not an
  equivalence); otherwise *not separated*; with no interval (one replicate, no spread) it is
  *undetermined*.
- **An optimum on a grid** (``optimum_verdict``) is *at the edge* when the best point is the
  first or last tried and the loss rises significantly from it to its neighbour (then the
  optimum is only bounded by the edge: "≥ the largest tried"); *best at the edge, not
  separated* when the best point is at the edge but not separated from its neighbour (or not
  tested): the optimum is not located; *bounded* only when the loss rises significantly past an
  interior best point on both sides (each rise a difference that is *ahead* in the direction of
  a higher loss, in its family); otherwise *interior, not bounded*.
- **A trend** (``trend_verdict``) *rises* or *falls* when its interval excludes 0 (and its
  adjusted p, if given, is below alpha), is *flat within ±m* when the interval lies inside a
  pre-set margin, and is *undetermined* otherwise; a trend through optima at a grid's edge is
  *undetermined* and gets no slope (``edge_values``), and an interval needs at least
  ``MIN_SEEDS_FOR_SHARES`` seeds.
- **A share of replicates** ("best in 80 % of resamples") is given only from
  ``MIN_SEEDS_FOR_SHARES`` seeds: a bootstrap over 2 seeds has 3 outcomes per cell.

numpy-free and torch-free: plain floats in, a ``Verdict`` out.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal, Optional

from moelab.stats.intervals import ALPHA
from moelab.stats.multiple import ADJUSTMENT, holm

DifferenceWord = Literal["ahead", "behind", "equivalent", "not separated", "undetermined"]
OptimumWord = Literal["at the lower edge", "at the upper edge", "best at the edge, not separated",
                      "bounded", "interior, not bounded", "undetermined"]
TrendWord = Literal["rises", "falls", "flat", "undetermined"]

MIN_SEEDS_FOR_SHARES = 3
"""A share of resamples ("best in 70 %") is shown only from this many seeds."""


@dataclass(frozen=True)
class Verdict:
    """A word and the rule that gave it, in words a report can print after the word."""

    word: str
    rule: str

    def __str__(self) -> str:
        return self.word


@dataclass(frozen=True)
class Difference:
    """One tested difference (first − second, or a rise): its estimate, 95 % interval and the
    p-value adjusted over ``family`` (None when the test could not be made)."""

    estimate: float
    interval: Optional[tuple[float, float]]
    p_adjusted: Optional[float]
    family: str


@dataclass(frozen=True)
class Family:
    """A named family of tests fixed before looking, adjusted by Holm together. Tests added
    after looking (post hoc) join the family, and every verdict in it is read again at the
    enlarged family's adjusted p."""

    name: str
    p_values: Mapping[str, Optional[float]]

    @property
    def size(self) -> int:
        return sum(p is not None and not math.isnan(p) for p in self.p_values.values())

    @property
    def label(self) -> str:
        """'Holm over the 17 tests of the recipe factorial'."""
        return f"{ADJUSTMENT} over the {self.size} tests of {self.name}"

    def adjusted(self) -> dict[str, float]:
        """Each test's Holm-adjusted p-value (NaN where no test could be made)."""
        names = list(self.p_values)
        return dict(zip(names, holm([self.p_values[name] for name in names])))


def _missing(value: Optional[float]) -> bool:
    return value is None or math.isnan(value)


def _interval_missing(interval: Optional[tuple[float, float]]) -> bool:
    return interval is None or any(_missing(end) for end in interval)


def difference_verdict(difference: Difference, *, alpha: float = ALPHA,
                       margin: Optional[float] = None, ahead: str = "ahead",
                       behind: str = "behind") -> Verdict:
    """The word for a difference read as "first against second" (positive: first ahead).

    ``ahead``/``behind`` rename the two directional words for a report ("MoE ahead", "loss
    rises"); ``margin`` is an equivalence margin fixed in advance (None: no equivalence claim).
    """
    if _interval_missing(difference.interval) or _missing(difference.p_adjusted):
        return Verdict("undetermined", "no interval: fewer than 2 replicates or no spread")
    low, high = difference.interval  # type: ignore[misc]  # checked just above
    p = float(difference.p_adjusted)  # type: ignore[arg-type]
    if p < alpha and (low > 0 or high < 0):
        word = ahead if low > 0 else behind
        return Verdict(word, f"p = {p:.2g} < {alpha:g} after {difference.family}")
    if margin is not None and -margin < low and high < margin:
        return Verdict("equivalent", f"95 % interval [{low:+.3g}, {high:+.3g}] inside "
                                     f"±{margin:g}, a margin set in advance")
    reason = (f"p = {p:.2g} ≥ {alpha:g} after {difference.family}" if p >= alpha
              else f"the interval [{low:+.3g}, {high:+.3g}] includes 0")
    return Verdict("not separated", reason)


def optimum_verdict(grid: Sequence[float], best: int, rise_below: Optional[Difference],
                    rise_above: Optional[Difference], *, alpha: float = ALPHA) -> Verdict:
    """The word for the best point ``grid[best]`` of a grid search.

    ``rise_below``/``rise_above``: the loss at the neighbouring grid point below/above minus the
    loss at the best (positive: the loss rises past the optimum), each tested in its family.
    """
    if not grid or not 0 <= best < len(grid):
        raise ValueError(f"best={best} is not an index of a grid of {len(grid)} points")
    if len(grid) < 3:
        return Verdict("undetermined", f"{len(grid)} grid points cannot bound an optimum")
    if best in (0, len(grid) - 1):
        return _edge_verdict(grid, best, rise_above if best == 0 else rise_below, alpha)
    rises = [difference_verdict(rise, alpha=alpha).word if rise else "undetermined"
             for rise in (rise_below, rise_above)]
    if rises == ["ahead", "ahead"]:
        return Verdict("bounded", "the loss rises significantly on both sides of the optimum")
    sides = [side for side, word in zip(("below", "above"), rises) if word != "ahead"]
    return Verdict("interior, not bounded",
                   f"the loss does not rise significantly {' or '.join(sides)} the optimum")


def _edge_verdict(grid: Sequence[float], best: int, rise: Optional[Difference],
                  alpha: float) -> Verdict:
    """A best point at the edge: the optimum lies at or past it only when the loss rises
    significantly from it to its one neighbour."""
    lower = best == 0
    edge, side = grid[best], ("smallest" if lower else "largest")
    neighbour = grid[1] if lower else grid[-2]
    if rise is not None and difference_verdict(rise, alpha=alpha).word == "ahead":
        return Verdict("at the lower edge" if lower else "at the upper edge",
                       f"the best point is the {side} tried and the loss rises significantly "
                       f"to {neighbour:g}: the optimum is {'≤' if lower else '≥'} {edge:g}")
    tested = "not tested against" if rise is None else "not separated from"
    return Verdict("best at the edge, not separated",
                   f"the best mean is at the {side} point tried, {edge:g}, {tested} {neighbour:g}: "
                   "the optimum is not located")


def trend_verdict(estimate: float, interval: Optional[tuple[float, float]], *,
                  p_adjusted: Optional[float] = None, family: Optional[str] = None,
                  margin: Optional[float] = None, alpha: float = ALPHA,
                  edge_values: int = 0, seeds: Optional[int] = None) -> Verdict:
    """The word for a slope or an ordinal trend statistic with its 95 % interval.

    ``edge_values``: how many of the values the trend runs through sit at a grid's edge (a
    slope through clamped values is no estimate); ``seeds``: how many seeds its interval
    resamples (fewer than ``MIN_SEEDS_FOR_SHARES`` give no interval to read)."""
    if edge_values:
        return Verdict("undetermined", f"{edge_values} of the values it runs through sit at the "
                                       "grid's edge, so no slope is read")
    if seeds is not None and seeds < MIN_SEEDS_FOR_SHARES:
        return Verdict("undetermined", f"its interval resamples {seeds} seeds")
    if _interval_missing(interval):
        return Verdict("undetermined", "no interval")
    low, high = interval  # type: ignore[misc]
    significant = _missing(p_adjusted) or float(p_adjusted) < alpha  # type: ignore[arg-type]
    if significant and (low > 0 or high < 0):
        where = f" and p < {alpha:g} after {family}" if family and not _missing(p_adjusted) else ""
        return Verdict("rises" if estimate > 0 else "falls",
                       f"95 % interval [{low:+.3g}, {high:+.3g}] excludes 0{where}")
    if margin is not None and -margin < low and high < margin:
        return Verdict("flat", f"95 % interval inside ±{margin:g}, a margin set in advance")
    return Verdict("undetermined", f"95 % interval [{low:+.3g}, {high:+.3g}] includes 0"
                   + ("" if margin is None else f" and reaches past ±{margin:g}"))


def share_of_replicates(share: float, seeds: int) -> Optional[str]:
    """"best in 70 % of resamples", or None below ``MIN_SEEDS_FOR_SHARES`` seeds (where a
    share only says whether the seeds agree)."""
    if seeds < MIN_SEEDS_FOR_SHARES:
        return None
    return f"{share:.0%} of resamples"
