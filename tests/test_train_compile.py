"""``train.compile: true``: the compiled loop trains like the eager one, and MoE does not recompile.

The MoE layer's loops over experts have routing-dependent trip counts. Under compile they are
opaque custom ops (``moelab::segment_matmul``, ``moelab::segment_outer_products``) whose output
shapes depend only on input shapes, so the whole layer compiles once. Traced instead, dynamo
specialises on the per-expert counts and compiles again as routing changes, which the frame
counts below catch (checked by making the layer call the plain loops under compile: the MoE
test fails, frames growing from 31 after step 1 to 37 after step 2).

References are the eager run of the same config (same seed, same batches) and dynamo's own
counters (``torch._dynamo.utils.counters``): frames compiled and unique graphs, read after every
step. With a cold inductor cache the file takes about 35 s on one CPU thread (under 10 s warm),
so each test compiles once.
"""

from __future__ import annotations

import pytest
import torch
import torch._dynamo
from torch._dynamo.utils import counters

import moelab.moe.kernels
import moelab.train.loop
from moelab.config import load_config
from moelab.train import train
from moelab.train.run_folder import RunFolder
from tiny_overrides import TINY_MOE_RUN

pytestmark = pytest.mark.slow

STEPS = 12
# The shared tiny MoE (tiny_overrides.py), 12 steps of 8 sequences.
TINY = TINY_MOE_RUN + [f"train.max_tokens={STEPS * 8 * 32}", "train.eval_interval=4",
                       "train.sample_tokens=0"]
# Inductor fuses and reorders float32 reductions (norms, softmax, cross-entropy), so compiled and
# eager differ by rounding: measured at most 2e-7 relative on the losses and 3e-6 on the
# gradient norm over these 12 steps (AdamW amplifies the differences a little every step).
# 1e-4 leaves a 30x margin and still catches a real divergence: dropping the z term
# (0.001 * z) or the lb term (0.01 * lb) moves the loss by more than 3e-4 relative.
REL = 1e-4
COMPARED = ("loss", "ce_loss", "lb_loss", "z_loss", "grad_norm")
TIMINGS = ("tokens_per_s", "tokens_per_cpu_s", "flops_per_s", "mfu")


def tiny_config(*overrides: str):
    return load_config(None, TINY + list(overrides))


@pytest.fixture(autouse=True)
def _fresh_dynamo():
    """Compiled code, guards and counters must not leak into (or out of) a test."""
    torch._dynamo.reset()
    counters.clear()
    yield
    torch._dynamo.reset()
    counters.clear()


def _train_watching_dynamo(config, run_dir, monkeypatch):
    """Train and record, after every step, (frames compiled, unique graphs) so far and the
    per-expert slot counts every expert loop of that step ran with.

    The counts are read where they are used at run time: in
    ``moelab.moe.kernels._segment_matmul``, which eager code calls directly and the compiled
    graph calls through its custom op (so the recorder runs on every step, not once at trace
    time).
    """
    per_step, step_counts, counts = [], [], []
    forward_backward = moelab.train.loop.forward_backward
    segment_matmul = moelab.moe.kernels._segment_matmul

    def watched_forward_backward(*args, **kwargs):
        counts.clear()
        losses = forward_backward(*args, **kwargs)
        per_step.append((counters["frames"]["total"], counters["stats"]["unique_graphs"]))
        step_counts.append(tuple(counts))
        return losses

    def watched_segment_matmul(rows, matrices, slots_per_expert):
        counts.append(tuple(slots_per_expert.tolist()))
        return segment_matmul(rows, matrices, slots_per_expert)

    monkeypatch.setattr(moelab.train.loop, "forward_backward", watched_forward_backward)
    monkeypatch.setattr(moelab.moe.kernels, "_segment_matmul", watched_segment_matmul)
    summary = train(config, run_dir)
    return summary, per_step, step_counts


def _assert_same_metrics(eager_dir, compiled_dir):
    eager, compiled = RunFolder(eager_dir).read_metrics(), RunFolder(compiled_dir).read_metrics()
    for kind, names in (("train", COMPARED), ("eval", ("val_loss", "val_bpb"))):
        eager_events = [e for e in eager if e["kind"] == kind]
        compiled_events = [e for e in compiled if e["kind"] == kind]
        assert [e["step"] for e in compiled_events] == [e["step"] for e in eager_events]
        for name in names:
            assert [e[name] for e in compiled_events] == pytest.approx(
                [e[name] for e in eager_events], rel=REL), f"{kind} {name}"


def test_compiled_dense_trains_like_eager_in_one_graph(tmp_path, monkeypatch):
    dense = ["model.moe=null", "model.n_layers=1"]  # one layer: the same graph, less to compile
    train(tiny_config(*dense), tmp_path / "eager")
    assert counters["frames"]["total"] == 0  # the eager run compiled nothing
    _, per_step, _ = _train_watching_dynamo(tiny_config(*dense, "train.compile=true"),
                                            tmp_path / "compiled", monkeypatch)

    assert len(per_step) == STEPS
    assert per_step[0][0] >= 1  # it really compiled...
    assert set(per_step) == {per_step[0]}  # ...in the first step, and never again
    assert not counters["graph_break"]  # a dense model is one graph
    _assert_same_metrics(tmp_path / "eager", tmp_path / "compiled")


def test_compiled_moe_trains_like_eager_without_recompiling_as_routing_changes(
        tmp_path, monkeypatch):
    train(tiny_config(), tmp_path / "eager")
    _, per_step, step_counts = _train_watching_dynamo(
        tiny_config("train.compile=true"), tmp_path / "compiled", monkeypatch)

    # The routing really changes: each step's per-expert slot counts are new. Per step, each of
    # the 2 layers runs 3 segment matmuls forward and 2 backward, all with that layer's counts.
    assert len(step_counts) == STEPS and all(len(calls) == 2 * 5 for calls in step_counts)
    assert all(isinstance(n, int) for calls in step_counts for layer in calls for n in layer)
    assert len(set(step_counts)) >= STEPS - 1
    # Everything compiled in step 1; later steps reuse it (no new frames, no new graphs).
    assert per_step[0][0] >= 1
    assert per_step == [per_step[0]] * STEPS, f"recompiled: (frames, graphs) per step {per_step}"
    assert not counters["graph_break"]  # the expert loops are custom ops: one graph
    _assert_same_metrics(tmp_path / "eager", tmp_path / "compiled")


def test_a_compiled_run_repeats_its_losses_bit_for_bit(tmp_path):
    """The same config and seed give the same losses compiled too: the second run compiles
    afresh in dynamo and takes AOTAutograd's and inductor's code from their on-disk caches,
    the first may have generated it (the cpu sweep preset compiles, and its runs must not
    depend on the cache). Neither run bypasses AOTAutograd's cache: a graph holding an
    autocast region or, without ``compile_afresh``'s flag, an autograd.Function is refused
    by it, and every warm start re-traces the joint graph (checked: both made this fail)."""
    config = tiny_config("train.compile=true", f"train.max_tokens={6 * 8 * 32}")
    train(config, tmp_path / "first")
    torch._dynamo.reset()
    train(config, tmp_path / "second")
    first, second = ([{key: value for key, value in event.items() if key not in TIMINGS}
                      for event in RunFolder(tmp_path / name).read_metrics()]
                     for name in ("first", "second"))
    assert sum(event["kind"] == "train" for event in first) == 6
    assert first == second
    assert counters["aot_autograd"]["autograd_cache_bypass"] == 0
    assert counters["aot_autograd"]["autograd_cache_hit"] >= 1


def test_each_run_of_a_process_compiles_afresh(tmp_path, monkeypatch):
    """A --jobs 1 study trains its runs in one process. Had the second shape counted against
    dynamo's recompile limit (here 1 instead of 8, so two shapes reach it), dynamo would have
    trained that run eager without a word, and its losses would depend on the runs before it."""
    dense = ["model.moe=null", "model.n_layers=1", "train.compile=true",
             f"train.max_tokens={4 * 8 * 32}"]
    # torch's own patch: pytest's monkeypatch, undone, leaves a torch config key hidden.
    with torch._dynamo.config.patch(recompile_limit=1):
        train(tiny_config(*dense), tmp_path / "first")
        graphs_after_first = counters["stats"]["unique_graphs"]
        _, per_step, _ = _train_watching_dynamo(tiny_config(*dense, "model.d_model=48"),
                                                tmp_path / "second", monkeypatch)
    # (frames, graphs) after the second run's first step: a new graph, not a refused frame.
    assert graphs_after_first >= 1 and per_step[0][1] > graphs_after_first
    assert counters["frames"]["total"] == counters["frames"]["ok"]


def test_throughput_times_a_compiled_config_compiled(monkeypatch):
    """``moelab throughput`` of a compiled grid (the cpu preset) times the steps its runs take:
    the warm-up step compiles, and the timed steps run the compiled graph."""
    from moelab.sweep.timing import config_shapes, time_shape

    compiled_steps = []
    forward_backward = moelab.train.loop.forward_backward

    def watched(*args, **kwargs):
        compiled_steps.append(counters["stats"]["unique_graphs"])
        return forward_backward(*args, **kwargs)

    monkeypatch.setattr(moelab.train.loop, "forward_backward", watched)
    shape, = config_shapes(None, TINY + ["model.moe=null", "model.n_layers=1",
                                         "train.compile=true"], None, 1)
    row = time_shape(shape, seconds_per_shape=0.2, warmup_steps=1)
    assert row["steps_timed"] >= 1 and len(compiled_steps) == 1 + row["steps_timed"]
    assert compiled_steps[0] == 0 and counters["stats"]["unique_graphs"] == 1  # compiled once
    assert counters["frames"]["total"] == counters["frames"]["ok"] == 1
