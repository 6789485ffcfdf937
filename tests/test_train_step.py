"""One optimizer step as the optimizer sees it: parameter groups, clipping, learning rate,
gradient accumulation and the two seeds.

The loop's logs are not trusted here: the tests wrap the optimizer the loop builds and read
what its ``step()`` is handed (the gradients, each group's lr), and compare with references
written out in the test (parameter names, hand-computed schedules, a plain full-batch backward).
"""

from __future__ import annotations

import math
from contextlib import nullcontext

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import moelab.train.loop as loop
from moelab.config import load_config
from moelab.data import TrainBatches
from moelab.model import Transformer
from moelab.train import load_run, train
from moelab.train.step import StepPlan, forward_backward, step_slot_counts
from moelab.train.optim import build_optimizer
from moelab.train.run_folder import RunFolder
from tiny_overrides import TINY_MOE_RUN

TINY = TINY_MOE_RUN + ["train.sample_tokens=0"]


def tiny_config(*overrides: str):
    return load_config(None, TINY + list(overrides))


def train_events(run_dir) -> list[dict]:
    return [e for e in RunFolder(run_dir).read_metrics() if e["kind"] == "train"]


class StepWatch:
    """Records, for every run the loop starts while installed, the model's initial weights,
    every step's input batch, and what each ``optimizer.step()`` is handed."""

    def __init__(self):
        self.initial_weights: list[dict[str, torch.Tensor]] = []
        self.inputs: list[torch.Tensor] = []
        self.grad_norms: list[float] = []
        """Global L2 norm of the gradients at step() time, summed in float64 here."""
        self.lrs: list[list[float]] = []
        """Every param group's lr at step() time."""

    def build_optimizer(self, model, train_cfg):
        # The loop builds the optimizer right after the model's init: the weights are initial.
        self.initial_weights.append({n: p.detach().clone() for n, p in model.named_parameters()})
        optimizer = build_optimizer(model, train_cfg)
        real_step = optimizer.step

        def step_and_record(*args, **kwargs):
            grads = [p.grad for g in optimizer.param_groups for p in g["params"] if p.grad is not None]
            self.grad_norms.append(math.sqrt(sum(float(g.double().square().sum()) for g in grads)))
            self.lrs.append([g["lr"] for g in optimizer.param_groups])
            return real_step(*args, **kwargs)

        optimizer.step = step_and_record
        return optimizer

    def forward_backward(self, train_model, ddp_model, x_BT, *args, **kwargs):
        self.inputs.append(x_BT.clone())
        return forward_backward(train_model, ddp_model, x_BT, *args, **kwargs)


@pytest.fixture
def watch(monkeypatch) -> StepWatch:
    recorder = StepWatch()
    monkeypatch.setattr(loop, "build_optimizer", recorder.build_optimizer)
    monkeypatch.setattr(loop, "forward_backward", recorder.forward_backward)
    return recorder


# --------------------------------------------------------------------------------------------
# Weight decay
# --------------------------------------------------------------------------------------------


def _groups_by_name(model, optimizer) -> list[tuple[float, list[str]]]:
    name_of = {id(p): n for n, p in model.named_parameters()}
    return [(g["weight_decay"], sorted(name_of[id(p)] for p in g["params"]))
            for g in optimizer.param_groups]


def test_weight_decay_goes_on_matrices_and_embeddings_not_on_norms():
    # MoE, tied head: the embedding is the only head weight; router and stacked experts decay.
    config = tiny_config("train.weight_decay=0.05")
    model = Transformer(config.model)
    per_layer_decay = ["attention.wq.weight", "attention.wk.weight", "attention.wv.weight",
                       "attention.wo.weight", "feed_forward.router.weight", "feed_forward.w1",
                       "feed_forward.w2", "feed_forward.w3"]
    per_layer_no_decay = ["attention_norm.weight", "ffn_norm.weight"]
    decay = ["tok_embeddings.weight"] + [f"layers.{i}.{n}" for i in (0, 1) for n in per_layer_decay]
    no_decay = ["norm.weight"] + [f"layers.{i}.{n}" for i in (0, 1) for n in per_layer_no_decay]
    assert _groups_by_name(model, build_optimizer(model, config.train)) == [
        (0.05, sorted(decay)), (0.0, sorted(no_decay))]

    # Dense, untied head: the output matrix decays too, and so do the dense FFN's matrices.
    config = tiny_config("train.weight_decay=0.05", "model.moe=null", "model.tie_embeddings=false")
    model = Transformer(config.model)
    per_layer_decay = ["attention.wq.weight", "attention.wk.weight", "attention.wv.weight",
                       "attention.wo.weight", "feed_forward.w1.weight", "feed_forward.w2.weight",
                       "feed_forward.w3.weight"]
    decay = (["tok_embeddings.weight", "output.weight"]
             + [f"layers.{i}.{n}" for i in (0, 1) for n in per_layer_decay])
    optimizer = build_optimizer(model, config.train)
    assert _groups_by_name(model, optimizer) == [(0.05, sorted(decay)), (0.0, sorted(no_decay))]

    # And the groups act: with zero gradients Adam's update is 0, so one step only decays,
    # multiplying decayed weights by 1 - lr * weight_decay and leaving the norms alone.
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    for p in model.parameters():
        p.grad = torch.zeros_like(p)
    optimizer.step()
    for name, p in model.named_parameters():
        factor = 1 - 0.01 * 0.05 if name in decay else 1.0
        torch.testing.assert_close(p.detach(), before[name] * factor, rtol=1e-6, atol=0.0)


# --------------------------------------------------------------------------------------------
# Gradient clipping
# --------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_the_optimizer_sees_the_clipped_gradient_and_the_log_the_unclipped_norm(tmp_path, watch):
    clip = 1e-3
    three_steps = "train.max_tokens=768"
    train(tiny_config(three_steps, f"train.grad_clip={clip}"), tmp_path / "clipped")
    clipped_seen = list(watch.grad_norms)
    watch.grad_norms.clear()
    train(tiny_config(three_steps, "train.grad_clip=0"), tmp_path / "unclipped")
    unclipped_seen = watch.grad_norms
    clipped_logged = [e["grad_norm"] for e in train_events(tmp_path / "clipped")]
    unclipped_logged = [e["grad_norm"] for e in train_events(tmp_path / "unclipped")]
    assert len(clipped_seen) == len(clipped_logged) == len(unclipped_seen) == 3

    # Clipping rescales the gradient onto the sphere of radius grad_clip: at most grad_clip
    # (float slack), and not far below it (not zeroed, not clipped to some other radius).
    for seen, logged in zip(clipped_seen, clipped_logged):
        assert seen <= clip * (1 + 1e-6)
        assert seen == pytest.approx(clip, rel=1e-3)
        assert logged > 10 * clip  # the norm before clipping: far above the radius
    # Same init, same first batch: the first logged norm is the pre-clip norm either way.
    assert clipped_logged[0] == pytest.approx(unclipped_logged[0], rel=1e-6)
    # grad_clip=0 is off: the optimizer gets the very gradient whose norm is logged.
    assert unclipped_seen == pytest.approx(unclipped_logged, rel=1e-5)


# --------------------------------------------------------------------------------------------
# Learning rate
# --------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_logged_and_applied_lr_follow_linear_warmup_then_cosine_to_the_floor(tmp_path, watch):
    # 10 steps of 256 tokens; warmup int(0.2 * 10) = 2 steps; floor 0.25 * 0.01.
    config = tiny_config("model.moe=null", "train.max_tokens=2560", "train.warmup_fraction=0.2",
                         "train.min_lr_ratio=0.25", "train.eval_interval=10")
    train(config, tmp_path / "run")
    peak, floor, warmup, steps = 0.01, 0.0025, 2, 10
    expected = []
    for step in range(1, steps + 1):  # 1-based, as logged
        if step <= warmup:  # step 1 already gets peak / warmup, step `warmup` the peak
            expected.append(peak * step / warmup)
        else:  # cosine over the steps after warmup: the peak on step 3, the floor on step 10
            progress = (step - warmup - 1) / (steps - warmup - 1)
            expected.append(floor + (peak - floor) * (1 + math.cos(math.pi * progress)) / 2)
    # The formula against values worked out by hand at its ends.
    assert expected[:3] == pytest.approx([0.005, 0.01, 0.01]) and expected[-1] == pytest.approx(floor)

    events = train_events(tmp_path / "run")
    assert [e["step"] for e in events] == list(range(1, steps + 1))
    assert [e["lr"] for e in events] == pytest.approx(expected, rel=1e-12)
    # The optimizer used the same values, in both its groups (decay and no decay).
    assert len(watch.lrs) == steps
    for group_lrs, lr in zip(watch.lrs, expected):
        assert group_lrs == pytest.approx([lr, lr], rel=1e-12)


@pytest.mark.slow
def test_a_wsd_run_logs_and_applies_warmup_stable_then_sqrt_decay(tmp_path, watch):
    # 10 steps; warmup int(0.2 * 10) = 2; decay int(0.5 * 10) = 5 steps (6-10, 1-based), t = 0,
    # 1/4, 1/2, 3/4, 1; peak 0.01, floor 0.25 * 0.01: lr = 0.0025 + 0.0075 * (1 - sqrt(t)).
    config = tiny_config("model.moe=null", "train.max_tokens=2560", "train.warmup_fraction=0.2",
                         "train.min_lr_ratio=0.25", "train.eval_interval=10",
                         "train.schedule=wsd", "train.decay_fraction=0.5",
                         "train.decay_shape=sqrt")
    train(config, tmp_path / "run")
    expected = [0.005, 0.01,  # warmup
                0.01, 0.01, 0.01,  # stable
                0.01, 0.00625, 0.0025 + 0.0075 * (1 - 0.5 ** 0.5), 0.0025 + 0.0075 * 0.133975,
                0.0025]  # decay
    events = train_events(tmp_path / "run")
    assert [e["step"] for e in events] == list(range(1, 11))
    assert [e["lr"] for e in events] == pytest.approx(expected, rel=1e-5)
    assert len(watch.lrs) == 10
    for group_lrs, lr in zip(watch.lrs, expected):
        assert group_lrs == pytest.approx([lr, lr], rel=1e-5)


# --------------------------------------------------------------------------------------------
# Gradient accumulation
# --------------------------------------------------------------------------------------------


def test_accumulated_micro_batch_gradients_equal_the_full_batch_gradient():
    """Dense: its objective is the mean cross-entropy, which splits exactly over equal micro
    batches (the MoE balancing loss is not linear in the batch). The reference is one plain
    backward of F.cross_entropy over the whole rank batch."""
    config = tiny_config("model.moe=null", "train.micro_batch_size=2")
    plan = StepPlan.from_config(config, world_size=1)
    assert plan.accumulation_steps == 4
    tokens = np.random.default_rng(0).integers(0, 512, size=5_000)
    x_BT, y_BT = TrainBatches(tokens, 32, 8, seed=0).next()
    torch.manual_seed(0)
    model = Transformer(config.model)

    losses_4, _ = forward_backward(model, None, x_BT, y_BT, plan, nullcontext)
    accumulated = {n: p.grad.clone() for n, p in model.named_parameters()}
    model.zero_grad(set_to_none=True)
    full_loss = F.cross_entropy(model(x_BT).logits.flatten(0, 1), y_BT.flatten())
    full_loss.backward()

    assert float(losses_4[0]) == pytest.approx(full_loss.item(), rel=1e-6)
    assert float(losses_4[1]) == pytest.approx(full_loss.item(), rel=1e-6)  # ce = loss (dense)
    for name, p in model.named_parameters():
        torch.testing.assert_close(accumulated[name], p.grad, rtol=1e-4, atol=1e-7, msg=name)


def _moe_step(scope: str, micro_batch_size: int):
    """One forward_backward of the tiny MoE (batch 4, lb_coef 1 so the balancing loss weighs)
    the way optimizer_step runs it; returns (the four losses, the gradients)."""
    config = tiny_config("train.batch_size=4", f"train.micro_batch_size={micro_batch_size}",
                         f"model.moe.lb_scope={scope}", "model.moe.lb_coef=1.0")
    plan = StepPlan.from_config(config, world_size=1)
    tokens = np.random.default_rng(0).integers(0, 512, size=5_000)
    x_BT, y_BT = TrainBatches(tokens, 32, 4, seed=0).next()
    torch.manual_seed(0)
    model = Transformer(config.model)
    counts_LE = (step_slot_counts(model, x_BT, plan, nullcontext, lambda t: t)
                 if scope == "global_batch" else None)
    losses_4, _ = forward_backward(model, None, x_BT, y_BT, plan, nullcontext, counts_LE)
    return losses_4, {n: p.grad.clone() for n, p in model.named_parameters()}


def test_global_batch_balancing_makes_four_micro_batches_equal_one_batch_of_four():
    """The reference is one micro batch of 4: there the balancing loss of the model's own
    counts is the loss on the whole step, whatever the scope."""
    full_losses, full_grads = _moe_step("micro_batch", 4)
    global_losses, global_grads = _moe_step("global_batch", 1)
    torch.testing.assert_close(global_losses, full_losses, rtol=1e-6, atol=0)
    for name in full_grads:
        torch.testing.assert_close(global_grads[name], full_grads[name], rtol=1e-4, atol=1e-7,
                                   msg=name)
    # micro_batch balances each micro batch on its own: another loss, another router gradient
    micro_losses, micro_grads = _moe_step("micro_batch", 1)
    assert abs(float(micro_losses[2]) - float(full_losses[2])) > 1e-3
    router = "layers.0.feed_forward.router.weight"
    assert not torch.allclose(micro_grads[router], full_grads[router], rtol=1e-2)


@pytest.mark.slow
def test_global_batch_balancing_trains_like_one_micro_batch(tmp_path):
    """Through the loop (the routing pass of optimizer_step): 3 steps of batch 8 in micro
    batches of 2 follow the run without accumulation; micro_batch scope does not."""
    def losses(scope, micro, name):
        train(tiny_config("train.max_tokens=768", "train.eval_interval=3",
                          f"train.micro_batch_size={micro}", f"model.moe.lb_scope={scope}",
                          "model.moe.lb_coef=1.0"), tmp_path / name)
        return [e["loss"] for e in train_events(tmp_path / name)]

    whole = losses("global_batch", 8, "whole")
    assert len(whole) == 3
    assert losses("global_batch", 2, "global") == pytest.approx(whole, rel=1e-5)
    assert losses("micro_batch", 2, "micro") != pytest.approx(whole, rel=1e-4)


# --------------------------------------------------------------------------------------------
# Aux-loss-free balancing
# --------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_the_loop_moves_the_expert_bias_by_the_sign_of_the_steps_loads(tmp_path, watch):
    """After step 1 each layer's bias is rate * sign(mean load - load) of the loads that
    step's batch had under the initial weights (recounted here from the recorded batch, in
    the two micro batches), and balance: bias leaves the balancing loss out of the loss."""
    config = tiny_config("train.max_tokens=256", "train.micro_batch_size=4",
                         "model.moe.balance=bias", "model.moe.bias_update_rate=0.01")
    train(config, tmp_path / "run")
    initial = Transformer(config.model)
    initial.load_state_dict(watch.initial_weights[0], strict=False)
    counts_LE = sum(initial.routing_counts(x_bT) for x_bT in watch.inputs[0].split(4))
    mean_L1 = counts_LE.double().mean(dim=1, keepdim=True)
    expected_LE = 0.01 * torch.sign(mean_L1 - counts_LE.double())
    assert expected_LE.abs().sum() > 0

    trained, _ = load_run(tmp_path / "run")
    for layer, expected_E in zip(trained.layers, expected_LE):
        torch.testing.assert_close(layer.feed_forward.expert_bias.double(), expected_E)
    (event,) = train_events(tmp_path / "run")
    assert event["lb_loss"] > 0.9
    assert event["loss"] == pytest.approx(event["ce_loss"] + 0.001 * event["z_loss"], rel=1e-6)


# --------------------------------------------------------------------------------------------
# Seeds
# --------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_data_seed_changes_the_batches_and_not_the_init(tmp_path, watch):
    one_step = "train.max_tokens=256"
    runs = {"seed0": ["train.seed=0"], "seed0_data7": ["train.seed=0", "train.data_seed=7"],
            "seed3_data0": ["train.seed=3", "train.data_seed=0"]}
    for name, seeds in runs.items():
        train(tiny_config(one_step, *seeds), tmp_path / name)
    assert len(watch.initial_weights) == len(watch.inputs) == 3  # one step, one micro batch each
    weights = dict(zip(runs, watch.initial_weights))
    inputs = dict(zip(runs, watch.inputs))

    def same_weights(a: str, b: str) -> bool:
        return all(torch.equal(weights[a][n], weights[b][n]) for n in weights[a])

    # train.seed alone sets the init; the batches follow data_seed, which defaults to seed.
    assert same_weights("seed0", "seed0_data7")
    assert not same_weights("seed0", "seed3_data0")
    assert not torch.equal(inputs["seed0"], inputs["seed0_data7"])
    assert torch.equal(inputs["seed0"], inputs["seed3_data0"])
    assert RunFolder(tmp_path / "seed0_data7").read_summary()["data_seed"] == 7
