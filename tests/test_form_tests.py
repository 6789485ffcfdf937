"""F tests of law forms against the pure error of replicate points, checked against hand
computations with numpy and scipy.stats; the choice between nested forms on synthetic truths;
and the forms whose S*(C) is constant by construction."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import numpy as np
import pytest
import scipy.stats

from moelab.scaling.form_tests import (
    CONSTANT_S_STAR, FormSS, PureError, choose_by_f_tests, lack_of_fit, nested_test,
    optimal_sparsity_moves, pure_error, residual_ss,
)
from moelab.scaling.laws import get_law
from moelab.scaling.fit_record import fit_columns

EFFECTIVE = get_law("sparsity-effective-size")
EFFECTIVE_TRUTH = {"b": 40.0, "d": 20.0, "e": 1.2, "beta": 0.3, "delta": 0.3, "gamma": 0.35}


def replicated_points(law, truth, seeds=2, noise=0.004, rng_seed=0):
    """3 sizes x 3 token budgets x 4 sparsities, each trained ``seeds`` times with noise."""
    rng = np.random.default_rng(rng_seed)
    grid = [(n, d, s) for n in (1e5, 3e5, 1e6) for d in (1e6, 3e6, 1e7)
            for s in (0.0, 0.5, 0.75, 0.875)]
    rows = [(n, d, s) for n, d, s in grid for _ in range(seeds)]
    columns = {key: np.array([r[i] for r in rows]) for i, key in enumerate("NDS")}
    clean = law.predict_loss(truth, N=columns["N"], D=columns["D"], S=columns["S"])
    columns["loss"] = clean * np.exp(rng.normal(0, noise, len(clean)))
    return columns


def test_pure_error_is_the_spread_about_each_points_mean_by_hand():
    columns = {"N": np.array([1.0, 1, 2, 2, 2, 3]), "D": np.ones(6), "S": np.zeros(6),
               "loss": np.array([2.0, 2.2, 3.0, 3.3, 3.6, 4.0])}
    logs = np.log(columns["loss"])
    by_hand = (np.sum((logs[:2] - logs[:2].mean()) ** 2) + np.sum((logs[2:5] - logs[2:5].mean()) ** 2))
    pure = pure_error(columns)
    assert pure.ss == pytest.approx(by_hand, rel=1e-12)
    assert (pure.df, pure.groups) == (3, 3)  # 6 points in 3 groups
    assert pure.variance == pytest.approx(by_hand / 3)


def test_lack_of_fit_and_nested_f_statistics_match_a_hand_computation():
    pure = PureError(ss=0.02, df=40, groups=36, n_points=76, variance=0.0005)
    lack = lack_of_fit(0.05, 6, pure)
    f = (0.05 - 0.02) / (36 - 6) / 0.0005
    assert lack.F == pytest.approx(f) and lack.df == [30, 40]
    assert lack.p == pytest.approx(scipy.stats.f.sf(f, 30, 40))
    test = nested_test(FormSS("small", 5, 0.06), FormSS("large", 7, 0.05), pure)
    f = (0.06 - 0.05) / 2 / 0.0005
    assert test.F == pytest.approx(f) and test.p == pytest.approx(scipy.stats.f.sf(f, 2, 40))
    lr = 76 * math.log(0.06 / 0.05)
    assert test.likelihood_ratio == pytest.approx(lr)
    assert test.p_likelihood_ratio == pytest.approx(scipy.stats.chi2.sf(lr, 2))
    assert lack_of_fit(0.05, 6, dataclasses.replace(pure, variance=None)) is None


def fitted(columns, names):
    fits = {}
    for name in names:
        law = get_law(name)
        record = fit_columns(name, columns, max_starts=512)
        fits[name] = FormSS(name, law.num_params, residual_ss(law, record.theta, columns))
    return fits


@pytest.mark.slow
def test_f_tests_take_the_s_term_a_truth_has_and_not_one_it_lacks():
    names = ("chinchilla", "sparsity-effective-size", "sparsity-additive")
    with_s = replicated_points(EFFECTIVE, EFFECTIVE_TRUTH)
    choice = choose_by_f_tests(fitted(with_s, names), pure_error(with_s))
    assert choice.path[0] == "chinchilla" and choice.chosen != "chinchilla"
    assert choice.chosen_likelihood_ratio != "chinchilla"
    chinchilla = get_law("chinchilla")
    without_s = replicated_points(chinchilla, {"A": 40.0, "B": 40.0, "E": 1.2, "alpha": 0.35,
                                               "beta": 0.3}, rng_seed=1)
    choice = choose_by_f_tests(fitted(without_s, names), pure_error(without_s))
    assert choice.chosen == "chinchilla" and choice.chosen_likelihood_ratio == "chinchilla"
    assert all(t.p > 0.05 for t in choice.tests if t.small == "chinchilla")
    assert choice.constant_s_star == CONSTANT_S_STAR["chinchilla"]


def test_the_effective_size_form_has_a_constant_s_star_and_the_full_law_need_not():
    assert "sparsity-effective-size" in CONSTANT_S_STAR and "sparsity" not in CONSTANT_S_STAR
    # An interior optimum (S* = 0.958 here) stays put over budgets 10^6 apart.
    moves = optimal_sparsity_moves(EFFECTIVE, {**EFFECTIVE_TRUTH, "delta": 0.05}, 0.2)
    assert 0.5 < moves.sparsity[0] < 0.97 and not moves.moves, moves
    full = {"a": 30.0, "b": 400.0, "c": 0.3, "d": 200.0, "e": 1.2, "alpha": 0.25, "beta": 0.3,
            "lam": 0.3, "delta": -0.4, "gamma": 0.35}
    assert optimal_sparsity_moves(get_law("sparsity"), full, 0.4).moves


def test_the_report_says_in_words_when_the_chosen_form_fixes_s_star():
    from moelab.sweep.analyses.optima import constant_s_star_text

    text = constant_s_star_text("sparsity-effective-size")
    assert "cannot answer how S* moves with compute" in text
    assert "C^(-beta gamma / (beta + gamma)) g(S)" in text
    assert constant_s_star_text("sparsity") == constant_s_star_text("sparsity-interaction") == ""


STORED = sorted((Path(__file__).resolve().parents[1] / "experiments" / "results" / "sweeps")
                .glob("*/form_tests.json"))


@pytest.mark.parametrize("path", STORED, ids=[p.parent.name for p in STORED])
def test_a_stored_form_tests_json_reads_back_as_written_key_for_key(path):
    """Files earlier moelabs wrote as hand-built dicts (some without the likelihood-ratio path,
    the deltas' E or the expert pairs) read into the typed record and write back unchanged."""
    from moelab.codec import from_json, to_json
    from moelab.sweep.analyses.form_tests import FormTestsRecord

    stored = json.loads(path.read_text())
    record = from_json(FormTestsRecord, stored)
    # a single-sparsity grid (cpu-granularity) fits no law forms: only its deltas
    assert record.by_count is None or record.by_count["total"].forms
    assert json.dumps(to_json(record), indent=2) == json.dumps(stored, indent=2)
