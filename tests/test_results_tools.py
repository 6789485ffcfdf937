"""``fit``, ``isoflop`` and ``optimal`` read moelab's own files without ``--columns``: a sweep's
results.csv (N is N_total, the loss best_val_loss, the IsoFLOP budget C_budget), its fit.json
or the sweep folder. Checked against what the sweep itself recorded in the house fixtures
(written by an earlier moelab) and in the committed cpu sweep."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from moelab.cli import main

ROOT = Path(__file__).resolve().parents[1]
HOUSE = ROOT / "tests" / "fixtures" / "house"
CPU_SWEEP = ROOT / "experiments" / "results" / "sweeps" / "cpu"


def run_json(args: list[str], capsys) -> dict:
    capsys.readouterr()
    assert main(args + ["--json"]) == 0
    return json.loads(capsys.readouterr().out)


@pytest.mark.slow
def test_fit_reads_a_sweeps_results_csv_as_the_sweep_fitted_it(capsys):
    folder = HOUSE / "sweep-flops"
    analysis = json.loads((folder / "analysis.json").read_text())
    recorded = {form["law"]: form for form in json.loads((folder / "forms.json").read_text())["forms"]}
    law = "sparsity-effective-size"
    fit = run_json(["fit", str(folder / "results.csv"), "--law", law,
                    "--starts", str(analysis["max_starts"])], capsys)
    assert fit["n_points"] == analysis["n_points"] == 18
    assert fit["objective"] == pytest.approx(recorded[law]["objective"], rel=1e-6)
    for name, value in recorded[law]["params"].items():
        assert fit["params"][name] == pytest.approx(value, rel=1e-3, abs=1e-6), name


@pytest.mark.slow
def test_explicit_columns_still_win(capsys):
    csv = str(HOUSE / "sweep-flops" / "results.csv")
    by_default = run_json(["fit", csv, "--law", "chinchilla", "--starts", "20"], capsys)
    by_active = run_json(["fit", csv, "--law", "chinchilla", "--starts", "20",
                          "--columns", "N=N_active"], capsys)
    assert by_default["objective"] != by_active["objective"]


def test_isoflop_groups_a_sweeps_runs_by_their_planned_budget(capsys):
    folder = HOUSE / "sweep-flops"
    result = run_json(["isoflop", str(folder / "results.csv")], capsys)
    recorded = json.loads((folder / "isoflop.json").read_text())["all_points"]["budgets"]
    assert [b["flops"] for b in result["budgets"]] == [b["flops"] for b in recorded] == [1e9, 3e9]
    for mine, theirs in zip(result["budgets"], recorded):
        assert mine["n_points"] == theirs["n_points"] == 9
        for key in ("params", "sparsity", "loss"):
            assert mine[key] == pytest.approx(theirs[key], rel=1e-9), key


def test_isoflop_of_a_token_budget_sweep_says_why_in_one_line(capsys):
    assert main(["isoflop", str(HOUSE / "sweep-tokens" / "results.csv")]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "C_budget is empty" in err


@pytest.mark.parametrize("given", ["folder", "fit.json"])
def test_optimal_reads_the_sweeps_fit_as_the_sweep_did(given, capsys):
    optimum = json.loads((CPU_SWEEP / "optima.json").read_text())["vs_flops"][0]
    source = CPU_SWEEP if given == "folder" else CPU_SWEEP / "fit.json"
    result = run_json(["optimal", str(source), "--flops", repr(optimum["flops"])], capsys)
    for key in ("sparsity", "params_total", "tokens", "loss"):
        assert result["optimum"][key] == pytest.approx(optimum["optimum"][key], rel=1e-4), key


@pytest.mark.parametrize("source, expected", [
    (CPU_SWEEP / "forms.json", "is fit.json beside it"),
    (HOUSE / "sweep-tokens" / "forms.json", "none was identified"),
    (HOUSE / "sweep-tokens", "has no fit.json"),
])
def test_optimal_on_a_file_that_is_no_fit_names_the_one_to_use(source, expected, capsys):
    assert main(["optimal", str(source), "--flops", "1e12"]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and expected in err
