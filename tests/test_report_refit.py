"""``moelab report DIR --bootstrap R --starts K`` fits a sweep folder's law again with these
settings (a folder kept without its run folders too, which a plain report only renders); the
files the fit reads are left as they were; on a study folder, or out of range, the options are
refused in one line."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from one_line_errors import refused_on_one_line

from moelab.cli import main

ROOT = Path(__file__).resolve().parents[1]
COMMITTED_SWEEP = ROOT / "experiments" / "results" / "sweeps" / "cpu"
HOUSE = ROOT / "tests" / "fixtures" / "house"
READ_ONLY = ("results.csv", "grid.json", "plan.json")


def copy_without_runs(source: Path, into: Path) -> Path:
    copy = into / source.name
    shutil.copytree(source, copy, ignore=shutil.ignore_patterns("runs"))
    return copy


def read(folder: Path, name: str) -> dict:
    return json.loads((folder / name).read_text("utf-8"))


@pytest.mark.slow
def test_a_stored_sweep_is_fitted_again_with_the_given_settings(tmp_path, capsys):
    folder = copy_without_runs(COMMITTED_SWEEP, tmp_path)
    kept = {name: (folder / name).read_bytes() for name in READ_ONLY}
    assert read(folder, "fit.json")["num_starts"] != 16  # the stored fit used other settings
    assert main(["report", str(folder), "--bootstrap", "2", "--starts", "16"]) == 0
    fit = read(folder, "fit.json")
    assert fit["num_starts"] == 16
    assert fit["bootstrap"]["replicates"] == 2 and len(fit["bootstrap"]["params"]) == 2
    analysis = read(folder, "analysis.json")
    assert (analysis["bootstrap_replicates"], analysis["max_starts"]) == (2, 16)
    assert {name: (folder / name).read_bytes() for name in READ_ONLY} == kept
    assert "report: " in capsys.readouterr().out


@pytest.mark.slow
def test_a_sweep_with_its_runs_is_fitted_with_the_given_bootstrap(tmp_path):
    folder = tmp_path / "sweep-flops"
    shutil.copytree(HOUSE / "sweep-flops", folder)
    recorded = read(folder, "plan.json")["fit"]
    assert recorded["bootstrap_replicates"] != 3
    assert main(["report", str(folder), "--bootstrap", "3"]) == 0
    analysis = read(folder, "analysis.json")
    # --starts not given: the sweep's recorded setting stays.
    assert (analysis["bootstrap_replicates"], analysis["max_starts"]) == (3, recorded["max_starts"])
    assert read(folder, "plan.json")["fit"] == recorded  # plan.json is read, never written


@pytest.mark.parametrize("args, expected", [
    (["--bootstrap", "5"], ["--bootstrap is invalid", "grid.json"]),
    (["--starts", "8"], ["--starts is invalid", "grid.json"]),
])
def test_the_fit_options_on_a_study_folder_are_refused_on_one_line(args, expected, tmp_path,
                                                                    capsys):
    folder = tmp_path / "study"
    shutil.copytree(HOUSE / "study", folder)
    before = {p: p.read_bytes() for p in folder.rglob("*") if p.is_file()}
    refused_on_one_line(capsys, ["report", str(folder), *args], *expected)
    assert {p: p.read_bytes() for p in folder.rglob("*") if p.is_file()} == before


@pytest.mark.parametrize("args, expected", [
    (["--bootstrap", "-1"], "-1 is invalid"),
    (["--bootstrap", "100001"], "at most 100,000"),
    (["--starts", "0"], "0 is invalid"),
])
def test_fit_settings_out_of_range_are_refused_on_one_line(args, expected, tmp_path, capsys):
    with pytest.raises(SystemExit) as exited:  # argparse's own refusal
        main(["report", str(tmp_path), *args])
    err = capsys.readouterr().err
    assert exited.value.code == 2 and len(err.strip().splitlines()) == 1 and expected in err
