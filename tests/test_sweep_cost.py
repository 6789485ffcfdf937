"""``moelab sweep-sparsity --dry-run`` prices the plan: runs, tokens and 6ND FLOPs against hand
counts of the micro grid's parameters, and with ``--speeds`` the time at a hand-made table's
tokens/s (log-log in N_active, nearest sparsity, flat below the smallest shape); bad tables and
options are refused on one line."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from one_line_errors import refused_on_one_line

import moelab
from moelab.cli import main
from moelab.sweep.cost import read_speeds, time_estimate, tokens_per_s
from moelab.sweep.grid import load_sweep_grid
from moelab.sweep.plan import plan_sweep, run_specs

VOCAB = 320  # the micro grid: tied embeddings, one layer, n_kv_heads = n_heads, top-1


def active_params(d_model: int, d_ff: int, experts: int) -> int:
    """By hand: embedding (tied), attention q k v o, SwiGLU FFN (one expert of d_ff / E and a
    router of d_model x E when E > 1), two norms in the layer and the final one."""
    ffn = 3 * d_model * d_ff if experts == 1 else 3 * d_model * (d_ff // experts) + d_model * experts
    return VOCAB * d_model + 4 * d_model * d_model + ffn + 2 * d_model + d_model


# micro: sizes a (32, 64) and b (48, 96) x S 0 (E 1) and 0.5 (E 2) x 256 tokens x seed 0.
MICRO_ACTIVE = {("a", 0.0): active_params(32, 64, 1), ("a", 0.5): active_params(32, 64, 2),
                ("b", 0.0): active_params(48, 96, 1), ("b", 0.5): active_params(48, 96, 2)}
TOKENS = 256


def test_the_dry_run_prints_runs_tokens_and_flops_of_the_hand_count(capsys):
    assert main(["sweep-sparsity", "micro", "--dry-run"]) == 0
    out = capsys.readouterr().out
    flops = 6 * TOKENS * sum(MICRO_ACTIVE.values())
    assert f"cost: 4 runs, 1.02K tokens trained (1.02K as separate runs), {flops:.3g} training " \
           "FLOPs (6ND)" in out
    for (size, sparsity), active in MICRO_ACTIVE.items():
        assert f"/{size}/S{sparsity:.3f}" in out and f"N_active={active:,}" in out


def test_a_wsd_budget_family_trains_fewer_tokens_than_separate_runs(capsys):
    assert main(["sweep-sparsity", "micro", "--dry-run", "--set", "token_budgets=[256,512]",
                 "--set", "train.schedule=wsd"]) == 0
    line = next(l for l in capsys.readouterr().out.splitlines() if l.startswith("cost: "))
    # 4 points x (256 + 512) tokens as separate runs; the 256 branch reuses the trunk's steps.
    assert "8 runs, " in line and "(3.07K as separate runs)" in line
    assert "3.07K tokens trained" not in line


def write_speeds(path, rows: list[tuple[float, int, object]]) -> str:
    path.write_text("S,N_active,tokens_per_s,other\n"
                    + "".join(f"{s},{n},{t},x\n" for s, n, t in rows))
    return str(path)


def hand_table(tmp_path) -> str:
    # S=0: 4e7 / N_active (three rows at 10K, median 4000); S=0.9: 2e7 / N_active. One row
    # without a speed (an older run) is skipped.
    return write_speeds(tmp_path / "speeds.csv", [
        (0.0, 10_000, 3_900), (0.0, 10_000, 4_100), (0.0, 10_000, 4_000), (0.0, 40_000, 1_000),
        (0.9, 10_000, 2_000), (0.9, 20_000, 1_000), (0.0, 20_000, "")])


def test_speeds_interpolate_log_log_from_the_nearest_sparsity(tmp_path):
    speeds = read_speeds(hand_table(tmp_path))
    assert math.isclose(tokens_per_s(speeds, 0.0, 20_000), 2_000)  # between: 4e7 / N
    assert math.isclose(tokens_per_s(speeds, 0.1, 80_000), 500)  # above: the last segment
    assert math.isclose(tokens_per_s(speeds, 0.5, 15_000), 2e7 / 15_000)  # 0.9 is nearer
    assert math.isclose(tokens_per_s(speeds, 0.0, 5_000), 4_000)  # below: flat


def test_the_time_is_the_tokens_at_the_table_speeds_plus_each_runs_overhead(tmp_path, capsys):
    table = hand_table(tmp_path)
    grid = load_sweep_grid("micro", [])
    points = plan_sweep(grid)
    estimate = time_estimate(grid, points, run_specs(points), read_speeds(table), 1.5)
    # S=0 at S=0's speeds, S=0.5 at S=0.9's (nearer than 0); every N_active is above 10K.
    by_hand = {key: TOKENS * active / (4e7 if key[1] == 0 else 2e7) + 1.5
               for key, active in MICRO_ACTIVE.items()}
    assert {(s.size, s.sparsity): s.seconds for s in estimate.shapes} == pytest.approx(by_hand)
    assert estimate.seconds == pytest.approx(sum(by_hand.values()))
    assert main(["sweep-sparsity", "micro", "--dry-run", "--speeds", table,
                 "--per-run-seconds", "1.5", "--jobs", "2"]) == 0
    out = capsys.readouterr().out
    total = sum(by_hand.values())
    assert f"about {total:,.0f} s one run at a time, {total / 120:.0f} min with --jobs 2" in out
    assert f"N_active={MICRO_ACTIVE[('b', 0.5)]:>9,}: {by_hand[('b', 0.5)]:7.0f} s" in out


@pytest.mark.parametrize("rows, expected", [
    ([(1.5, 10_000, 100)], "S '1.5' is invalid"),
    ([(0.0, 10_000, "fast")], "tokens_per_s 'fast' is invalid"),
    ([(0.0, -3, 100)], "N_active '-3' is invalid"),
    ([(0.0, 10_000, "")], "no row with tokens_per_s"),
])
def test_a_bad_speeds_table_is_refused_on_one_line(rows, expected, tmp_path, capsys):
    table = write_speeds(tmp_path / "speeds.csv", rows)
    refused_on_one_line(capsys, ["sweep-sparsity", "micro", "--dry-run", "--speeds", table],
                        expected)


def test_speed_options_out_of_place_are_refused_on_one_line(tmp_path, capsys):
    table = hand_table(tmp_path)
    (tmp_path / "columns.csv").write_text("S,N,speed\n0,1,2\n")
    cases = [
        (["--speeds", table, "--out", str(tmp_path / "s")], "without --dry-run"),
        (["--dry-run", "--per-run-seconds", "3"], "--per-run-seconds is invalid without --speeds"),
        (["--dry-run", "--speeds", table, "--per-run-seconds", "-1"], "--per-run-seconds -1"),
        (["--dry-run", "--speeds", str(tmp_path / "columns.csv")], "N_active, tokens_per_s"),
        (["--dry-run", "--speeds", str(tmp_path / "absent.csv")], "absent.csv"),
    ]
    for args, expected in cases:
        refused_on_one_line(capsys, ["sweep-sparsity", "micro", *args], expected)
    assert not (tmp_path / "s").exists()


# Without --speeds: the committed table (moelab/presets/measured_speeds.json), an estimate.

def _stored() -> dict:
    return json.loads((Path(moelab.__file__).parent / "presets" / "measured_speeds.json")
                      .read_text())


def _stored_speed(sparsity: float, active: int | None = None) -> float:
    """A shape's tokens/s read straight from the committed file; without ``active``, the
    smallest shape of that sparsity (what a shape below every measured one runs at)."""
    shapes = _stored()["shapes"]
    rows = sorted((s["N_active"], s["tokens_per_s"]) for s in shapes if s["S"] == sparsity)
    return rows[0][1] if active is None else dict(rows)[active]


def test_the_dry_run_without_speeds_prints_an_estimate_and_its_basis(capsys):
    assert main(["sweep-sparsity", "micro", "--dry-run", "--jobs", "2"]) == 0
    out = capsys.readouterr().out
    # Every micro shape is below the committed table's smallest (55K+ active): flat there.
    assert max(MICRO_ACTIVE.values()) < 50_000
    total = sum(TOKENS / _stored_speed(sparsity) + 2.0 for (_, sparsity) in MICRO_ACTIVE)
    assert f"estimated time: about {total:,.0f} s one run at a time, {total / 120:.1f} min " \
           "with --jobs 2" in out
    assert "an estimate: the median tokens/s of" in out and "measured_speeds.json" in out


def test_the_study_dry_run_prices_the_demo_at_its_measured_shapes(capsys, tmp_path):
    assert main(["study", "demo", "--dry-run", "--out", str(tmp_path / "s")]) == 0
    out = capsys.readouterr().out
    assert not (tmp_path / "s").exists()  # a dry run writes nothing
    # The demo's arms (README: 394.82K, 393.79K and 590.40K active), 6 seeds of 409,600 tokens,
    # each at its own committed shape's speed plus the committed seconds per run.
    per_run = _stored()["seconds_beyond_training"]
    per_seed = sum(409_600 / _stored_speed(s, active) + per_run
                   for s, active in ((0.5, 394_816), (0.0, 393_792), (0.0, 590_400)))
    total = 6 * per_seed
    assert "cost: 18 runs, 7.37M tokens" in out
    assert f"estimated time: about {total:,.0f} s one run at a time" in out
    assert out.count("N_active=") == 18


def test_the_committed_speed_table_is_what_the_committed_runs_say(monkeypatch):
    import importlib.util

    benchmarks = Path(__file__).resolve().parents[1] / "benchmarks"
    monkeypatch.syspath_prepend(str(benchmarks))
    spec = importlib.util.spec_from_file_location("preset_times", benchmarks / "preset_times.py")
    assert spec is not None and spec.loader is not None
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    assert script.measured_speeds() == _stored()  # else: run benchmarks/preset_times.py
    # One shape by hand: the demo's MoE (394,816 active) in the unsuffixed studies/ files:
    # seeds0-5 6, seeds617-622 6, seeds0-6 7, compiled-seeds0-7 8, tasks-active 6, tune-lr 6,
    # cpu-budgets 4 budgets x 3, demo-ladder's four top-2 rungs x 3: 63 runs.
    assert {"S": 0.5, "N_active": 394_816, "tokens_per_s": _stored_speed(0.5, 394_816),
            "runs": 63} in _stored()["shapes"]


def _mark_complete(folder: Path, run_names: list[str]) -> None:
    """What a finished run leaves for the completeness check: its summary saying complete."""
    for name in run_names:
        run = folder / "runs" / name
        run.mkdir(parents=True)
        (run / "summary.json").write_text(json.dumps({"status": "complete"}))


def test_the_sweep_dry_run_prices_only_the_runs_its_folder_lacks(capsys, tmp_path):
    out = tmp_path / "sweep"
    _mark_complete(out, ["D256/a/S0.000-E1k1/seed0", "D256/b/S0.500-E2k1/seed0"])
    assert main(["sweep-sparsity", "micro", "--dry-run", "--out", str(out)]) == 0
    text = capsys.readouterr().out
    left = [("a", 0.5), ("b", 0.0)]
    flops = 6 * TOKENS * sum(MICRO_ACTIVE[shape] for shape in left)
    assert (f"cost: 2 runs to train (2 already complete in {out}), 512 tokens trained (512 as "
            f"separate runs), {flops:.3g} training FLOPs (6ND)") in text
    total = sum(TOKENS / _stored_speed(sparsity) + 2.0 for _, sparsity in left)
    assert f"estimated time: about {total:,.0f} s one run at a time" in text
    # Every run complete: nothing to price, as the real run trains nothing.
    _mark_complete(out, ["D256/a/S0.500-E2k1/seed0", "D256/b/S0.000-E1k1/seed0"])
    assert main(["sweep-sparsity", "micro", "--dry-run", "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert f"cost: 0 runs to train (4 already complete in {out}), 0 tokens trained" in text
    assert "estimated time: about 0 s one run at a time" in text


def test_the_study_dry_run_prices_only_the_runs_its_folder_lacks(capsys, tmp_path):
    out = tmp_path / "s"
    _mark_complete(out, [f"moe/seed{seed}" for seed in range(6)])
    assert main(["study", "demo", "--dry-run", "--out", str(out)]) == 0
    text = capsys.readouterr().out
    per_run = _stored()["seconds_beyond_training"]
    per_seed = sum(409_600 / _stored_speed(0.0, active) + per_run for active in (393_792, 590_400))
    assert f"cost: 12 runs to train (6 already complete in {out}), 4.92M tokens" in text
    assert f"estimated time: about {6 * per_seed:,.0f} s one run at a time" in text
    assert text.count("N_active=") == 18  # the plan is listed whole
