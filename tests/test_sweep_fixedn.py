"""The fixed-N extension presets plan what their comments promise: the same sizes, budget and seeds
in both families, S up to 0.9375 (E = 16 at k = 1), experts of width d_ff / E (fixed_total, N fixed
per size) or d_ff (fixed_expert, N_active fixed per size, N growing with E)."""

from moelab.accounting import count_params
from moelab.sweep.grid import load_grid
from moelab.sweep.plan import plan_sweep


def _by_point(name):
    return {(p.size, p.sparsity, p.seed): p for p in plan_sweep(load_grid(name))}


def test_both_families_share_sizes_budget_and_three_fresh_seeds():
    total, expert = load_grid("cpu-fixedn"), load_grid("cpu-expertn")
    assert (total.mode, expert.mode) == ("fixed_total", "fixed_expert")
    for grid in (total, expert):
        assert [s["name"] for s in grid.sizes] == ["s0", "s1", "s2"]
        assert grid.flops_budgets == [1.08e12] and grid.seeds == [2, 3, 4]
        assert max(grid.sparsities) == 0.9375 and grid.top_k == 1


def test_fixed_total_keeps_n_and_fixed_expert_keeps_the_dense_ffn_width():
    d_ff = {"s0": 128, "s1": 192, "s2": 256}
    for (size, sparsity, seed), point in _by_point("cpu-fixedn").items():
        experts = round(1 / (1 - sparsity))  # k = 1: E = 1 / (1 - S), by hand
        assert point.num_experts == experts
        assert point.config.model.moe.d_expert * experts == d_ff[size]
    for (size, sparsity, seed), point in _by_point("cpu-expertn").items():
        if sparsity > 0:
            assert point.config.model.moe.d_expert == d_ff[size]
    expert = _by_point("cpu-expertn")
    for size in d_ff:  # N_active within 2 % across S (the router), N up 5x or more at E = 16
        dense = count_params(expert[(size, 0.0, 2)].config.model)
        widest = count_params(expert[(size, 0.9375, 2)].config.model)
        assert abs(widest.active / dense.active - 1) < 0.02
        assert widest.total > 4.5 * dense.total
