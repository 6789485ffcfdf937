"""A grid with several top-k at one sparsity (top_ks): S = 0.75 as 4-choose-1, 8-choose-2 and
16-choose-4 at the same total and active parameters (by hand counts), the dense model once,
each k its own budget family and run folder."""

from __future__ import annotations

import re

import pytest

from moelab.accounting import count_params
from moelab.errors import ConfigError
from moelab.sweep.grid import load_grid
from moelab.sweep.plan import grid_json_record, plan_sweep, run_specs


def test_cpu_topk_plans_each_sparse_point_once_per_k_and_the_dense_model_once():
    grid = load_grid("cpu-topk")
    points = plan_sweep(grid)
    assert len(grid.seeds) >= 3
    # 2 sizes x (dense + 3 k at S = 0.75) x 3 seeds
    assert len(points) == 2 * 4 * 3 and len({p.run_name for p in points}) == len(points)
    s3 = [p for p in points if p.size == "s3" and p.seed == 0 and p.sparsity == 0.75]
    assert [(p.num_experts, p.top_k) for p in s3] == [(4, 1), (8, 2), (16, 4)]
    for point in s3:
        moe = point.config.model.moe
        assert moe.d_expert * moe.num_experts == 384  # fixed total: d_ff split into E experts
        counts = count_params(point.config.model)
        # By hand: a token uses k experts of 3 x 96 x d_expert in each of 3 layers: 384 / 4 wide.
        expert_active = 3 * moe.top_k * 3 * 96 * moe.d_expert
        assert expert_active == 3 * 3 * 96 * 96
        routers = 3 * 96 * moe.num_experts
        assert counts.total - counts.active == 3 * (moe.num_experts - moe.top_k) * 3 * 96 * moe.d_expert
        assert counts.total == 639_648 + routers  # the dense s3 plus the routers
    assert "top_ks" in grid_json_record(grid)
    assert "top_ks" not in grid_json_record(load_grid("cpu"))


def test_each_k_is_its_own_budget_family():
    grid = load_grid("cpu-topk", ["token_budgets=[1228800,3686400]", "seeds=[0]"])
    specs = run_specs(plan_sweep(grid))
    branches = {spec.name: spec.branch.source for spec in specs if spec.branch}
    assert branches["D1228800/s2/S0.750-E8k2/seed0"] == "D3686400/s2/S0.750-E8k2/seed0"
    assert branches["D1228800/s2/S0.750-E16k4/seed0"] == "D3686400/s2/S0.750-E16k4/seed0"


@pytest.mark.parametrize("change, message", [
    (["top_ks=[1,1]"], "top_ks=[1, 1] is invalid: expected distinct whole numbers >= 1"),
    (["top_ks=[0]"], "top_ks=[0] is invalid: expected distinct whole numbers >= 1"),
    # S = 0.6 with k = 3: E = 3 / 0.4 = 7.5 experts
    (["top_ks=[2,3]", "sparsities=[0.0,0.6]"], "E = k / (1 - S) = 7.5 must be a whole number"),
])
def test_bad_top_ks_are_one_line_errors(change, message):
    with pytest.raises(ConfigError, match=re.escape(message)):
        load_grid("cpu-topk", change)


def test_expert_pairs_are_seed_by_seed_differences_with_a_t_interval():
    import numpy as np
    import scipy.stats

    from moelab.sweep.analyses.form_tests import sparsity_deltas
    from sweep_rows import results_table

    rng = np.random.default_rng(0)
    rows, by_hand = [], {}
    for point in plan_sweep(load_grid("cpu-topk")):
        # The same seed moves every E of a size alike; E = 16 is 0.01 worse than E = 4.
        loss = 3.0 + 0.01 * point.seed + (0.01 if point.num_experts == 16 else 0.0) \
            + float(rng.normal(0, 0.002))
        by_hand[(point.size, point.num_experts, point.seed)] = loss
        rows.append({"size": point.size, "budget": point.budget_label, "S": str(point.sparsity),
                     "E": str(point.num_experts), "seed": str(point.seed),
                     "D": str(point.config.train.max_tokens), "best_val_loss": str(loss),
                     "run": f"runs/{point.run_name}"})
    deltas = sparsity_deltas(results_table(rows).rows)
    pairs = {(p.size, tuple(p.E)): p for p in deltas.expert_pairs}
    assert len(pairs) == 2 * 3  # per size: (4, 8), (4, 16), (8, 16)
    differences = np.array([by_hand[("s3", 16, s)] - by_hand[("s3", 4, s)] for s in range(3)])
    half = scipy.stats.t.ppf(0.975, 2) * differences.std(ddof=1) / np.sqrt(3)
    pair = pairs[("s3", (4, 16))]
    assert pair.difference == pytest.approx(differences.mean())
    assert pair.ci == pytest.approx([differences.mean() - half, differences.mean() + half])
    assert pair.ci[0] > 0  # pairing by seed removes the seeds' common 0.01 steps
