"""The README's preset times are the committed runs' own: benchmarks/results/preset_times.json
matches a fresh read of experiments/results/, and each figure of the presets table matches it."""

from __future__ import annotations

import importlib.util
import json
import re
from pathlib import Path

import pytest

from moelab.cli import main

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "experiments" / "results"


@pytest.fixture
def script(monkeypatch):
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    spec = importlib.util.spec_from_file_location("preset_times",
                                                  ROOT / "benchmarks" / "preset_times.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _committed() -> dict[str, dict]:
    rows = json.loads((ROOT / "benchmarks/results/preset_times.json").read_text())["rows"]
    return {(row["kind"], row["preset"]): row for row in rows}


def _minutes(row: dict) -> str:
    """A preset's figure as the README writes it: per run of the preset (a record each)."""
    minutes = row["seconds"] / len(row["records"]) / 60
    return f"{minutes:.1f}" if minutes < 10 else f"{minutes:.0f}"


def _presets_row(first_cell: str) -> str:
    readme = (ROOT / "README.md").read_text()
    return next(line for line in readme.splitlines() if line.startswith(f"| {first_cell} |"))


def test_the_committed_times_are_what_the_records_say(script):
    rows = [script.study_time(p, files) for p, files in script.STUDY_RECORDS.items()]
    rows += [script.sweep_time(p, folder) for p, folder in script.SWEEP_RECORDS.items()]
    assert {(row["kind"], row["preset"]): row for row in rows} == _committed()


def test_the_demo_time_by_hand():
    # Each run's wall_time_s in the two demo records, summed without the script: 36 runs.
    seconds, runs = 0.0, 0
    for name in ("demo-seeds0-5.json", "demo-seeds617-622.json"):
        record = json.loads((RESULTS / "studies" / name).read_text())
        for arm in ("moe", "dense_active", "dense_total"):
            runs += len(record["arms"][arm]["runs"])
            seconds += sum(run["wall_time_s"] for run in record["arms"][arm]["runs"])
    assert runs == 36
    assert _committed()[("study", "demo")]["seconds"] == pytest.approx(seconds, abs=0.05)
    minutes = f"{seconds / 2 / 60:.1f} min"
    assert f"| CPU, {minutes} |" in _presets_row("`demo`")
    # The quickstart and the study presets table quote the same figure, not a range of their own.
    readme = (ROOT / "README.md").read_text()
    quickstart = readme.split("## Quickstart")[1].split("\n## ")[0]
    make_demo = next(line for line in quickstart.splitlines() if line.startswith("make demo"))
    assert f"(CPU, {minutes} of runs)" in make_demo
    assert f"took\n{minutes} one after another" in quickstart
    study_row = next(line for line in (ROOT / "docs/study.md").read_text().splitlines()
                     if line.startswith("| `demo` |"))
    assert f"CPU, {minutes} of runs" in study_row


def test_the_readme_presets_table_quotes_the_committed_times():
    committed = _committed()
    studies = [committed[("study", p)] for p in ("cpu-budgets", "cpu-ablation", "cpu-replication")]
    row = _presets_row("`cpu-budgets`, `cpu-ablation`, `cpu-replication`")
    assert f"| CPU, {', '.join(map(_minutes, studies[:2]))} and {_minutes(studies[2])} min |" in row
    sweeps = [committed[("sweep", p)] for p in ("cpu", "cpu-isoflop", "cpu-fixedn", "cpu-expertn",
                                                 "cpu-topk", "cpu-finetune")]
    row = _presets_row("sweeps `cpu`, `cpu-isoflop`, `cpu-fixedn`, `cpu-expertn`, `cpu-topk`, "
                       "`cpu-finetune`")
    assert (f"training alone {', '.join(map(_minutes, sweeps[:-1]))} and "
            f"{_minutes(sweeps[-1])} min |") in row


def test_the_small_sweeps_quote_their_dry_run_estimates(capsys):
    figures = []
    for preset in ("demo", "micro"):
        assert main(["sweep-sparsity", preset, "--dry-run"]) == 0
        line = next(l for l in capsys.readouterr().out.splitlines()
                    if l.startswith("estimated time"))
        seconds = float(re.search(r"about ([\d,]+) s", line).group(1).replace(",", ""))
        figure = f"{seconds / 60:.0f} min" if seconds >= 60 else f"{seconds:.0f} s"
        figures.append(f"{figure} (`{preset}`)")
    assert f"`--dry-run` estimates {' and '.join(figures)} |" in _presets_row(
        "sweeps `demo`, `micro`")


def test_benchmarks_md_copies_the_committed_times():
    text = (ROOT / "BENCHMARKS.md").read_text()
    for row in _committed().values():
        name = f"{'sweep ' if row['kind'] == 'sweep' else ''}`{row['preset']}`"
        cells = (f"| {row['runs']} | {row['seconds'] / 60:.1f} |",
                 f"| {row['estimated_seconds'] / 60:.1f} | "
                 f"{row['estimated_seconds'] / row['seconds']:.2f} |")
        line = next(line for line in text.splitlines() if line.startswith(f"| {name}"))
        assert all(cell in line for cell in cells), line
