"""The throughput model against known synthetic timings, S* under a wall-clock budget against
closed forms and brute force, ``moelab throughput`` on the micro grid, and bad input as
one-line errors."""

from __future__ import annotations

import json
import math
import re

import numpy as np
import pytest

from moelab.accounting import count_params
from moelab.cli import main
from moelab.errors import MoelabError
from moelab.scaling import CHINCHILLA, SPARSITY, compute_optimal
from moelab.scaling.optimal import (
    dense_seconds_to_loss, seconds_optimal, seconds_optimal_dense,
)
from moelab.scaling.throughput import (
    COEFFICIENTS, ThroughputModel, ThroughputRow, expert_flops, family_throughput, fit_throughput,
    read_throughput_table,
)
from moelab.sweep.timing import grid_shapes

# Prices of the right order for a CPU: 30 ps per dense FLOP, 20 % more per FLOP inside the
# experts, 10 ps per stored parameter per token (AdamW over a 1K-token step), 0.3 us per expert.
TRUTH = {"c": 2e-6, "a": 3e-11, "m": 6e-12, "p": 1e-11, "e": 3e-7}


def routed_expert_params(model) -> int:
    """By hand from the shape: per layer k SwiGLU experts of d_model x d_expert (w1, w2, w3)."""
    if model.moe is None:
        return 0
    return model.n_layers * model.moe.top_k * 3 * model.d_model * model.moe.d_expert


def true_seconds_per_token(row: dict, truth: dict = TRUTH) -> float:
    """The model written out term by term (an independent statement of the form): only the
    FLOPs inside the routed experts pay the MoE's extra price m."""
    flops, sparse = 6 * row["N_active"], row["S"] > 0
    return (truth["c"] + truth["a"] * flops + truth["m"] * 6 * row["expert_params"]
            + truth["p"] * row["N_total"] + (truth["e"] * row["E"] if sparse else 0.0))


def cpu_grid_rows(noise: float, seed: int = 0, truth: dict = TRUTH, repeats: int = 1) -> list[dict]:
    """The cpu sweep's 16 real shapes (their own counts), timed by the known prices, each
    ``repeats`` times (a sweep times a shape once per run)."""
    rng = np.random.default_rng(seed)
    rows = []
    for shape in grid_shapes("cpu", []) * repeats:
        counts, moe = count_params(shape.config.model), shape.config.model.moe
        row = {"N_total": counts.total, "N_active": counts.active, "S": shape.sparsity,
               "E": moe.num_experts if moe else 1, "k": 1, "tokens_per_step": 1024,
               "expert_params": routed_expert_params(shape.config.model)}
        seconds = true_seconds_per_token(row, truth) * math.exp(rng.normal(0, noise))
        rows.append({**row, "tokens_per_s": 1 / seconds})
    return rows


def table(rows: list[dict]) -> list[ThroughputRow]:
    """The rows as a throughput table holds them (without the test's own expert counts)."""
    return [ThroughputRow(N_total=r["N_total"], N_active=r["N_active"], S=r["S"], E=r["E"],
                          tokens_per_s=r["tokens_per_s"], k=r.get("k"),
                          tokens_per_step=r.get("tokens_per_step")) for r in rows]


def test_only_expert_flops_pay_the_moe_price():
    """The sparse price multiplies the FLOPs inside the experts, read off the counts alone:
    a model whose experts are a third of its active parameters pays m on that third."""
    model = ThroughputModel({"c": 0.0, "a": 0.0, "m": 1.0, "p": 0.0, "e": 0.0})
    for row in cpu_grid_rows(noise=0.0):
        priced = model.seconds_per_token(row["N_total"], row["N_active"], row["S"], row["E"])[0]
        assert priced == pytest.approx(6 * row["expert_params"], rel=1e-12)
    assert expert_flops([100.0], [100.0], [0.0])[0] == 0.0


def test_the_bootstrap_resamples_shapes_not_rows():
    """16 shapes timed 6 times each with the same noise draw per shape: the shapes' evidence,
    not 96 independent rows, so the intervals are as wide as for the 16 shapes alone."""
    once = cpu_grid_rows(noise=0.03, seed=3)
    repeated = once * 6
    narrow = fit_throughput(table(once), bootstrap_replicates=300, seed=1).ci()
    wide = fit_throughput(table(repeated), bootstrap_replicates=300, seed=1).ci()
    for name in ("a", "c"):
        width_once, width_repeated = (np.diff(ci[name])[0] for ci in (narrow, wide))
        # Row resampling of 96 rows would shrink the width by about sqrt(6).
        assert width_repeated == pytest.approx(width_once, rel=0.35), name


def test_noise_free_timings_give_back_the_prices():
    model = fit_throughput(table(cpu_grid_rows(noise=0.0)), bootstrap_replicates=0)
    for name in COEFFICIENTS:
        assert model.coefficients[name] == pytest.approx(TRUTH[name], rel=1e-6), name


def test_noisy_timings_recover_the_prices_and_predict_an_unseen_sparsity():
    rows = cpu_grid_rows(noise=0.01)
    model = fit_throughput(table(rows), bootstrap_replicates=200)
    # The dense price comes back within a few times the 1 % noise; the MoE terms, measured on
    # 12 sparse rows only, and the constant (half aliased with the per-expert term) less well.
    for name, tolerance in (("a", 0.05), ("m", 0.15), ("e", 0.25), ("c", 0.3)):
        assert model.coefficients[name] == pytest.approx(TRUTH[name], rel=tolerance), name
    # The 95 % bootstrap intervals cover the shape terms' prices.
    for name in ("a", "m", "p", "e"):
        low, high = model.ci()[name]
        assert low <= TRUTH[name] <= high, (name, low, high, TRUTH[name])
    # An unseen shape: the largest size at S = 0.9375 (E = 16), a sparsity not in the table.
    # s3 (d_model 96, 3 layers, d_ff 384) as 16 experts of width 24: 16 router columns per
    # layer, and a token skips 15 of the 16 experts (3 x 96 x 24 parameters each).
    dense = max((r for r in rows if r["S"] == 0), key=lambda r: r["N_total"])
    expert = 3 * 96 * 24
    unseen = {"N_total": dense["N_total"] + 3 * 16 * 96, "S": 0.9375, "E": 16,
              "expert_params": 3 * expert}
    unseen["N_active"] = unseen["N_total"] - 3 * 15 * expert
    predicted = model.seconds_per_token(unseen["N_total"], unseen["N_active"], 0.9375, 16)[0]
    assert predicted == pytest.approx(true_seconds_per_token(unseen), rel=0.03)


def test_family_throughput_is_the_model_at_the_family_shape():
    model = ThroughputModel(dict(TRUTH))
    rate = family_throughput(model, shared_fraction=0.4, top_k=2)
    # E = 2 / 0.25 = 8; the experts hold 0.6e6 parameters, a token uses 0.25 of them (1.5e5),
    # so N_active = 0.4e6 + 1.5e5 = 5.5e5 and only the 1.5e5 pay the expert price m.
    total, sparsity = 1e6, 0.75
    by_hand = 1 / (TRUTH["c"] + TRUTH["a"] * 6 * 5.5e5 + TRUTH["m"] * 6 * 1.5e5
                   + TRUTH["p"] * 1e6 + TRUTH["e"] * 8)
    assert rate(total, sparsity) == pytest.approx(by_hand, rel=1e-12)


@pytest.mark.parametrize("change, message", [
    (lambda rows: rows[:5], "5 rows are too few"),
    (lambda rows: [r for r in rows if r["S"] == 0] * 2, "no sparse (S > 0) row"),
    (lambda rows: [r for r in rows if r["S"] > 0], "no dense (S = 0) row"),
    # One size: its sparse shapes differ in E only, so per-FLOP, per-parameter and per-expert
    # costs move together.
    (lambda rows: [r for r in rows if r["N_total"] < 1.2e5] * 2, "cannot separate"),
    (lambda rows: [{**r, "tokens_per_step": 512 if i else 1024} for i, r in enumerate(rows)],
     "different tokens per step"),
    # One sparse E: a per-expert cost cannot be told from a fixed MoE cost.
    (lambda rows: [r for r in rows if r["S"] in (0.0, 0.5)], "every sparse row has E = 2"),
])
def test_degenerate_tables_are_refused(change, message):
    with pytest.raises(MoelabError, match=re.escape(message)):
        fit_throughput(table(change(cpu_grid_rows(noise=0.0))), bootstrap_replicates=0)


# --------------------------------------------------------------------------------------------
# S* under a wall-clock budget
# --------------------------------------------------------------------------------------------

CHINCHILLA_TRUTH = {"A": 406.4, "B": 410.7, "E": 1.69, "alpha": 0.34, "beta": 0.28}
SPARSITY_TRUTH = {"a": 30.0, "b": 400.0, "c": 0.3, "d": 200.0, "e": 1.2, "alpha": 0.25,
                  "beta": 0.3, "lam": 0.3, "delta": -0.4, "gamma": 0.35}


def flops_only_rate(seconds_per_flop: float, shared_fraction: float):
    """Hardware whose time is its FLOPs alone: tokens/s = 1 / (seconds_per_flop 6 N_active)."""
    model = ThroughputModel({"c": 0.0, "a": seconds_per_flop, "m": 0.0, "p": 0.0, "e": 0.0})
    return family_throughput(model, shared_fraction, top_k=1)


def test_dense_seconds_optimum_is_hoffmanns_closed_form_when_time_is_flops():
    # With time = a x FLOPs, T seconds buy C = T / a FLOPs: N_opt = G (C / 6)^(beta / (alpha + beta)).
    p, seconds_per_flop = CHINCHILLA_TRUTH, 1e-15
    total = p["alpha"] + p["beta"]
    for seconds in (1e3, 1e6):
        flops = seconds / seconds_per_flop
        expected = ((p["alpha"] * p["A"] / (p["beta"] * p["B"])) ** (1 / total)
                    * (flops / 6) ** (p["beta"] / total))
        optimum = seconds_optimal_dense(CHINCHILLA, p, seconds, flops_only_rate(seconds_per_flop, 0))
        assert optimum.params_total == pytest.approx(expected, rel=1e-3)
        assert optimum.flops == pytest.approx(flops, rel=1e-9)


def test_seconds_optimum_is_the_compute_optimum_when_time_is_flops():
    seconds_per_flop, seconds, phi = 1e-14, 1e4, 0.3
    by_seconds = seconds_optimal(SPARSITY, SPARSITY_TRUTH, seconds,
                                 flops_only_rate(seconds_per_flop, phi), shared_fraction=phi)
    by_flops = compute_optimal(SPARSITY, SPARSITY_TRUTH, seconds / seconds_per_flop,
                               shared_fraction=phi)
    assert 0.05 < by_flops.sparsity < 0.9 and not by_flops.at_boundary
    assert by_seconds.sparsity == pytest.approx(by_flops.sparsity, abs=2e-3)
    assert math.log(by_seconds.params_total) == pytest.approx(math.log(by_flops.params_total),
                                                              abs=0.01)
    assert by_seconds.loss == pytest.approx(by_flops.loss, abs=1e-7)


def brute_force_seconds_optimum(law, params, seconds, rate):
    log_n, sparsity = np.meshgrid(np.linspace(np.log(1e5), np.log(1e11), 1201),
                                  np.concatenate([[0.0], np.linspace(0.001, 0.98, 980)]))
    total, s = np.exp(log_n.ravel()), sparsity.ravel()
    loss = law.predict_loss(params, N=total, D=seconds * rate(total, s), S=s)
    best = int(np.argmin(loss))
    return total[best], s[best], loss[best]


def test_seconds_optimum_with_moe_overheads_matches_brute_force():
    # GPU-like prices: 1e-17 s per dense FLOP, 30 % more in experts, and a per-expert cost that
    # makes very many experts slow, so the hardware moves S* off the FLOPs optimum.
    model = ThroughputModel({"c": 1e-9, "a": 1e-17, "m": 3e-18, "p": 1e-19, "e": 2e-10})
    rate = family_throughput(model, shared_fraction=0.3, top_k=1)
    seconds = 3600.0
    optimum = seconds_optimal(SPARSITY, SPARSITY_TRUTH, seconds, rate, shared_fraction=0.3)
    total, sparsity, loss = brute_force_seconds_optimum(SPARSITY, SPARSITY_TRUTH, seconds, rate)
    assert optimum.loss <= loss + 1e-9 and optimum.loss == pytest.approx(loss, abs=1e-5)
    assert optimum.sparsity == pytest.approx(sparsity, abs=0.01)
    assert math.log(optimum.params_total) == pytest.approx(math.log(total), abs=0.02)
    assert optimum.tokens == pytest.approx(seconds * rate(optimum.params_total, optimum.sparsity))


def test_dense_time_to_equal_loss_is_the_first_budget_reaching_it():
    model = ThroughputModel({"c": 1e-9, "a": 1e-17, "m": 3e-18, "p": 1e-19, "e": 2e-10})
    rate = family_throughput(model, shared_fraction=0.3, top_k=1)
    target = seconds_optimal(SPARSITY, SPARSITY_TRUTH, 3600.0, rate, shared_fraction=0.3).loss
    dense = dense_seconds_to_loss(SPARSITY, SPARSITY_TRUTH, target, rate, 3600.0)
    needed = dense.tokens / dense.tokens_per_s
    # Brute force over dense sizes: at the found time the best dense loss is the target, and
    # 1 % less time misses it.
    sizes = np.geomspace(1e5, 1e11, 200_001)

    def best_dense_loss(seconds):
        return SPARSITY.predict_loss(SPARSITY_TRUTH, N=sizes, D=seconds * rate(sizes, 0.0),
                                     S=np.zeros_like(sizes)).min()

    assert best_dense_loss(needed) == pytest.approx(target, abs=1e-6)
    assert best_dense_loss(0.99 * needed) > target


# --------------------------------------------------------------------------------------------
# The commands
# --------------------------------------------------------------------------------------------


def write_table(path, rows) -> str:
    path.write_text(json.dumps({"device_name": "synthetic", "rows": rows}))
    return str(path)


def write_fit(path, law: str, params: dict, replicas: list[dict] | None = None) -> str:
    path.write_text(json.dumps({"law": law, "params": params, "shared_fraction": 0.3,
                                "bootstrap": {"params": replicas} if replicas else None}))
    return str(path)


def test_optimal_seconds_prints_three_optima_with_intervals(tmp_path, capsys):
    # The GPU-like prices above, as a table of the cpu grid's shapes (their own counts).
    prices = {"c": 1e-9, "a": 1e-17, "m": 3e-18, "p": 1e-19, "e": 2e-10}
    table = write_table(tmp_path / "tp.json", cpu_grid_rows(noise=0.0, truth=prices))
    replicas = [dict(SPARSITY_TRUTH, beta=b) for b in (0.29, 0.3, 0.31)]
    fit = write_fit(tmp_path / "fit.json", "sparsity", SPARSITY_TRUTH, replicas)
    assert main(["optimal", fit, "--seconds", "3600", "--throughput", table, "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    rate = family_throughput(ThroughputModel(prices), 0.3, 1)
    expected = seconds_optimal(SPARSITY, SPARSITY_TRUTH, 3600.0, rate, shared_fraction=0.3)
    assert result["by_seconds"]["optimum"]["sparsity"] == pytest.approx(expected.sparsity, abs=1e-3)
    assert result["by_seconds"]["ci"]["sparsity"][0] <= result["by_seconds"]["ci"]["sparsity"][1]
    # The FLOPs and parameter questions are asked at what the seconds optimum spends.
    flops = result["by_seconds"]["optimum"]["flops"]
    assert result["by_flops"]["optimum"]["sparsity"] == pytest.approx(
        compute_optimal(SPARSITY, SPARSITY_TRUTH, flops, shared_fraction=0.3).sparsity, abs=1e-6)
    assert result["params"] == result["by_seconds"]["optimum"]["params_total"]
    assert main(["optimal", fit, "--seconds", "3600", "--throughput", table]) == 0
    text = capsys.readouterr().out
    assert "wall clock T=3600 s" in text and "throughput ratio" in text and "synthetic" in text
    assert "note:" not in text  # a record without data ranges: nothing to compare


def test_optimal_seconds_notes_each_optimum_outside_the_fitted_runs(tmp_path, capsys):
    prices = {"c": 1e-9, "a": 1e-17, "m": 3e-18, "p": 1e-19, "e": 2e-10}
    table = write_table(tmp_path / "tp.json", cpu_grid_rows(noise=0.0, truth=prices))
    record = {"law": "sparsity", "params": SPARSITY_TRUTH, "shared_fraction": 0.3,
              "bootstrap": None, "data_ranges": {"N": [10.0, 100.0]}}
    fit = tmp_path / "fit.json"
    fit.write_text(json.dumps(record))
    assert main(["optimal", str(fit), "--seconds", "3600", "--throughput", str(table),
                 "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    # By hand: every optimum's N total is far above 100, so each question gets one note (no
    # N_active range in this record, so none for the active count).
    outside = [name for name in ("by_seconds", "by_flops", "by_params")
               if result[name]["optimum"]["params_total"] > 100.0]
    assert len(outside) == 3
    assert [note.split(":")[0] for note in result["notes"]] == outside
    assert all("params_total" in note and "extrapolation" in note for note in result["notes"])


@pytest.mark.parametrize("argv_tail, message", [
    (["--seconds", "0"], "--seconds 0.0 is invalid"),
    (["--seconds", "-5"], "--seconds -5.0 is invalid"),
    (["--seconds", "nan"], "--seconds nan is invalid"),
    (["--seconds", "inf"], "--seconds inf is invalid"),
    (["--seconds", "60", "--throughput", "MISSING"], "cannot read throughput table"),
    (["--seconds", "60"], "--seconds needs a throughput table"),
    (["--seconds", "60", "--throughput", "NOTJSON"], "is not JSON"),
    (["--seconds", "60", "--throughput", "BADROW"], "row 2: tokens_per_s='fast' is invalid"),
    (["--seconds", "60", "--throughput", "BADCSV"], "column 'tokens_per_s' is missing"),
    (["--seconds", "60", "--throughput", "DENSE"], "no sparse (S > 0) row"),
    (["--seconds", "60", "--flops", "1e18"], "--seconds T goes alone"),
    (["--flops", "1e18", "--throughput", "x.json"], "go with --seconds"),
])
def test_optimal_seconds_bad_input_is_one_line(tmp_path, capsys, argv_tail, message):
    rows = cpu_grid_rows(noise=0.0)
    files = {"MISSING": tmp_path / "missing.json", "NOTJSON": tmp_path / "not.json",
             "BADROW": tmp_path / "bad.json", "BADCSV": tmp_path / "bad.csv",
             "DENSE": tmp_path / "dense.json"}
    files["NOTJSON"].write_text("{rows: ")
    write_table(files["BADROW"], [rows[0], {**rows[1], "tokens_per_s": "fast"}])
    files["BADCSV"].write_text("N_total,N_active,S,E\n1,1,0,1\n")
    write_table(files["DENSE"], [r for r in rows if r["S"] == 0] * 2)
    argv_tail = [str(files.get(a, a)) for a in argv_tail]
    fit = write_fit(tmp_path / "fit.json", "sparsity", SPARSITY_TRUTH)
    assert main(["optimal", fit] + argv_tail) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1, err
    if "throughput table" in message or "row 2" in message:
        assert str(tmp_path) in err  # names the file


def test_throughput_command_times_the_micro_grid(tmp_path, capsys):
    out = tmp_path / "tp.csv"
    assert main(["throughput", "--grid", "micro", "--seconds-per-shape", "0.1", "--rounds", "2",
                 "--clock", "process", "--warmup-steps", "1", "--out", str(out)]) == 0
    rows, _ = read_throughput_table(out)
    shapes = grid_shapes("micro", [])
    expected = sorted((count_params(s.config.model).total, count_params(s.config.model).active,
                       s.sparsity) for s in shapes)
    assert [(r.N_total, r.N_active, r.S) for r in rows] == expected
    assert [r.E for r in rows] == [1, 2, 1, 2]
    assert all(r.tokens_per_step == 4 * 32 for r in rows)  # micro: batch 4 x 32 tokens
    import csv

    with open(out) as f:
        for row in csv.DictReader(f):
            assert int(row["steps_timed"]) >= 3 and row["device"] == "cpu"
            assert row["clock"] == "process" and row["rounds"] == "2"
            # The fastest of the two rounds is the shape's.
            assert float(row["step_time_s"]) == min(json.loads(row["round_step_times_s"]))
            assert float(row["tokens_per_s"]) * float(row["step_time_s"]) == pytest.approx(128)
            assert int(row["peak_memory_bytes"]) > 0


@pytest.mark.parametrize("argv, message", [
    (["throughput", "--out", "x.json"], "exactly one of CONFIG or --grid"),
    (["throughput", "demo", "--grid", "micro", "--out", "x.json"], "exactly one of CONFIG"),
    (["throughput", "--grid", "micro", "--seconds-per-shape", "0", "--out", "x.json"],
     "--seconds-per-shape 0.0 is invalid"),
    (["throughput", "demo", "--sparsities", "0,half", "--out", "x.json"],
     "--sparsities '0,half' is invalid"),
    (["throughput", "demo", "--sparsities", "0.6", "--out", "x.json"], "sparsity 0.6 is invalid"),
    (["throughput", "--grid", "nosuchgrid", "--out", "x.json"], "neither a file nor a preset"),
])
def test_throughput_bad_input_is_one_line(tmp_path, capsys, argv, message):
    argv = [str(tmp_path / a) if a == "x.json" else a for a in argv]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1, err


def test_the_documented_synthetic_fit_is_this_truth():
    from pathlib import Path

    fixture = Path(__file__).parent / "fixtures" / "synthetic_sparsity_fit.json"
    assert json.loads(fixture.read_text())["params"] == SPARSITY_TRUTH


def test_moe_versus_dense_ratios_by_hand():
    from moelab.scaling.throughput import moe_versus_dense

    dense = [{"N_total": 1e5, "N_active": 1e5, "S": 0.0, "E": 1, "tokens_per_s": 1e5},
             {"N_total": 4e5, "N_active": 4e5, "S": 0.0, "E": 1, "tokens_per_s": 2.5e4}]
    # Dense seconds per token grow as N_active (1e-5 s at 1e5, 4e-5 s at 4e5): 2e-5 s at 2e5.
    sparse = {"N_total": 4.004e5, "N_active": 2e5, "S": 0.75, "E": 4, "tokens_per_s": 1 / 3e-5}
    tiny = {"N_total": 1e5, "N_active": 5e4, "S": 0.875, "E": 8, "tokens_per_s": 1e5}
    first, second = moe_versus_dense(table(dense + [sparse, tiny]))
    assert first.step_time_vs_equal_flops_dense == pytest.approx(1.5, rel=1e-12)
    assert first.tokens_per_s_vs_same_size_dense == pytest.approx(4 / 3, rel=1e-12)
    assert second.step_time_vs_equal_flops_dense is None  # below the smallest dense model
    assert second.tokens_per_s_vs_same_size_dense == pytest.approx(1.0)
