"""The law forms tested against the sweep's own noise: F tests against the pure error of seed
replicates, N counted as total and as non-embedding parameters, held-out largest D as well as
largest S; and the effect of sparsity at fixed N and D read off the runs directly.

Written as ``form_tests.json`` (``FormTestsRecord``) next to forms.json; only a sweep with
replicated points (several seeds) has a pure error, so only such a sweep gets one.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable

import numpy as np

from moelab.errors import MoelabError
from moelab.scaling.form_tests import (
    FORMS_BY_NAME, choose_by_f_tests, lack_of_fit, pure_error, residual_ss,
)
from moelab.scaling.forms import FORMS, FormSelection
from moelab.scaling.fit_record import fit_columns
from moelab.scaling.table import holdout_mask
from moelab.stats.intervals import mean_interval, t_interval
from moelab.sweep.analysis_records import (
    CountChecks, ExpertPair, FormTestCheck, FormTestsRecord, SparsityDelta, SparsityDeltas,
)
from moelab.sweep.results_csv import ResultRow

N_COUNTS = {"total": "N_total", "non_embedding": "N_non_embedding"}
"""How N is counted in a fit, and the results.csv column behind it."""
HOLDOUTS = ("S=max", "D=max")


def form_tests(selection: FormSelection, columns: dict[str, np.ndarray],
               non_embedding: np.ndarray | None, *, max_starts: int | None,
               log: Callable[[str], None]) -> FormTestsRecord | None:
    """Per N count: every form's residual sum of squares, lack-of-fit F, held-out errors at the
    largest S and the largest D, and the form chosen by nested F tests. ``selection`` is
    ``select_form``'s on total N (its fits are reused). None without replicated points."""
    pure = pure_error(columns)
    if not pure.variance:
        return None
    counts = {"total": _checks_total(selection, columns, max_starts, log)}
    if non_embedding is not None:
        counts["non_embedding"] = _checks_refitted({**columns, "N": non_embedding}, max_starts, log)
    by_count = {}
    for count, forms in counts.items():
        for form in forms:
            if form.ss is not None:
                form.lack_of_fit = lack_of_fit(form.ss, form.num_params, pure)
        fitted = {f.law: fit for f in forms if (fit := f.fitted()) is not None}
        by_count[count] = CountChecks(forms, choose_by_f_tests(fitted, pure) if fitted else None)
    return FormTestsRecord(pure_error=pure, holdouts=list(HOLDOUTS), by_count=by_count)


def _checks_total(selection: FormSelection, columns: dict, max_starts,
                  log) -> list[FormTestCheck]:
    """Total N: the forms' fits from the selection, plus a refit without the largest D."""
    forms = []
    for check in selection.forms:
        if check.fit is None:
            forms.append(FormTestCheck(check.law, check.num_params, skipped=check.skipped))
            continue
        law = FORMS_BY_NAME[check.law]
        forms.append(FormTestCheck(law.name, law.num_params,
                                   ss=residual_ss(law, check.fit.theta, columns),
                                   holdout_mae={"S=max": check.holdout_mae,
                                                "D=max": _holdout_mae(law.name, columns, "D=max",
                                                                      max_starts, log)}))
    return forms


def _checks_refitted(columns: dict, max_starts, log) -> list[FormTestCheck]:
    forms = []
    for law in FORMS:
        try:
            fit = fit_columns(law.name, columns, max_starts=max_starts)
        except MoelabError as exc:
            forms.append(FormTestCheck(law.name, law.num_params, skipped=str(exc)))
            continue
        forms.append(FormTestCheck(law.name, law.num_params,
                                   ss=residual_ss(law, fit.theta, columns),
                                   holdout_mae={spec: _holdout_mae(law.name, columns, spec,
                                                                   max_starts, log)
                                                for spec in HOLDOUTS}))
    return forms


def _holdout_mae(law_name: str, columns: dict, spec: str, max_starts, log) -> float | None:
    try:
        holdout_mask(columns, spec)
        fit = fit_columns(law_name, columns, holdout=spec, max_starts=max_starts)
    except MoelabError as exc:  # a holdout that leaves too few points for this form
        log(f"{law_name} without {spec} skipped: {exc}")
        return None
    return fit.holdout.mean_abs_error if fit.holdout else None


def sparsity_deltas(rows: list[ResultRow]) -> SparsityDeltas | None:
    """Loss at S minus the dense model's, per size and token budget, from the runs alone: the
    difference of the seeds' means with a 95 % t interval on the pooled seed variance. None
    unless every (size, budget) trains its sparsities on the same D (a token-budget sweep) and
    some point has two seeds."""
    losses: dict[tuple, list[float]] = {}
    tokens: dict[tuple, set] = {}
    for row in rows:
        losses.setdefault(row.point, []).append(row.best_val_loss)
        tokens.setdefault((row.size, row.budget), set()).add(row.D)
    if any(len(d) > 1 for d in tokens.values()):
        return None
    deviations = [np.asarray(v) - np.mean(v) for v in losses.values() if len(v) > 1]
    df = sum(len(d) - 1 for d in deviations)
    if df == 0:
        return None
    variance = sum(float(np.sum(d ** 2)) for d in deviations) / df
    table = []
    for (size, budget, sparsity, experts), values in sorted(losses.items()):
        dense = losses.get((size, budget, 0.0, 1))
        if sparsity == 0.0 or dense is None:
            continue
        delta = float(np.mean(values) - np.mean(dense))
        standard_error = float(np.sqrt(variance * (1 / len(values) + 1 / len(dense))))
        table.append(SparsityDelta(size=size, budget=budget, D=next(iter(tokens[(size, budget)])),
                                   sparsity=sparsity, E=experts, delta=delta,
                                   ci=list(t_interval(delta, standard_error, df)),
                                   seeds=[len(values), len(dense)]))
    return SparsityDeltas(seed_std=float(np.sqrt(variance)), df=df, deltas=table,
                          expert_pairs=expert_pairs(rows))


def expert_pairs(rows: list[ResultRow]) -> list[ExpertPair]:
    """At one size, budget and sparsity trained with several E (a grid with top_ks): each pair
    of E, the loss difference seed by seed (the same seed, so the pair shares its data order),
    its mean and 95 % t interval over the seeds."""
    by_seed: dict[tuple, dict[int, dict[str, float]]] = {}
    for row in rows:
        if row.S > 0:
            by_seed.setdefault((row.size, row.budget, row.S), {}).setdefault(row.E, {})[
                row.seed] = row.best_val_loss
    pairs = []
    for (size, budget, sparsity), by_experts in sorted(by_seed.items()):
        for low, high in itertools.combinations(sorted(by_experts), 2):
            seeds = sorted(set(by_experts[low]) & set(by_experts[high]))
            differences = np.array([by_experts[high][s] - by_experts[low][s] for s in seeds])
            interval = mean_interval(differences)
            if interval is None:  # fewer than 2 seeds in common
                continue
            pairs.append(ExpertPair(size=size, budget=budget, sparsity=sparsity, E=[low, high],
                                    seeds=len(differences), difference=float(differences.mean()),
                                    ci=list(interval)))
    return pairs
