"""Optimal sparsity and IsoFLOP analysis against closed forms, brute force and Chinchilla's data;
bad inputs as one-line errors."""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import numpy as np
import pytest

from moelab.accounting import count_params
from moelab.cli import main
from moelab.config import load_config
from moelab.scaling import CHINCHILLA, SPARSITY, compute_optimal, optimal_sparsity_at_params
from moelab.scaling.isoflop import fit_surface, isoflop_analysis, read_isoflop_table
from moelab.scaling.family import active_params, estimate_shared_fraction

FIXTURES = Path(__file__).parent / "fixtures"
SPARSITY_TRUTH = {"a": 30.0, "b": 400.0, "c": 0.3, "d": 200.0, "e": 1.2, "alpha": 0.25,
                  "beta": 0.3, "lam": -0.4, "delta": 0.5, "gamma": 0.35}
CHINCHILLA_TRUTH = {"A": 406.4, "B": 410.7, "E": 1.69, "alpha": 0.34, "beta": 0.28}


def test_compute_optimal_chinchilla_matches_closed_form():
    # Hoffmann et al. eq. 4: N_opt = G (C/6)^(beta/(alpha+beta)), G = (alpha A / (beta B))^(1/(alpha+beta))
    p = CHINCHILLA_TRUTH
    total = p["alpha"] + p["beta"]
    for flops in (1e18, 1e21, 1e24):
        expected = (p["alpha"] * p["A"] / (p["beta"] * p["B"])) ** (1 / total) * (flops / 6) ** (p["beta"] / total)
        optimum = compute_optimal(CHINCHILLA, p, flops)
        assert optimum.params_total == pytest.approx(expected, rel=1e-3)
        assert optimum.tokens * 6 * optimum.params_active == pytest.approx(flops, rel=1e-9)
        assert optimum.sparsity == 0.0 and not optimum.at_boundary


def test_optimal_sparsity_at_fixed_params_and_tokens_matches_closed_form():
    # Only c (1-S)^-lam + d N^-gamma (1-S)^-delta depends on S; with u = 1 - S its minimum is at
    # u* = (-delta d N^-gamma / (lam c))^(1 / (delta - lam)).
    p = SPARSITY_TRUTH
    params = 1e9
    d_eff = p["d"] * params ** -p["gamma"]
    u_star = (-p["delta"] * d_eff / (p["lam"] * p["c"])) ** (1 / (p["delta"] - p["lam"]))
    optimum = optimal_sparsity_at_params(SPARSITY, p, params, tokens=1e10)
    assert 0.2 < 1 - u_star < 0.8
    assert optimum.sparsity == pytest.approx(1 - u_star, abs=1e-4)
    assert not optimum.at_boundary


def sparsity_law_by_hand(p, total_params, tokens, sparsity):
    """Abnar et al. eq. 6, written out."""
    u = 1.0 - sparsity
    return (p["a"] / total_params ** p["alpha"] + p["b"] / tokens ** p["beta"] + p["c"] / u ** p["lam"]
            + p["d"] / (u ** p["delta"] * total_params ** p["gamma"]) + p["e"])


@pytest.mark.parametrize("shared_fraction, interior_between", [(0.0, (0.85, 0.9)), (0.3, (0.7, 0.8))])
def test_optimal_sparsity_at_fixed_params_and_flops_matches_brute_force(shared_fraction,
                                                                         interior_between):
    # At fixed total N and compute C a sparser model is trained on more tokens:
    # D = C / (6 N_active), N_active = N (phi + (1 - phi)(1 - S)).
    params = dict(SPARSITY_TRUTH, lam=0.3, delta=-0.4)  # sparsity costs a little, saves FLOPs
    total, flops, phi = 1e8, 1e18, shared_fraction
    sparsity = np.linspace(0.0, 0.98, 98_001)  # steps of 1e-5
    tokens = flops / (6 * total * (phi + (1 - phi) * (1 - sparsity)))
    loss = sparsity_law_by_hand(params, total, tokens, sparsity)
    best = int(np.argmin(loss))
    assert interior_between[0] < sparsity[best] < interior_between[1]  # phi moves S* by ~0.13
    optimum = optimal_sparsity_at_params(SPARSITY, params, total, flops=flops,
                                         shared_fraction=phi)
    assert optimum.sparsity == pytest.approx(sparsity[best], abs=1e-4)
    assert optimum.loss <= loss[best] + 1e-12 and optimum.loss == pytest.approx(loss[best], abs=1e-9)
    active = total * (phi + (1 - phi) * (1 - optimum.sparsity))
    assert optimum.params_active == pytest.approx(active, rel=1e-12)
    assert optimum.tokens == pytest.approx(flops / (6 * active), rel=1e-12)
    assert not optimum.at_boundary


def brute_force_compute_optimum(law, params, flops, shared_fraction):
    """A slow, direct reference: the best point of a fine (log N, S) grid."""
    log_n, sparsity = np.meshgrid(np.linspace(np.log(1e5), np.log(1e10), 1500),
                                  np.linspace(0, 0.98, 981))
    total = np.exp(log_n.ravel())
    s = sparsity.ravel()
    tokens = flops / (6 * active_params(total, s, shared_fraction))
    loss = law.predict_loss(params, N=total, D=tokens, S=s)
    best = int(np.argmin(loss))
    return total[best], s[best], loss[best]


def test_compute_optimal_sparsity_matches_brute_force_grid():
    params = dict(SPARSITY_TRUTH, lam=0.3, delta=-0.4)  # sparsity costs a little, saves FLOPs
    flops = 1e18
    optimum = compute_optimal(SPARSITY, params, flops, shared_fraction=0.3)
    total, sparsity, loss = brute_force_compute_optimum(SPARSITY, params, flops, 0.3)
    assert optimum.loss <= loss + 1e-9
    assert optimum.loss == pytest.approx(loss, abs=1e-5)
    assert math.log(optimum.params_total) == pytest.approx(math.log(total), abs=0.02)
    assert optimum.sparsity == pytest.approx(sparsity, abs=0.01)


def test_shared_fraction_estimate_from_counted_models():
    # Real configs of two sizes: dense, and top-1 MoEs that split the same FFN into E experts.
    configs = []
    for size in (["model.d_model=64", "model.d_ff=256"], ["model.d_model=96", "model.d_ff=384"]):
        d_ff = int(size[1].split("=")[1])
        size = size + ["model.tie_embeddings=true"]  # the shares below are the tied model's
        configs.append(load_config("demo", size + ["model.moe=null"]))
        for experts in (2, 4, 8):
            configs.append(load_config("demo", size + [
                f"model.moe.num_experts={experts}", "model.moe.top_k=1",
                f"model.moe.d_expert={d_ff // experts}"]))
    total, active, sparsity, phi_by_hand = [], [], [], []
    for config in configs:
        counts = count_params(config.model)
        total.append(counts.total)
        active.append(counts.active)
        model, moe = config.model, config.model.moe
        if moe is None:
            sparsity.append(0.0)
            continue
        sparsity.append(1 - moe.top_k / moe.num_experts)
        # Expert weights by hand: n_layers * E SwiGLU experts of 3 * d_model * d_expert each.
        # Everything else (attention, embeddings, norms, router) is the shared part phi * N.
        experts = model.n_layers * moe.num_experts * 3 * model.d_model * moe.d_expert
        phi_by_hand.append(1 - experts / counts.total)
    total, active, sparsity = map(np.array, (total, active, sparsity))
    sparse = sparsity > 0
    phi = np.array(phi_by_hand)
    # Each MoE is exactly its own family member: N_active / N = phi + (1 - phi)(1 - S).
    np.testing.assert_allclose(active[sparse] / total[sparse],
                               phi + (1 - phi) * (1 - sparsity[sparse]), rtol=1e-12)
    # phi differs between the sizes (0.36 and 0.40: the embeddings' share) and a little within
    # one (the router, d_model * E per layer); least squares of N_active / N - (1 - S) = phi S
    # then weighs each member's own phi by S^2.
    assert 0.03 < phi.max() - phi.min() < 0.05
    weighted = np.sum(phi * sparsity[sparse] ** 2) / np.sum(sparsity[sparse] ** 2)
    estimate = estimate_shared_fraction(total, active, sparsity)
    assert estimate == pytest.approx(weighted, abs=1e-12)
    assert phi.min() < estimate < phi.max()
    # Dense points say nothing about phi: alone they give None.
    assert estimate_shared_fraction(total[~sparse], active[~sparse], sparsity[~sparse]) is None


def closed_form_sparsity_at_tokens(p, total_params):
    """S* at fixed N and D: only c u^-lam + d N^-gamma u^-delta depends on u = 1 - S, and its
    minimum is at u* = (-delta d N^-gamma / (lam c))^(1 / (delta - lam))."""
    d_eff = p["d"] * total_params ** -p["gamma"]
    return 1 - (-p["delta"] * d_eff / (p["lam"] * p["c"])) ** (1 / (p["delta"] - p["lam"]))


def test_optimal_cli_reads_fit_json_and_reports_intervals(tmp_path, capsys):
    # 41 bootstrap fits (c from 0.25 to 0.35, shuffled): the 2.5 and 97.5 percentiles fall on
    # ranks 0.025 * 40 = 1 and 0.975 * 40 = 39, the second smallest and second largest value.
    order = np.random.default_rng(0).permutation(41)
    replicas = [dict(SPARSITY_TRUTH, c=float(c)) for c in np.linspace(0.25, 0.35, 41)[order]]
    record = {"law": "sparsity", "params": SPARSITY_TRUTH, "objective": 0.0, "n_points": 10,
              "ci": {}, "bootstrap": {"params": replicas}}
    fit_path = tmp_path / "fit.json"
    fit_path.write_text(json.dumps(record))
    total, tokens = 1e9, 1e10
    assert main(["optimal", str(fit_path), "--params", str(total), "--tokens", str(tokens),
                 "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["shared_fraction"] == 0.0  # fit.json has none: N_active = (1 - S) N
    assert result["optimum"]["sparsity"] == pytest.approx(
        closed_form_sparsity_at_tokens(SPARSITY_TRUTH, total), abs=1e-7)
    sparsity = np.sort([closed_form_sparsity_at_tokens(p, total) for p in replicas])
    assert 0.3 < sparsity[0] and sparsity[-1] < 0.55 and np.all(np.diff(sparsity) > 1e-3)
    loss = np.sort([sparsity_law_by_hand(p, total, tokens, closed_form_sparsity_at_tokens(p, total))
                    for p in replicas])
    ci = result["ci"]
    assert ci["sparsity"] == pytest.approx([sparsity[1], sparsity[39]], abs=1e-7)
    # Active parameters fall as S rises: their interval is the sparsity interval mirrored.
    assert ci["params_active"] == pytest.approx([total * (1 - sparsity[39]), total * (1 - sparsity[1])],
                                                rel=1e-6)
    assert ci["params_total"] == [total, total] and ci["tokens"] == [tokens, tokens]
    assert ci["loss"] == pytest.approx([loss[1], loss[39]], rel=1e-12)
    # --flops alone solves for (N, S) per fit: three replicas keep it quick.
    fit_path.write_text(json.dumps(dict(record, bootstrap={"params": replicas[:3]})))
    assert main(["optimal", str(fit_path), "--flops", "1e19"]) == 0
    assert "sparsity" in capsys.readouterr().out


HOFFMANN_APPROACH_2_EXPONENT = 0.49
"""Hoffmann et al. 2022 ("Training Compute-Optimal Large Language Models", arXiv 2203.15556),
Table 2: a = 0.49 for approach 2, IsoFLOP profiles (their Table 3 / Figure 3)."""
BESIROGLU_EXPONENT = 0.36585 / (0.34781 + 0.36585)
"""Besiroglu et al. 2024 (Epoch AI, "Chinchilla Scaling: A replication attempt", arXiv
2404.10102): their refit of Chinchilla's law has alpha = 0.34781, beta = 0.36585, so
a = beta / (alpha + beta) = 0.513 (tests/fixtures/README.md)."""


@pytest.mark.parametrize("estimator", ["window", "global"])
def test_isoflop_on_chinchilla_data_gives_the_published_exponent(estimator):
    """On Chinchilla's IsoFLOP points both estimators land between the two published readings
    of the same data, Hoffmann et al.'s approach 2 (0.49) and Besiroglu et al.'s refit (0.513),
    within 0.025 of each: the window gives 0.513, the global parabola 0.492."""
    columns = read_isoflop_table(FIXTURES / "chinchilla_isoflops.csv", {"N": "params", "C": "budget"})
    result = isoflop_analysis(columns, estimator=estimator)
    assert len(result.budgets) == 9
    exponent = result.params_exponent.exponent
    assert exponent == pytest.approx(HOFFMANN_APPROACH_2_EXPONENT, abs=0.025)
    assert exponent == pytest.approx(BESIROGLU_EXPONENT, abs=0.025)
    low, high = result.params_exponent.ci
    assert low < HOFFMANN_APPROACH_2_EXPONENT < high and low < BESIROGLU_EXPONENT < high
    # The 1e20 budget's lowest loss is its smallest model's: a vertex the data cannot support.
    assert 1e20 in result.poorly_supported
    optima = {row.flops: row.params for row in result.budgets}
    # Hoffmann et al. Table 3 (approach 2 column is close): ~1e9 params around 1e20... we check
    # the ends of the range: 6e18 -> 1e8..3e8 params, 3e21 -> 2e9..6e9 params.
    assert 1e8 < optima[6e18] < 3e8
    assert 2e9 < optima[3e21] < 6e9


def isoflop_exponent_by_hand(csv_path) -> tuple[float, list[float]]:
    """Hoffmann et al.'s approach 2, written out: per budget the vertex of a parabola in log N,
    kept when it lies inside that budget's sampled sizes; then the slope of log N* on log C."""
    with open(csv_path, newline="") as f:
        rows = [r for r in csv.DictReader(f) if r["source"] == "epochai_chinchilla"]
    budgets, log_vertices = [], []
    for budget in sorted({float(r["budget"]) for r in rows}):
        at_budget = [r for r in rows if float(r["budget"]) == budget]
        log_n = np.log([float(r["params"]) for r in at_budget])
        c2, c1, _ = np.polyfit(log_n, [float(r["loss"]) for r in at_budget], 2)
        vertex = -c1 / (2 * c2)
        if c2 > 0 and log_n.min() <= vertex <= log_n.max():
            budgets.append(budget)
            log_vertices.append(vertex)
    return float(np.polyfit(np.log(budgets), log_vertices, 1)[0]), budgets


def test_isoflop_cli_prints_json_and_rejects_bad_filters(capsys):
    csv_path = str(FIXTURES / "chinchilla_isoflops.csv")
    assert main(["isoflop", csv_path, "--columns", "N=params,C=budget",
                 "--where", "source=epochai_chinchilla", "--estimator", "global", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    # The 1e20 budget's vertex lies below its smallest model, so it stays out of the exponent
    # (with it: 0.495, over all nine budgets).
    assert result["outside_data"] == [1e20]
    with open(csv_path, newline="") as f:
        rows = list(csv.DictReader(f))
    smallest = min(float(r["params"]) for r in rows if float(r["budget"]) == 1e20)
    [vertex] = [b["params"] for b in result["budgets"] if b["flops"] == 1e20]
    assert vertex < smallest
    exponent, inside = isoflop_exponent_by_hand(csv_path)
    assert len(inside) == 8 and 1e20 not in inside
    assert result["params_exponent"]["exponent"] == pytest.approx(exponent, abs=1e-6)
    assert result["params_exponent"]["n_budgets"] == 8
    assert main(["isoflop", csv_path, "--columns", "N=params,C=budget", "--where", "nope=1"]) == 2
    assert "--where 'nope=1' is invalid" in capsys.readouterr().err


def parabola_points(budgets_and_vertices, sizes_per_budget) -> str:
    """A CSV of dense IsoFLOP points whose loss per budget is an exact parabola in log N."""
    lines = ["N,C,loss"]
    for (flops, vertex), sizes in zip(budgets_and_vertices, sizes_per_budget):
        lines += [f"{n},{flops},{2.0 + 0.05 * math.log(n / vertex) ** 2}" for n in sizes]
    return "\n".join(lines) + "\n"


def test_isoflop_leaves_vertices_outside_the_data_out_of_the_exponent(tmp_path, capsys):
    # Three budgets on N* = 0.1 C^0.5, sampled around their vertex; a fourth whose vertex lies
    # far beyond its sampled sizes and off that line. The exponent must be the line's.
    on_line = [(flops, 0.1 * flops ** 0.5) for flops in (1e18, 1e19, 1e20)]
    around = [np.geomspace(vertex / 4, vertex * 4, 5) for _, vertex in on_line]
    beyond, below_beyond = (1e21, 10 * 0.1 * 1e21 ** 0.5), np.geomspace(1e8, 4e8, 5)
    path = tmp_path / "iso.csv"
    path.write_text(parabola_points(on_line + [beyond], around + [below_beyond]))
    result = isoflop_analysis(read_isoflop_table(path))
    assert [b.inside_data for b in result.budgets] == [True, True, True, False]
    assert result.budgets[3].params == pytest.approx(beyond[1], rel=1e-6)
    assert result.outside_data == [1e21]
    assert result.params_exponent.exponent == pytest.approx(0.5, abs=1e-6)
    assert result.params_exponent.n_budgets == 3
    assert main(["isoflop", str(path)]) == 0
    out = capsys.readouterr().out.splitlines()
    lines = [line for line in out if line.startswith("  C=")]
    assert ["outside data" in line for line in lines] == [False, False, False, True]
    [exponent_line] = [line for line in out if line.startswith("N*(C)")]
    assert "C^0.5000" in exponent_line and "3 budgets" in exponent_line
    # With one budget inside the data there is no exponent to fit, and the CLI says so.
    path.write_text(parabola_points(on_line[:1] + [beyond], around[:1] + [below_beyond]))
    assert isoflop_analysis(read_isoflop_table(path)).params_exponent is None
    assert main(["isoflop", str(path)]) == 0
    assert "not fitted" in capsys.readouterr().out


@pytest.mark.parametrize("bad_row, message", [
    ("4e6,1e18,1.0,2e6,2.5", "S=1 is invalid: allowed [0, 1)"),
    ("4e6,1e18,0.5,0,2.5", "N_active=0 is invalid: must be > 0"),
    ("4e6,1e18,-0.5,2e6,2.5", "S=-0.5 is invalid"),
])
def test_isoflop_rejects_bad_sparsity_and_active_counts(tmp_path, capsys, bad_row, message):
    rows = [f"{n},1e18,{s},{n * (1 - s / 2)},{3 + 0.1 * i}"
            for i, (n, s) in enumerate([(1e6, 0), (2e6, 0), (4e6, 0), (1e6, 0.5), (2e6, 0.5)])]
    path = tmp_path / "iso.csv"
    path.write_text("N,C,S,N_active,loss\n" + "\n".join(rows + [bad_row]) + "\n")
    assert main(["isoflop", str(path)]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1 and "Traceback" not in err


def test_isoflop_surface_recovers_known_minimum():
    rng = np.random.default_rng(0)
    log_n = rng.uniform(14, 18, 40)
    sparsity = rng.uniform(0, 0.95, 40)
    y = -np.log1p(-sparsity)
    x0, y0 = 16.2, 1.1  # minimum inside the box
    loss = 3.0 + 0.05 * (log_n - x0) ** 2 + 0.02 * (log_n - x0) * (y - y0) + 0.04 * (y - y0) ** 2
    surface = fit_surface(log_n, sparsity, loss)
    assert surface.log_params == pytest.approx(x0, abs=1e-6)
    assert surface.sparsity == pytest.approx(1 - math.exp(-y0), abs=1e-6)


# --------------------------------------------------------------------------------------------
# Bad input: one line on stderr, exit code 2
# --------------------------------------------------------------------------------------------

GOOD_ROWS = [f"{n},{d},{l}" for n, d, l in zip([1e6, 2e6, 4e6, 8e6, 1e7, 2e7, 4e7],
                                                [1e8, 3e8, 1e9, 2e8, 5e8, 2e9, 4e9],
                                                [3.1, 2.9, 2.6, 2.8, 2.6, 2.4, 2.3])]


@pytest.mark.parametrize("text, message", [
    ("N,loss\n1e6,3\n", "tokens column"),
    ("N,D\n1e6,1e8\n", "column 'loss'"),
    ("N,D,loss\n" + "\n".join(GOOD_ROWS[:-1] + ["-5,1e8,2.0"]) + "\n", "N=-5"),
    ("N,D,loss\n" + "\n".join(GOOD_ROWS[:-1] + ["1e6,0,2.0"]) + "\n", "D=0"),
    ("N,D,loss\n" + "\n".join(GOOD_ROWS[:-1] + ["1e6,1e8,nan"]) + "\n", "loss=nan"),
    ("N,D,loss\n" + "\n".join(GOOD_ROWS[:-1] + ["1e6,1e8,abc"]) + "\n", "not a number"),
    ("N,D,loss\n" + "\n".join(GOOD_ROWS[:4]) + "\n", "too few"),
    ("N,D,loss\n", "no data rows"),
])
def test_bad_csv_is_one_line_error(tmp_path, capsys, text, message):
    path = tmp_path / "bad.csv"
    path.write_text(text)
    assert main(["fit", str(path)]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1 and "Traceback" not in err


def test_sparsity_law_needs_s_column_and_valid_s(tmp_path, capsys):
    path = tmp_path / "points.csv"
    path.write_text("N,D,loss\n" + "\n".join(GOOD_ROWS) + "\n")
    assert main(["fit", str(path), "--law", "sparsity"]) == 2
    assert "column 'S'" in capsys.readouterr().err
    path.write_text("N,D,S,loss\n" + "\n".join(f"{r.rsplit(',', 1)[0]},1.0,{r.rsplit(',', 1)[1]}"
                                                for r in GOOD_ROWS) + "\n")
    assert main(["fit", str(path), "--law", "sparsity"]) == 2
    assert "S=1 is invalid" in capsys.readouterr().err


@pytest.mark.parametrize("argv, message", [
    (["--drop-highest", "7"], "--drop-highest 7"),
    (["--holdout", "S=max"], "--holdout"),
    (["--holdout", "N>1e12"], "holds out 0"),
    (["--columns", "X=foo"], "--columns name 'X'"),
    (["--bootstrap", "-1"], "argument --bootstrap: -1 is invalid: must be a whole number >= 0"),
])
def test_bad_fit_options_are_one_line_errors(tmp_path, capsys, argv, message):
    path = tmp_path / "points.csv"
    path.write_text("N,D,loss\n" + "\n".join(GOOD_ROWS) + "\n")
    with pytest.raises(SystemExit) as exit_info:  # argparse exits directly, main returns
        raise SystemExit(main(["fit", str(path), "--starts", "20", *argv]))
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1


def test_optimal_rejects_bad_fit_files(tmp_path, capsys):
    path = tmp_path / "fit.json"
    path.write_text("{not json")
    assert main(["optimal", str(path), "--flops", "1e20"]) == 2
    assert "not JSON" in capsys.readouterr().err
    path.write_text(json.dumps({"law": "chinchilla", "params": CHINCHILLA_TRUTH}))
    assert main(["optimal", str(path)]) == 2
    assert "--params" in capsys.readouterr().err
    assert main(["optimal", str(path), "--flops", "-3"]) == 2
    assert "--flops=-3" in capsys.readouterr().err


def test_a_degenerate_fit_beyond_float_range_gives_infinities_not_errors():
    # A bootstrap replicate of a poorly identified sparsity fit can run a log-coefficient off to
    # 800 (the demo sweep did): exp overflows. Each step must carry inf through, not raise or
    # turn it into nan, and the optimum search must not feed inf - inf to scipy.
    import warnings

    from moelab.scaling.fitting import percentile_interval

    theta = SPARSITY.theta_from_natural(dict(SPARSITY_TRUTH, lam=0.3, delta=-0.4))
    theta[SPARSITY.param_names.index("log_a")] = 800.0
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        params = SPARSITY.natural_params(theta)
        assert params["a"] == math.inf
        loss = SPARSITY.predict_loss(params, N=[1e6, 1e7], D=[1e9, 1e9], S=[0.0, 0.5])
        assert np.all(loss == math.inf)
        optimum = compute_optimal(SPARSITY, params, 1e18)
        assert optimum.loss == math.inf
        # Percentiles: two infinite replicates at the top give inf, not inf - inf = nan ...
        low, high = percentile_interval([1.0, 2.0, 3.0, math.inf, math.inf])
        assert low == pytest.approx(1.1) and high == math.inf  # rank 0.025 * 4 = 0.1: 1 + 0.1 * (2 - 1)
    # ... and finite replicates give numpy's linear interpolation unchanged.
    values = np.random.default_rng(0).normal(size=200)
    assert percentile_interval(values) == pytest.approx(np.percentile(values, [2.5, 97.5]), rel=1e-12)


def _notes(out: str) -> list[str]:
    return [line.strip() for line in out.splitlines() if line.strip().startswith("note: ")]


def test_optimal_says_when_the_optimum_lies_outside_the_fitted_runs(tmp_path, capsys):
    total, tokens = 1e9, 1e10
    s_star = closed_form_sparsity_at_tokens(SPARSITY_TRUTH, total)
    active = total * (1 - s_star)  # shared fraction 0: N_active = (1 - S) N
    record = {"law": "sparsity", "params": SPARSITY_TRUTH, "objective": 0.0, "n_points": 10,
              "ci": {}, "bootstrap": None,
              "data_ranges": {"N": [1e5, 1e6], "N_active": [5e4, 1e6]}}
    fit_path = tmp_path / "fit.json"
    fit_path.write_text(json.dumps(record))
    argv = ["optimal", str(fit_path), "--params", str(total), "--tokens", str(tokens)]
    assert main(argv) == 0
    notes = _notes(capsys.readouterr().out)
    # By hand: 1e9 is 1,000 times the largest fitted N (3.0 orders of magnitude); the active
    # count active / 1e6 times the largest fitted N_active.
    assert notes == [
        "note: params_total 1B is outside the fitted runs' 100K-1M: an extrapolation by 3.0 "
        "orders of magnitude",
        f"note: params_active {active / 1e6:.3g}M is outside the fitted runs' 50K-1M: an "
        f"extrapolation by {math.log10(active / 1e6):.1f} orders of magnitude"]
    # Inside the runs' range: no note; a range a little short: a factor, not orders.
    fit_path.write_text(json.dumps(dict(record, data_ranges={"N": [1e8, 2e9],
                                                             "N_active": [1e8, active / 2]})))
    assert main(argv) == 0
    assert _notes(capsys.readouterr().out) == [
        f"note: params_active {active / 1e6:.3g}M is outside the fitted runs' 100M-"
        f"{active / 2e6:.3g}M: an extrapolation by a factor of 2"]
    # --json carries the same notes.
    assert main([*argv, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["notes"] == [
        f"params_active {active / 1e6:.3g}M is outside the fitted runs' 100M-"
        f"{active / 2e6:.3g}M: an extrapolation by a factor of 2"]
    # A record written before fits kept their range: nothing to compare, no note.
    del record["data_ranges"]
    fit_path.write_text(json.dumps(record))
    assert main(argv) == 0
    assert _notes(capsys.readouterr().out) == []


def test_optimal_refuses_a_malformed_data_range(tmp_path, capsys):
    record = {"law": "chinchilla", "params": CHINCHILLA_TRUTH, "data_ranges": {"N": [5, 1]}}
    fit_path = tmp_path / "fit.json"
    fit_path.write_text(json.dumps(record))
    assert main(["optimal", str(fit_path), "--flops", "1e20"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "data_ranges.N=[5, 1] is invalid" in err
