"""The sweep report split: analysis files from grid.json and results.csv, a report rendered
from the folder alone, the runs' measured throughput and the three optima, malformed sweep
files as one-line errors."""

from __future__ import annotations

import ast
import csv
import json
from pathlib import Path

import numpy as np
import pytest

from moelab.errors import MoelabError
from moelab.scaling.laws import get_law
from moelab.scaling.optimal import seconds_optimal
from moelab.scaling.throughput import ThroughputModel, family_throughput
from moelab.sweep.grid import load_grid
from moelab.sweep.plan import plan_sweep
from moelab.sweep.report import load_sweep, render_sweep_report, sweep_inputs, write_sweep_report
from moelab.sweep.tabulate import write_results_csv
from sweep_rows import synthetic_results, write_grid_json

SWEEP = Path(__file__).resolve().parents[1] / "src" / "moelab" / "sweep"
EFFECTIVE_SIZE = get_law("sparsity-effective-size")
EFFECTIVE_TRUTH = {"b": 40.0, "d": 20.0, "e": 1.2, "beta": 0.3, "delta": 0.3, "gamma": 0.35}
# CPU-like prices (seconds per token per unit): see moelab.scaling.throughput.
PRICES = {"c": 2e-6, "a": 3e-11, "m": 6e-12, "p": 1e-11, "e": 3e-7}


def timed_rows(grid, law=EFFECTIVE_SIZE, truth=EFFECTIVE_TRUTH) -> list[dict]:
    """Synthetic results whose runs also recorded their speed, by the known prices."""
    rows = synthetic_results(grid, truth, law)
    for row, point in zip(rows, plan_sweep(grid)):
        sparse = row["S"] > 0
        flops = 6 * row["N_active"]
        model = point.config.model  # only the routed experts' FLOPs pay the MoE price m
        expert_flops = 6 * model.n_layers * 3 * model.d_model * model.moe.d_expert if sparse else 0
        seconds = (PRICES["c"] + PRICES["a"] * flops + PRICES["m"] * expert_flops
                   + PRICES["p"] * row["N_total"] + PRICES["e"] * row["E"] * sparse)
        row.update(tokens_per_s=1 / seconds, step_time_s=1024 * seconds, tokens_per_step=1024,
                   peak_memory_bytes=2**28, device="cpu")
    return rows


def imported_modules(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
        elif isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
    return names


def test_report_and_analysis_do_not_import_the_sweep_runner():
    for module in ("report.py", "analysis.py", "folder.py"):
        for runner in ("moelab.sweep.plan", "moelab.sweep.commands"):
            assert runner not in imported_modules(SWEEP / module), module


@pytest.mark.slow
def test_report_shows_measured_throughput_and_the_three_optima(tmp_path):
    grid = load_grid("demo")
    rows = timed_rows(grid)
    write_results_csv(tmp_path / "results.csv", rows)
    text = write_sweep_report(sweep_inputs(write_grid_json(tmp_path, grid)), bootstrap_replicates=4,
                              max_starts=200, log=lambda _: None).read_text()
    throughput = json.loads((tmp_path / "throughput.json").read_text())
    # One row per (N, S) of the grid, tokens/s the runs' own (each shape's runs agree here).
    shapes = {(r["N_total"], r["S"]): r["tokens_per_s"] for r in rows}
    assert len(throughput["rows"]) == len(shapes) == 12
    for shape in throughput["rows"]:
        assert shape["tokens_per_s"] == pytest.approx(shapes[(shape["N_total"], shape["S"])])
        assert f"{shape['tokens_per_s']:,.0f}" in text
    # The model fitted to the runs gives the prices back (noise-free timings).
    for name, price in PRICES.items():
        assert throughput["model"]["coefficients"][name] == pytest.approx(price, rel=1e-4), name
    assert "## Throughput" in text and "(a + m) / a = 1.20" in text
    assert throughput["model"]["source"] == "results.csv"  # the folder's file, not its path
    # The three optima, the seconds one at the runs' median training time.
    optima = json.loads((tmp_path / "optima.json").read_text())
    median_seconds = float(np.median([r["D"] / r["tokens_per_s"] for r in rows]))
    three = optima["three"]
    assert three["seconds"] == pytest.approx(median_seconds, rel=1e-9)
    fit = json.loads((tmp_path / "fit.json").read_text())
    rate = family_throughput(ThroughputModel(PRICES), fit["shared_fraction"], 1)
    expected = seconds_optimal(EFFECTIVE_SIZE, fit["params"], median_seconds, rate,
                               shared_fraction=fit["shared_fraction"])
    assert three["by_seconds"]["optimum"]["sparsity"] == pytest.approx(expected.sparsity, abs=2e-3)
    assert "### The three optima" in text and "wall clock T =" in text
    assert "throughput ratio" in text and len(optima["vs_seconds"]) == 9
    assert (tmp_path / "figures" / "optimal_sparsity.png").stat().st_size > 1000
    # The report is the folder's: rendering it again from the files gives the same text.
    assert render_sweep_report(load_sweep(tmp_path)).read_text() == text


def test_a_wall_clock_optimum_whose_interval_spans_most_of_0_1_is_undetermined():
    from moelab.scaling.optimal import Optimum, OptimumInterval
    from moelab.sweep.analyses.optima import _undetermined_or_ci

    def at(sparsity: float, ci: list[float]) -> OptimumInterval:
        optimum = Optimum(sparsity=sparsity, params_total=1e6, params_active=1e6 * (1 - sparsity),
                          tokens=1e8, loss=3.0, at_boundary=False)
        return OptimumInterval(optimum=optimum, ci={"sparsity": ci})

    wide, narrow = at(0.0, [0.0, 0.967]), at(0.8, [0.7, 0.9])
    assert _undetermined_or_ci(wide) == "undetermined on this hardware [0.000, 0.967]"
    assert _undetermined_or_ci(narrow) == "0.800 [0.700, 0.900]"


@pytest.mark.slow
def test_report_without_a_law_still_tabulates_throughput(tmp_path):
    grid = load_grid("demo")
    rows = timed_rows(grid)
    rng = np.random.default_rng(1)
    for row in rows:
        row["best_val_loss"] = 3.0 + float(rng.normal(0, 0.3))  # noise: no form identified
    write_results_csv(tmp_path / "results.csv", rows)
    text = write_sweep_report(sweep_inputs(write_grid_json(tmp_path, grid)), bootstrap_replicates=4,
                              max_starts=100, log=lambda _: None).read_text()
    assert "No form of the law passes both checks" in text
    assert "## Throughput" in text and (tmp_path / "throughput.json").exists()
    assert "optima (under parameters, FLOPs and wall-clock seconds) are read off a fitted law" in text
    assert not (tmp_path / "optima.json").exists()


@pytest.mark.slow
def test_results_without_timings_say_throughput_was_not_measured(tmp_path):
    grid = load_grid("demo")
    write_results_csv(tmp_path / "results.csv", synthetic_results(grid, EFFECTIVE_TRUTH,
                                                                   EFFECTIVE_SIZE))
    (tmp_path / "throughput.json").write_text("{}")  # stale
    text = write_sweep_report(sweep_inputs(write_grid_json(tmp_path, grid)), bootstrap_replicates=0,
                              max_starts=100, log=lambda _: None).read_text()
    assert "## Throughput\n\nNot measured" in text
    assert not (tmp_path / "throughput.json").exists()
    assert "No optimum under wall-clock seconds" in text


def corrupt_results(path: Path) -> None:
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    rows[0]["N_total"] = "many"
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)


@pytest.mark.parametrize("damage, message", [
    (lambda d: corrupt_results(d / "results.csv"), "results.csv line 2: N_total='many' is not a number"),
    (lambda d: (d / "results.csv").write_bytes(b"run,N_total\n\xff\xfe,1\n"), "results.csv"),
    (lambda d: (d / "grid.json").write_text("{\"name\": "), "grid.json is not JSON"),
    (lambda d: (d / "grid.json").write_text("[1, 2]"), "grid.json is invalid: expected a JSON object"),
    (lambda d: (d / "grid.json").write_text(json.dumps(
        {**json.loads((d / "grid.json").read_text()), "top_k": "one"})), "grid.json: top_k='one'"),
    (lambda d: (d / "grid.json").unlink(), "cannot read"),
])
def test_malformed_sweep_files_are_one_line_errors_naming_the_file(tmp_path, damage, message):
    grid = load_grid("demo")
    write_results_csv(tmp_path / "results.csv", synthetic_results(grid, EFFECTIVE_TRUTH,
                                                                   EFFECTIVE_SIZE))
    write_grid_json(tmp_path, grid)
    damage(tmp_path)
    with pytest.raises(MoelabError, match=message) as error:
        write_sweep_report(sweep_inputs(tmp_path), bootstrap_replicates=0, max_starts=50, log=lambda _: None)
    assert "\n" not in str(error.value) and str(tmp_path) in str(error.value)


@pytest.mark.slow
def test_a_wsd_family_sweep_says_its_smaller_budgets_are_branches_and_counts_their_tokens(
        tmp_path):
    grid = load_grid("demo")
    rows = timed_rows(grid)  # 1,024 tokens per step
    write_results_csv(tmp_path / "results.csv", rows)
    write_grid_json(tmp_path, grid)
    write_sweep_report(sweep_inputs(tmp_path), bootstrap_replicates=0, max_starts=50, log=lambda _: None)
    assert "budget family" not in (tmp_path / "report.md").read_text()  # no plan: no branches

    branches = {rows[0]["run"]: 3, rows[1]["run"]: 5}
    plan = {"kind": "sweep", "runs": [
        {"run_dir": row["run"], **({"branch": {"source": "elsewhere", "step": branches[row["run"]]}}
                                   if row["run"] in branches else {})} for row in rows]}
    (tmp_path / "plan.json").write_text(json.dumps(plan))
    text = render_sweep_report(load_sweep(tmp_path)).read_text()
    separate = sum(int(row["D"]) for row in rows)
    trained = separate - (3 + 5) * 1024  # a branch trains only the steps after its source step
    assert "(2 branches, plan.json)" in text
    assert f"trained {trained:,} tokens against {separate:,} for one run per budget" in text
    assert "its points are not independent draws" in text


@pytest.mark.slow
def test_a_sweep_of_several_seeds_tabulates_each_runs_seed_and_the_spread_between_seeds(tmp_path):
    grid = load_grid("demo", ["seeds=[0,1]"])
    rows = synthetic_results(grid, EFFECTIVE_TRUTH, EFFECTIVE_SIZE)
    assert len(rows) == 2 * len(synthetic_results(load_grid("demo"), EFFECTIVE_TRUTH,
                                                  EFFECTIVE_SIZE))
    # Seed 1 of every point 0.01 nats above seed 0, one point 0.05 above: per-point stds of
    # 0.01 / sqrt(2) and 0.05 / sqrt(2), by hand.
    for row in rows[len(rows) // 2:]:
        row["best_val_loss"] = rows[rows.index(row) - len(rows) // 2]["best_val_loss"] + 0.01
    rows[-1]["best_val_loss"] += 0.04
    write_results_csv(tmp_path / "results.csv", rows)
    write_grid_json(tmp_path, grid)
    text = write_sweep_report(sweep_inputs(tmp_path), bootstrap_replicates=0, max_starts=50,
                              log=lambda _: None).read_text()
    points = len(rows) // 2
    small, large = 0.01 / np.sqrt(2), 0.05 / np.sqrt(2)
    rms = np.sqrt(((points - 1) * small ** 2 + large ** 2) / points)
    assert (f"Each of {points} points has runs of several seeds. Their seed std, over those "
            f"points: median {small:.4f}, root mean square {rms:.4f}, largest {large:.4f}") in text
    assert "seeds 0, 1" in text  # the setup names them
    table = text.split("## Runs")[1].split("\n\n")[2].splitlines()
    assert "| seed |" in table[0]
    assert sorted(line.split("|")[5].strip() for line in table[2:]) == ["0"] * points + ["1"] * points


@pytest.mark.slow
def test_every_run_and_optimum_says_its_tokens_per_parameter(tmp_path):
    grid = load_grid("demo")
    rows = timed_rows(grid)
    write_results_csv(tmp_path / "results.csv", rows)
    text = write_sweep_report(sweep_inputs(write_grid_json(tmp_path, grid)), bootstrap_replicates=0,
                              max_starts=200, log=lambda _: None).read_text()
    assert "| D/N (total / active) |" in text
    for row in rows:  # D over each count, by hand, in the run's table row
        assert f"{row['D'] / row['N_total']:.3g} / {row['D'] / row['N_active']:.3g}" in text
    per_total = [row["D"] / row["N_total"] for row in rows]
    assert f"D/N_total {min(per_total):.3g} to {max(per_total):.3g}" in text  # under a figure
    three = json.loads((tmp_path / "optima.json").read_text())["three"]
    for key in ("by_params", "by_flops", "by_seconds"):
        optimum = three[key]["optimum"]
        assert (f"{optimum['tokens'] / optimum['params_total']:.3g} / "
                f"{optimum['tokens'] / optimum['params_active']:.3g}") in text
