"""The sweep report is its registry of analyses rendered in order: every analysis module is
listed once, and a new analysis is one new module and one registry line, with no other file to
touch (its record computed, written, read back and rendered in its place)."""

from __future__ import annotations

import importlib
import importlib.util
import json
import pkgutil
import sys
from pathlib import Path

import pytest

import moelab.sweep.analyses as registry
from moelab.scaling.laws import get_law
from moelab.sweep.grid import load_grid
from moelab.sweep.report import load_sweep, render_sweep_report, sweep_inputs, write_sweep_report
from moelab.sweep.tabulate import write_results_csv
from sweep_rows import synthetic_results, write_grid_json

TRUTH = {"b": 40.0, "d": 20.0, "e": 1.2, "beta": 0.3, "delta": 0.3, "gamma": 0.35}


def test_every_analysis_module_is_listed_once_in_the_registry():
    modules = [importlib.import_module(f"{registry.__name__}.{info.name}")
               for info in pkgutil.iter_modules(registry.__path__)]
    defined = [module.ANALYSIS for module in modules if hasattr(module, "ANALYSIS")]
    assert len(defined) >= 15  # the analyses the sweep report shows
    assert sorted(a.name for a in registry.ANALYSES) == sorted(a.name for a in defined)
    assert len({a.name for a in registry.ANALYSES}) == len(registry.ANALYSES)
    files = [a.file for a in registry.ANALYSES if a.file is not None]
    assert len(set(files)) == len(files)
    assert all(a.record_type is not None for a in registry.ANALYSES if a.file is not None)
    assert registry.ANALYSES[0].name == "setup" and registry.ANALYSES[-1].name == "reproduce"


NEW_ANALYSIS = '''
"""Runs per sparsity: a made-up analysis, one module."""

from dataclasses import dataclass

from moelab.report.analysis import Analysis


@dataclass
class RunsPerSparsity:
    counts: dict[float, int]


def compute(folder, findings):
    counts = {}
    for row in folder.rows:
        counts[row.S] = counts.get(row.S, 0) + 1
    return RunsPerSparsity(counts) if counts else None


def render(record, folder, findings):
    if record is None:
        return ""
    return "## Runs per sparsity\\n\\n" + ", ".join(
        f"S = {s:g}: {n}" for s, n in sorted(record.counts.items())) + "\\n"


ANALYSIS = Analysis("runs_per_sparsity", compute, render, file="runs_per_sparsity.json",
                    record_type=RunsPerSparsity)
'''


def _module_from(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow
def test_a_new_analysis_is_one_module_and_one_registry_line(tmp_path, monkeypatch):
    (tmp_path / "runs_per_sparsity.py").write_text(NEW_ANALYSIS)
    new = _module_from(tmp_path / "runs_per_sparsity.py", "runs_per_sparsity_probe")
    monkeypatch.setattr(registry, "ANALYSES", (*registry.ANALYSES, new.ANALYSIS))  # the line

    grid = load_grid("demo")
    rows = synthetic_results(grid, TRUTH, get_law("sparsity-effective-size"))
    folder = write_grid_json(tmp_path / "sweep", grid)
    write_results_csv(folder / "results.csv", rows)
    report = write_sweep_report(sweep_inputs(folder), bootstrap_replicates=0, max_starts=20,
                                log=lambda _: None).read_text()

    expected: dict[str, int] = {}  # counted by hand from the rows written
    for row in rows:
        key = f"{float(row['S'])}"
        expected[key] = expected.get(key, 0) + 1
    assert json.loads((folder / "runs_per_sparsity.json").read_text()) == {"counts": expected}
    section = "## Runs per sparsity\n\n" + ", ".join(
        f"S = {float(s):g}: {n}" for s, n in sorted(expected.items(), key=lambda i: float(i[0])))
    assert report.endswith(section + "\n")  # the registry's last line: the report's last section
    assert report.index("## Reproduce") < report.index("## Runs per sparsity")

    stored = load_sweep(folder)  # read back from its file, typed
    assert stored.record(new.ANALYSIS) == new.RunsPerSparsity(
        {float(s): n for s, n in expected.items()})
    assert render_sweep_report(stored).read_text() == report

    monkeypatch.setattr(registry, "ANALYSES", registry.ANALYSES[:-1])  # the line taken out
    without = render_sweep_report(load_sweep(folder)).read_text()
    assert "Runs per sparsity" not in without and report.startswith(without)


@pytest.mark.slow
def test_the_report_follows_the_registry_order(tmp_path, monkeypatch):
    """Moving an analysis in the registry moves its section: nothing else orders them."""
    folder = write_grid_json(tmp_path / "sweep", load_grid("demo"))
    (folder / "plan.json").write_text(json.dumps({"runs": [{"run_dir": "runs/x"}] * 2}))
    first = write_sweep_report(sweep_inputs(folder), bootstrap_replicates=0,
                               log=lambda _: None).read_text()
    assert first.startswith("# Sparsity sweep `demo`\n\n## Setup")
    assert first.index("## Setup") < first.index("## Partial results")
    setup, *others = registry.ANALYSES
    monkeypatch.setattr(registry, "ANALYSES", (*others, setup))
    moved = render_sweep_report(load_sweep(folder)).read_text()
    assert moved.startswith("## Partial results")
    assert moved.index("No results to analyse yet") < moved.index("# Sparsity sweep `demo`")
    assert sorted(moved.splitlines()) == sorted(first.splitlines())  # the same sections, moved
