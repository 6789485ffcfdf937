"""Which form of the sparsity law a sweep's points identify.

A small sweep cannot pin down all ten parameters of Abnar et al.'s eq. 6: the fit reaches a low
objective with parameters that mean nothing (alpha ~ 3,400 on the demo's 24 points), and its
bootstrap intervals run off to zero or infinity. So each form of ``SPARSITY_FORMS`` (the full
law, then eq. 6 with terms removed) is fitted, bootstrapped and checked on held-out points, and
the richest form that passes both checks is the one a report uses:

- **identified**: every term but the constant e changes by at least ``MIN_TERM_SPREAD`` nats
  across the points (a term that barely changes over the sweep acts as a constant, confounded
  with e, or has been switched off; either way its coefficient and exponent are not measured,
  and as the optimizer need not move them, the bootstrap alone may not show it), every
  parameter's 95 % bootstrap interval is finite (no coefficient runs to 0 or to infinity, no
  exponent to infinity) and no exponent's interval is wider than ``MAX_EXPONENT_CI_WIDTH`` (an
  exponent the resamples move by more than that is not measured: scaling exponents are
  fractions);
- **predictive**: refitted without the held-out points, the form predicts them with a mean
  absolute error of at most ``MAX_HOLDOUT_MAE`` nats.

Without bootstrap resamples the intervals are not checked, only the terms (the record says so). When no form passes, none is chosen: the caller reports the
checks rather than a fit.
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from moelab.errors import MoelabError
from moelab.scaling.laws import SPARSITY_FORMS, Law, log_features
from moelab.scaling.summary import fit_columns

MIN_TERM_SPREAD = 0.01
"""Nats: about the seed noise of one CPU sweep point."""
MAX_EXPONENT_CI_WIDTH = 1.0
MAX_HOLDOUT_MAE = 0.02
"""Nats: the accuracy a sweep's law must reach on points it never saw."""


def term_spreads(law: Law, record: dict, columns: dict[str, np.ndarray]) -> dict[str, float]:
    """How much each non-constant term of a fit changes across the points (max - min, nats),
    by its coefficient's name."""
    theta = np.array([record["theta"][name] for name in law.param_names])
    values = np.exp(law.log_terms(theta, log_features(law, columns)))
    return {law.log_coef_names[log_coef]: float(value.max() - value.min())
            for (log_coef, exponents), value in zip(law.terms, values) if exponents}


def identification_problems(law: Law, record: dict, columns: dict[str, np.ndarray]) -> list[str]:
    """Why a fit record (bootstrapped, fitted to ``columns``) does not identify its parameters
    (empty: it does)."""
    problems = [f"term {name} changes by only {spread:.2g} nats" for name, spread
                in term_spreads(law, record, columns).items() if spread < MIN_TERM_SPREAD]
    for name, (low, high) in record["ci"].items():
        is_coefficient = name in law.log_coef_names.values()
        if is_coefficient and not (0.0 < low and np.isfinite(high)):
            problems.append(f"{name} interval [{low:.3g}, {high:.3g}] reaches 0 or infinity")
        elif not is_coefficient and not (np.isfinite(low) and np.isfinite(high)):
            problems.append(f"{name} interval [{low:.3g}, {high:.3g}] is not finite")
        elif not is_coefficient and high - low > MAX_EXPONENT_CI_WIDTH:
            problems.append(f"{name} interval [{low:.3g}, {high:.3g}] is wider than "
                            f"{MAX_EXPONENT_CI_WIDTH:g}")
    return problems


def check_form(law: Law, columns: dict[str, np.ndarray], holdout: str, *,
               bootstrap_replicates: int, max_starts: int | None = None, seed: int = 0) -> dict:
    """Fit ``law`` to every point (bootstrapped) and without the ``holdout`` points; check both."""
    fit = fit_columns(law.name, columns, bootstrap_replicates=bootstrap_replicates,
                      max_starts=max_starts, seed=seed)
    heldout = fit_columns(law.name, columns, holdout=holdout, max_starts=max_starts)
    problems = identification_problems(law, fit, columns)
    mae = heldout["holdout"]["mean_abs_error"]
    return {
        "law": law.name, "num_params": law.num_params, "objective": fit["objective"],
        "identified": not problems, "intervals_checked": bool(bootstrap_replicates),
        "problems": problems,
        "holdout_mae": mae, "predictive": mae <= MAX_HOLDOUT_MAE,
        "fit": fit, "fit_holdout": heldout,
    }


def select_form(columns: dict[str, np.ndarray], holdout: str, *, bootstrap_replicates: int,
                max_starts: int | None = None, seed: int = 0, forms: tuple[Law, ...] = SPARSITY_FORMS,
                log: Callable[[str], None] = print) -> dict:
    """Check every form (richest first) and choose the richest that passes.

    Returns {"chosen": law name or None, "criteria": {...}, "forms": [check_form records]};
    a form too large for the points is left out (its record says why).
    """
    checks = []
    for law in forms:
        try:
            checks.append(check_form(law, columns, holdout, bootstrap_replicates=bootstrap_replicates,
                                     max_starts=max_starts, seed=seed))
        except MoelabError as exc:  # too few points for this form, or for it without the holdout
            log(f"{law.name} fit skipped: {exc}")
            checks.append({"law": law.name, "num_params": law.num_params, "skipped": str(exc)})
            continue
        check = checks[-1]
        log(f"{law.name}: held-out MAE {check['holdout_mae']:.4f}, "
            f"{'identified' if check['identified'] else 'not identified'}")
    passing = [c for c in checks if "skipped" not in c and c["predictive"] and c["identified"]]
    chosen = max(passing, key=lambda c: (c["num_params"], -c["holdout_mae"]), default=None)
    return {
        "chosen": chosen["law"] if chosen else None,
        "criteria": {"holdout": holdout, "max_holdout_mae": MAX_HOLDOUT_MAE,
                     "min_term_spread": MIN_TERM_SPREAD,
                     "max_exponent_ci_width": MAX_EXPONENT_CI_WIDTH,
                     "bootstrap_replicates": bootstrap_replicates},
        "forms": checks,
    }
