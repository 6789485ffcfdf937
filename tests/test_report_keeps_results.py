"""``moelab report`` never destroys results: on a folder kept without its run folders it rebuilds
from the stored table or refuses in one line, leaving every file it cannot rebuild as it was;
and every file it (or a committed report) names exists.

Run on copies of the committed results folders (experiments/results/sweeps) and of the house
fixtures (tests/fixtures/house, never regenerated: copied to tmp_path).
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from moelab.cli import main

ROOT = Path(__file__).resolve().parents[1]
HOUSE = ROOT / "tests" / "fixtures" / "house"
COMMITTED_SWEEP = ROOT / "experiments" / "results" / "sweeps" / "cpu"
FIGURE_LINK = re.compile(r"!\[[^\]]*\]\(([^)\s]+)\)")


def snapshot(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes()
            for p in sorted(folder.rglob("*")) if p.is_file() and p.name != ".moelab.lock"}


def copy_without_runs(source: Path, into: Path) -> Path:
    copy = into / source.name
    shutil.copytree(source, copy, ignore=shutil.ignore_patterns("runs"))
    return copy


def named_files_exist(text: str, folder: Path) -> None:
    for name in re.findall(r"\b([\w.-]+\.(?:json|csv|md))\b", text):
        assert (folder / name).is_file(), f"the output names {name}, which is not in {folder}"


def linked_figures(report: Path) -> list[Path]:
    return [report.parent / link for link in FIGURE_LINK.findall(report.read_text("utf-8"))]


def test_report_of_the_committed_cpu_sweep_keeps_every_result(tmp_path, capsys):
    folder = copy_without_runs(COMMITTED_SWEEP, tmp_path)
    before = snapshot(folder)
    assert main(["report", str(folder)]) == 0
    output = capsys.readouterr().out
    after = snapshot(folder)
    for name, content in before.items():
        if name != "report.md":
            assert after.get(name) == content, f"{name} was changed or removed"
    report = (folder / "report.md").read_text("utf-8")
    assert "No results to analyse yet" not in report
    rows = len((folder / "results.csv").read_text().splitlines()) - 1
    assert rows == 96 and report.count("| s") >= rows  # the runs table is still there
    named_files_exist(output, folder)
    assert linked_figures(folder / "report.md")
    assert all(path.is_file() for path in linked_figures(folder / "report.md"))


@pytest.mark.parametrize("name", ["sweep-flops", "sweep-tokens"])
def test_a_house_sweep_without_runs_reports_the_same_from_its_stored_files(name, tmp_path,
                                                                           capsys):
    # The fixture's report.md was rendered from these same stored files when its runs were
    # there: rendering it again from the files alone must give the same text.
    folder = copy_without_runs(HOUSE / name, tmp_path)
    before = snapshot(folder)
    assert main(["report", str(folder)]) == 0
    named_files_exist(capsys.readouterr().out, folder)
    after = snapshot(folder)
    for file_name, content in before.items():
        if not file_name.startswith("figures/"):
            assert after.get(file_name) == content, file_name
    assert all(path.is_file() for path in linked_figures(folder / "report.md"))


def test_a_sweep_missing_some_run_folders_is_refused_and_left_as_it_was(tmp_path, capsys):
    folder = tmp_path / "sweep-flops"
    shutil.copytree(HOUSE / "sweep-flops", folder)
    lost = sorted((folder / "runs").glob("*/*/*"))[0]
    shutil.rmtree(lost)
    before = snapshot(folder)
    assert main(["report", str(folder)]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert lost.relative_to(folder).as_posix() in err and "results.csv" in err
    assert snapshot(folder) == before


@pytest.mark.parametrize("lose", ["runs", "one run"])
def test_a_study_whose_run_folders_are_gone_is_refused_and_left_as_it_was(lose, tmp_path,
                                                                          capsys):
    folder = tmp_path / "study"
    shutil.copytree(HOUSE / "study", folder)
    lost = folder / "runs" if lose == "runs" else folder / "runs" / "dense_total" / "seed1"
    shutil.rmtree(lost)
    before = snapshot(folder)
    assert main(["report", str(folder)]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert "results.json" in err
    assert ("reports 6 runs" if lose == "runs" else "reports 1 runs whose folders are missing "
            "or incomplete (runs/dense_total/seed1)") in err
    assert snapshot(folder) == before


def committed_reports() -> list[Path]:
    folders = [ROOT / "experiments", ROOT / "tests" / "fixtures", ROOT / "docs"]
    return sorted(p for folder in folders for p in folder.rglob("report.md"))


def test_committed_reports_link_only_figures_that_are_committed():
    reports = committed_reports()
    assert len(reports) >= 9  # six committed sweeps, the three house folders
    missing = [f"{report.relative_to(ROOT)} -> {path.relative_to(report.parent)}"
               for report in reports for path in linked_figures(report) if not path.is_file()]
    assert not missing, missing
