"""Which form of the sparsity law a sweep's points identify.

A small sweep cannot pin down all ten parameters of Abnar et al.'s eq. 6: the fit reaches a low
objective with parameters that mean nothing (alpha ~ 3,400 on the demo's 24 points), and its
bootstrap intervals run off to zero or infinity. So each form of ``FORMS`` (the full law, eq. 6
with terms removed, and last Chinchilla's law in the total parameter count, the form of a sweep
that measures no effect of S at fixed N and D) is fitted, bootstrapped and checked on held-out
points, and the richest form that passes both checks is the one a report uses:

- **identified**: every term adds at least ``MIN_TERM_SIZE`` nats to some point's loss (a
  coefficient that ran to 0 describes nothing, and an exponent check cannot see it in a
  constant term: e ~ 0 beside c / (1 - S)^lam with lam ~ 0 leaves only e + c measured), every
  exponent moves its term by at least ``MIN_EXPONENT_EFFECT`` nats over
  the sweep's range of its variable (an exponent that moves its term less, or whose term has
  been switched off, describes nothing the points show: a / N^alpha with alpha ~ 0 is a constant
  beside e, an S exponent ~ 0 is no effect of S, which a smaller form states directly; and as
  the optimizer need not move such parameters, the bootstrap alone may not show it), every
  parameter's 95 % bootstrap interval is finite (no coefficient runs to 0 or to infinity, no
  exponent to infinity), no exponent's interval contains 0 (the sign of its effect is not
  measured) and none is wider than ``MAX_EXPONENT_CI_WIDTH``
  (an exponent the resamples move by more than that is not measured: scaling exponents are
  fractions);
- **predictive**: refitted without the held-out points, the form predicts them with a mean
  absolute error of at most ``MAX_HOLDOUT_MAE`` nats.

Without bootstrap resamples only the exponents' effects are checked, not the intervals (the
selection's ``criteria`` record the resample count).
When no form passes, none is chosen: the caller reports the checks rather than a fit.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from collections.abc import Callable

import numpy as np

from moelab.errors import MoelabError
from moelab.scaling.laws import CHINCHILLA, SPARSITY_FORMS, Law, log_features
from moelab.scaling.fit_record import OMIT_NONE, LawFit, fit_columns

FORMS = (*SPARSITY_FORMS, CHINCHILLA)
"""Richest first. In Chinchilla's law S enters only through compute: D = C / (6 N_active)."""
MIN_EXPONENT_EFFECT = 0.01
"""Nats: about the seed noise of one CPU sweep point."""
MIN_TERM_SIZE = MIN_EXPONENT_EFFECT
MAX_EXPONENT_CI_WIDTH = 1.0
MAX_HOLDOUT_MAE = 0.02
"""Nats: the accuracy a sweep's law must reach on points it never saw."""
MIN_STEADY_REPLICATES = 32
"""Fewer bootstrap resamples leave an interval's ends, and so the choice of form, to chance:
with 8, a synthetic sweep's choice flipped with the CPU's float rounding (docs/explanation/laws.md)."""


def exponent_effects(law: Law, record: LawFit, columns: dict[str, np.ndarray]) -> dict[str, float]:
    """Nats by which each exponent moves its term over the points' range of its variable.

    For exponent p of a term with values v_i and log feature f: max_i v_i * (1 - exp(-|p| *
    (max f - min f))), the change of the term's largest value if f ran over the whole range.
    """
    theta = np.array([record.theta[name] for name in law.param_names])
    features = log_features(law, columns)
    values = np.exp(law.log_terms(theta, features))
    effects = {}
    for (_, exponents), value in zip(law.terms, values):
        for exponent, feature in exponents:
            span = float(np.ptp(features[feature]))
            power = abs(float(record.theta[exponent]))
            effects[exponent] = float(value.max() * -np.expm1(-power * span))
    return effects


def term_sizes(law: Law, record: LawFit, columns: dict[str, np.ndarray]) -> dict[str, float]:
    """Nats: each term's largest value over the points, by its coefficient's name."""
    theta = np.array([record.theta[name] for name in law.param_names])
    values = np.exp(law.log_terms(theta, log_features(law, columns)))
    return {law.log_coef_names[log_coef]: float(value.max())
            for (log_coef, _), value in zip(law.terms, values)}


def identification_problems(law: Law, record: LawFit, columns: dict[str, np.ndarray]) -> list[str]:
    """Why a fit record (bootstrapped, fitted to ``columns``) does not identify its parameters
    (empty: it does)."""
    problems = [f"{name} has run to 0: its term adds at most {size:.2g} nats" for name, size
                in term_sizes(law, record, columns).items() if size < MIN_TERM_SIZE]
    problems += [f"{name} moves its term by only {effect:.2g} nats" for name, effect
                 in exponent_effects(law, record, columns).items() if effect < MIN_EXPONENT_EFFECT]
    fitted = law.natural_params(np.zeros(law.num_params))  # not the derived quantities
    for name, (low, high) in ((name, record.ci[name]) for name in fitted if name in record.ci):
        is_coefficient = name in law.log_coef_names.values()
        if is_coefficient and not (0.0 < low and np.isfinite(high)):
            problems.append(f"{name} interval [{low:.3g}, {high:.3g}] reaches 0 or infinity")
        elif not is_coefficient and not (np.isfinite(low) and np.isfinite(high)):
            problems.append(f"{name} interval [{low:.3g}, {high:.3g}] is not finite")
        elif not is_coefficient and low <= 0.0 <= high:
            problems.append(f"{name} interval [{low:.3g}, {high:.3g}] contains 0")
        elif not is_coefficient and high - low > MAX_EXPONENT_CI_WIDTH:
            problems.append(f"{name} interval [{low:.3g}, {high:.3g}] is wider than "
                            f"{MAX_EXPONENT_CI_WIDTH:g}")
    return problems


@dataclass(kw_only=True)
class FormOutcome:
    """One form's checks: identified and predictive, or why it was not fitted (``skipped``)."""

    law: str
    """The form's name (a law of ``moelab.scaling.laws``)."""
    num_params: int
    """Its free parameters."""
    objective: float | None = field(default=None, metadata=OMIT_NONE)
    """Its fit's summed Huber loss."""
    identified: bool | None = field(default=None, metadata=OMIT_NONE)
    """Every parameter is pinned down by the data (no problems)."""
    problems: list[str] | None = field(default=None, metadata=OMIT_NONE)
    """Why the fit does not identify its parameters (``identification_problems``)."""
    holdout_mae: float | None = field(default=None, metadata=OMIT_NONE)
    """Nats: the mean absolute error on the held-out points of the fit without them."""
    predictive: bool | None = field(default=None, metadata=OMIT_NONE)
    """holdout_mae is within the criteria's max_holdout_mae."""
    skipped: str | None = field(default=None, metadata=OMIT_NONE)
    """Set (with the reason) when the points are too few for this form: nothing else is."""

    @property
    def passes(self) -> bool:
        return self.skipped is None and bool(self.predictive and self.identified)


@dataclass(kw_only=True)
class FormCheck(FormOutcome):
    """A form's checks with the fits they read (None when skipped)."""

    fit: LawFit | None = None
    """Fitted to every point, with bootstrap resamples."""
    fit_holdout: LawFit | None = None
    """Fitted without the held-out points."""


@dataclass(frozen=True, kw_only=True)
class FormCriteria:
    """The thresholds a selection applied (``select_form``)."""

    holdout: str
    """Which points the held-out check leaves out."""
    max_holdout_mae: float
    """The largest held-out mean absolute error (nats) a chosen form may have."""
    min_term_size: float | None = field(default=None, metadata=OMIT_NONE)
    """None in a forms.json written before the check existed."""
    min_exponent_effect: float
    """The least an exponent must move its term over the data (nats) to count as identified."""
    max_exponent_ci_width: float
    """The widest an exponent's bootstrap 95 % interval may be."""
    bootstrap_replicates: int
    """Bootstrap resamples behind those intervals."""


@dataclass
class FormSelection:
    """Every form's checks, richest first, and the richest that passes (None: none does)."""

    chosen: str | None
    criteria: FormCriteria
    forms: list[FormCheck]

    def chosen_check(self) -> FormCheck | None:
        return next((check for check in self.forms if check.law == self.chosen), None)


def check_form(law: Law, columns: dict[str, np.ndarray], holdout: str, *,
               bootstrap_replicates: int, max_starts: int | None = None,
               seed: int = 0) -> FormCheck:
    """Fit ``law`` to every point (bootstrapped) and without the ``holdout`` points; check both."""
    fit = fit_columns(law.name, columns, bootstrap_replicates=bootstrap_replicates,
                      max_starts=max_starts, seed=seed)
    heldout = fit_columns(law.name, columns, holdout=holdout, max_starts=max_starts)
    problems = identification_problems(law, fit, columns)
    assert heldout.holdout is not None  # fitted with a holdout, so it has its error
    mae = heldout.holdout.mean_abs_error
    return FormCheck(law=law.name, num_params=law.num_params, objective=fit.objective,
                     identified=not problems, problems=problems, holdout_mae=mae,
                     predictive=mae <= MAX_HOLDOUT_MAE, fit=fit, fit_holdout=heldout)


def select_form(columns: dict[str, np.ndarray], holdout: str, *, bootstrap_replicates: int,
                max_starts: int | None = None, seed: int = 0, forms: tuple[Law, ...] = FORMS,
                log: Callable[[str], None] = print) -> FormSelection:
    """Check every form (richest first) and choose the richest that passes; a form too large
    for the points is left out (its check says why)."""
    checks = []
    for law in forms:
        try:
            check = check_form(law, columns, holdout, bootstrap_replicates=bootstrap_replicates,
                               max_starts=max_starts, seed=seed)
        except MoelabError as exc:  # too few points for this form, or for it without the holdout
            log(f"{law.name} fit skipped: {exc}")
            checks.append(FormCheck(law=law.name, num_params=law.num_params, skipped=str(exc)))
            continue
        checks.append(check)
        log(f"{law.name}: held-out MAE {check.holdout_mae:.4f}, "
            f"{'identified' if check.identified else 'not identified'}")
    passing = [c for c in checks if c.passes]
    chosen = max(passing, key=lambda c: (c.num_params, -(c.holdout_mae or 0.0)), default=None)
    criteria = FormCriteria(holdout=holdout, max_holdout_mae=MAX_HOLDOUT_MAE,
                            min_term_size=MIN_TERM_SIZE, min_exponent_effect=MIN_EXPONENT_EFFECT,
                            max_exponent_ci_width=MAX_EXPONENT_CI_WIDTH,
                            bootstrap_replicates=bootstrap_replicates)
    return FormSelection(chosen.law if chosen else None, criteria, checks)
