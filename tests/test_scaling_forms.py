"""Choosing the form of the sparsity law a sweep identifies: synthetic truths and hand-made fits."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from moelab.scaling.forms import (
    FORMS, MAX_EXPONENT_CI_WIDTH, MAX_HOLDOUT_MAE, MIN_EXPONENT_EFFECT, MIN_STEADY_REPLICATES,
    MIN_TERM_SIZE, exponent_effects, identification_problems, select_form, term_sizes,
)
from moelab.scaling.laws import CHINCHILLA, SPARSITY, SPARSITY_FORMS, get_law
from moelab.sweep.grid import load_grid
from moelab.sweep.report import sweep_inputs, write_sweep_report
from moelab.sweep.tabulate import write_results_csv
from sweep_rows import synthetic_results, write_grid_json

REPO_ROOT = Path(__file__).resolve().parents[1]
EFFECTIVE_SIZE = get_law("sparsity-effective-size")
EFFECTIVE_TRUTH = {"b": 40.0, "d": 20.0, "e": 1.2, "beta": 0.3, "delta": 0.3, "gamma": 0.35}
BOOTSTRAP_REPLICATES = 64  # enough for the choice of form not to hang on the CPU's rounding


def grid_columns(law, truth, noise: float, seed: int = 0) -> dict[str, np.ndarray]:
    """4 sizes x 4 sparsities x 3 token budgets, losses from ``law`` with relative noise."""
    n, s, d = np.meshgrid([2e5, 4e5, 8e5, 1.6e6], [0.0, 0.5, 0.75, 0.875], [2e5, 6e5, 1.8e6])
    columns = {"N": n.ravel(), "S": s.ravel(), "D": d.ravel()}
    loss = law.predict_loss(truth, **columns)
    columns["loss"] = loss * np.exp(np.random.default_rng(seed).normal(0, noise, loss.shape))
    return columns


def test_reduced_forms_are_eq6_with_terms_removed():
    values = {"a": 30.0, "b": 400.0, "c": 0.7, "d": 200.0, "e": 1.2, "alpha": 0.25, "beta": 0.3,
              "lam": 0.6, "delta": -0.4, "gamma": 0.35}
    columns = {"N": np.array([1e5, 1e6, 3e6]), "D": np.array([1e6, 3e6, 1e7]),
               "S": np.array([0.0, 0.75, 0.9])}
    for law in SPARSITY_FORMS:
        assert set(law.terms) <= set(SPARSITY.terms), law.name
        reduced = {name: values[name] for name in law.natural_params(np.zeros(law.num_params))}
        # The full law with the missing coefficients set to 0 predicts the same losses.
        full = {**values, **{x: 0.0 for x in "abcde" if x not in reduced}}
        assert law.predict_loss(reduced, **columns) == pytest.approx(
            SPARSITY.predict_loss(full, **columns), rel=1e-12), law.name
    assert [law.num_params for law in SPARSITY_FORMS] == [10, 8, 7, 6]
    # The full law keeps its published start grid (a seeded subset of Abnar et al.'s).
    assert SPARSITY.start_grid().shape == (4096, 10)


def test_exponent_effects_are_hand_counts():
    record = SimpleNamespace(theta=dict(zip(EFFECTIVE_SIZE.param_names,
                                            EFFECTIVE_SIZE.theta_from_natural(EFFECTIVE_TRUTH))))
    n, d, s = np.array([1e5, 1e6]), np.array([1e6, 4e6]), np.array([0.0, 0.5])
    effects = exponent_effects(EFFECTIVE_SIZE, record, {"N": n, "D": d, "S": s})
    # The b term is largest at D = 1e6: 40 / 1e6^0.3; over D's range (x4) it falls by
    # 1 - 4^-0.3 of that. The d term is largest at (N, S) = (1e5, 0); over N (x10) it falls by
    # 1 - 10^-0.35 and over 1 - S (x0.5) by 1 - 2^-0.3 (|delta|: the size of the effect).
    b_max = 40.0 / 1e6 ** 0.3
    d_max = max(20.0 / ((1 - s) ** 0.3 * n ** 0.35))
    assert effects == pytest.approx({"beta": b_max * (1 - 4 ** -0.3),
                                     "gamma": d_max * (1 - 10 ** -0.35),
                                     "delta": d_max * (1 - 2 ** -0.3)}, rel=1e-12)


def test_a_constant_that_ran_to_zero_is_not_identified_whatever_its_interval():
    # e has no exponent, so only its size can show it describes nothing: the sweep report's
    # additive fit had e ~ 9e-6 beside c / (1 - S)^lam with lam ~ 0.006 (only e + c measured).
    truth = {**EFFECTIVE_TRUTH, "e": 5e-3}
    record = SimpleNamespace(  # the two fields of a LawFit the checks read
        theta=dict(zip(EFFECTIVE_SIZE.param_names, EFFECTIVE_SIZE.theta_from_natural(truth))),
        ci={name: [0.5 * v, 1.5 * v] for name, v in truth.items()})
    columns = grid_columns(EFFECTIVE_SIZE, truth, 0.0)
    sizes = term_sizes(EFFECTIVE_SIZE, record, columns)
    n, d, s = columns["N"], columns["D"], columns["S"]
    assert sizes == pytest.approx({"b": max(40.0 / d ** 0.3), "e": 5e-3,
                                   "d": max(20.0 / ((1 - s) ** 0.3 * n ** 0.35))}, rel=1e-12)
    assert identification_problems(EFFECTIVE_SIZE, record, columns) == [
        "e has run to 0: its term adds at most 0.005 nats"]
    truth["e"] = 2 * MIN_TERM_SIZE
    record.theta = dict(zip(EFFECTIVE_SIZE.param_names, EFFECTIVE_SIZE.theta_from_natural(truth)))
    assert identification_problems(EFFECTIVE_SIZE, record, columns) == []


@pytest.mark.parametrize("ci, problem", [
    ({"d": [1.0, np.inf]}, "d interval [1, inf] reaches 0 or infinity"),
    ({"b": [0.0, 3.0]}, "b interval [0, 3] reaches 0 or infinity"),
    ({"beta": [-np.inf, 0.4]}, "beta interval [-inf, 0.4] is not finite"),
    ({"gamma": [0.1, 0.1 + MAX_EXPONENT_CI_WIDTH + 0.01]}, "gamma interval [0.1, 1.11] is wider than 1"),
    ({"delta": [-0.05, 0.6]}, "delta interval [-0.05, 0.6] contains 0"),
    ({}, None),
])
def test_identification_problems_name_each_failed_check(ci, problem):
    record = SimpleNamespace(
        theta=dict(zip(EFFECTIVE_SIZE.param_names, EFFECTIVE_SIZE.theta_from_natural(EFFECTIVE_TRUTH))),
        ci={**{name: [0.5 * v, 1.5 * v] for name, v in EFFECTIVE_TRUTH.items()}, **ci})
    columns = grid_columns(EFFECTIVE_SIZE, EFFECTIVE_TRUTH, 0.0)
    problems = identification_problems(EFFECTIVE_SIZE, record, columns)
    assert problems == ([problem] if problem else [])
    # A term switched off (d = 1e-9), or an S exponent near 0, moves nothing the points show,
    # whatever the intervals say.
    for change, flagged in (({"d": 1e-9}, ("delta", "gamma")), ({"delta": 1e-4}, ("delta",))):
        values = {**EFFECTIVE_TRUTH, **change}
        record.theta = dict(zip(EFFECTIVE_SIZE.param_names,
                                EFFECTIVE_SIZE.theta_from_natural(values)))
        found = [p.split()[0] for p in identification_problems(EFFECTIVE_SIZE, record, columns)
                 if "moves its term by only" in p]
        assert tuple(found) == flagged, found
    # The documented thresholds are the ones the code applies.
    docs = " ".join((REPO_ROOT / "docs" / "explanation" / "laws.md").read_text().split())
    assert f"every term adds at least {MIN_TERM_SIZE:g} nats" in docs
    assert f"moves its term by at least {MIN_EXPONENT_EFFECT:g} nats" in docs
    assert f"or is wider than {MAX_EXPONENT_CI_WIDTH:g}" in docs
    assert f"at most {MAX_HOLDOUT_MAE:g} nats" in docs


@pytest.mark.slow
def test_selection_recovers_the_generating_reduced_form():
    columns = grid_columns(EFFECTIVE_SIZE, EFFECTIVE_TRUTH, 0.001)
    # The checks read bootstrap intervals, so they need enough resamples for an interval's ends
    # to hold still: with 8, one CPU's rounding let the interaction form's alpha interval pass.
    selection = select_form(columns, "S=max", bootstrap_replicates=BOOTSTRAP_REPLICATES,
                            max_starts=300, log=lambda _: None)
    assert selection.chosen == "sparsity-effective-size"
    checks = {c.law: c for c in selection.forms}
    # The richer forms nest the truth but carry terms it lacks: the fit switches them off, or
    # makes them constants beside e, and their exponents go unmeasured.
    assert not checks["sparsity"].identified
    assert any(p.startswith(("alpha", "lam")) for p in checks["sparsity"].problems)
    problems = checks["sparsity-interaction"].problems
    assert any(p.startswith("alpha") for p in problems), problems
    chosen = checks["sparsity-effective-size"]
    assert chosen.identified and chosen.predictive and chosen.holdout_mae < 0.01
    params = chosen.fit.params
    for name in ("beta", "delta", "gamma"):
        assert params[name] == pytest.approx(EFFECTIVE_TRUTH[name], abs=0.02), name
        low, high = chosen.fit.ci[name]
        assert low <= EFFECTIVE_TRUTH[name] + 0.01 and EFFECTIVE_TRUTH[name] - 0.01 <= high


@pytest.mark.slow
def test_report_without_an_identified_form_shows_the_checks_and_no_law(tmp_path):
    """Losses that are pure noise around 3 nats: no form predicts held-out points to 0.02."""
    grid = load_grid("demo")
    rows = synthetic_results(grid, EFFECTIVE_TRUTH, EFFECTIVE_SIZE)
    rng = np.random.default_rng(1)
    for row in rows:
        row["best_val_loss"] = 3.0 + float(rng.normal(0, 0.3))
    write_results_csv(tmp_path / "results.csv", rows)
    for stale in ("fit.json", "fit_holdout.json", "optima.json"):
        (tmp_path / stale).write_text("{}")
    text = write_sweep_report(sweep_inputs(write_grid_json(tmp_path, grid)), bootstrap_replicates=4, max_starts=100,
                              log=lambda _: None).read_text()
    assert "No form of the law passes both checks" in text
    # Four resamples are too few for the intervals the identification check reads: it says so.
    caveat = f"with fewer than {MIN_STEADY_REPLICATES} resamples these intervals"
    assert caveat in " ".join(text.split())
    assert "## Law fit" not in text and "moelab optimal" not in text
    optima = text[text.index("\n## Optimal sparsity\n"):text.index("## Reproduce")]  # not ###
    assert "Not computed" in optima and "identify none" in optima and "![" not in optima
    for stale in ("fit.json", "fit_holdout.json", "optima.json"):
        assert not (tmp_path / stale).exists(), stale
    forms = json.loads((tmp_path / "forms.json").read_text())
    assert forms["chosen"] is None and len(forms["forms"]) == len(FORMS)
    assert all(not (f["predictive"] and f["identified"]) for f in forms["forms"])


@pytest.mark.slow
def test_fit_cli_knows_every_form_and_fits_one(tmp_path, capsys):
    from moelab.cli import main
    from moelab.cli.fit import LAW_NAMES
    from moelab.scaling.laws import LAWS

    assert LAW_NAMES == tuple(LAWS)
    columns = grid_columns(EFFECTIVE_SIZE, EFFECTIVE_TRUTH, 0.0)
    path = tmp_path / "points.csv"
    path.write_text("N,D,S,loss\n" + "".join(
        f"{n!r},{d!r},{s!r},{loss!r}\n" for n, d, s, loss in
        zip(*(columns[k].tolist() for k in ("N", "D", "S", "loss")))))
    assert main(["fit", str(path), "--law", "sparsity-effective-size", "--starts", "300",
                 "--json"]) == 0
    params = json.loads(capsys.readouterr().out)["params"]
    assert params == pytest.approx(EFFECTIVE_TRUTH, rel=1e-4)


@pytest.mark.slow
def test_sweep_without_an_effect_of_sparsity_chooses_chinchilla(tmp_path):
    """Losses that depend on N and D only: every sparsity form's S exponent is unmeasured, and
    the report says sparsity pays only through compute instead of drawing optima."""
    grid = load_grid("demo")
    truth = {"A": 30.0, "B": 40.0, "E": 1.2, "alpha": 0.3, "beta": 0.3}
    write_results_csv(tmp_path / "results.csv", synthetic_results(grid, truth, CHINCHILLA))
    (tmp_path / "optima.json").write_text("{}")
    text = write_sweep_report(sweep_inputs(write_grid_json(tmp_path, grid)),
                              bootstrap_replicates=BOOTSTRAP_REPLICATES, max_starts=300,
                              log=lambda _: None).read_text()
    forms = json.loads((tmp_path / "forms.json").read_text())
    assert forms["chosen"] == "chinchilla", [(f["law"], f["problems"]) for f in forms["forms"]]
    for check in forms["forms"][:-1]:
        assert not (check["identified"] and check["predictive"]), check["law"]
    assert "## Law fit (`chinchilla`" in text and "has no sparsity term" in text
    assert f"fewer than {MIN_STEADY_REPLICATES} resamples" not in " ".join(text.split())
    assert not (tmp_path / "optima.json").exists()
    # The demo's three small sizes trade A against E; the exponents are measured.
    params = json.loads((tmp_path / "fit.json").read_text())["params"]
    assert params["beta"] == pytest.approx(0.3, abs=0.02)
    assert params["alpha"] == pytest.approx(0.3, abs=0.05)
