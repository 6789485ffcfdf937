"""moelab predict and score: the units the uncertainty is built from, the forms, the interval's
coverage on synthetic sweeps with a known law, and the two commands end to end."""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from moelab.cli import main
from moelab.scaling.prediction import TargetCell, predict
from moelab.scaling.prediction_data import (
    family_bootstrap_weights, inflated_deviations, read_sweep_runs, seed_noise,
)
from moelab.scaling.prediction_forms import ParabolaForecaster, Targets

HEADER = ["run", "size", "budget", "seed", "C_budget", "N_total", "N_active", "D", "S",
          "best_val_loss"]
SIZES = {"s0": 1e5, "s1": 2e5, "s2": 4e5, "s3": 8e5, "s4": 1.6e6}
TRUE = {"E": 1.8, "A": 400.0, "alpha": 0.35, "B": 600.0, "beta": 0.3}
"""A Chinchilla law: L = E + A / N^alpha + B / D^beta."""


def true_loss(n, d):
    return TRUE["E"] + TRUE["A"] / n ** TRUE["alpha"] + TRUE["B"] / d ** TRUE["beta"]


def write_sweep(folder: Path, rows: list[dict]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / "results.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=HEADER)
        writer.writeheader()
        writer.writerows(rows)
    return folder


def tokens_sweep_rows(rng, budgets=(1e7, 3e7, 9e7), seeds=3, noise=0.01) -> list[dict]:
    rows = []
    for seed in range(seeds):
        for size, n in SIZES.items():
            for d in budgets:
                rows.append({"run": f"runs/D{d:g}/{size}/S0.000-E1k1/seed{seed}", "size": size,
                             "budget": f"D{d:g}", "seed": seed, "C_budget": "", "N_total": n,
                             "N_active": n, "D": d, "S": 0.0,
                             "best_val_loss": true_loss(n, d) + noise * rng.standard_normal()})
    return rows


def test_seed_noise_is_the_pooled_sd_of_the_seeds_about_their_point(tmp_path):
    rows = [
        {"run": "runs/C1e12/s0/S0.000-E1k1/seed0", "best_val_loss": 3.0},
        {"run": "runs/C1e12/s0/S0.000-E1k1/seed1", "best_val_loss": 3.2},
        {"run": "runs/C1e12/s1/S0.000-E1k1/seed0", "best_val_loss": 2.9},
        {"run": "runs/C1e12/s1/S0.000-E1k1/seed1", "best_val_loss": 2.8},
        {"run": "runs/C1e12/s1/S0.000-E1k1/seed2", "best_val_loss": 3.0},
    ]
    for row in rows:
        size, seed = row["run"].split("/")[2], row["run"][-1]
        row.update(size=size, budget="C1e12", seed=seed, C_budget=1e12, N_total=1e5, N_active=1e5,
                   D=1e6, S=0.0)
    runs = read_sweep_runs(write_sweep(tmp_path / "sweep", rows))
    noise = seed_noise(runs)
    # By hand: squares 2 * 0.1^2 = 0.02 (1 df) and 0.01 + 0 + 0.01 = 0.02 (2 df): 0.04 / 3.
    assert noise.df == 3
    assert noise.sd == pytest.approx(math.sqrt(0.04 / 3))
    # Two seeds: the deviations 0.1 scaled by sqrt(2); three: by sqrt(3 / 2).
    inflated = inflated_deviations(runs)
    assert inflated[0] == pytest.approx(3.1 - 0.1 * math.sqrt(2))
    assert inflated[2] == pytest.approx(2.9 + 0.0)
    assert inflated[3] == pytest.approx(2.9 - 0.1 * math.sqrt(1.5))


def test_the_bootstrap_draws_whole_families_within_each_cell(tmp_path):
    rng = np.random.default_rng(0)
    runs = read_sweep_runs(write_sweep(tmp_path / "sweep", tokens_sweep_rows(rng)))
    weights = family_bootstrap_weights(runs, replicates=50, seed=1)
    for replicate in weights:
        for family in set(runs.family.tolist()):
            # every run of a family (its budgets) is drawn the same number of times
            assert len(set(replicate[runs.family == family].tolist())) == 1
        for cell in set(runs.cell.tolist()):
            mask = runs.cell == cell
            # each cell keeps its 3 seeds' worth of draws at each of its 3 budgets
            assert replicate[mask].sum() == 9
    assert weights.std(axis=0).max() > 0  # and the draws do vary


def test_the_parabola_forecast_is_exact_on_parabolas_whose_vertex_moves_as_a_power_law(tmp_path):
    rows = []
    for c in (1e11, 3e11, 9e11):
        x_star = 0.5 * math.log(c) - 1.0
        l_star = 40.0 * c ** -0.1
        for size, n in SIZES.items():
            loss = l_star + 0.2 * (math.log(n) - x_star) ** 2
            rows.append({"run": f"runs/C{c:g}/{size}/S0.000-E1k1/seed0", "size": size,
                         "budget": f"C{c:g}", "seed": 0, "C_budget": c, "N_total": n,
                         "N_active": n, "D": c / (6 * n), "S": 0.0, "best_val_loss": loss})
    runs = read_sweep_runs(write_sweep(tmp_path / "sweep", rows))
    forecaster = ParabolaForecaster()
    params = forecaster.fit(runs)
    c_new, n_new = 8.1e12, 3e5
    truth = 40.0 * c_new ** -0.1 + 0.2 * (math.log(n_new) - (0.5 * math.log(c_new) - 1.0)) ** 2
    targets = Targets(N=np.array([n_new]), N_active=np.array([n_new]), D=np.array([1.0]),
                      S=np.array([0.0]), budget=np.array([c_new]))
    assert forecaster.predict(params, targets)[0] == pytest.approx(truth, rel=1e-9)
    s_star, n_star, l_star = forecaster.optimum(params, c_new)
    assert n_star == pytest.approx(math.exp(0.5 * math.log(c_new) - 1.0), rel=1e-9)


def test_prediction_intervals_reach_their_nominal_coverage_on_a_known_law(tmp_path):
    """20 synthetic sweeps of a Chinchilla law with seed noise; each predicts 5 cells at 3x its
    largest budget for the mean of 3 new seeds drawn from the same law. The 90 % intervals
    must cover the drawn means at a rate a binomial 99 % interval around 0.9 allows (0.82 to
    0.96 of 100 cells): intervals too narrow or too wide both fail."""
    rng = np.random.default_rng(2024)
    noise, new_seeds, budget = 0.01, 3, 2.7e8
    inside = total = 0
    for draw in range(20):
        runs = read_sweep_runs(write_sweep(tmp_path / f"s{draw}", tokens_sweep_rows(rng, noise=noise)))
        cells = [TargetCell(label=size, size=size, params_total=n, params_active=n, sparsity=0.0,
                            budget=budget, tokens=budget) for size, n in SIZES.items()]
        record = predict(runs, "chinchilla", cells, flops=[], seeds=new_seeds, bootstrap=60,
                         seed=draw, max_starts=200)
        for cell in record.cells:
            measured = true_loss(cell.cell.params_total, budget) + \
                noise * rng.standard_normal(new_seeds).mean()
            assert cell.interval is not None
            inside += cell.interval[0] <= measured <= cell.interval[1]
            total += 1
    low, high = stats.binom.ppf([0.005, 0.995], total, 0.9) / total
    assert low <= inside / total <= high


def _cpu_like_sweep(tmp_path: Path) -> Path:
    rng = np.random.default_rng(5)
    rows = []
    for c in (1e11, 3e11, 9e11):
        for size, n in list(SIZES.items())[:4]:
            for s, active in ((0.0, n), (0.75, 0.6 * n)):
                for seed in (0, 1):
                    d = c / (6 * active)
                    loss = true_loss(n * (1 + s), d) + 0.01 * rng.standard_normal()
                    rows.append({"run": f"runs/C{c:g}/{size}/S{s:.3f}/seed{seed}", "size": size,
                                 "budget": f"C{c:g}", "seed": seed, "C_budget": c, "N_total": n,
                                 "N_active": active, "D": d, "S": s, "best_val_loss": loss})
    return write_sweep(tmp_path / "sweep", rows)


def _summary(folder: Path, n: float, active: float, tokens: float, loss: float) -> None:
    folder.mkdir(parents=True)
    (folder / "summary.json").write_text(json.dumps({
        "status": "complete", "best_val_loss": loss, "total_params": int(n),
        "active_params": int(active), "tokens": int(tokens),
        "flops_per_token_6n": int(6 * active), "schema_version": 2}))


def test_predict_then_score_end_to_end(tmp_path, capsys):
    sweep = _cpu_like_sweep(tmp_path)
    out = tmp_path / "prediction.json"
    assert main(["predict", str(sweep), "--form", "sparsity-additive", "--flops", "3e12",
                 "--cell", "s1:0", "--cell", "s1:0.75", "--bootstrap", "20", "--starts", "64",
                 "--command", "train it", "--out", str(out)]) == 0
    record = json.loads(out.read_text())
    assert record["command"] == "train it" and len(record["cells"]) == 2
    dense, sparse = record["cells"]
    # one run inside the dense cell's interval for 1 seed, one far outside the sparse one's
    runs = tmp_path / "runs"
    _summary(runs / "a", 2e5, 2e5, 3e12 / (6 * 2e5), dense["loss"])
    _summary(runs / "b", 2e5, 1.2e5, 3e12 / (6 * 1.2e5), sparse["loss"] + 1.0)
    _summary(runs / "other", 9e9, 9e9, 10, 1.0)  # no cell of the prediction
    score_path = tmp_path / "score.json"
    assert main(["score", str(out), str(runs), "--out", str(score_path)]) == 0
    score = json.loads(score_path.read_text())
    assert [c["inside"] for c in score["cells"]] == [True, False]
    assert score["coverage"] == 0.5 and score["scored"] == 2
    assert score["cells"][1]["error"] == pytest.approx(1.0)
    assert (tmp_path / "score.md").read_text().startswith("## Prediction scored")
    assert (tmp_path / "score.png").stat().st_size > 0


@pytest.mark.parametrize("argv, message", [
    (["--flops", "3e12", "--cell", "s1"], "--cell 's1' is invalid"),
    (["--flops", "3e12", "--cell", "s9:0.5"], "no runs of size 's9'"),
    (["--tokens", "3e12", "--cell", "s1:0"], "give --flops"),
    (["--flops", "3e12", "--cell", "s1:0", "--exclude", "nope"], "--exclude 'nope' is invalid"),
    (["--cell", "s1:0"], "give exactly one of --flops C or --tokens D"),
])
def test_predict_refuses_bad_input_on_one_line(tmp_path, capsys, argv, message):
    sweep = _cpu_like_sweep(tmp_path)
    assert main(["predict", str(sweep), "--bootstrap", "10", *argv]) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1


def test_the_cli_forms_are_the_laws_and_the_parabolas():
    from moelab.cli.predict import FORMS
    from moelab.scaling.laws import LAWS
    from moelab.scaling.prediction_forms import PARABOLA

    # the laws a sweep's (N, D, S) points fit; the MoE laws that read E, G or N_active
    # (clark, granularity, joint) are not predicted from a sweep yet
    predictable = {name for name, law in LAWS.items() if set(law.columns) <= {"N", "D", "S"}}
    assert set(FORMS) == predictable | {PARABOLA}


def test_predict_from_a_fit_file_uses_its_law_and_the_given_noise(tmp_path, capsys):
    params = {"E": 1.8, "A": 400.0, "B": 600.0, "alpha": 0.35, "beta": 0.3}
    fit = tmp_path / "fit.json"
    fit.write_text(json.dumps({"law": "chinchilla", "params": params}))
    out = tmp_path / "p.json"
    assert main(["predict", str(fit), "--tokens", "1e8", "--cell", "2e5:0", "--seeds", "4",
                 "--noise-sd", "0.02", "--noise-df", "30", "--out", str(out)]) == 0
    cell = json.loads(out.read_text())["cells"][0]
    assert cell["loss"] == pytest.approx(true_loss(2e5, 1e8))
    # no bootstrap in the file: the interval is the noise's alone, t(0.95, 30) * 0.02 / sqrt(4)
    half = stats.t.ppf(0.95, 30) * 0.02 / 2
    assert cell["interval"] == pytest.approx([cell["loss"] - half, cell["loss"] + half])
    assert main(["predict", str(fit), "--tokens", "1e8", "--cell", "s1:0"]) == 2
    assert "allowed N:S" in capsys.readouterr().err


def test_a_rollout_predicts_the_largest_budget_from_the_rest_and_measures_the_excess_error(tmp_path):
    from moelab.errors import MoelabError
    from moelab.scaling.rollout import extrapolation, rollout

    rng = np.random.default_rng(11)
    runs = read_sweep_runs(write_sweep(tmp_path / "sweep", tokens_sweep_rows(rng)))
    result = rollout(runs, "chinchilla", sweep="synthetic", bootstrap=20, max_starts=100)
    assert result.held_out_budget == 9e7 and result.budgets_fitted == [1e7, 3e7]
    assert result.score is not None and result.score.scored == len(SIZES)
    for cell in result.score.cells:  # each cell's measured mean is its 3 seeds' at 9e7
        mask = runs.point == cell.label
        assert cell.seeds == 3 and cell.measured == pytest.approx(runs.loss[mask].mean())
    errors = np.array([c.error for c in result.score.cells])
    sds = np.array([c.sd for c in result.score.cells])
    extra = extrapolation(result)
    assert extra is not None and extra.ratio == 3.0
    assert extra.sd == pytest.approx(math.sqrt(max(np.mean(errors ** 2) - np.mean(sds ** 2), 0.0)))
    with pytest.raises(MoelabError, match="a rollout needs >= 3"):
        rollout(runs.subset(runs.budget < 9e7), "chinchilla", sweep="two", bootstrap=20)
