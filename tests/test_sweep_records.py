"""The sweep's typed records read the analysis files earlier moelab wrote and write them back
key for key: the stored files are the reference, not the records' own output."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from moelab.codec import from_json, to_json
from moelab.scaling.fit_record import LawFit
from moelab.scaling.form_table import FormTable
from moelab.sweep.analyses.law_fit import SweepFit
from moelab.sweep.analyses.law_form import FormsRecord
from moelab.sweep.analyses.optima import OptimaRecord
from moelab.sweep.analyses.throughput import ThroughputRecord
from moelab.sweep.folder import AnalysisStatus

REPO = Path(__file__).resolve().parents[1]
HOUSE = REPO / "tests" / "fixtures" / "house"
SWEEPS = [HOUSE / "sweep-flops", HOUSE / "sweep-tokens",
          *sorted((REPO / "experiments" / "results" / "sweeps").glob("*/"))]
RECORDS = {"fit.json": SweepFit, "fit_holdout.json": LawFit, "forms.json": FormsRecord,
           "optima.json": OptimaRecord, "throughput.json": ThroughputRecord,
           "form_table.json": FormTable}
STORED = [folder / name for folder in SWEEPS for name in RECORDS if (folder / name).is_file()]
DROPPED = "intervals_checked"
"""A key of each form's checks in forms.json that an older analysis wrote and none reads."""


def test_the_stored_sweeps_hold_every_record():
    assert {path.name for path in STORED} == set(RECORDS)


@pytest.mark.parametrize("path", STORED, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_a_stored_file_reads_and_writes_back_key_for_key(path):
    stored = json.loads(path.read_text())
    again = to_json(from_json(RECORDS[path.name], stored))
    if path.name == "forms.json":
        for check in stored["forms"]:
            check.pop(DROPPED, None)
    # The same text as json.dump writes it: keys, their order, values, NaN and null alike.
    assert json.dumps(again, indent=2) == json.dumps(stored, indent=2)


@pytest.mark.parametrize("path", [folder / "analysis.json" for folder in SWEEPS
                                  if (folder / "analysis.json").is_file()],
                         ids=lambda p: p.parent.name)
def test_the_status_keeps_only_the_steps_that_ran(path):
    status = json.loads(path.read_text())["status"]
    assert to_json(from_json(AnalysisStatus, status)) == status
    assert to_json(AnalysisStatus(law="chosen")) == {"law": "chosen"}


def test_typed_records_answer_by_name():
    """What the report reads, read from the file by hand."""
    folder = next(path.parent for path in STORED if path.name == "optima.json")
    stored = json.loads((folder / "optima.json").read_text())
    optima = from_json(OptimaRecord, stored)
    assert [p.flops for p in optima.vs_flops] == [p["flops"] for p in stored["vs_flops"]]
    assert optima.vs_params[0].optimum.sparsity == stored["vs_params"][0]["optimum"]["sparsity"]
    fit = from_json(SweepFit, json.loads((folder / "fit.json").read_text()))
    assert fit.replicas == json.loads((folder / "fit.json").read_text())["bootstrap"]["params"]
