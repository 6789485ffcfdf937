"""``moelab merge``: sweep folders of one grid extended by new sparsities become one folder
whose report fits them together; grids that differ in more than the new sparsities, repeated
runs or sparsities, and an output that would replace a sweep are refused on one line with
nothing written. The folders are fakes: grid.json as the sweep writes it, a plan.json, and a
results.csv of synthetic rows (tests/sweep_rows.py)."""

from __future__ import annotations

import csv
import json
import shutil
from pathlib import Path

import pytest
from one_line_errors import refused_on_one_line
from sweep_rows import synthetic_results, write_grid_json

from moelab.cli import main
from moelab.scaling.laws import get_law
from moelab.sweep.grid import load_sweep_grid
from moelab.sweep.tabulate import write_results_csv

TRUTH = {"b": 40.0, "d": 20.0, "e": 1.2, "beta": 0.3, "delta": 0.3, "gamma": 0.35}


def fake_sweep(folder: Path, sparsities: str, *sets: str) -> Path:
    """A sweep folder of the micro grid at these sparsities, without run folders."""
    grid = load_sweep_grid("micro", [f"sparsities={sparsities}", "token_budgets=[]",
                                     "flops_budgets=[1e9,3e9]", *sets])
    rows = synthetic_results(grid, TRUTH, get_law("sparsity-effective-size"))
    write_grid_json(folder, grid)
    (folder / "plan.json").write_text(json.dumps(
        {"kind": "sweep-sparsity", "fit": {"bootstrap_replicates": 0, "max_starts": 8},
         "runs": [{"name": row["run"].removeprefix("runs/"), "run_dir": row["run"]}
                  for row in rows]}))
    write_results_csv(folder / "results.csv", rows)
    return folder


def table(folder: Path) -> list[dict[str, str]]:
    with (folder / "results.csv").open(newline="") as handle:
        return list(csv.DictReader(handle))


def snapshot(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in folder.iterdir() if p.is_file()}


@pytest.fixture
def two_sweeps(tmp_path) -> tuple[Path, Path]:
    return (fake_sweep(tmp_path / "first", "[0.0,0.5]"),
            fake_sweep(tmp_path / "second", "[0.75]", "name=micro-extended"))


@pytest.mark.slow
def test_merged_folder_holds_both_grids_rows_and_reports_as_one_sweep(two_sweeps, tmp_path,
                                                                      capsys):
    first, second = two_sweeps
    out = tmp_path / "merged"
    assert main(["merge", str(first), str(second), "--out", str(out)]) == 0
    assert "12 runs from 2 folders, sparsities 0, 0.5, 0.75" in capsys.readouterr().out
    grid = json.loads((out / "grid.json").read_text())
    first_grid = json.loads((first / "grid.json").read_text())
    assert grid == {**first_grid, "sparsities": [0.0, 0.5, 0.75]}  # the first's name is kept
    # 2 sizes x 2 budgets x 1 seed: 8 rows at S 0 and 0.5, then 4 at S 0.75.
    rows = table(out)
    assert (len(table(first)), len(table(second)), len(rows)) == (8, 4, 12)
    assert rows == table(first) + table(second)
    assert sorted({float(row["S"]) for row in rows}) == [0.0, 0.5, 0.75]
    plan = json.loads((out / "plan.json").read_text())
    assert len(plan["runs"]) == 12 and plan["merged_from"] == [str(first), str(second)]
    assert main(["report", str(out), "--bootstrap", "0", "--starts", "8"]) == 0
    analysis = json.loads((out / "analysis.json").read_text())
    assert analysis["n_points"] == 12
    assert "0.75" in (out / "report.md").read_text()


@pytest.mark.parametrize("sets, expected", [
    (["seeds=[0,1]"], "differs from"),  # more seeds are more than new points
    (["flops_budgets=[1e9,2e9]"], "flops_budgets"),
    (["top_k=2"], "top_k"),
])
def test_grids_that_differ_in_more_than_the_sparsities_are_refused(sets, expected, tmp_path,
                                                                   capsys):
    first = fake_sweep(tmp_path / "first", "[0.0,0.5]")
    second = fake_sweep(tmp_path / "second", "[0.75]", *sets)
    out = tmp_path / "merged"
    err = refused_on_one_line(capsys, ["merge", str(first), str(second), "--out", str(out)],
                              expected, "only sparsities and name may differ")
    assert str(second / "grid.json") in err
    assert not out.exists()


def test_sparsities_in_both_folders_are_refused(tmp_path, capsys):
    first = fake_sweep(tmp_path / "first", "[0.0,0.5]")
    second = fake_sweep(tmp_path / "second", "[0.5,0.75]")
    refused_on_one_line(capsys, ["merge", str(first), str(second), "--out", str(tmp_path / "m")],
                        "sparsities 0.5 are in an earlier folder too")
    assert not (tmp_path / "m").exists()


def test_a_run_in_two_folders_is_refused(two_sweeps, tmp_path, capsys):
    first, second = two_sweeps
    rows = table(second)
    rows[0]["run"] = table(first)[0]["run"]
    with (second / "results.csv").open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]), lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows)
    refused_on_one_line(capsys, ["merge", str(first), str(second), "--out", str(tmp_path / "m")],
                        table(first)[0]["run"], "more than one folder")


def test_other_results_columns_are_refused(two_sweeps, tmp_path, capsys):
    first, second = two_sweeps
    rows = [{**row, "extra": "1"} for row in table(second)]
    with (second / "results.csv").open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]), lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows)
    refused_on_one_line(capsys, ["merge", str(first), str(second), "--out", str(tmp_path / "m")],
                        "other columns")


def test_an_output_that_is_an_input_or_holds_a_sweep_is_refused(two_sweeps, tmp_path, capsys):
    first, second = two_sweeps
    before = snapshot(first), snapshot(second)
    refused_on_one_line(capsys, ["merge", str(first), str(second), "--out", str(first)],
                        "one of the folders merged")
    kept = shutil.copytree(first, tmp_path / "kept")
    refused_on_one_line(capsys, ["merge", str(first), str(second), "--out", str(kept)],
                        "already holds grid.json")
    assert (snapshot(first), snapshot(second)) == before
    assert snapshot(kept) == before[0]


def test_an_output_inside_an_input_is_refused_and_nothing_written(two_sweeps, capsys):
    first, second = two_sweeps
    for inside in (second / "sub", second / "deeper" / "still"):
        refused_on_one_line(capsys, ["merge", str(first), str(second), "--out", str(inside)],
                            f"--out {inside} is invalid", f"inside {second}")
        assert not (second / "sub").exists() and not (second / "deeper").exists()


@pytest.mark.parametrize("damage, expected", [
    ("one folder", "2 or more"),
    ("no grid.json", "grid.json"),
    ("no results.csv", "no results.csv"),
    ("missing folder", "no such folder"),
])
def test_what_is_not_a_sweep_folder_is_refused(damage, expected, two_sweeps, tmp_path, capsys):
    first, second = two_sweeps
    sources = [str(first), str(second)]
    if damage == "one folder":
        sources = [str(first)]
    elif damage == "no grid.json":
        (second / "grid.json").unlink()
    elif damage == "no results.csv":
        (second / "results.csv").unlink()
    else:
        sources[1] = str(tmp_path / "absent")
    refused_on_one_line(capsys, ["merge", *sources, "--out", str(tmp_path / "m")], expected)
    assert not (tmp_path / "m").exists()
