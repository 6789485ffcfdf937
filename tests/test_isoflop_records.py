"""isoflop.json as typed records: the files an earlier moelab wrote (the stored sweeps and the
house fixture) read into an ``IsoflopRecord`` and write back as the same text, and a file from
before the window estimator (no diagnostics) still reads, with the global parabola it used."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from moelab.codec import from_json, to_json
from moelab.scaling.isoflop import ParabolaBudget, SurfaceBudget
from moelab.scaling.isoflop_vertex import VertexSupport
from moelab.sweep.analyses.isoflop import IsoflopRecord

ROOT = Path(__file__).parents[1]
WRITTEN_BY_EARLIER_CODE = sorted(
    [*ROOT.glob("experiments/results/sweeps/*/isoflop.json"),
     *ROOT.glob("tests/fixtures/house/*/isoflop.json")])


def _with_window_estimator(path: Path) -> bool:
    return "estimator" in json.loads(path.read_text())["all_points"]


@pytest.mark.parametrize("path", [p for p in WRITTEN_BY_EARLIER_CODE if _with_window_estimator(p)],
                         ids=lambda p: p.parent.name)
def test_a_stored_isoflop_json_reads_and_writes_back_as_the_same_text(path):
    text = path.read_text()
    record = from_json(IsoflopRecord, json.loads(text))
    assert json.dumps(to_json(record), indent=2) + "\n" == text
    # Typed all the way down: surface rows with each sparsity's vertex diagnostics, the
    # per-sparsity parabolas keyed by S as a number.
    budget = record.all_points.budgets[0]
    assert isinstance(budget, SurfaceBudget) and record.surface
    assert all(isinstance(s, VertexSupport) for s in budget.support.values())
    for sparsity, analysis in record.per_sparsity.items():
        assert isinstance(sparsity, float)
        assert all(isinstance(b, ParabolaBudget) for b in analysis.budgets)


def test_an_isoflop_json_from_before_the_window_estimator_still_reads():
    older = [p for p in WRITTEN_BY_EARLIER_CODE if not _with_window_estimator(p)]
    if not older:
        pytest.skip("no stored isoflop.json predates the window estimator")
    stored = json.loads(older[0].read_text())
    record = from_json(IsoflopRecord, stored)
    assert record.all_points.estimator == "global" and record.all_points.poorly_supported == []
    for budget, raw in zip(record.all_points.budgets, stored["all_points"]["budgets"]):
        assert isinstance(budget, SurfaceBudget)
        assert budget.support == {} and budget.warnings == [] and budget.n_points_used is None
        assert (budget.params, budget.sparsity, budget.at_edge) == (
            raw["params"], raw["sparsity"], raw["at_edge"])
