"""DDP: ``torchrun --nproc_per_node=2 -m moelab train`` on CPU (gloo) follows the same loss
trajectory as one process with the same global batch.

A dense config: its objective is the mean cross-entropy, which splits exactly over equal
micro batches, so the two runs differ only by float rounding (gradient all-reduce order).
An MoE config with ``model.moe.lb_scope: global_batch``: the balancing loss counts its loads
over both ranks (all-reduced before the backward), so it is exact in the same sense; so is the
aux-loss-free bias (``balance: both``), moved by the loads of both ranks. With the
default micro_batch scope each rank balances its own batch: a slightly different objective
(docs/training.md, "Balancing scope").
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from moelab.train.run_folder import RunFolder

TINY_DENSE = """
model: {vocab_size: 512, d_model: 32, n_layers: 2, n_heads: 2, n_kv_heads: 2, d_ff: 64,
        max_seq_len: 32}
data: {source: sample, max_train_stories: 300}
train: {batch_size: 8, max_tokens: 3072, lr: 0.01, eval_interval: 6, eval_windows: 8,
        log_interval: 1, progress: false, sample_tokens: 0}
"""


def _run(command: list[str], env: dict[str, str]) -> None:
    """Run to completion; a failure shows the child's stderr (torchrun passes on its ranks')."""
    result = subprocess.run(command, env=env, capture_output=True, text=True)
    assert result.returncode == 0, f"{command} exited {result.returncode}:\n{result.stderr}"


def _train_alone_and_on_two_ranks(tmp_path, config_text: str):
    """The same config trained by one process and by torchrun with 2 gloo ranks: (single, ddp)."""
    config_file = tmp_path / "config.yaml"
    config_file.write_text(config_text)
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    single, ddp = tmp_path / "single", tmp_path / "ddp"
    _run([sys.executable, "-m", "moelab", "train", str(config_file), "--out", str(single)], env)
    _run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
          "-m", "moelab", "train", str(config_file), "--out", str(ddp)], env)
    return single, ddp


@pytest.mark.slow
def test_two_cpu_processes_match_one(tmp_path):
    single, ddp = _train_alone_and_on_two_ranks(tmp_path, TINY_DENSE)

    single_events, ddp_events = RunFolder(single).read_metrics(), RunFolder(ddp).read_metrics()
    assert [(e["kind"], e["step"]) for e in ddp_events] == [(e["kind"], e["step"]) for e in single_events]
    single_losses = [e["loss"] for e in single_events if e["kind"] == "train"]
    ddp_losses = [e["loss"] for e in ddp_events if e["kind"] == "train"]
    assert len(single_losses) == 12
    assert ddp_losses == pytest.approx(single_losses, rel=1e-5)
    assert ddp_losses[0] == pytest.approx(single_losses[0], rel=1e-6)  # same init, same data
    assert single_losses[-1] < single_losses[0] - 0.3  # and it trains

    single_summary, ddp_summary = RunFolder(single).read_summary(), RunFolder(ddp).read_summary()
    assert ddp_summary["world_size"] == 2 and single_summary["world_size"] == 1
    assert ddp_summary["tokens"] == single_summary["tokens"] == 12 * 8 * 32
    assert ddp_summary["final_val_loss"] == pytest.approx(single_summary["final_val_loss"], rel=1e-5)


TINY_MOE_GLOBAL = TINY_DENSE.replace(
    "max_seq_len: 32}",
    "max_seq_len: 32,\n        moe: {num_experts: 4, top_k: 2, d_expert: 32, lb_coef: 1.0, "
    "lb_scope: global_batch, balance: both, bias_update_rate: 0.01}}",
).replace("max_tokens: 3072", "max_tokens: 1536")


@pytest.mark.slow
def test_two_cpu_processes_match_one_for_moe_with_global_batch_and_bias_balancing(tmp_path):
    assert "global_batch" in TINY_MOE_GLOBAL
    single, ddp = _train_alone_and_on_two_ranks(tmp_path, TINY_MOE_GLOBAL)

    def train_events(run_dir):
        return [e for e in RunFolder(run_dir).read_metrics() if e["kind"] == "train"]

    single_events, ddp_events = train_events(single), train_events(ddp)
    assert len(single_events) == 6
    for name in ("loss", "lb_loss", "ce_loss"):
        assert [e[name] for e in ddp_events] == pytest.approx(
            [e[name] for e in single_events], rel=1e-5), name
    single_summary, ddp_summary = RunFolder(single).read_summary(), RunFolder(ddp).read_summary()
    assert ddp_summary["world_size"] == 2
    assert ddp_summary["final_val_loss"] == pytest.approx(single_summary["final_val_loss"], rel=1e-5)
