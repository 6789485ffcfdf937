"""The sweep report's efficiency leverage and form table as analyses
(moelab.sweep.analyses.efficiency_leverage, .form_table): leverage read off a constructed law
against Chinchilla's closed form inverted with scipy, and when each analysis has nothing to say."""

from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np
import pytest
import scipy.optimize

from moelab.report.analysis import Findings
from moelab.sweep.analyses import ANALYSES, efficiency_leverage, form_table
from moelab.sweep.analyses.law_fit import ANALYSIS as LAW_FIT

# The effective-size law: a MoE of total N at sparsity S is a dense model of N (1 - S)^(delta /
# gamma) parameters, so its dense law is Chinchilla's with A = d, alpha = gamma, B = b.
LAW = {"b": 400.0, "d": 200.0, "e": 1.2, "beta": 0.3, "delta": 0.5, "gamma": 0.35}


def chinchilla_optimal_loss(flops: float) -> float:
    """Hoffmann et al.'s closed-form compute-optimal loss of the dense law."""
    alpha, beta, a, b = LAW["gamma"], LAW["beta"], LAW["d"], LAW["b"]
    g = (alpha * a / (beta * b)) ** (1 / (alpha + beta))
    n_opt = g * (flops / 6) ** (beta / (alpha + beta))
    d_opt = (flops / 6) ** (alpha / (alpha + beta)) / g
    return LAW["e"] + a / n_opt ** alpha + b / d_opt ** beta


def row(sparsity, experts, seed, total=4e6, tokens=2e8):
    active = total * (0.25 + 0.75 * (1 - sparsity))
    return SimpleNamespace(size="s1", S=sparsity, E=experts, N_total=total, N_active=active,
                           D=tokens, C=6 * active * tokens, best_val_loss=3.0, seed=seed,
                           tokens_per_s=1000.0, G=None)


def folder(rows):
    return SimpleNamespace(results=object(), rows=rows)


def test_leverage_of_the_chosen_law_is_the_closed_form_inverted():
    rows = [row(s, e, seed) for s, e in ((0.0, 1), (0.75, 4)) for seed in (0, 1)]
    fit = SimpleNamespace(law="sparsity-effective-size", params=LAW, replicas=[LAW] * 3)
    record = efficiency_leverage.compute(folder(rows), Findings({LAW_FIT.name: fit}))
    (point,) = record.points  # the MoE point, its two seeds pooled
    effective = point.N_total * (1 - 0.75) ** (LAW["delta"] / LAW["gamma"])
    loss = LAW["e"] + LAW["d"] / effective ** LAW["gamma"] + LAW["b"] / point.D ** LAW["beta"]
    assert point.law_loss == pytest.approx(loss, rel=1e-12)
    log_c = scipy.optimize.brentq(lambda x: chinchilla_optimal_loss(math.exp(x)) - loss, 10, 70)
    assert point.leverage == pytest.approx(math.exp(log_c) / (6 * point.N_active * point.D),
                                           rel=1e-5)
    assert point.ci == pytest.approx([point.leverage] * 2, rel=1e-3)
    assert "## Efficiency leverage" in efficiency_leverage.render(record, folder(rows), Findings())


def test_no_leverage_without_a_chosen_law_or_from_a_law_blind_to_s():
    rows = [row(0.0, 1, 0), row(0.75, 4, 0)]
    assert efficiency_leverage.compute(folder(rows), Findings({LAW_FIT.name: None})) is None
    blind = SimpleNamespace(law="chinchilla", params={}, replicas=[])
    assert efficiency_leverage.compute(folder(rows), Findings({LAW_FIT.name: blind})) is None
    assert efficiency_leverage.render(None, folder(rows), Findings()) == ""


def test_the_form_tables_columns_add_e_and_g_only_where_every_run_has_one():
    rows = [row(0.0, 1, 0), row(0.75, 4, 0)]
    base = {"N": np.array([4e6, 4e6]), "loss": np.array([3.0, 2.9])}
    stand_in = SimpleNamespace(rows=rows, law_columns=lambda: dict(base))
    columns = form_table.sweep_columns(stand_in)
    assert list(columns["E"]) == [1.0, 4.0] and "G" not in columns
    for r, g in zip(rows, (1.0, 2.0)):
        r.G = g
    assert list(form_table.sweep_columns(stand_in)["G"]) == [1.0, 2.0]


def test_both_are_in_the_registry_where_their_inputs_are_computed():
    names = [analysis.name for analysis in ANALYSES]
    assert names.index("form_table") == names.index("form_tests") + 1
    assert names.index("law_fit") < names.index("efficiency_leverage") == names.index("optima") + 1
