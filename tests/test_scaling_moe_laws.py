"""The MoE law forms beyond Abnar et al.: clark, granularity, joint (moelab.scaling.laws).

Each law's prediction is checked against its formula written out here in plain numpy, and each
fit against noise-free synthetic data from known coefficients (Clark's form, linear in log L,
also against numpy's least squares). No published coefficients are used: the papers' own tables
could not be read where this was written (docs/explanation/laws.md, "Other MoE law forms").
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from moelab.cli import main
from moelab.scaling.fitting import fit_law
from moelab.scaling.laws import CLARK, GRANULARITY, JOINT, Law, saturated_experts


def test_saturated_experts_by_hand():
    # E_start = 2, E_max = 100, E = 10: 1/(9 + 1/(1/2 - 1/100)) + 1/100 = 1/11.040816 + 0.01
    # = 0.1005730, so Ê = 9.943025.
    assert saturated_experts(10, 2.0, 100.0) == pytest.approx(9.943025, rel=1e-6)
    # Ê = E_start at E = 1, E itself without saturation, E_max in the limit.
    assert saturated_experts(1, 2.0, 100.0) == pytest.approx(2.0)
    np.testing.assert_allclose(saturated_experts([1, 4, 64]), [1, 4, 64])
    assert saturated_experts(1e12, 2.0, 100.0) == pytest.approx(100.0, rel=1e-6)


CLARK_TRUTH = {"a": -0.08, "b": -0.05, "c": 0.004, "d": 2.2}
GRANULARITY_TRUTH = {"a": 18.0, "b": 30.0, "c": 1.5, "g": 6.0, "alpha": 0.3, "beta": 0.25,
                     "gamma": 0.6}
JOINT_TRUTH = {"a": 40.0, "b": 50.0, "c": 1.4, "alpha": 0.25, "beta": 0.22, "delta": 0.15,
               "omega": -0.3, "gamma": -0.01, "zeta": 0.02}


def clark_formula(p, n_active, experts, e_start=1.0, e_max=math.inf):
    """log L = a log N + b log Ê + c log N log Ê + d, Ê written out."""
    inverse_max = 0.0 if math.isinf(e_max) else 1.0 / e_max
    e_hat = 1.0 / (1.0 / (experts - 1.0 + 1.0 / (1.0 / e_start - inverse_max)) + inverse_max)
    log_n, log_e = np.log(n_active), np.log(e_hat)
    return np.exp(p["a"] * log_n + p["b"] * log_e + p["c"] * log_n * log_e + p["d"])


def granularity_formula(p, params, tokens, granularity):
    """L = c + (g / G^gamma + a) / N^alpha + b / D^beta."""
    return (p["c"] + (p["g"] / granularity ** p["gamma"] + p["a"]) / params ** p["alpha"]
            + p["b"] / tokens ** p["beta"])


def joint_formula(p, n_active, tokens, experts):
    """L = a / (E^delta N^(alpha + gamma ln E)) + b / (E^omega D^(beta + zeta ln E)) + c,
    with Ê = E (no saturation)."""
    log_e = np.log(experts)
    return (p["a"] / (experts ** p["delta"] * n_active ** (p["alpha"] + p["gamma"] * log_e))
            + p["b"] / (experts ** p["omega"] * tokens ** (p["beta"] + p["zeta"] * log_e))
            + p["c"])


def clark_points():
    n_active, experts = np.meshgrid(np.geomspace(1e6, 1e9, 5), [1, 2, 4, 8, 16, 64])
    return {"N_active": n_active.ravel(), "E": experts.ravel().astype(float)}


def moe_points(seed: int = 0):
    rng = np.random.default_rng(seed)
    size = 60
    return {"N": np.exp(rng.uniform(np.log(1e6), np.log(1e9), size)),
            "N_active": np.exp(rng.uniform(np.log(1e6), np.log(1e9), size)),
            "D": np.exp(rng.uniform(np.log(1e8), np.log(1e11), size)),
            "G": rng.choice([1.0, 2.0, 4.0, 8.0, 16.0], size),
            "E": rng.choice([1.0, 2.0, 4.0, 8.0, 16.0, 32.0], size)}


def test_clark_prediction_is_the_formula_written_out():
    law = Law(**{**CLARK.__dict__, "expert_saturation": (1.8, 300.0)})
    points = clark_points()
    np.testing.assert_allclose(law.predict_loss(CLARK_TRUTH, **points),
                               clark_formula(CLARK_TRUTH, points["N_active"], points["E"],
                                             1.8, 300.0), rtol=1e-12)


def test_granularity_and_joint_predictions_are_the_formulas_written_out():
    points = moe_points()
    np.testing.assert_allclose(
        GRANULARITY.predict_loss(GRANULARITY_TRUTH, N=points["N"], D=points["D"], G=points["G"]),
        granularity_formula(GRANULARITY_TRUTH, points["N"], points["D"], points["G"]), rtol=1e-12)
    np.testing.assert_allclose(
        JOINT.predict_loss(JOINT_TRUTH, N_active=points["N_active"], D=points["D"], E=points["E"]),
        joint_formula(JOINT_TRUTH, points["N_active"], points["D"], points["E"]), rtol=1e-12)


def test_clark_fit_matches_least_squares_on_noisy_points():
    """Clark's form is linear in log L: with small noise (inside the Huber threshold, where the
    objective is least squares) the fit is numpy's least-squares solution."""
    points = clark_points()
    clean = clark_formula(CLARK_TRUTH, points["N_active"], points["E"])
    loss = clean * np.exp(np.random.default_rng(1).normal(0, 2e-4, clean.size))
    log_n, log_e = np.log(points["N_active"]), np.log(points["E"])
    design = np.column_stack([log_n, log_e, log_n * log_e, np.ones_like(log_n)])
    reference = np.linalg.lstsq(design, np.log(loss), rcond=None)[0]
    fit = fit_law(CLARK, {**points, "loss": loss}, max_starts=50)
    fitted = [fit.params[name] for name in ("a", "b", "c", "d")]
    np.testing.assert_allclose(fitted, reference, rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("law, truth, columns", [
    (GRANULARITY, GRANULARITY_TRUTH, ("N", "D", "G")),
    (JOINT, JOINT_TRUTH, ("N_active", "D", "E")),
])
def test_fit_recovers_noise_free_truth(law, truth, columns):
    points = {key: value for key, value in moe_points().items() if key in columns}
    loss = law.predict_loss(truth, **points)
    fit = fit_law(law, {**points, "loss": loss}, max_starts=400)
    assert fit.objective < 1e-8
    for name, value in truth.items():
        assert fit.params[name] == pytest.approx(value, rel=0.02, abs=2e-3), name


@pytest.mark.slow
def test_fit_cli_reads_the_mapped_granularity_column(tmp_path, capsys):
    points = moe_points()
    loss = granularity_formula(GRANULARITY_TRUTH, points["N"], points["D"], points["G"])
    path = tmp_path / "points.csv"
    rows = ["params,tokens,expert split,loss"] + [
        f"{float(n)!r},{float(d)!r},{float(g)!r},{float(value)!r}"
        for n, d, g, value in zip(points["N"], points["D"], points["G"], loss)]
    path.write_text("\n".join(rows) + "\n")
    assert main(["fit", str(path), "--law", "granularity", "--columns",
                 "N=params,D=tokens,G=expert split", "--starts", "400", "--json"]) == 0
    params = json.loads(capsys.readouterr().out)["params"]
    assert params["gamma"] == pytest.approx(GRANULARITY_TRUTH["gamma"], rel=0.02)


def test_fit_cli_refuses_a_table_without_the_laws_column(tmp_path, capsys):
    path = tmp_path / "points.csv"
    path.write_text("N,D,loss\n1e6,1e9,3.0\n2e6,1e9,2.9\n")
    assert main(["fit", str(path), "--law", "joint"]) == 2
    error = capsys.readouterr().err
    assert "N_active" in error and "Traceback" not in error


def test_clark_refuses_a_single_expert_count(tmp_path, capsys):
    path = tmp_path / "points.csv"
    lines = ["N,N_active,D,E,loss"] + [f"{n},{n},1e9,8,{3.0 - i * 0.1}"
                                       for i, n in enumerate([1e6, 2e6, 4e6, 8e6, 1.6e7, 3.2e7])]
    path.write_text("\n".join(lines) + "\n")
    assert main(["fit", str(path), "--law", "clark"]) == 2
    assert "E takes one value" in capsys.readouterr().err
