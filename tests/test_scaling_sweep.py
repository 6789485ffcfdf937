"""Sparsity sweeps: planning against hand counts, the report on a synthetic results table, and a
micro grid end to end through the real training engine."""

from __future__ import annotations

import csv
import json

import numpy as np
import pytest

from moelab.accounting import count_params, flops_per_token
from moelab.cli import main
from moelab.errors import ConfigError
from moelab.scaling.laws import SPARSITY
from moelab.scaling.optimal import optimal_sparsity_at_params
from moelab.scaling.sweep import (
    collect_results, experts_for, load_grid, plan_sweep, run_sweep, tokens_for_flops,
    write_results_csv,
)
from moelab.scaling.sweep_report import write_sweep_report


def test_experts_follow_sparsity_and_reject_fractional_counts():
    assert [experts_for(s, 1) for s in (0.0, 0.5, 0.75, 0.875)] == [1, 2, 4, 8]
    assert [experts_for(s, 2) for s in (0.5, 0.75, 0.9375)] == [4, 8, 32]
    with pytest.raises(ConfigError, match="sparsity 0.6 is invalid with top_k=1"):
        experts_for(0.6, 1)


def test_fixed_total_plan_keeps_stored_ffn_and_shrinks_active_by_hand_count():
    grid = load_grid("demo")
    points = [p for p in plan_sweep(grid) if p.size == "s2" and p.flops_budget == min(grid.flops_budgets)]
    size = next(s for s in grid.sizes if s["name"] == "s2")
    d_model, n_layers, d_ff = size["d_model"], size["n_layers"], size["d_ff"]
    dense = next(p for p in points if p.sparsity == 0.0)
    dense_total = count_params(dense.config.model).total
    assert dense.config.model.moe is None
    for point in points:
        experts = point.num_experts
        assert experts == round(1 / (1 - point.sparsity))
        counts = count_params(point.config.model)
        if experts == 1:
            continue
        # The same 3 * d_model * d_ff FFN weights, split into E experts, plus a d_model x E router.
        assert point.config.model.moe.d_expert * experts == d_ff
        assert counts.total - dense_total == n_layers * d_model * experts
        skipped = n_layers * (experts - 1) * 3 * d_model * (d_ff // experts)
        assert counts.active == counts.total - skipped


def test_tokens_for_flops_spend_the_budget_in_whole_steps():
    grid = load_grid("demo")
    for point in plan_sweep(grid):
        config, budget = point.config, point.flops_budget
        tokens_per_step = config.train.batch_size * config.model.max_seq_len
        flops_per_tok = 6 * count_params(config.model).active
        tokens = config.train.max_tokens
        assert tokens == tokens_for_flops(config, budget)
        assert tokens % tokens_per_step == 0
        assert tokens * flops_per_tok <= budget < (tokens + tokens_per_step) * flops_per_tok


@pytest.mark.parametrize("text, message", [
    ("name: x\nbase: demo\nsizes: [{name: a, d_ff: 64}]\nsparsities: [0.6]\ntoken_budgets: [256]\n",
     "sparsity 0.6 is invalid"),
    ("name: x\nbase: demo\nsizes: [{name: a, d_ff: 64}]\nsparsities: [0]\n", "exactly one of"),
    ("name: x\nbase: demo\nwidth: 3\n", "key 'width' is unknown"),
    ("name: x\nbase: demo\nsizes: [{name: a, d_ff: 64}]\nsparsities: [0]\ntoken_budgets: [256]\n"
     "mode: sideways\n", "mode='sideways'"),
])
def test_bad_grids_are_one_line_errors(tmp_path, capsys, text, message):
    path = tmp_path / "grid.yaml"
    path.write_text(text)
    assert main(["sweep-sparsity", str(path), "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1


# A law whose optimal sparsity at the demo's sizes and budgets is interior (S* ~ 0.53 at
# N = 2e5 total parameters and C = 8e10 FLOPs).
TRUTH = {"a": 30.0, "b": 400.0, "c": 1.0, "d": 200.0, "e": 1.2, "alpha": 0.25, "beta": 0.3,
         "lam": 1.0, "delta": -0.4, "gamma": 0.35}


def synthetic_results(grid) -> list[dict]:
    """results.csv rows for every planned point, losses from a known law (0.1 % noise)."""
    rng = np.random.default_rng(0)
    rows = []
    for point in plan_sweep(grid):
        counts, flops = count_params(point.config.model), flops_per_token(point.config.model)
        tokens = point.config.train.max_tokens
        loss = float(SPARSITY.predict_loss(TRUTH, N=counts.total, D=tokens, S=point.sparsity)[0])
        rows.append({
            "run": f"runs/{point.arm}/seed0", "size": point.size, "budget": point.budget_label,
            "C_budget": f"{point.flops_budget:.6g}", "N_total": counts.total,
            "N_active": counts.active, "N_non_embedding": counts.non_embedding, "D": tokens,
            "C": flops.six_n * tokens, "S": point.sparsity, "E": point.num_experts, "k": 1,
            "d_expert": "", "flops_per_token_6n": flops.six_n, "flops_per_token_full": flops.full,
            "best_val_loss": loss * float(np.exp(rng.normal(0, 0.001))), "final_val_loss": loss,
            "collapse": False,
        })
    return rows


def test_report_from_synthetic_results_fits_checks_and_plots(tmp_path, capsys):
    grid = load_grid("demo")
    rows = synthetic_results(grid)
    write_results_csv(tmp_path / "results.csv", rows)
    report = write_sweep_report(tmp_path, grid, bootstrap_replicates=4, max_starts=200,
                                log=lambda _: None)
    text = report.read_text()
    for heading in ("## Runs", "## Law fit", "## Held-out check (S=max)", "## IsoFLOP analysis",
                    "## Optimal sparsity"):
        assert heading in text
    for figure in ("figures/isoflop.png", "figures/optimal_sparsity.png"):
        assert (tmp_path / figure).stat().st_size > 1000
    # Every loss in the report's table is a number of results.csv.
    for row in rows:
        assert f"{row['best_val_loss']:.4f}" in text
    fit = json.loads((tmp_path / "fit.json").read_text())
    assert fit["n_points"] == len(rows) and len(fit["bootstrap"]["params"]) == 4
    # The family's non-expert share, from the runs' own counts, is what the planner built.
    expected_shared = np.mean([
        (r["N_active"] / r["N_total"] - (1 - r["S"])) / r["S"] for r in rows if r["S"] > 0])
    assert fit["shared_fraction"] == pytest.approx(expected_shared, abs=0.05)
    # The law fitted to all points reproduces them, and fit.json drives `moelab optimal`.
    assert fit["objective"] < len(rows) * 1e-6
    holdout = json.loads((tmp_path / "fit_holdout.json").read_text())["holdout"]
    assert holdout["n_points"] == 6 and holdout["mean_abs_log_error"] < 0.05
    # The optimum read off the fit matches the true law's (same family, shared fraction).
    assert main(["optimal", str(tmp_path / "fit.json"), "--params", "2e5", "--flops", "8e10",
                 "--json"]) == 0
    found = json.loads(capsys.readouterr().out)["optimum"]["sparsity"]
    expected = optimal_sparsity_at_params(SPARSITY, TRUTH, 2e5, flops=8e10,
                                          shared_fraction=fit["shared_fraction"]).sparsity
    assert 0.3 < expected < 0.8
    assert found == pytest.approx(expected, abs=0.1), (found, expected)


@pytest.mark.slow
def test_micro_sweep_end_to_end_then_rerun_skips_and_jobs_agree(tmp_path, shared_dir, monkeypatch):
    grid = load_grid("micro")
    out = tmp_path / "sweep"
    report = run_sweep(grid, out, bootstrap_replicates=4, log=lambda _: None)
    assert report.is_file()
    with open(out / "results.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 4
    for row in rows:
        summary = json.loads((out / row["run"] / "summary.json").read_text())
        assert float(row["best_val_loss"]) == pytest.approx(summary["best_val_loss"])
        assert int(row["N_total"]) == summary["total_params"]
        assert int(row["N_active"]) == summary["active_params"]
        assert int(row["D"]) == summary["tokens"] == 256
        assert int(row["flops_per_token_6n"]) == summary["flops_per_token"]
        assert (float(row["S"]) == 0.0) == (int(row["E"]) == 1)

    def must_not_train(*args, **kwargs):
        raise AssertionError("a finished run was trained again")

    run_sweep(grid, out, bootstrap_replicates=4, train_fn=must_not_train, log=lambda _: None)
    assert len(collect_results(out, plan_sweep(grid))) == 4

    # The same sweep two runs at a time, in child processes with this process's thread count:
    # the same numbers, run for run.
    import torch

    parallel = tmp_path / "parallel"
    monkeypatch.setenv("OMP_NUM_THREADS", str(torch.get_num_threads()))
    assert main(["sweep-sparsity", "micro", "--out", str(parallel), "--jobs", "2",
                 "--bootstrap", "4"]) == 0
    with open(parallel / "results.csv", newline="") as f:
        assert [r["best_val_loss"] for r in csv.DictReader(f)] == [r["best_val_loss"] for r in rows]
