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
import scipy.stats

from moelab.errors import MoelabError
from moelab.scaling.form_tests import (
    CONSTANT_S_STAR, FORMS_BY_NAME, choose_by_f_tests, lack_of_fit, pure_error, residual_ss,
)
from moelab.scaling.forms import FORMS
from moelab.scaling.summary import fit_columns
from moelab.scaling.table import holdout_mask
from moelab.sweep.folder import row_seed

N_COUNTS = {"total": "N_total", "non_embedding": "N_non_embedding"}
"""How N is counted in a fit, and the results.csv column behind it."""
HOLDOUTS = ("S=max", "D=max")


def form_tests(selection: dict, columns: dict[str, np.ndarray], non_embedding: np.ndarray | None,
               *, max_starts: int | None, log: Callable[[str], None]) -> dict | None:
    """Per N count: every form's residual sum of squares, lack-of-fit F, held-out errors at the
    largest S and the largest D, and the form chosen by nested F tests. ``selection`` is
    ``select_form``'s on total N (its fits are reused). None without replicated points."""
    pure = pure_error(columns)
    if not pure["variance"]:
        return None
    counts = {"total": _checks_total(selection, columns, max_starts, log)}
    if non_embedding is not None:
        counts["non_embedding"] = _checks_refitted({**columns, "N": non_embedding}, max_starts, log)
    result = {"pure_error": pure, "holdouts": list(HOLDOUTS), "by_count": {}}
    for count, forms in counts.items():
        for form in forms:
            if "ss" in form:
                form["lack_of_fit"] = lack_of_fit(form["ss"], form["num_params"], pure)
        fitted = {f["law"]: f for f in forms if "ss" in f}
        choice = choose_by_f_tests(fitted, pure) if fitted else None
        if choice:
            choice["constant_s_star"] = CONSTANT_S_STAR.get(choice["chosen"])
        result["by_count"][count] = {"forms": forms, "selection": choice}
    return result


def _checks_total(selection: dict, columns: dict, max_starts, log) -> list[dict]:
    """Total N: the forms' fits from the selection, plus a refit without the largest D."""
    forms = []
    for check in selection["forms"]:
        if "skipped" in check:
            forms.append({"law": check["law"], "num_params": check["num_params"],
                          "skipped": check["skipped"]})
            continue
        law = FORMS_BY_NAME[check["law"]]
        forms.append({"law": law.name, "num_params": law.num_params,
                      "ss": residual_ss(law, check["fit"]["theta"], columns),
                      "holdout_mae": {"S=max": check["holdout_mae"],
                                      "D=max": _holdout_mae(law.name, columns, "D=max",
                                                            max_starts, log)}})
    return forms


def _checks_refitted(columns: dict, max_starts, log) -> list[dict]:
    forms = []
    for law in FORMS:
        try:
            fit = fit_columns(law.name, columns, max_starts=max_starts)
        except MoelabError as exc:
            forms.append({"law": law.name, "num_params": law.num_params, "skipped": str(exc)})
            continue
        forms.append({"law": law.name, "num_params": law.num_params,
                      "ss": residual_ss(law, fit["theta"], columns),
                      "holdout_mae": {spec: _holdout_mae(law.name, columns, spec, max_starts, log)
                                      for spec in HOLDOUTS}})
    return forms


def _holdout_mae(law_name: str, columns: dict, spec: str, max_starts, log) -> float | None:
    try:
        holdout_mask(columns, spec)
        fit = fit_columns(law_name, columns, holdout=spec, max_starts=max_starts)
    except MoelabError as exc:  # a holdout that leaves too few points for this form
        log(f"{law_name} without {spec} skipped: {exc}")
        return None
    return fit["holdout"]["mean_abs_error"]


def sparsity_deltas(rows: list[dict[str, str]]) -> dict | None:
    """Loss at S minus the dense model's, per size and token budget, from the runs alone: the
    difference of the seeds' means with a 95 % t interval on the pooled seed variance. None
    unless every (size, budget) trains its sparsities on the same D (a token-budget sweep) and
    some point has two seeds."""
    losses: dict[tuple, list[float]] = {}
    tokens: dict[tuple, set] = {}
    for row in rows:
        key = (row["size"], row["budget"])
        losses.setdefault((*key, float(row["S"]), int(float(row["E"]))), []).append(
            float(row["best_val_loss"]))
        tokens.setdefault(key, set()).add(float(row["D"]))
    if any(len(d) > 1 for d in tokens.values()):
        return None
    deviations = [np.asarray(v) - np.mean(v) for v in losses.values() if len(v) > 1]
    df = sum(len(d) - 1 for d in deviations)
    if df == 0:
        return None
    variance = sum(float(np.sum(d ** 2)) for d in deviations) / df
    quantile = float(scipy.stats.t.ppf(0.975, df))
    table = []
    for (size, budget, sparsity, experts), values in sorted(losses.items()):
        dense = losses.get((size, budget, 0.0, 1))
        if sparsity == 0.0 or dense is None:
            continue
        delta = float(np.mean(values) - np.mean(dense))
        half = quantile * float(np.sqrt(variance * (1 / len(values) + 1 / len(dense))))
        table.append({"size": size, "budget": budget, "D": next(iter(tokens[(size, budget)])),
                      "sparsity": sparsity, "E": experts, "delta": delta,
                      "ci": [delta - half, delta + half], "seeds": [len(values), len(dense)]})
    return {"seed_std": float(np.sqrt(variance)), "df": df, "deltas": table,
            "expert_pairs": expert_pairs(rows)}


def expert_pairs(rows: list[dict[str, str]]) -> list[dict]:
    """At one size, budget and sparsity trained with several E (a grid with top_ks): each pair
    of E, the loss difference seed by seed (the same seed, so the pair shares its data order),
    its mean and 95 % t interval over the seeds."""
    by_seed: dict[tuple, dict[int, dict[str, float]]] = {}
    for row in rows:
        if float(row["S"]) > 0:
            key = (row["size"], row["budget"], float(row["S"]))
            by_seed.setdefault(key, {}).setdefault(int(float(row["E"])), {})[row_seed(row)] = \
                float(row["best_val_loss"])
    pairs = []
    for (size, budget, sparsity), by_experts in sorted(by_seed.items()):
        for low, high in itertools.combinations(sorted(by_experts), 2):
            seeds = sorted(set(by_experts[low]) & set(by_experts[high]))
            differences = np.array([by_experts[high][s] - by_experts[low][s] for s in seeds])
            if len(differences) < 2:
                continue
            half = float(scipy.stats.t.ppf(0.975, len(differences) - 1)
                         * differences.std(ddof=1) / np.sqrt(len(differences)))
            mean = float(differences.mean())
            pairs.append({"size": size, "budget": budget, "sparsity": sparsity,
                          "E": [low, high], "seeds": len(differences),
                          "difference": mean, "ci": [mean - half, mean + half]})
    return pairs
