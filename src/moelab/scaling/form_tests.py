"""Choosing between nested law forms by F tests against the pure error of replicate points.

When a point (N, D, S) was trained with several seeds, the spread of its losses is the noise no
law can fit: the *pure error*. Its sum of squares SS_pe has n - g degrees of freedom (n points in
g distinct groups), so s^2 = SS_pe / (n - g) estimates the noise variance whatever the law
(Draper & Smith, "Applied Regression Analysis", ch. 2.1). Against it:

- **lack of fit** of a form with p parameters and residual sum of squares SS:
  F = ((SS - SS_pe) / (g - p)) / s^2 on (g - p, n - g) degrees of freedom: a large F says the
  form misses the group means by more than the noise;
- **nested forms** (the smaller is the larger with terms removed or an exponent at 0):
  F = ((SS_small - SS_large) / (p_large - p_small)) / s^2 on (p_large - p_small, n - g) degrees
  of freedom, and the likelihood-ratio statistic n log(SS_small / SS_large) ~ chi^2(p_large -
  p_small). A small p value says the larger form's extra terms describe something the noise does
  not.

Residuals are those of the fit's own target, log loss; the laws are fitted by a Huber loss, not
least squares, so these tests are approximate (the Huber fit's SS is at least the least-squares
one, which makes the nested F a little conservative for the larger form).

``choose_by_f_tests`` starts from the smallest form and moves to a form nesting it while one is
significantly better (at ``ALPHA``), taking the most significant; it stops at a form no larger
form improves on.

Some forms decide the answer to "does S* move with compute?" by their shape. In the effective-
size form L = b / D^beta + d / ((1 - S)^delta N^gamma) + e, with D = C / (6 N a(S)) for the
family's a(S) = N_active / N, minimising over N gives L - e = K C^(-beta gamma / (beta + gamma))
g(S): the best S is the same at every C. Chinchilla's law has no S term at all (S pays only
through compute, so S* is the edge of any search). ``CONSTANT_S_STAR`` names them, and
``optimal_sparsity_moves`` checks any fitted law numerically.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Optional
from collections.abc import Callable

import numpy as np
import scipy.stats

from moelab.scaling.laws import CHINCHILLA, SPARSITY_FORMS, Law, log_features
from moelab.scaling.optimal import compute_optimal

ALPHA = 0.05
NESTED = (
    ("chinchilla", "sparsity-effective-size"),
    ("chinchilla", "sparsity-additive"),
    ("sparsity-effective-size", "sparsity-interaction"),
    ("chinchilla", "sparsity-interaction"),
    ("sparsity-interaction", "sparsity"),
    ("sparsity-additive", "sparsity"),
)
"""(smaller, larger) pairs: the smaller is the larger with terms removed, or (Chinchilla inside
the effective-size and interaction forms) with the S exponent delta at 0."""
CONSTANT_S_STAR = {
    "sparsity-effective-size": (
        "in the effective-size form L = b / D^beta + d / ((1 - S)^delta N^gamma) + e, minimising "
        "over N at fixed compute C gives L - e ~ C^(-beta gamma / (beta + gamma)) g(S), so S* is "
        "the same at every C by construction"),
    "chinchilla": (
        "Chinchilla's law has no S term: sparsity pays only through compute, so S* is the edge "
        "of any search at every C"),
}
"""Forms whose S*(C) cannot move with compute, and why: a sweep that chooses one cannot say
how S* moves with C."""
FORMS_BY_NAME = {law.name: law for law in (*SPARSITY_FORMS, CHINCHILLA)}


OMIT_NONE = {"omit_none": True}
"""A key older files lack: left out when None (``moelab.codec``)."""


@dataclass(frozen=True)
class PureError:
    """The spread of replicate points about their groups' means, in log loss."""

    ss: float
    """Sum of squared deviations of replicate points from their group means (log loss)."""
    df: int
    """n - g: points less distinct groups."""
    groups: int
    """Distinct groups (points that differ only by seed form one)."""
    n_points: int
    """Points."""
    variance: Optional[float]
    """s^2 = ss / df, the noise variance; None without any replicated point."""


@dataclass(frozen=True)
class FormSS:
    """What the F tests read of a fitted form."""

    law: str
    num_params: int
    ss: float
    """Residual sum of squares of log loss."""


@dataclass(frozen=True)
class LackOfFit:
    """The residual beyond pure error against pure error, as an F test."""

    F: float
    """Lack-of-fit F: the residual beyond pure error against pure error."""
    df: list[int]
    """(g - p, n - g)."""
    p: float
    """Its p value."""


@dataclass(frozen=True)
class NestedTest:
    """A larger form against the smaller one it nests."""

    small: str
    """The smaller form."""
    large: str
    """The larger form that nests it."""
    extra_params: int
    """Parameters the larger form adds."""
    F: float
    """The extra-sum-of-squares F statistic."""
    df: list[int]
    """Its (numerator, denominator) degrees of freedom."""
    p: float
    """Its p value."""
    likelihood_ratio: float
    """The likelihood-ratio statistic of the same pair."""
    p_likelihood_ratio: float
    """Its chi-squared p value."""


@dataclass(frozen=True)
class FormChoice:
    """The form chosen by climbing nested tests, by F (``chosen``) and by likelihood ratio."""

    chosen: str
    """The form chosen by F-tests, climbing from the smallest."""
    path: list[str]
    """The forms climbed through, smallest first, ending at chosen."""
    chosen_likelihood_ratio: Optional[str] = field(default=None, metadata=OMIT_NONE)
    """The form the same climb chooses by likelihood-ratio tests."""
    path_likelihood_ratio: Optional[list[str]] = field(default=None, metadata=OMIT_NONE)
    """That climb's path."""
    alpha: float = ALPHA
    """The level each test is read at."""
    tests: list[NestedTest] = field(default_factory=list)
    """Every nested test computed."""
    constant_s_star: Optional[str] = None
    """Why the chosen form fixes S*(C) (``CONSTANT_S_STAR``); None when it does not."""


@dataclass(frozen=True)
class SStarMovement:
    """S* at two compute budgets read off a fitted law."""

    flops: list[float]
    sparsity: list[float]
    moves: bool
    """By more than 0.001."""


def pure_error(columns: dict[str, np.ndarray], keys: tuple[str, ...] = ("N", "D", "S")) -> PureError:
    """Sum of squares of log loss about each replicate group's mean, its degrees of freedom
    n - g, the groups g and the variance estimate (None without any replicated point)."""
    log_loss = np.log(columns["loss"])
    groups: dict[tuple, list[int]] = {}
    for index, key in enumerate(zip(*(columns[k] for k in keys if k in columns))):
        groups.setdefault(key, []).append(index)
    ss = float(sum(np.sum((log_loss[i] - log_loss[i].mean()) ** 2) for i in map(np.array, groups.values())))
    df = len(log_loss) - len(groups)
    return PureError(ss=ss, df=df, groups=len(groups), n_points=len(log_loss),
                     variance=ss / df if df > 0 else None)


def residual_ss(law: Law, theta: dict[str, float], columns: dict[str, np.ndarray]) -> float:
    """Sum of squared log residuals of a fit (``theta``: the fit record's log-space parameters)."""
    vector = np.array([theta[name] for name in law.param_names])
    predicted = law.predict_log_loss(vector, log_features(law, columns))
    return float(np.sum((np.log(columns["loss"]) - predicted) ** 2))


def lack_of_fit(ss: float, num_params: int, pure: PureError) -> LackOfFit | None:
    """F of a form's misfit of the group means against the pure error; None when either has no
    degrees of freedom."""
    df_fit = pure.groups - num_params
    if df_fit <= 0 or not pure.variance:
        return None
    f = max(ss - pure.ss, 0.0) / df_fit / pure.variance
    return LackOfFit(F=f, df=[df_fit, pure.df], p=float(scipy.stats.f.sf(f, df_fit, pure.df)))


def nested_test(small: FormSS, large: FormSS, pure: PureError) -> NestedTest | None:
    """F (against the pure error) and likelihood-ratio tests of ``large`` over ``small``; None
    without pure error."""
    extra = large.num_params - small.num_params
    if extra <= 0 or not pure.variance:
        return None
    gain = max(small.ss - large.ss, 0.0)
    f = gain / extra / pure.variance
    lr = pure.n_points * math.log(small.ss / large.ss) if large.ss > 0 else math.inf
    return NestedTest(small=small.law, large=large.law, extra_params=extra, F=f,
                      df=[extra, pure.df], p=float(scipy.stats.f.sf(f, extra, pure.df)),
                      likelihood_ratio=max(lr, 0.0),
                      p_likelihood_ratio=float(scipy.stats.chi2.sf(max(lr, 0.0), extra)))


def choose_by_f_tests(fits: dict[str, FormSS], pure: PureError, alpha: float = ALPHA) -> FormChoice:
    """From the smallest form up: move to a nesting form while one is significantly better,
    by the F test against the pure error (``chosen``) and, for comparison, by the
    likelihood-ratio test (``chosen_likelihood_ratio``), whose variance is the larger form's
    residual one: when every form misfits the group means, the pure error is the smaller
    variance and the F test takes any term that absorbs some of the misfit.

    ``fits``: by law name (forms left out are skipped). Returns the choices, their paths and
    every nested test."""
    tests = [t for small, large in NESTED if small in fits and large in fits
             if (t := nested_test(fits[small], fits[large], pure)) is not None]
    start = min(fits, key=lambda name: fits[name].num_params)
    by_f = _climb(tests, start, lambda t: t.p, alpha)
    by_lr = _climb(tests, start, lambda t: t.p_likelihood_ratio, alpha)
    return FormChoice(chosen=by_f[-1], path=by_f, chosen_likelihood_ratio=by_lr[-1],
                      path_likelihood_ratio=by_lr, alpha=alpha, tests=tests,
                      constant_s_star=CONSTANT_S_STAR.get(by_f[-1]))


def _climb(tests: list[NestedTest], start: str, p_of: Callable[[NestedTest], float],
           alpha: float) -> list[str]:
    """The forms visited from ``start``, each step to the most significant larger form."""
    path = [start]
    while better := [t for t in tests if t.small == path[-1] and p_of(t) < alpha]:
        path.append(min(better, key=p_of).large)
    return path


def optimal_sparsity_moves(law: Law, params: dict[str, float], shared_fraction: float,
                           flops: tuple[float, float] = (1e12, 1e18)) -> SStarMovement:
    """S* at two compute budgets 10^6 apart, from the fitted law (compute-optimal over N and S):
    whether it moves by more than 0.001."""
    low, high = (compute_optimal(law, params, c, shared_fraction=shared_fraction).sparsity
                 for c in flops)
    return SStarMovement(flops=list(flops), sparsity=[low, high], moves=abs(high - low) > 1e-3)
