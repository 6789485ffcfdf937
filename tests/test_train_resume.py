"""Exact resume: a run SIGKILLed mid-way and resumed logs exactly what an uninterrupted run logs.

All runs are real ``moelab train`` subprocesses (same interpreter, same environment), so the
comparison is bit for bit: train losses and gradient norms step by step, every eval, and the
final summary's val losses. The killed run SIGKILLs itself at a fixed step, so where it dies
does not depend on how fast the machine is.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from moelab.train import load_run
from moelab.train.run_folder import RunFolder
from tiny_overrides import TIMING_KEYS

TINY_MOE = """
model: {vocab_size: 512, d_model: 32, n_layers: 2, n_heads: 2, n_kv_heads: 2, d_ff: 64,
        max_seq_len: 32, moe: {num_experts: 4, top_k: 2, d_expert: 32}}
data: {source: sample, max_train_stories: 300}
train: {batch_size: 8, micro_batch_size: 4, max_tokens: 6144, lr: 0.01, eval_interval: 8,
        eval_windows: 8, log_interval: 1, checkpoint_interval: 4, progress: false,
        sample_tokens: 4}
"""
# Aux-loss-free balancing with global-batch loads: the expert biases (buffers the optimizer
# does not hold) and the routing pass must come back from the checkpoint exactly too.
TINY_MOE_BIAS = TINY_MOE.replace(
    "d_expert: 32}", "d_expert: 32, balance: bias, bias_update_rate: 0.01, "
                     "lb_scope: global_batch}")


# ``moelab train`` that SIGKILLs itself as step 11 begins: after the checkpoint of step 8 and
# the logs of steps 9 and 10, which the resumed run must drop and redo.
KILLED_AT_STEP_11 = """
import os, signal, sys
import moelab.train.loop as loop
from moelab.cli import main

real_optimizer_step, steps_begun = loop.optimizer_step, []

def optimizer_step_or_die(*args, **kwargs):
    steps_begun.append(True)
    if len(steps_begun) == 11:
        os.kill(os.getpid(), signal.SIGKILL)
    return real_optimizer_step(*args, **kwargs)

loop.optimizer_step = optimizer_step_or_die
sys.exit(main(sys.argv[1:]))
"""


def _train_args(config_file: Path, run_dir: Path, *extra: str) -> list[str]:
    return ["train", str(config_file), "--out", str(run_dir), *extra]


def _run(command: list[str], env: dict[str, str]) -> None:
    """Run to completion; a failure shows the child's stderr."""
    result = subprocess.run(command, env=env, capture_output=True, text=True)
    assert result.returncode == 0, f"{command} exited {result.returncode}:\n{result.stderr}"


def _without_timings(event: dict) -> dict:
    return {k: v for k, v in event.items() if k not in TIMING_KEYS}


@pytest.mark.slow
@pytest.mark.parametrize("config_text", [TINY_MOE, TINY_MOE_BIAS], ids=["aux_loss", "bias"])
def test_sigkilled_run_resumes_bit_for_bit(tmp_path, config_text):
    config_file = tmp_path / "tiny.yaml"
    config_file.write_text(config_text)
    env = {**os.environ, "OMP_NUM_THREADS": "1"}  # steady under a busy CPU; same for every run

    moelab_train = [sys.executable, "-m", "moelab"]
    reference = tmp_path / "uninterrupted"
    _run(moelab_train + _train_args(config_file, reference), env)

    killed = tmp_path / "killed"
    process = subprocess.run([sys.executable, "-c", KILLED_AT_STEP_11,
                              *_train_args(config_file, killed)], env=env, capture_output=True,
                             text=True)
    assert process.returncode == -signal.SIGKILL, process.stderr
    assert not (killed / "summary.json").exists()
    assert json.loads((killed / "checkpoints" / "latest.json").read_text())["step"] == 8
    assert max(e["step"] for e in RunFolder(killed).read_metrics()) == 10

    _run(moelab_train + _train_args(config_file, killed, "--resume"), env)

    reference_events = [_without_timings(e) for e in RunFolder(reference).read_metrics()]
    resumed_events = [_without_timings(e) for e in RunFolder(killed).read_metrics()]
    assert [e["step"] for e in resumed_events if e["kind"] == "train"] == list(range(1, 25))
    assert resumed_events == reference_events  # exact equality, floats included

    reference_summary = RunFolder(reference).read_summary()
    resumed_summary = RunFolder(killed).read_summary()
    for key in ("final_val_loss", "best_val_loss", "best_val_step", "tokens", "steps", "routing"):
        assert resumed_summary[key] == reference_summary[key]
    assert (killed / "samples.txt").read_text() == (reference / "samples.txt").read_text()
    if config_text == TINY_MOE_BIAS:  # the bias moved, so resuming had to restore it
        model, _ = load_run(killed)
        assert float(model.layers[0].feed_forward.expert_bias.abs().max()) > 0.01
