"""Seeds added in rounds until a paired comparison is resolved: a group-sequential design with
repeated confidence intervals, valid under this optional stopping.

Method: the repeated confidence intervals of Jennison & Turnbull (1989, "Interim analyses: the
repeated confidence interval approach", JRSS B 51:305-361; their book Group Sequential Methods
with Applications to Clinical Trials, 2000, ch. 9), with critical values from the Lan-DeMets
(1983, Biometrika 70:659-663) alpha-spending function of O'Brien-Fleming type
(each side spends ``alpha'(t) = 2 - 2 Phi(z_{1-alpha'/2} / sqrt(t))`` of its alpha' = alpha / 2), at information fractions ``t_k = n_k / N``
(seeds at look k over the maximum N, both fixed before any run). The critical values ``c_k``
of the standardised mean are found by numerical integration of the Brownian-motion recursion
(Armitage, McPherson & Rowe 1969): at look k the chance of first crossing, under no difference,
is the spending of that look. Seed noise is estimated, so each ``c_k`` is turned into a
Student-t critical value with ``n_k - 1`` degrees of freedom at the same nominal level (Jennison
& Turnbull 2000, section 3.8). The interval at look k is ``mean +- t_k * sd / sqrt(n_k)``.

The intervals of all looks hold the true mean together with probability >= 1 - alpha, so any
rule that reads them stays valid, in particular: stop a comparison once its interval excludes 0
(resolved: the sign is claimed) or lies inside +- threshold (a gap smaller than the threshold
is claimed), else at the last look (undetermined). Several comparisons split alpha equally
(Bonferroni), so the family's intervals hold together too. Early looks have very wide
intervals (O'Brien-Fleming spends little alpha early); that is the price of looking.

numpy and scipy only: no torch, nothing else of moelab.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional, Sequence

import numpy as np
from scipy import optimize, stats

METHOD = ("group-sequential repeated confidence intervals (Jennison & Turnbull 1989), "
          "O'Brien-Fleming-type Lan-DeMets alpha spending (Lan & DeMets 1983), Student-t "
          "critical values at the nominal levels")
RESOLVED = "resolved"
SMALLER = "smaller than threshold"
UNDETERMINED = "undetermined at the maximum"
GRID_POINTS = 601
"""Points of the numerical integration on each look's continuation region."""


def obrien_fleming_spending(fraction: float, alpha: float) -> float:
    """Lan-DeMets O'Brien-Fleming-type spending of a two-sided test as the usual software
    spends it (each side alpha / 2, e.g. gsDesign's ``sfLDOF``, ldbounds): the two-sided alpha
    spent by information fraction t, ``4 - 4 Phi(z_{1-alpha/4} / sqrt(t))``."""
    if fraction <= 0:
        return 0.0
    z = stats.norm.isf(alpha / 4)
    return float(4 * stats.norm.sf(z / math.sqrt(min(fraction, 1.0))))


def boundaries(fractions: Sequence[float], alpha: float) -> list[float]:
    """Two-sided critical values c_k of the standardised statistic at information fractions
    ``fractions`` (increasing, the last usually 1): under no difference the chance of first
    crossing +-c_k at look k is the spending between looks k-1 and k."""
    fractions = [float(t) for t in fractions]
    if not fractions or any(b <= a for a, b in zip(fractions, fractions[1:])) or fractions[0] <= 0:
        raise ValueError(f"information fractions must increase from above 0: {fractions}")
    spent = [obrien_fleming_spending(t, alpha) for t in fractions]
    critical = [float(stats.norm.isf(spent[0] / 2))]
    # The sub-density of the score S_1 = Z_1 sqrt(t_1) on the continuation region of look 1.
    grid, density = _continuation(critical[0] * math.sqrt(fractions[0]), fractions[0], None, None)
    for k in range(1, len(fractions)):
        step = fractions[k] - fractions[k - 1]
        target = spent[k] - spent[k - 1]
        sqrt_t = math.sqrt(fractions[k])

        def exit_probability(c: float) -> float:
            upper = stats.norm.sf((c * sqrt_t - grid) / math.sqrt(step))
            lower = stats.norm.cdf((-c * sqrt_t - grid) / math.sqrt(step))
            return float(np.trapezoid(density * (upper + lower), grid))

        c = optimize.brentq(lambda c: exit_probability(c) - target, 1e-3, 50.0, xtol=1e-10)
        critical.append(float(c))
        grid, density = _continuation(c * sqrt_t, step, grid, density)
    return critical


def _continuation(bound: float, step: float, grid: Optional[np.ndarray],
                  density: Optional[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """The sub-density of the score on (-bound, bound) after an increment of variance
    ``step``, from the previous look's (``grid``, ``density``); from 0 when there is none."""
    new_grid = np.linspace(-bound, bound, GRID_POINTS)
    scale = math.sqrt(step)
    if grid is None:
        return new_grid, stats.norm.pdf(new_grid / scale) / scale
    standardised = (new_grid[:, None] - grid[None, :]) / scale
    kernel = np.exp(-0.5 * standardised**2) / (scale * math.sqrt(2 * math.pi))
    return new_grid, np.trapezoid(kernel * density[None, :], grid, axis=1)


@dataclass
class SequentialDesign:
    """Fixed before any run: the seed count at each look, alpha and the practical threshold."""

    looks: list[int]
    """Seeds (paired differences) at each look, increasing; the last is the maximum."""
    alpha: float = 0.05
    threshold: float = 0.01
    comparisons: int = 1
    """Comparisons in the family: each gets alpha / comparisons (Bonferroni)."""

    def __post_init__(self) -> None:
        if len(self.looks) < 1 or self.looks[0] < 2 or any(
                b <= a for a, b in zip(self.looks, self.looks[1:])):
            raise ValueError(f"looks must increase from at least 2 seeds: {self.looks}")
        self.z_critical = boundaries([n / self.looks[-1] for n in self.looks],
                                     self.alpha / self.comparisons)

    def t_critical(self, look: int, n: Optional[int] = None) -> float:
        """The Student-t critical value of look ``look`` (0-based) with ``n`` differences (the
        look's planned count unless a run is missing): at the nominal level of c_k."""
        n = self.looks[look] if n is None else n
        nominal = 2 * stats.norm.sf(self.z_critical[look])
        return float(stats.t.isf(nominal / 2, n - 1)) if n >= 2 else math.inf

    def to_dict(self) -> dict:
        return {"method": METHOD, "looks": list(self.looks), "alpha": self.alpha,
                "alpha_per_comparison": self.alpha / self.comparisons,
                "threshold": self.threshold, "comparisons": self.comparisons,
                "z_critical": list(self.z_critical)}


@dataclass
class LookResult:
    look: int
    """0-based."""
    n: int
    mean: float
    low: float
    high: float
    decision: Optional[str]
    """RESOLVED, SMALLER, or None (continue)."""


def repeated_interval(differences: Sequence[float], design: SequentialDesign,
                      look: int) -> LookResult:
    """Look ``look``'s repeated confidence interval of the mean paired difference, and what it
    decides."""
    values = np.asarray(differences, dtype=float)
    n = int(values.size)
    mean = float(values.mean()) if n else math.nan
    if n < 2:
        return LookResult(look, n, mean, -math.inf, math.inf, None)
    half = design.t_critical(look, n) * float(values.std(ddof=1)) / math.sqrt(n)
    low, high = mean - half, mean + half
    return LookResult(look, n, mean, low, high, decide(low, high, design.threshold))


def decide(low: float, high: float, threshold: float) -> Optional[str]:
    if low > 0 or high < 0:
        return RESOLVED
    if -threshold < low and high < threshold:
        return SMALLER
    return None


@dataclass
class SequentialOutcome:
    """Where one comparison stopped: the look, why, and every look's interval up to it."""

    stopped_at: Optional[int]
    """The 0-based look it stopped at; None while it continues."""
    reason: Optional[str]
    """RESOLVED, SMALLER, UNDETERMINED, or None while it continues."""
    looks: list[LookResult]

    @property
    def final(self) -> Optional[LookResult]:
        return self.looks[-1] if self.looks else None


def run_looks(differences_by_look: Sequence[Sequence[float]],
              design: SequentialDesign) -> SequentialOutcome:
    """Read the looks in order (each the paired differences of that look's seeds) and stop at
    the first that decides, or at the design's last look."""
    results = []
    for look, differences in enumerate(differences_by_look):
        result = repeated_interval(differences, design, look)
        results.append(result)
        if result.decision is not None:
            return SequentialOutcome(look, result.decision, results)
        if look == len(design.looks) - 1:
            return SequentialOutcome(look, UNDETERMINED, results)
    return SequentialOutcome(None, None, results)


def round_looks(first: int, step: int, maximum: int) -> list[int]:
    """Seeds at each look: ``first``, then ``step`` more a round, the last capped at
    ``maximum``."""
    looks = list(range(first, maximum, step)) + [maximum]
    return sorted(set(looks))
