"""The zero-shot section of a study without training: budgets, a failed run, one seed, the ladder.

A fake trainer (tests/test_study.py's, plus a tasks.json) gives each run an accuracy chosen
here, so every statistic is checked against numbers worked out by hand.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from scipy import stats as scipy_stats

from moelab.study import commands as study_commands
from moelab.study.settings import StudySettings, load_study
from test_study import FakeTrain

# agreement accuracy = correct / 200 with correct = BASE[arm] + STEP[arm] * seed, plus 5 above
# 500K tokens: MoE minus dense_active is 10, 8, 6 items (0.05, 0.04, 0.03) over seeds 0, 1, 2.
ITEMS = 200
BASE = {"moe": 120, "dense_active": 110, "dense_total": 116, "naive_top1": 100, "top1_lb": 104,
        "top2_lb": 108, "top2_lb_z": 112, "top2_global_lb_z": 114, "top2_bias_z": 118}
STEP = {"moe": 2, "dense_active": 4, "dense_total": 1}


def correct(arm: str, seed: int, budget: int) -> int:
    return BASE[arm] + STEP.get(arm, 0) * seed + (5 if budget > 500_000 else 0)


class FakeTrainWithTasks(FakeTrain):
    """Also writes the tasks.json a run with train.eval_tasks=[agreement] would."""

    def __call__(self, config, run_dir, *, resume=False):
        summary = super().__call__(config, run_dir, resume=resume)
        arm, seed = Path(run_dir).parent.name, config.train.seed
        hits = correct(arm, seed, config.train.max_tokens)
        entry = {"step": 3, "items": ITEMS, "correct": hits, "accuracy": hits / ITEMS,
                 "ci_low": 0.0, "ci_high": 1.0, "chance": 0.5}
        (Path(run_dir) / "tasks.json").write_text(json.dumps({"tasks": {"agreement": entry}}))
        return summary


@pytest.fixture(autouse=True)
def _no_data(monkeypatch):
    monkeypatch.setattr(study_commands, "prepare_shared_data", lambda config, log: None)


@pytest.fixture
def demo():
    return load_study("demo", ["train.max_tokens=1000000"])


def _run(kind, demo, folder, train, **settings):
    config, _ = demo
    return study_commands.run_study(kind, config, StudySettings(**settings), folder,
                                    train_fn=train, log=lambda line: None).to_dict()


@pytest.mark.slow
def test_each_budget_has_its_section_and_the_last_is_the_studys(tmp_path, demo):
    results = _run("study", demo, tmp_path / "s", FakeTrainWithTasks(), seeds=3,
                   budgets=[200_000, 1_000_000])
    for group in results["budgets"]:
        agreement = group["zero_shot"]["agreement"]
        moe = [correct("moe", s, group["tokens"]) / ITEMS for s in range(3)]
        assert agreement["arms"]["moe"]["accuracy"]["mean"] == pytest.approx(sum(moe) / 3,
                                                                              abs=1e-12)
        active = agreement["comparisons"]["active"]
        # 0.05, 0.04, 0.03: mean 0.04, sd 0.01, so t = 0.04 / (0.01 / sqrt 3) on 2 df.
        assert active["difference"] == pytest.approx(0.04, abs=1e-12)
        assert active["std_diff"] == pytest.approx(0.01, abs=1e-12)
        half = scipy_stats.t.ppf(0.975, 2) * 0.01 / math.sqrt(3)
        assert (active["ci_low"], active["ci_high"]) == pytest.approx((0.04 - half, 0.04 + half),
                                                                      abs=1e-12)
        assert active["p_value"] == pytest.approx(2 * scipy_stats.t.sf(0.04 * math.sqrt(3) / 0.01,
                                                                       2), rel=1e-9)
        # Raw, it would be 'MoE better' (p 0.020). But the family is all 4 comparisons (2
        # budgets x 2 criteria): total's raw p is 0.0131 at both budgets, active's 0.0202. Holm:
        # 4 x 0.0131 = 0.052 first; 3 x 0.0131, 2 x 0.0202 and 1 x 0.0202 are all smaller, so the
        # running maximum holds every adjusted p at 4 x 0.0131, above 0.05.
        total = agreement["comparisons"]["total"]
        assert total["p_value"] < active["p_value"] < 0.05
        assert active["p_adjusted"] == pytest.approx(4 * total["p_value"], rel=1e-12)
        assert total["p_adjusted"] == active["p_adjusted"] and active["adjustment"] == "Holm, 4 tests"
        assert active["verdict"] == "not significant (paired t, n=3)"
    assert results["zero_shot"] == results["budgets"][-1]["zero_shot"]
    assert "## Zero-shot tasks" in (tmp_path / "s/report.md").read_text()


@pytest.mark.slow
def test_a_failed_run_leaves_the_pairs_it_has(tmp_path, demo):
    results = _run("study", demo, tmp_path / "s", FakeTrainWithTasks(
        fail_runs=("dense_total/seed2",)), seeds=3)
    total = results["zero_shot"]["agreement"]["comparisons"]["total"]
    # moe - dense_total: (120 - 116) / 200 + (2 - 1) * seed / 200 = 0.02, 0.025 over seeds 0, 1.
    assert total["n_pairs"] == 2 and [d["seed"] for d in total["differences"]] == [0, 1]
    assert [d["diff"] for d in total["differences"]] == pytest.approx([0.02, 0.025], abs=1e-12)
    assert results["zero_shot"]["agreement"]["arms"]["dense_total"]["accuracy"]["n"] == 2


@pytest.mark.slow
def test_one_seed_has_no_interval_and_is_not_testable(tmp_path, demo):
    results = _run("study", demo, tmp_path / "s", FakeTrainWithTasks(), seeds=1)
    agreement = results["zero_shot"]["agreement"]
    assert agreement["arms"]["moe"]["ci_low"] is None  # NaN is written as null
    assert agreement["comparisons"]["active"]["verdict"] == "not testable (paired t, n=1)"
    report = (tmp_path / "s/report.md").read_text()
    assert "| agreement | moe | 0.6250 (n=1) | – | 0.5000 |" in report  # (120 + 5) / 200


@pytest.mark.slow
def test_the_ladder_lists_its_rungs_without_comparisons(tmp_path, demo):
    results = _run("ablation", demo, tmp_path / "a", FakeTrainWithTasks(), seeds=2)
    agreement = results["zero_shot"]["agreement"]
    assert list(agreement["arms"]) == list(results["arms"]) and agreement["comparisons"] == {}
    report = (tmp_path / "a/report.md").read_text()
    assert "| agreement | naive_top1 | 0.5250 ± 0.0000 (n=2) |" in report  # (100 + 5) / 200
    assert "Difference = MoE − dense" not in report
