"""experiments/wsd_cosine.py on a tiny config: its runs are planned runs trained through the
runs layer (plan folders select/ and report/, each run complete, every wsd member but the
trunk a branch from the trunk's checkpoint at its decay start), and its results file has the
stored file's keys and numbers read back from the run folders."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]
STORED = REPO_ROOT / "experiments" / "results" / "wsd_cosine.json"
TINY = ["model.vocab_size=320", "model.d_model=32", "model.n_layers=1", "model.n_heads=2",
        "model.n_kv_heads=2", "model.d_ff=64", "data.max_train_stories=400",
        "train.warmup_steps=2", "train.eval_interval=5", "train.eval_windows=2"]


def load_script(name: str):
    spec = importlib.util.spec_from_file_location(name, REPO_ROOT / "experiments" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow
def test_wsd_cosine_trains_through_the_runs_layer(tmp_path):
    wsd_cosine = load_script("wsd_cosine")
    out, results = tmp_path / "out", tmp_path / "wsd_cosine.json"
    wsd_cosine.main(["--lrs", "0.01,0.02", "--select-seeds", "0", "--report-seeds", "1,2",
                     "--jobs", "1", "--out", str(out), "--data", "sample", "--horizons", "10,20",
                     "--batch-size", "2", "--results", str(results),
                     *[arg for item in TINY for arg in ("--set", item)]])
    entry = json.loads(results.read_text())
    assert set(json.loads(STORED.read_text())) <= set(entry)  # the stored file's keys
    # select: 2 lrs x 1 seed x (cosine, wsd20 trunk, wsd30 branch); report: 2 seeds x (2
    # cosine, and per best wsd lr a 20-step trunk with the other members branched).
    assert len([k for k in entry["run_dirs"] if "/10steps/" in k and k.endswith("seed0")]) == 6
    for phase in ("select", "report"):
        plan_folder = out / phase
        assert (plan_folder / "configs").is_dir() and (plan_folder / "failures.json").is_file()
        assert json.loads((plan_folder / "failures.json").read_text()) == {}
    for key, run_dir in entry["run_dirs"].items():
        summary = json.loads((out / run_dir / "summary.json").read_text())
        assert summary["status"] == "complete", key
        schedule, steps = key.split("/")[0], int(key.split("/")[1].removesuffix("steps"))
        trunk_steps = 10 if run_dir.startswith("select/") else 20
        branch_file = out / run_dir / "branch.json"
        if schedule == "cosine" or (schedule == "wsd20" and steps == trunk_steps):
            assert not branch_file.exists(), key
            continue
        # The decay start by hand: the last int(fraction * steps) steps decay.
        start = {("wsd20", 10): 8, ("wsd30", 10): 7, ("wsd30", 20): 14}[schedule, steps]
        assert json.loads(branch_file.read_text())["step"] == start, key
    # The losses are the run folders', and each gap their paired mean difference.
    for row in entry["gaps"]:
        name, steps = row["comparison"].removeprefix("cosine - "), row["steps"]
        losses = {schedule: {seed: json.loads((out / entry["run_dirs"][
            f"{schedule}/{steps}steps/lr{entry['best_lr'][schedule]:g}/seed{seed}"]
            / "summary.json").read_text())["final_val_loss"] for seed in (1, 2)}
            for schedule in ("cosine", name)}
        for schedule in ("cosine", name):
            assert entry["final_val_loss"][schedule][str(steps)] == {
                str(seed): loss for seed, loss in losses[schedule].items()}
        differences = [losses["cosine"][s] - losses[name][s] for s in (1, 2)]
        assert row["gap"] == pytest.approx(np.mean(differences)) and row["n"] == 2


@pytest.mark.slow
def test_wsd_budgets_trains_one_family_per_seed_through_the_runs_layer(tmp_path):
    wsd_budgets = load_script("wsd_budgets")
    out, results = tmp_path / "out", tmp_path / "wsd_budgets.json"
    # 10, 20 and 40 steps of 2 x 128 tokens; the shared warmup is half the smallest's steps.
    wsd_budgets.main(["--seeds", "2", "--jobs", "1", "--out", str(out), "--data", "sample",
                      "--budgets", "2560,5120,10240", "--results", str(results),
                      "--set", "train.batch_size=2",
                      *[arg for item in TINY if "warmup" not in item for arg in ("--set", item)]])
    entry = json.loads(results.read_text())
    stored = json.loads((REPO_ROOT / "experiments" / "results" / "wsd_budgets.json").read_text())
    assert set(entry) == set(stored)
    # The last 20 % of each budget's steps decay: 10 - 2, 20 - 4, 40 - 8.
    assert entry["decay_start_steps"] == {"2560": 8, "5120": 16, "10240": 32}
    assert entry["warmup_steps"] == 5
    # Per seed the family trains the 40 steps and the cooldowns, 2 + 4 steps of 256 tokens.
    family_tokens, cosine_tokens = 10240 + (2 + 4) * 256, 2560 + 5120 + 10240
    assert entry["planned_tokens"] == {"wsd": family_tokens, "cosine": cosine_tokens}
    assert entry["measured"]["wsd"]["tokens"] == 2 * family_tokens
    assert entry["measured"]["cosine"]["tokens"] == 2 * cosine_tokens
    assert json.loads((out / "failures.json").read_text()) == {}
    for budget, step in ((2560, 8), (5120, 16)):
        for seed in (0, 1):
            branch = json.loads((out / "runs" / "wsd" / str(budget) / f"seed{seed}"
                                 / "branch.json").read_text())
            assert branch["step"] == step
    for budget, row in entry["by_budget"].items():
        differences = [row["cosine_best_val_loss"][s] - row["wsd_best_val_loss"][s]
                       for s in ("0", "1")]
        assert row["paired_cosine_minus_wsd"]["gap"] == pytest.approx(np.mean(differences))
        for plan in ("cosine", "wsd"):
            summary = json.loads((out / "runs" / plan / budget / "seed1" / "summary.json")
                                 .read_text())
            assert row[f"{plan}_best_val_loss"]["1"] == summary["best_val_loss"]
