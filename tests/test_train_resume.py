"""Exact resume: a run SIGKILLed mid-way and resumed logs exactly what an uninterrupted run logs.

Both runs are real ``moelab train`` subprocesses (same interpreter, same environment), so the
comparison is bit for bit: train losses and gradient norms step by step, every eval, and the
final summary's val losses.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from moelab.train.run_folder import RunFolder

TINY_MOE = """
model: {vocab_size: 512, d_model: 32, n_layers: 2, n_heads: 2, n_kv_heads: 2, d_ff: 64,
        max_seq_len: 32, moe: {num_experts: 4, top_k: 2, d_expert: 32}}
data: {source: sample, max_train_stories: 300}
train: {batch_size: 8, micro_batch_size: 4, max_tokens: 6144, lr: 0.01, eval_interval: 8,
        eval_windows: 8, log_interval: 1, checkpoint_interval: 4, progress: false,
        sample_tokens: 4}
"""
# Fields that measure the machine, not the computation.
TIMING_KEYS = ("tokens_per_s", "flops_per_s", "wall_time_s", "train_time_s")


def _train_command(config_file: Path, run_dir: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "moelab", "train", str(config_file), "--out", str(run_dir), *extra]


def _latest_checkpoint_step(run_dir: Path) -> int:
    try:
        return json.loads((run_dir / "checkpoints" / "latest.json").read_text())["step"]
    except (OSError, ValueError):
        return 0


def _without_timings(event: dict) -> dict:
    return {k: v for k, v in event.items() if k not in TIMING_KEYS}


def test_sigkilled_run_resumes_bit_for_bit(tmp_path):
    config_file = tmp_path / "tiny.yaml"
    config_file.write_text(TINY_MOE)
    env = {**os.environ, "OMP_NUM_THREADS": "1"}  # steady under a busy CPU; same for both runs

    reference = tmp_path / "uninterrupted"
    subprocess.run(_train_command(config_file, reference), env=env, check=True,
                   capture_output=True)

    killed = tmp_path / "killed"
    process = subprocess.Popen(_train_command(config_file, killed), env=env,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    while _latest_checkpoint_step(killed) < 8 and process.poll() is None:
        assert time.monotonic() < deadline, "the run never reached its second checkpoint"
        time.sleep(0.01)
    process.send_signal(signal.SIGKILL)
    process.wait()
    assert process.returncode == -signal.SIGKILL, "the run finished before it could be killed"
    assert not (killed / "summary.json").exists()
    steps_before_kill = max(e["step"] for e in RunFolder(killed).read_metrics())
    assert 8 <= steps_before_kill < 24

    subprocess.run(_train_command(config_file, killed, "--resume"), env=env, check=True,
                   capture_output=True)

    reference_events = [_without_timings(e) for e in RunFolder(reference).read_metrics()]
    resumed_events = [_without_timings(e) for e in RunFolder(killed).read_metrics()]
    assert [e["step"] for e in resumed_events if e["kind"] == "train"] == list(range(1, 25))
    assert resumed_events == reference_events  # exact equality, floats included

    reference_summary = RunFolder(reference).read_summary()
    resumed_summary = RunFolder(killed).read_summary()
    for key in ("final_val_loss", "best_val_loss", "best_val_step", "tokens", "steps", "routing"):
        assert resumed_summary[key] == reference_summary[key]
    assert (killed / "samples.txt").read_text() == (reference / "samples.txt").read_text()
