"""experiments/twins.py: the twin differences and seed-count chances docs/recipe.md quotes."""

import importlib.util
import json
import math
from pathlib import Path

import numpy as np
import pytest

from moelab.stats.power import min_detectable_gap

REPO_ROOT = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("twins", REPO_ROOT / "experiments" / "twins.py")
twins = importlib.util.module_from_spec(spec)
spec.loader.exec_module(twins)


def write_study(path, losses_by_arm, spreads=(0.01, 0.02)):
    arms = {arm: {"runs": [{"seed": seed, "best_val_loss": loss} for seed, loss in runs.items()]}
            for arm, runs in losses_by_arm.items()}
    gaps = {name: {"paired": {"std_diff": spread}} for name, spread in zip(("active", "total"), spreads)}
    path.write_text(json.dumps({"arms": arms, "gaps": gaps}))
    return path


def test_twin_rows_give_hand_counted_rms_and_max(tmp_path):
    a = write_study(tmp_path / "a.json", {"moe": {0: 3.0, 1: 3.1, 2: 3.2}})
    b = write_study(tmp_path / "b.json", {"moe": {0: 3.03, 1: 3.06, 2: 3.2}})
    header, row = twins.twin_rows(a, b)
    # Differences +0.03, -0.04, 0: rms sqrt(0.0025 / 3) = 0.0289, max 0.04. Stds: 0.1, and for
    # 3.03 / 3.06 / 3.2 (mean 3.0967) sqrt(0.016467 / 2) = 0.0907.
    assert header == "a.json -> b.json"
    assert "seed std 0.1000 / 0.0907" in row and "rms 0.0289 (max 0.0400)" in row and "n=3" in row


def test_chance_within_matches_simulated_studies():
    # Studies of n seeds whose per-seed differences are N(0, spread): the share whose minimum
    # detectable gap (computed by moelab's own power code) is at most the target.
    spread, n, target = 0.0126, 6, 0.02
    rng = np.random.default_rng(0)
    sample_spreads = rng.normal(0.0, spread, size=(4000, n)).std(axis=1, ddof=1)
    per_unit_spread = min_detectable_gap(1 / math.sqrt(n), n - 1)  # the MDE scales with the spread
    simulated = float(np.mean(sample_spreads * per_unit_spread <= target))
    assert twins.chance_within(target, spread, n) == pytest.approx(simulated, abs=0.025)


def test_spread_rows_pool_by_squares(tmp_path):
    a = write_study(tmp_path / "a.json", {"moe": {0: 3.0}}, spreads=(0.01, 0.02))
    b = write_study(tmp_path / "b.json", {"moe": {0: 3.0}}, spreads=(0.02, 0.01))
    rows = twins.spread_rows([a, b], 0.02)
    assert rows[0] == f"paired spread pooled over 4 criteria: {math.sqrt(0.00025):.4f}"
    assert len(rows) == 1 + 8  # 3 to 10 seeds
