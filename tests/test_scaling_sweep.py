"""Sparsity sweeps: planning against hand counts, the report on a synthetic results table, and a
micro grid end to end through the real training engine."""

from __future__ import annotations

import csv
import dataclasses
import json
import re
from pathlib import Path

import numpy as np
import pytest

from moelab.config.legacy import spelt_as_today
from moelab.accounting import count_params
from moelab.cli import main
from moelab.config import load_config, override, save_config
from moelab.errors import ConfigError, MoelabError
from moelab.scaling.laws import SPARSITY, get_law
from moelab.scaling.optimal import optimal_sparsity_at_params
from moelab.sweep.commands import run_sweep
from moelab.sweep.folder import read_grid_record
from moelab.sweep.grid import experts_for, grid_preset_names, load_grid
from moelab.sweep.plan import grid_json_record, plan_sweep, plan_sweep_folder, tokens_for_flops
from moelab.sweep.report import sweep_inputs, write_sweep_report
from moelab.sweep.tabulate import collect_results, write_results_csv
from sweep_rows import synthetic_results, write_grid_json

REPO_ROOT = Path(__file__).resolve().parents[1]
SWEEP_PRESETS = REPO_ROOT / "src" / "moelab" / "presets" / "sweeps"
DEMO = load_grid("demo")


def exit_code(argv: list[str]) -> int:
    """main's exit code, also when argparse rejects an argument (it exits directly)."""
    with pytest.raises(SystemExit) as exit_info:
        raise SystemExit(main(argv))
    return exit_info.value.code


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


def dotted_point_overrides(size: dict, sparsity: float, top_k: int, mode: str) -> list[str]:
    """The point's model as dotted overrides, written out by hand: the reference the typed
    point configs are checked against."""
    changes = [f"model.{key}={value}" for key, value in size.items() if key != "name"]
    if sparsity == 0.0:
        return changes + ["model.moe=null"]
    experts = experts_for(sparsity, top_k)
    d_expert = size["d_ff"] // (experts if mode == "fixed_total" else top_k)
    return changes + [f"model.moe.num_experts={experts}", f"model.moe.top_k={top_k}",
                      f"model.moe.d_expert={d_expert}"]


@pytest.mark.parametrize("preset", ["demo", "cpu", "micro", "paper"])
@pytest.mark.parametrize("mode", ["fixed_total", "fixed_expert"])
def test_point_configs_equal_the_base_config_with_the_points_dotted_overrides(preset, mode):
    grid = dataclasses.replace(load_grid(preset), mode=mode)
    base = load_config(grid.base, grid.overrides)
    points = {(p.seed, p.budget_label, p.size, p.sparsity): p for p in plan_sweep(grid)}
    for point in points.values():
        size = next(s for s in grid.sizes if s["name"] == point.size)
        expected = override(base, [*dotted_point_overrides(size, point.sparsity, grid.top_k, mode),
                                   f"train.seed={point.seed}",
                                   f"train.max_tokens={point.config.train.max_tokens}"])
        assert point.config == expected, point.run_name


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
    ("name: x\nbase: demo\nwidth: 3\n", "width is not a known key: allowed name, base,"),
    ("name: x\nbase: demo\nsizes: [{name: a, d_ff: 64}]\nsparsities: [0]\ntoken_budgets: [256]\n"
     "mode: sideways\n", "mode='sideways'"),
    # Missing keys and wrong types: named, not a TypeError from deep inside.
    ("name: x\nsizes: [{name: a, d_ff: 64}]\nsparsities: [0]\ntoken_budgets: [256]\n",
     "base is missing: required keys are name, base, sizes, sparsities"),
    ("name: x\nbase: demo\nsparsities: [0]\ntoken_budgets: [256]\n", "sweep grid 'x': sizes is missing"),
    ("name: x\nbase: demo\nsizes: [{name: a, d_ff: 64}]\ntoken_budgets: [256]\n",
     "sweep grid 'x': sparsities is missing"),
    ("name: x\nbase: demo\nsizes: [{name: a, d_ff: 64}]\nsparsities: [0]\ntoken_budgets: [256]\n"
     "top_k: two\n", "top_k='two' is invalid: expected a whole number"),
    ("name: x\nbase: demo\nsizes: [{name: a, d_ff: 64}]\nsparsities: [0]\ntoken_budgets: [256]\n"
     "top_k: 1.5\n", "top_k=1.5 is invalid: expected a whole number"),
    ("name: x\nbase: demo\nsizes: [{name: a, d_model: wide, d_ff: 64}]\nsparsities: [0]\n"
     "token_budgets: [256]\n", "sizes[0].d_model='wide' is invalid: expected a whole number"),
    ("name: x\nbase: 7\nsizes: [{name: a, d_ff: 64}]\nsparsities: [0]\ntoken_budgets: [256]\n",
     "base='7' is invalid: expected a config preset (ablation, "),
    # Sizes are checked key by key, like a model section.
    ("name: x\nbase: demo\nsizes: [{name: a, d_ff: 64, width: 2}]\nsparsities: [0]\n"
     "token_budgets: [256]\n", "sizes[0].width is not a known key: allowed name, d_model,"),
    ("name: x\nbase: demo\nsizes: [{d_ff: 64}]\nsparsities: [0]\ntoken_budgets: [256]\n",
     "sizes[0].name is missing"),
    ("name: x\nbase: demo\nsizes: [{name: a, d_ff: 64}]\nsparsities: true\ntoken_budgets: [256]\n",
     "sparsities=True is invalid: expected a list of numbers"),
    ("name: x\nbase: demo\nsizes: [{name: a, d_ff: 64}]\nsparsities: [0, half]\n"
     "token_budgets: [256]\n", "sparsities[1]='half' is invalid: expected a number"),
    ("name: x\nbase: demo\nsizes: [{name: a, d_ff: 64}]\nsparsities: [0]\n"
     "token_budgets: [1K, 2X]\n", "token_budgets[1]: token budget '2X' is invalid"),
    ("name: x\nbase: demo\nsizes: [{name: a, d_ff: 64}]\nsparsities: [0]\n"
     "token_budgets: [256]\noverrides: [train.lr]\n",
     "overrides[0]='train.lr' is invalid: expected KEY=VALUE"),
])
def test_bad_grids_are_one_line_errors(tmp_path, capsys, text, message):
    path = tmp_path / "grid.yaml"
    path.write_text(text)
    assert main(["sweep-sparsity", str(path), "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1


# A reduced form the demo's 24 points identify, also with an interior optimum (S* ~ 0.64 at
# N = 2e5 and C = 8e10 with the demo's shared fraction): L = b / D^beta + d / ((1 - S)^delta
# N^gamma) + e.
EFFECTIVE_SIZE = get_law("sparsity-effective-size")
EFFECTIVE_TRUTH = {"b": 40.0, "d": 20.0, "e": 1.2, "beta": 0.3, "delta": 0.3, "gamma": 0.35}


@pytest.mark.slow
def test_report_from_synthetic_results_fits_checks_and_plots(tmp_path, capsys):
    grid = load_grid("demo")
    rows = synthetic_results(grid, EFFECTIVE_TRUTH, EFFECTIVE_SIZE)
    write_results_csv(tmp_path / "results.csv", rows)
    (tmp_path / "optima.json").write_text("{}")  # stale: rewritten from these results
    report = write_sweep_report(sweep_inputs(write_grid_json(tmp_path, grid)), bootstrap_replicates=4, max_starts=200,
                                log=lambda _: None)
    text = report.read_text()
    for heading in ("## Runs", "## Law form", "## Law fit (`sparsity-effective-size`",
                    "## Held-out check (S=max)", "## IsoFLOP analysis", "## Optimal sparsity"):
        assert heading in text
    # The richer forms switch the terms the truth lacks off, so the truth's own form is chosen.
    forms = json.loads((tmp_path / "forms.json").read_text())
    assert forms["chosen"] == "sparsity-effective-size"
    assert "| `sparsity-effective-size` | 6 |" in text and "**chosen**" in text
    # The fit's start count is part of how to reproduce it.
    assert "--starts 200" in text[text.index("## Reproduce"):]
    # How far the runs' actual compute is from their budgets, and which are beyond 2 %.
    deviation = {r["run"]: r["C"] / float(r["C_budget"]) - 1 for r in rows}
    assert f"off its budget by up to {max(abs(d) for d in deviation.values()):.1%}" in text
    off_budget = [run for run, d in deviation.items() if abs(d) > 0.02]
    assert off_budget  # the demo grid has some (whole steps of 1,024 tokens)
    for run in deviation:
        assert (f"`{run}`" in text) == (run in off_budget), run
    for figure in ("figures/isoflop.png", "figures/optimal_sparsity.png"):
        assert (tmp_path / figure).stat().st_size > 1000
    # Every loss in the report's table is a number of results.csv.
    for row in rows:
        assert f"{row['best_val_loss']:.4f}" in text
    fit = json.loads((tmp_path / "fit.json").read_text())
    assert fit["n_points"] == len(rows) and len(fit["bootstrap"]["params"]) == 4
    # The intervals are the 2.5 and 97.5 percentiles of the stored replicates: with 4 values,
    # linear interpolation at ranks 0.075 and 2.925.
    for name in fit["params"]:
        v = sorted(p[name] for p in fit["bootstrap"]["params"])
        assert fit["ci"][name] == pytest.approx(
            [v[0] + 0.075 * (v[1] - v[0]), v[2] + 0.925 * (v[3] - v[2])], rel=1e-12), name
    # The family's non-expert share, from the runs' own counts. Each sparse run has its own
    # phi_i = (N_active / N - (1 - S)) / S (0.39 to 0.55 here: embeddings and routers weigh
    # differently per size); the least-squares fit of N_active / N - (1 - S) = phi S is their
    # S^2-weighted mean. No noise enters, so it must hold to rounding.
    sparse = [r for r in rows if r["S"] > 0]
    phi = np.array([(r["N_active"] / r["N_total"] - (1 - r["S"])) / r["S"] for r in sparse])
    weight = np.array([r["S"] ** 2 for r in sparse])
    assert fit["shared_fraction"] == pytest.approx(np.sum(phi * weight) / np.sum(weight), abs=1e-12)
    # The law fitted to all points reproduces them, and fit.json drives `moelab optimal`.
    assert fit["objective"] < len(rows) * 1e-6
    # Held out: the S = 0.875 runs, extrapolated by the law fitted to 18 runs with 0.1 % noise
    # (losses near 2.6, so the noise alone is ~0.002 nats).
    holdout = json.loads((tmp_path / "fit_holdout.json").read_text())["holdout"]
    assert holdout["n_points"] == 6 and holdout["mean_abs_error"] < 0.01
    assert holdout["mean_abs_error"] == pytest.approx(
        np.mean([abs(p["predicted"] - p["loss"]) for p in holdout["points"]]), rel=1e-12)
    # The optimum read off the fit matches the true law's (same family, shared fraction).
    assert main(["optimal", str(tmp_path / "fit.json"), "--params", "2e5", "--flops", "8e10",
                 "--json"]) == 0
    found = json.loads(capsys.readouterr().out)["optimum"]["sparsity"]
    expected = optimal_sparsity_at_params(EFFECTIVE_SIZE, EFFECTIVE_TRUTH, 2e5, flops=8e10,
                                          shared_fraction=fit["shared_fraction"]).sparsity
    assert 0.3 < expected < 0.8
    assert found == pytest.approx(expected, abs=0.01), (found, expected)
    assert json.loads((tmp_path / "optima.json").read_text())["vs_flops"]


# A law whose dense compute-optimal size at 1.2e11 and 3.6e11 FLOPs lies inside the sizes below
# (about 4e5 and 7e5 total parameters) and at 1.08e12 FLOPs beyond the largest (9.2e5).
INTERIOR_TRUTH = {"a": 744.0, "b": 400.0, "c": 0.5, "d": 1e-3, "e": 1.5, "alpha": 0.3,
                  "beta": 0.3, "lam": 0.5, "delta": 0.5, "gamma": 0.3}
FIVE_SIZES = [{"name": "s0", "d_model": 32, "n_layers": 2, "n_heads": 2, "n_kv_heads": 2,
               "d_ff": 128}] + DEMO.sizes + [
             {"name": "s4", "d_model": 128, "n_layers": 3, "n_heads": 4, "n_kv_heads": 4,
              "d_ff": 512}]


def one_sparsity_grid(sparsity: float):
    return dataclasses.replace(DEMO, name="one", sizes=FIVE_SIZES, sparsities=[sparsity],
                               flops_budgets=[1.2e11, 3.6e11, 1.08e12]).validate()


def true_dense_optimum(truth: dict, flops: float) -> float:
    """Brute force: the N minimising the law along a dense budget (N_active = N, D = C / 6N)."""
    params = np.geomspace(1e4, 1e8, 200_001)
    loss = SPARSITY.predict_loss(truth, N=params, D=flops / (6 * params), S=np.zeros_like(params))
    return float(params[np.argmin(loss)])


@pytest.mark.slow
def test_report_of_dense_only_sweep_uses_parabolas_and_skips_optima(tmp_path):
    grid = one_sparsity_grid(0.0)
    write_results_csv(tmp_path / "results.csv", synthetic_results(grid, INTERIOR_TRUTH))
    text = write_sweep_report(sweep_inputs(write_grid_json(tmp_path, grid)), bootstrap_replicates=2, max_starts=50,
                              log=lambda _: None).read_text()
    optima = text[text.index("## Optimal sparsity"):text.index("## Reproduce")]
    assert "Skipped: every run has S = 0" in optima
    assert not (tmp_path / "optima.json").exists()
    # No sparse run says anything about the expert share: null, and `moelab optimal` still works.
    assert json.loads((tmp_path / "fit.json").read_text())["shared_fraction"] is None
    assert main(["optimal", str(tmp_path / "fit.json"), "--flops", "1e11", "--json"]) == 0
    # Each budget's parabola vertex is the true law's optimum along that budget; the one beyond
    # the largest size is flagged and left out of the exponent.
    analysis = json.loads((tmp_path / "isoflop.json").read_text())["all_points"]
    largest = max(count_params(p.config.model).total for p in plan_sweep(grid))
    for budget in analysis["budgets"]:
        expected = true_dense_optimum(INTERIOR_TRUTH, budget["flops"])
        assert budget["inside_data"] == (expected < largest)
        if budget["inside_data"]:
            assert budget["params"] == pytest.approx(expected, rel=0.05)
    assert analysis["outside_data"] == [1.08e12]
    assert "| 1.08e+12 | 5 |" in text and "outside data" in text
    inside = [b["flops"] for b in analysis["budgets"] if b["inside_data"]]
    true_exponent = np.polyfit(np.log(inside), np.log([true_dense_optimum(INTERIOR_TRUTH, c)
                                                       for c in inside]), 1)[0]
    assert analysis["params_exponent"]["exponent"] == pytest.approx(true_exponent, abs=0.02)
    assert f"C^{analysis['params_exponent']['exponent']:.3f}" in text


@pytest.mark.slow
def test_report_of_one_sparse_sparsity_skips_optima(tmp_path):
    grid = one_sparsity_grid(0.5)
    rows = synthetic_results(grid, INTERIOR_TRUTH)
    write_results_csv(tmp_path / "results.csv", rows)
    text = write_sweep_report(sweep_inputs(write_grid_json(tmp_path, grid)), bootstrap_replicates=0, max_starts=50,
                              log=lambda _: None).read_text()
    assert "Skipped: every run has S = 0.5" in text and "## IsoFLOP analysis" in text
    # With a sparse sparsity the family's share is still measured: N_active / N = phi + (1-phi)/2.
    # At one sparsity the least-squares phi is the plain mean of the runs' own, exactly.
    expected = np.mean([2 * r["N_active"] / r["N_total"] - 1 for r in rows])
    fit = json.loads((tmp_path / "fit.json").read_text())
    assert fit["shared_fraction"] == pytest.approx(expected, abs=1e-12)


@pytest.mark.slow
def test_sweep_bootstrap_must_be_a_count_before_any_training(tmp_path, capsys):
    assert exit_code(["sweep-sparsity", "micro", "--dry-run", "--bootstrap", "-1"]) == 2
    err = capsys.readouterr().err
    assert "argument --bootstrap: -1 is invalid" in err and err.count("\n") == 1
    assert exit_code(["sweep-sparsity", "micro", "--dry-run", "--bootstrap", "0",
                      "--starts", "50"]) == 0

    def must_not_train(*args, **kwargs):
        raise AssertionError("trained before checking --bootstrap")

    with pytest.raises(MoelabError, match="--bootstrap -3 is invalid"):
        run_sweep(load_grid("micro"), tmp_path, bootstrap_replicates=-3, train_fn=must_not_train,
                  log=lambda _: None)
    assert not (tmp_path / "runs").exists()


def fake_run(run_dir: Path, config, summary: dict) -> None:
    """A finished run folder as the training loop leaves it: config.yaml and summary.json."""
    run_dir.mkdir(parents=True)
    save_config(config, run_dir / "config.yaml")
    (run_dir / "summary.json").write_text(json.dumps({"status": "complete", **summary}))


def test_results_rows_come_from_the_run_folders_not_the_plan(tmp_path):
    grid = load_grid("micro")
    points = plan_sweep(grid)
    sparse = next(p for p in points if p.sparsity == 0.5)
    # The folder holds E = 4 experts where the plan said 2, and counts no planner would give:
    # results.csv must describe what was trained.
    trained = override(sparse.config, ["model.moe.num_experts=4", "model.moe.d_expert=16"])
    summary = {"total_params": 123_457, "active_params": 45_679, "non_embedding_params": 33_331,
               "tokens": 4_096, "flops_per_token_6n": 274_074, "flops_per_token_full": 300_001,  # an older summary's name
               "best_val_loss": 5.25, "final_val_loss": 5.5}
    run_dir = f"runs/{sparse.arm}/seed0"
    fake_run(tmp_path / run_dir, trained, summary)
    [row] = collect_results(tmp_path, points)
    assert row["run"] == run_dir
    assert (row["N_total"], row["N_active"], row["N_non_embedding"], row["D"]) == (
        123_457, 45_679, 33_331, 4_096)
    assert (row["flops_per_token_6n"], row["flops_per_token_kaplan"]) == (274_074, 300_001)
    assert row["C"] == 274_074 * 4_096
    assert (row["E"], row["k"], row["d_expert"], row["S"]) == (4, 1, 16, 0.75)
    assert (row["best_val_loss"], row["final_val_loss"]) == (5.25, 5.5)


def test_budget_labels_are_lossless_and_folders_never_shared(tmp_path):
    grid = dataclasses.replace(DEMO, sizes=DEMO.sizes[:1], sparsities=[0.0],
                               flops_budgets=[1.2341e11, 1.2342e11, 4e10]).validate()
    points = plan_sweep(grid)
    assert len({p.arm for p in points}) == 3
    # The label reads back as the budget itself; round budgets keep their old short labels.
    assert {float(p.budget_label[1:]) for p in points} == {1.2341e11, 1.2342e11, 4e10}
    assert "C4e+10" in {p.budget_label for p in points}
    repeated = dataclasses.replace(DEMO, flops_budgets=[4e10, 4e10]).validate()
    with pytest.raises(ConfigError, match="planned twice"):
        plan_sweep(repeated)


def test_seeds_plan_the_whole_grid_once_per_seed_with_one_wsd_family_per_seed(tmp_path):
    grid = load_grid("micro", ["token_budgets=[1280,2560]", "seeds=[3,0]"])
    grid = dataclasses.replace(grid, overrides=[*grid.overrides, "train.schedule=wsd"])
    points, specs = plan_sweep_folder(grid, tmp_path)
    # 2 sizes x 2 sparsities x 2 budgets, once per seed, the first seed's grid first.
    assert len(points) == len(specs) == 16
    assert [p.seed for p in points] == [3] * 8 + [0] * 8
    for point, spec in zip(points, specs):
        assert spec.name == point.run_name == f"{point.arm}/seed{point.seed}"
        assert spec.config.train.seed == point.seed
    # Each size, sparsity and seed is one family: the 2,560-token run and a branch from it,
    # never from another seed's run.
    branches = [spec for spec in specs if spec.branch]
    assert len(branches) == 8
    for spec in branches:
        assert spec.branch.source == spec.name.replace("D1280", "D2560")
    plan = json.loads((tmp_path / "plan.json").read_text())
    assert sorted({run["seed"] for run in plan["runs"]}) == [0, 3]
    assert json.loads((tmp_path / "grid.json").read_text())["seeds"] == [3, 0]


def test_a_grid_with_the_older_single_seed_key_still_plans_and_reruns(tmp_path):
    old = tmp_path / "old.yaml"
    old.write_text((SWEEP_PRESETS / "micro.yaml").read_text().replace("seeds: [0]", "seed: 5"))
    assert load_grid(old).seeds == [5]
    with pytest.raises(ConfigError, match=r"seed=5 and seeds=\[0, 1\] are both given"):
        load_grid(old, ["seeds=[0,1]"])
    # A sweep folder written when grid.json held `seed` is the same grid, not another one.
    grid = load_grid("micro")
    out = write_grid_json(tmp_path / "sweep", grid)
    record = json.loads((out / "grid.json").read_text())
    record["seed"] = record.pop("seeds")[0]
    (out / "grid.json").write_text(json.dumps(record))
    assert read_grid_record(out)["seeds"] == [0]
    plan_sweep_folder(grid, out)
    assert json.loads((out / "grid.json").read_text())["seeds"] == [0]
    # Seeds may be added to a folder (its runs stay valid); dropping one, or any other change
    # of the grid, is another sweep.
    plan_sweep_folder(dataclasses.replace(grid, seeds=[0, 2]), out)
    assert json.loads((out / "grid.json").read_text())["seeds"] == [0, 2]
    for other in (dataclasses.replace(grid, seeds=[2]), dataclasses.replace(grid, sparsities=[0.0])):
        with pytest.raises(MoelabError, match="already holds another sweep grid"):
            plan_sweep_folder(other, out)
    assert json.loads((out / "grid.json").read_text())["seeds"] == [0, 2]


def test_paper_grid_sizes_in_docs_are_the_counted_ones():
    totals = [count_params(p.config.model).total for p in plan_sweep(load_grid("paper"))]
    low, high = f"{min(totals) / 1e6:.1f}M", f"{max(totals) / 1e6:.1f}M"
    docs = (REPO_ROOT / "docs" / "scaling.md").read_text()
    stated = re.search(r"`paper` \(4 sizes\s+of ([\d.]+M)-([\d.]+M) total parameters", docs)
    assert stated and stated.groups() == (low, high)


def test_cpu_grid_sizes_and_runs_in_docs_are_the_counted_ones():
    points = plan_sweep(load_grid("cpu"))
    totals = [count_params(p.config.model).total for p in points]
    low, high = f"{round(min(totals), -3) / 1e3:.0f}K", f"{round(max(totals), -3) / 1e3:.0f}K"
    docs = (REPO_ROOT / "docs" / "scaling.md").read_text()
    assert f"`cpu` (4 sizes of {low}-{high} total parameters" in docs
    assert len(points) == 96 and len({p.arm for p in points}) == 48 and "= 96 runs" in docs
    # The documented results are this grid's, overrides and all: one row per planned run.
    results = REPO_ROOT / "experiments" / "results" / "sweeps" / "cpu"
    with open(results / "results.csv") as f:
        documented = {row["run"] for row in csv.DictReader(f)}
    assert documented == {f"runs/{p.run_name}" for p in points}
    grid = load_grid("cpu")
    recorded = read_grid_record(results)
    # The results were trained when the preset named the local copy by its path; the preset now
    # names the source `tinystories`, which reads that copy (MOELAB_DATA) into the same cache.
    # The logging keys moved to train.logging since; the grid spelt as today is the same grid.
    recorded["overrides"] = [spelt_as_today(item.replace("data.source=../shared/data/tinystories",
                                                         "data.source=tinystories"))
                             for item in recorded["overrides"]]
    assert recorded == json.loads(json.dumps(grid_json_record(grid)))


def test_sweep_help_lists_every_preset(capsys):
    assert exit_code(["sweep-sparsity", "--help"]) == 0
    help_text = " ".join(capsys.readouterr().out.split())
    assert grid_preset_names() == ["cpu", "cpu-expertn", "cpu-finetune", "cpu-fixedn",
                                   "cpu-granularity", "cpu-isoflop", "cpu-prereg", "cpu-topk", "demo", "micro",
                                   "paper", "quick-law"]
    for name in grid_preset_names():
        assert re.search(rf"\b{name}\b", help_text), name


@pytest.mark.slow
def test_micro_sweep_end_to_end_then_rerun_skips_and_jobs_agree(tmp_path, monkeypatch):
    # The micro grid trains on the `demo` config's bundled sample: no shared data folder needed.
    assert load_grid("micro").base == "demo" and load_config("demo").data.source == "sample"
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
        assert int(row["flops_per_token_6n"]) == summary["flops_per_token_6n"]
        assert int(row["C"]) == summary["flops_per_token_6n"] * summary["tokens"]
        assert (float(row["S"]) == 0.0) == (int(row["E"]) == 1)
        # How fast it trained: tokens over training time, per step, as the run measured it (the
        # summary reads its clock once per field, microseconds apart: 1 %).
        assert float(row["tokens_per_s"]) == pytest.approx(summary["tokens"] / summary["train_time_s"],
                                                           rel=0.01)
        assert float(row["step_time_s"]) == pytest.approx(summary["train_time_s"] / summary["steps"],
                                                          rel=0.01)
        assert int(row["tokens_per_step"]) == 4 * 32 and int(row["peak_memory_bytes"]) > 0
    # Four runs are too few for the throughput model's five terms: the report tabulates the
    # runs' speed and says why there is no model.
    text = report.read_text()
    assert "## Throughput" in text and "4 rows are too few for the throughput model" in text

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
                 "--bootstrap", "4", "--starts", "50"]) == 0
    assert "--starts 50" in (parallel / "report.md").read_text()
    with open(parallel / "results.csv", newline="") as f:
        assert [r["best_val_loss"] for r in csv.DictReader(f)] == [r["best_val_loss"] for r in rows]

    # Two seeds: seed 0's runs are the one-seed sweep's, run for run (a run depends on its
    # config and seed, not on the sweep it is in); seed 1's differ.
    two_seeds = tmp_path / "two_seeds"
    assert main(["sweep-sparsity", "micro", "--out", str(two_seeds), "--set", "seeds=[1,0]",
                 "--bootstrap", "0", "--starts", "50"]) == 0
    with open(two_seeds / "results.csv", newline="") as f:
        by_run = {r["run"]: r for r in csv.DictReader(f)}
    assert len(by_run) == 8 and {r["seed"] for r in by_run.values()} == {"0", "1"}
    for row in rows:
        assert by_run[row["run"]]["best_val_loss"] == row["best_val_loss"]
        assert by_run[row["run"].replace("/seed0", "/seed1")]["best_val_loss"] != row["best_val_loss"]
    assert "Each of 4 points has runs of several seeds" in (two_seeds / "report.md").read_text()


def test_sweep_set_overrides_grid_keys_and_adds_config_keys_to_the_grids_overrides(tmp_path, capsys):
    out = tmp_path / "sweep"
    assert main(["sweep-sparsity", "micro", "--out", str(out), "--list-runs",
                 "--set", "token_budgets=[1280,2560]", "--set", "train.schedule=wsd"]) == 0
    grid = json.loads((out / "grid.json").read_text())
    assert grid["token_budgets"] == [1280, 2560]
    assert grid["overrides"] == [*load_grid("micro").overrides, "train.schedule=wsd"]
    commands = capsys.readouterr().out.strip().splitlines()
    assert len(commands) == 8 and sum("--branch-from" in c for c in commands) == 4  # a wsd family
    assert main(["sweep-sparsity", "micro", "--dry-run", "--set", "seeds=x"]) == 2
    err = capsys.readouterr().err
    assert "seeds[0]='x' is invalid: expected a whole number" in err
    assert len(err.strip().splitlines()) == 1
