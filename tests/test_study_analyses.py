"""The study report's registry: every analysis module is listed once, under its own name, and
no section of the report reads a file (the folder is read once, by the command)."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

from moelab.study import analyses
from moelab.study.analyses import ANALYSES

PACKAGE = Path(analyses.__file__).parent
NOT_ANALYSES = {"__init__", "shared"}


def analysis_modules() -> list[str]:
    return sorted(path.stem for path in PACKAGE.glob("*.py") if path.stem not in NOT_ANALYSES)


def test_every_analysis_module_is_listed_once():
    listed = [analysis.name for analysis in ANALYSES]
    assert len(listed) == len(set(listed)), listed
    for name in analysis_modules():
        module = importlib.import_module(f"moelab.study.analyses.{name}")
        assert ANALYSES.count(module.ANALYSIS) == 1, name


def test_the_statistics_come_first_and_the_notes_last():
    # Every section reads the statistics; the notes close the report.
    assert [ANALYSES[0].name, ANALYSES[-1].name] == ["statistics", "notes"]


def test_no_analysis_reads_a_file():
    readers = {"read_json", "read_text", "read_bytes", "open", "read_plan", "read_choices",
               "read_failures", "read_complete_runs", "RunFolder"}
    found = []
    for path in sorted(PACKAGE.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text("utf-8"))):
            if isinstance(node, ast.Call):
                name = getattr(node.func, "id", None) or getattr(node.func, "attr", None)
                if name in readers:
                    found.append(f"{path.name}: {name}")
    assert not found, found
