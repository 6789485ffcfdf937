"""The routing ladder's adjacent-rung tests: paired by seed against scipy, Holm over the steps
by hand, in results.json and the report."""

from __future__ import annotations

import json
import math

import pytest
from scipy import stats as scipy_stats

import test_study
from moelab.study import commands as study_commands
from moelab.study.rungs import LADDER_STEPS, rung_steps
from moelab.study.settings import StudySettings, load_study


def test_each_step_is_the_paired_t_on_earlier_minus_later_with_holm_over_the_steps():
    seeds = (0, 1, 2)
    # Per seed: top1_lb is 0.10/0.11/0.12 below naive_top1, top2_lb 0.02/0.035/0.045 below
    # top1_lb, top2_lb_z 0.01 below/0.02 above/0.02 below top2_lb; the global rung equals
    # top2_lb_z exactly (no spread: not testable, not one of the tests); bias 0.03 above.
    base = {0: 3.00, 1: 3.01, 2: 2.99}
    steps_down = {"top1_lb": (0.10, 0.11, 0.12), "top2_lb": (0.02, 0.035, 0.045),
                  "top2_lb_z": (0.01, -0.02, 0.02)}
    losses = {"naive_top1": base}
    previous = base
    for rung, drops in steps_down.items():
        previous = {s: previous[s] - drop for s, drop in zip(seeds, drops)}
        losses[rung] = previous
    losses["top2_global_lb_z"] = dict(losses["top2_lb_z"])
    losses["top2_bias_z"] = {s: losses["top2_lb_z"][s] + 0.03 + 0.002 * s for s in seeds}
    steps = rung_steps(losses)
    assert [(s.earlier, s.later) for s in steps] == list(LADDER_STEPS)
    raw = []
    for step in steps:
        if step.later == "top2_global_lb_z":
            assert math.isnan(step.p_value) and step.outcome == "not testable"
            continue
        earlier = [losses[step.earlier][s] for s in seeds]
        later = [losses[step.later][s] for s in seeds]
        reference = scipy_stats.ttest_rel(earlier, later)
        assert step.difference == pytest.approx(sum(earlier) / 3 - sum(later) / 3, abs=1e-12)
        assert step.p_value == pytest.approx(reference.pvalue, rel=1e-9)
        raw.append(step.p_value)
    # Holm over the 4 testable steps, by hand: sorted p times 4, 3, 2, 1, then the running max.
    order = sorted(raw)
    expected, running = {}, 0.0
    for rank, p in enumerate(order):
        running = max(running, min(1.0, (4 - rank) * p))
        expected[p] = running
    testable = [s for s in steps if s.later != "top2_global_lb_z"]
    assert [s.p_adjusted for s in testable] == pytest.approx([expected[p] for p in raw])
    assert {s.adjustment for s in steps} == {"Holm, 4 tests"}
    by_later = {s.later: s for s in steps}
    # top1_lb's step: raw p 0.0028, 4 x 0.0028 = 0.011 < 0.05: the later rung is better.
    assert by_later["top1_lb"].verdict == "top1_lb better (paired t, n=3)"
    # The bias rung is 0.03 worse on every seed (raw p 0.0013): the earlier rung is better.
    assert by_later["top2_bias_z"].verdict == "top2_lb_z better (paired t, n=3)"
    # top2_lb's step alone would be significant (raw p 0.044); not over the 4 steps.
    assert by_later["top2_lb"].p_value < 0.05 <= by_later["top2_lb"].p_adjusted
    assert by_later["top2_lb"].outcome == "not significant"


@pytest.mark.slow
def test_the_ladder_report_has_its_steps(tmp_path, monkeypatch):
    # Seed noise for two rungs, so that their steps have a spread to test.
    monkeypatch.setitem(test_study.ARM_ODD_SEED_NOISE, "top1_lb", 0.004)
    monkeypatch.setitem(test_study.ARM_ODD_SEED_NOISE, "top2_bias_z", 0.003)
    monkeypatch.setattr(study_commands, "prepare_shared_data", lambda config, log: None)
    config, _ = load_study("demo", ["train.max_tokens=1000000"])
    folder = tmp_path / "ladder"
    results = study_commands.run_study("ablation", config, StudySettings(seeds=3), folder,
                                       train_fn=test_study.FakeTrain(),
                                       log=lambda line: None).to_dict()
    stored = json.loads((folder / "results.json").read_text())
    assert stored["rung_steps"] == results["rung_steps"]
    assert "rung_steps" not in stored["budgets"] and stored["gaps"] == {}

    def losses(rung):
        return [json.loads((folder / "runs" / rung / f"seed{s}" / "summary.json").read_text())
                ["best_val_loss"] for s in range(3)]

    steps = {(s["earlier"], s["later"]): s for s in stored["rung_steps"]}
    first = steps["naive_top1", "top1_lb"]
    reference = scipy_stats.ttest_rel(losses("naive_top1"), losses("top1_lb"))
    assert first["p_value"] == pytest.approx(reference.pvalue, rel=1e-9)
    # Only the two noisy rungs' steps (3 of them) can be tested; the others are constant.
    assert steps["top2_lb", "top2_lb_z"]["outcome"] == "not testable"
    assert first["adjustment"] == "Holm, 3 tests" and not math.isnan(first["p_adjusted"])
    report = (folder / "report.md").read_text()
    assert "## Adjacent rungs" in report and "p (Holm, 3 tests)" in report
    assert f"| naive_top1 → top1_lb | {first['difference']:+.4f} |" in report
