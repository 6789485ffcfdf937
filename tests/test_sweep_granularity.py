"""Granularity and shared experts as sweep axes (``granularities``, ``shared_experts``): the
planned configs hold N and N_active fixed (by hand counts and by the built model), the skipped
cell, the checks; and the analysis (moelab.sweep.granularity) against scipy and a hand Holm."""

from __future__ import annotations

import math

import pytest
import torch
from scipy import stats

from moelab.accounting import count_params
from moelab.errors import ConfigError
from moelab.model import Transformer
from moelab.sweep.granularity import compute, render
from moelab.sweep.grid import load_grid
from moelab.sweep.plan import grid_json_record, plan_sweep, run_specs
from moelab.sweep.results_csv import ResultRow

# s2 of cpu-granularity: d_model 64, 3 layers, d_ff 256; each SwiGLU expert of width w holds
# 3 x 64 x w parameters.
EXPERT_ROW = 3 * 64


def sparse_points(overrides=()):
    grid = load_grid("cpu-granularity", ["seeds=[0]", *overrides])
    return [p for p in plan_sweep(grid) if p.sparsity > 0]


def test_each_granularity_and_shared_expert_keeps_total_and_active_parameters():
    points = {p.arm.rsplit("/", 1)[-1]: p for p in sparse_points()}
    assert sorted(points) == ["S0.750-E4k1", "S0.750-E8k2", "S0.750-E8k2s1"]  # no G=1 + shared
    by_hand = {  # (routed E, routed k, shared, width)
        "S0.750-E4k1": (4, 1, 0, 256), "S0.750-E8k2": (8, 2, 0, 128),
        "S0.750-E8k2s1": (7, 1, 1, 128)}
    reference = count_params(points["S0.750-E4k1"].config.model)
    for name, (experts, top_k, shared, width) in by_hand.items():
        moe = points[name].config.model.moe
        assert (moe.num_experts, moe.top_k, moe.num_shared_experts, moe.d_expert) == (
            experts, top_k, shared, width)
        assert moe.shared_hidden == shared * width
        # Expert parameters by hand: every layer stores (E + s) experts of width w and a token
        # uses (k + s) of them: 4 x 256 = 8 x 128 and 1 x 256 = 2 x 128, whatever the split.
        assert (experts + shared) * width == 1024 and (top_k + shared) * width == 256
        counts = count_params(points[name].config.model)
        router_growth = 3 * 64 * (experts - 4)  # a router column per routed expert, 3 layers
        assert counts.total - reference.total == router_growth
        assert counts.active - reference.active == router_growth
        with torch.device("meta"):
            built = Transformer(points[name].config.model)
        assert sum(p.numel() for p in built.parameters()) == counts.total


def test_shared_cells_have_their_own_run_folders_and_budget_families():
    grid = load_grid("cpu-granularity", ["seeds=[0]", "token_budgets=[204800,409600]"])
    specs = run_specs(plan_sweep(grid))
    names = [spec.name for spec in specs]
    assert len(set(names)) == len(names) == 6
    assert "D409600/s2/S0.750-E8k2s1/seed0" in names
    assert set(grid_json_record(grid)) >= {"granularities", "shared_experts"}
    assert "granularities" not in grid_json_record(load_grid("cpu-topk"))


@pytest.mark.parametrize("override, message", [
    ("granularities=[1,1]", "granularities"),
    ("granularities=[0]", "granularities"),
    ("shared_experts=[-1]", "shared_experts"),
    ("top_ks=[1,2]", "top_ks and granularities"),
])
def test_bad_axes_are_one_line_errors(override, message):
    with pytest.raises(ConfigError, match=message):
        load_grid("cpu-granularity", [override])


def test_a_grid_whose_every_cell_routes_nothing_is_refused():
    with pytest.raises(ConfigError, match="no routed expert"):
        load_grid("cpu-granularity", ["granularities=[1]", "shared_experts=[1]"])


def row(seed, G, shared, loss, E=8, k=1):
    return ResultRow(run=f"r{G}{shared}{seed}", size="s2", budget="D1", seed=str(seed),
                     N_total=1.0, N_active=1.0, D=1.0, C=1.0, S=0.75, E=E, best_val_loss=loss,
                     k=k, shared_experts=shared, G=G)


LOSSES = {(1.0, 0): [3.00, 3.10, 3.05], (2.0, 0): [2.95, 3.02, 3.01], (2.0, 1): [2.97, 3.09, 3.00]}


def test_family_is_paired_t_against_the_reference_and_shared_against_none_with_holm():
    rows = [row(seed, G, shared, loss) for (G, shared), losses in LOSSES.items()
            for seed, loss in enumerate(losses)]
    rows.append(ResultRow(run="dense", size="s2", budget="D1", seed="0", N_total=1.0,
                          N_active=1.0, D=1.0, C=1.0, S=0.0, E=1, best_val_loss=3.3))
    record = compute(rows)
    assert record is not None and record.family == "Holm, 3 tests"
    pairs = [((2.0, 0), (1.0, 0)), ((2.0, 1), (1.0, 0)), ((2.0, 1), (2.0, 0))]
    raw = [stats.ttest_rel(LOSSES[a], LOSSES[b]).pvalue for a, b in pairs]
    order = sorted(range(3), key=raw.__getitem__)  # Holm by hand: 3p, 2p, 1p, running max
    expected, running = [0.0] * 3, 0.0
    for rank, index in enumerate(order):
        running = max(running, min(1.0, (3 - rank) * raw[index]))
        expected[index] = running
    for test, (a, b), p, p_holm in zip(record.tests, pairs, raw, expected):
        differences = [x - y for x, y in zip(LOSSES[a], LOSSES[b])]
        mean = sum(differences) / 3
        half = stats.t.ppf(0.975, 2) * stats.tstd(differences) / math.sqrt(3)
        assert test.difference == pytest.approx(mean)
        assert test.ci == pytest.approx([mean - half, mean + half])
        assert test.p == pytest.approx(p) and test.p_holm == pytest.approx(p_holm)
        assert test.verdict == ("lower" if p_holm < 0.05 and mean < 0 else
                                "higher" if p_holm < 0.05 else
                                "not significant after Holm" if (mean - half) * (mean + half) > 0
                                else "not significant")
    assert "## Granularity and shared experts" in render(record)


def test_a_sweep_without_the_axes_has_no_granularity_section():
    assert compute([row(0, 1.0, 0, 3.0), row(1, 1.0, 0, 3.1)]) is None
    assert render(None) == ""
