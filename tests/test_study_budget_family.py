"""A study with several budgets under train.schedule wsd trains each arm x seed once and
branches the smaller budgets: each budget's run folder equals a separate wsd run of its
planned config, bit for bit, for the largest budget's tokens plus the cooldowns."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from moelab.config import load_config, override
from moelab.runs.families import count_family_tokens
from moelab.runs.launchers.local import LocalLauncher
from moelab.study.commands import run_study, write_study_plan
from moelab.study.settings import StudySettings
from moelab.train import train
from tiny_overrides import TINY_MOE_RUN

STEP = 256  # tokens per step of the tiny run: batch 8 x context 32
BUDGETS = [8 * STEP, 12 * STEP, 16 * STEP]


def wsd_study_config():
    return override(load_config("demo"), [*TINY_MOE_RUN, "train.schedule=wsd",
                                          "train.decay_fraction=0.25", "train.warmup_steps=2",
                                          "train.eval_interval=4"])


def curves(run_dir: Path) -> list:
    events = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [(e["kind"], e["step"], e.get("loss"), e.get("val_loss"))
            for e in events if e.get("kind") in ("train", "eval")]


def test_the_plan_branches_the_smaller_budgets_of_each_arm_and_seed(tmp_path):
    settings = StudySettings(seeds=2, criteria=["active"], budgets=BUDGETS)
    specs = write_study_plan("study", wsd_study_config(), settings, tmp_path)
    branches = {spec.name: spec.branch for spec in specs}
    # 16 steps in full; decays of int(0.25 * steps) = 2 and 3 steps start after 6 and 9.
    for arm in ("moe", "dense_active"):
        for seed in (0, 1):
            full = f"4.096K/{arm}/seed{seed}"
            assert branches[full] is None
            assert (branches[f"2.048K/{arm}/seed{seed}"].source, branches[f"2.048K/{arm}/seed{seed}"].step) == (full, 6)
            assert (branches[f"3.072K/{arm}/seed{seed}"].source, branches[f"3.072K/{arm}/seed{seed}"].step) == (full, 9)
    planned, separate = count_family_tokens(
        {spec.name: spec.branch.step for spec in specs if spec.branch},
        [(spec.name, spec.config.train.max_tokens, STEP) for spec in specs])
    assert planned == 4 * (16 + (8 - 6) + (12 - 9)) * STEP  # 4 arm x seeds: full + cooldowns
    assert separate == 4 * (8 + 12 + 16) * STEP
    plan = json.loads((tmp_path / "plan.json").read_text())
    assert {run["name"]: run.get("branch") for run in plan["runs"]}["2.048K/moe/seed0"] == {
        "source": "4.096K/moe/seed0", "step": 6}


def test_cosine_budgets_stay_separate_runs(tmp_path):
    config = override(wsd_study_config(), ["train.schedule=cosine"])
    specs = write_study_plan("study", config, StudySettings(seeds=1, budgets=BUDGETS), tmp_path)
    assert all(spec.branch is None for spec in specs)


@pytest.mark.slow
def test_a_wsd_budget_study_equals_separate_runs_bit_for_bit(tmp_path, monkeypatch):
    import torch

    monkeypatch.setenv("OMP_NUM_THREADS", str(torch.get_num_threads()))  # children's threads
    settings = StudySettings(seeds=1, criteria=["active"], budgets=BUDGETS)
    study = tmp_path / "study"
    run_study("study", wsd_study_config(), settings, study, log=lambda _: None,
              launcher=LocalLauncher(jobs=2))
    plan = json.loads((study / "plan.json").read_text())
    branched = [run for run in plan["runs"] if run.get("branch")]
    assert len(branched) == 4  # 2 arms x 2 smaller budgets
    for run in plan["runs"]:
        separate = tmp_path / "separate" / run["name"]
        config = load_config(str(study / run["config"]))
        summary = train(config, separate)
        assert curves(study / run["run_dir"]) == curves(separate)
        assert json.loads((study / run["run_dir"] / "summary.json").read_text())["best_val_loss"] \
            == summary.best_val_loss
    # 2 arms, each 16 steps in full plus cooldowns of 8 - 6 = 2 and 12 - 9 = 3 steps.
    family = json.loads((study / "results.json").read_text())["budget_family"]
    assert family == {"branches": 4, "tokens_trained": 2 * (16 + 2 + 3) * STEP,
                      "tokens_one_run_per_budget": 2 * (8 + 12 + 16) * STEP}
    assert f"trained {2 * 21 * STEP:,} tokens against {2 * 36 * STEP:,}" in (study / "report.md").read_text()


def test_a_wsd_sweep_branches_the_smaller_budgets_of_each_size_and_sparsity(tmp_path):
    from dataclasses import replace

    from moelab.sweep.grid import load_grid
    from moelab.sweep.plan import plan_sweep_folder

    micro = load_grid("micro")  # batch 4 x context 32 = 128 tokens a step
    grid = replace(micro, overrides=[*micro.overrides, "train.schedule=wsd"],
                   token_budgets=[10 * 128, 20 * 128])
    _, specs = plan_sweep_folder(grid, tmp_path)
    by_name = {spec.name: spec for spec in specs}
    assert len(specs) == 8 and sum(spec.branch is not None for spec in specs) == 4
    for spec in specs:
        if spec.branch is not None:  # 10 steps, a decay of int(0.2 * 10) = 2 after step 8
            source = by_name[spec.branch.source]
            assert spec.branch.step == 8 and source.config.train.max_tokens == 20 * 128
            assert (source.labels["size"], source.labels["sparsity"]) == (
                spec.labels["size"], spec.labels["sparsity"])
