"""The study report's efficiency leverage (moelab.study.analyses.leverage): per-arm budgets
built from the runs, in FLOPs and in measured seconds, against a hand computation on dense and
MoE arms whose losses are set by construction."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest

from moelab.report.analysis import Findings
from moelab.study.analyses import ANALYSES, leverage
from moelab.study.analyses.statistics import ANALYSIS as STATISTICS

TOKENS = (1000, 2000, 4000)
DENSE_FLOPS_PER_TOKEN, MOE_FLOPS_PER_TOKEN = 600, 300
DENSE_SPEED, MOE_SPEED = 100.0, 200.0


def dense_loss(flops: float) -> float:
    """Linear in log C: 4.0 at 6e5 FLOPs, 0.1 lower per e-fold."""
    return 4.0 - 0.1 * math.log(flops / 6e5)


def arm(criterion, flops_per_token, tokens, speed, losses):
    runs = [SimpleNamespace(seed=seed, best_val_loss=loss, tokens=tokens, tokens_per_s=speed)
            for seed, loss in enumerate(losses)]
    return SimpleNamespace(criterion=criterion, flops_per_token_6n=flops_per_token, tokens=tokens,
                           runs=runs, by_seed=lambda key: {r.seed: getattr(r, key) for r in runs})


def budgets():
    out = []
    for tokens in TOKENS:
        dense = dense_loss(DENSE_FLOPS_PER_TOKEN * tokens)
        # The MoE reaches what dense reaches with 4x its FLOPs.
        moe = dense_loss(4 * MOE_FLOPS_PER_TOKEN * tokens)
        out.append(SimpleNamespace(arms={
            "dense_active": arm("active", DENSE_FLOPS_PER_TOKEN, tokens, DENSE_SPEED,
                                (dense - 0.001, dense + 0.001)),
            "moe": arm(None, MOE_FLOPS_PER_TOKEN, tokens, MOE_SPEED, (moe - 0.001, moe + 0.001))}))
    return out


def test_leverage_in_flops_and_seconds_matches_the_hand_computation():
    results = SimpleNamespace(is_ablation=False, budgets=budgets())
    record = leverage.compute(None, Findings({STATISTICS.name: results}))
    flops = record.flops.rows
    # MoE C = 3e5, 6e5, 1.2e6; dense reaches its loss at 4x: 1.2e6, 2.4e6 (inside the dense
    # budgets 6e5..2.4e6) and 4.8e6 (beyond the largest).
    assert [row.budget for row in flops] == [3e5, 6e5, 1.2e6]
    assert [row.leverage for row in flops[:2]] == pytest.approx([4.0, 4.0], rel=1e-9)
    assert flops[2].leverage is None and flops[2].beyond == "above the largest budget"
    # Seconds: dense runs take tokens / 100 s (10, 20, 40), the MoE tokens / 200 s (5, 10, 20);
    # dense loss in seconds is 4.0 - 0.1 ln(s / 10), so the MoE's loss at 1000 tokens
    # (4.0 - 0.1 ln 2) is dense's at 20 s: 20 / 5 = 4; at 2000 tokens 40 / 10 = 4.
    seconds = record.seconds.rows
    assert [row.budget for row in seconds] == pytest.approx([5.0, 10.0, 20.0])
    assert [row.leverage for row in seconds[:2]] == pytest.approx([4.0, 4.0], rel=1e-9)
    for row in flops[:2] + seconds[:2]:
        # Two seeds at +-0.001: the resamples move the means by at most 0.001 each.
        assert row.ci[0] <= 4.0 * (1 + 1e-9) and row.ci[1] >= 4.0 * (1 - 1e-9)
        assert row.ci[0] >= math.exp(-0.02 / 0.1) * 4.0 and row.ci[1] > row.ci[0]
    text = leverage.render(record, None, Findings())
    assert text.startswith("## Efficiency leverage") and "### In measured training seconds" in text


def test_a_study_of_one_budget_has_no_section():
    results = SimpleNamespace(is_ablation=False, budgets=budgets()[:1])
    assert leverage.compute(None, Findings({STATISTICS.name: results})) is None
    assert leverage.render(None, None, Findings()) == ""


def test_the_section_is_in_the_registry_after_the_budget_sweep():
    names = [analysis.name for analysis in ANALYSES]
    assert names.index("leverage") == names.index("budgets") + 1
