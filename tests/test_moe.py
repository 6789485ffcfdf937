"""The MoE layer against independent references: hand-computed losses and diagnostics,
Hugging Face's load_balancing_loss_func, a dense FFN, and the plain loop over experts (which
every experts implementation must equal)."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from transformers.models.mixtral.modeling_mixtral import load_balancing_loss_func

import moelab.moe.kernels
from moelab.config import ModelConfig, MoEConfig, load_config
from moelab.errors import ConfigError, MoelabError
from moelab.model import FeedForward
from moelab.moe import MoEFeedForward
from moelab.moe.experts import EXPERTS_IMPLEMENTATIONS, reference_experts_forward
from moelab.moe.kernels import (
    ROW_BLOCK,
    _row_pieces,
    expert_layout,
    segment_matmul,
    segment_outer_products,
    sorted_experts_forward,
)
from moelab.moe.routing import load_balancing_loss, route, router_z_loss, routing_stats


def moe_config(num_experts=4, top_k=2, d_model=16, d_expert=12) -> ModelConfig:
    return ModelConfig(d_model=d_model, n_heads=2, n_kv_heads=2,
                       moe=MoEConfig(num_experts=num_experts, top_k=top_k, d_expert=d_expert))


def random_layer(cfg: ModelConfig, experts_implementation="sorted", seed=0) -> MoEFeedForward:
    torch.manual_seed(seed)
    layer = MoEFeedForward(cfg, experts_implementation)
    for param in layer.parameters():
        torch.nn.init.normal_(param, std=0.3)
    return layer


# ----- routing --------------------------------------------------------------------------------


def test_route_is_mixtral_softmax_topk_renormalised():
    logits_TE = torch.tensor([[1.0, 3.0, 2.0, 0.0]])
    routing = route(logits_TE, top_k=2)
    exp = [math.exp(v) for v in (1.0, 3.0, 2.0, 0.0)]
    assert routing.experts_TK.tolist() == [[1, 2]]
    assert routing.slot_counts_E.tolist() == [0, 1, 1, 0]
    # softmax over all 4 then renormalised over the chosen 2 = softmax over the chosen 2
    expected = [exp[1] / (exp[1] + exp[2]), exp[2] / (exp[1] + exp[2])]
    assert routing.weights_TK[0].tolist() == pytest.approx(expected, rel=1e-6)
    z = sum(exp)
    assert routing.z_loss.item() == pytest.approx(math.log(z) ** 2, rel=1e-6)
    # f = (0, 1/2, 1/2, 0): E * (p_1 + p_2) / 2
    assert routing.lb_loss.item() == pytest.approx(4 * (exp[1] + exp[2]) / z / 2, rel=1e-6)


def test_route_without_renormalising_keeps_the_softmax_probabilities():
    logits_TE = torch.tensor([[1.0, 3.0, 2.0, 0.0], [0.5, -1.0, 0.0, 2.0]])
    routing = route(logits_TE, top_k=1, renormalize=False)
    exp = torch.tensor([[math.exp(v) for v in row] for row in logits_TE.tolist()])
    probs = exp / exp.sum(dim=1, keepdim=True)
    assert routing.experts_TK.tolist() == [[1], [3]]
    torch.testing.assert_close(routing.weights_TK, probs.max(dim=1, keepdim=True).values)


@pytest.mark.parametrize("norm_topk_prob, learns", [(None, True), (True, False)])
def test_top1_router_learns_from_the_task_loss_only_without_renormalising(norm_topk_prob, learns):
    # One renormalised weight is exactly 1: the output no longer depends on the router's
    # probabilities, so the task loss cannot train it (Switch keeps the raw probability).
    cfg = ModelConfig(d_model=16, n_heads=2, n_kv_heads=2, moe=MoEConfig(
        num_experts=4, top_k=1, d_expert=12, norm_topk_prob=norm_topk_prob))
    layer = random_layer(cfg)
    out, _ = layer(torch.randn(3, 7, cfg.d_model))
    out.square().sum().backward()  # the task loss only: no balancing or z-loss
    # relative to the experts' gradients: renormalised, the router's is rounding noise
    router_over_experts = layer.router.weight.grad.abs().max() / layer.w1.grad.abs().max()
    assert bool(router_over_experts > 1e-3) is learns
    assert bool(router_over_experts < 1e-5) is not learns


@pytest.mark.parametrize("top_k, norm_topk_prob", [(2, None), (1, None), (1, True)])
def test_route_tokens_equals_the_textbook_formulas_with_gradients(top_k, norm_topk_prob):
    # The layer shares one softmax (exp(logits - log Z)) and one slot count between the weights
    # and both losses; each must equal its textbook formula (torch.softmax, per-expert counts
    # by comparison, logsumexp), gradients included. The standalone loss functions too.
    cfg = ModelConfig(d_model=16, n_heads=2, n_kv_heads=2, moe=MoEConfig(
        num_experts=5, top_k=top_k, d_expert=12, norm_topk_prob=norm_topk_prob))
    layer = random_layer(cfg)
    x_TD = torch.randn(40, cfg.d_model)
    weights_g = torch.randn(40, top_k)

    def objective(weights_TK, lb_loss, z_loss):
        return (weights_TK * weights_g).sum() + 0.7 * lb_loss + 0.3 * z_loss

    routed = layer.route_tokens(x_TD)
    objective(routed.weights_TK, routed.lb_loss, routed.z_loss).backward()
    fast_grad = layer.router.weight.grad.clone()
    layer.router.weight.grad = None

    logits_TE = x_TD @ layer.router.weight.T
    probs_TE = torch.softmax(logits_TE, dim=-1)
    top_probs_TK, experts_TK = probs_TE.topk(top_k, dim=-1)
    weights_TK = (top_probs_TK / top_probs_TK.sum(-1, keepdim=True)
                  if cfg.moe.renormalizes_weights else top_probs_TK)
    counts_E = torch.tensor([float((experts_TK == e).sum()) for e in range(5)])
    lb_loss = 5 * (counts_E / counts_E.sum() * probs_TE.mean(0)).sum()
    z_loss = torch.logsumexp(logits_TE, -1).square().mean()
    objective(weights_TK, lb_loss, z_loss).backward()
    assert torch.equal(routed.experts_TK, experts_TK)
    assert routed.slot_counts_E.tolist() == counts_E.tolist()
    for fast, slow in zip((routed.weights_TK, routed.lb_loss, routed.z_loss),
                          (weights_TK, lb_loss, z_loss)):
        torch.testing.assert_close(fast, slow)
    torch.testing.assert_close(fast_grad, layer.router.weight.grad)
    torch.testing.assert_close(load_balancing_loss(logits_TE, experts_TK), lb_loss)
    torch.testing.assert_close(router_z_loss(logits_TE), z_loss)


# ----- losses ---------------------------------------------------------------------------------


def test_load_balancing_loss_is_one_when_balanced():
    num_experts, tokens = 4, 8  # two experts per token (experts_TK)
    logits_TE = torch.randn(tokens, num_experts)  # f uniform makes P irrelevant: E * sum P/E = 1
    experts_TK = torch.tensor([[t % num_experts, (t + 1) % num_experts] for t in range(tokens)])
    assert load_balancing_loss(logits_TE, experts_TK).item() == pytest.approx(1.0, rel=1e-6)


def test_load_balancing_loss_is_e_when_collapsed():
    num_experts = 8
    logits_TE = torch.zeros(10, num_experts)
    logits_TE[:, 3] = 100.0  # probability 1 on expert 3
    experts_TK = torch.full((10, 1), 3)
    assert load_balancing_loss(logits_TE, experts_TK).item() == pytest.approx(num_experts, rel=1e-6)


@pytest.mark.parametrize("num_experts,top_k", [(4, 1), (4, 2), (8, 2), (16, 4)])
def test_load_balancing_loss_matches_hf_divided_by_k(num_experts, top_k):
    # HF divides expert counts by T (not k*T), so its balanced score is k: ours = HF / k.
    torch.manual_seed(num_experts + top_k)
    logits_TE = torch.randn(64, num_experts) * 2
    experts_TK = route(logits_TE, top_k).experts_TK
    hf = load_balancing_loss_func((logits_TE,), num_experts=num_experts, top_k=top_k)
    ours = load_balancing_loss(logits_TE, experts_TK)
    assert ours.item() == pytest.approx(hf.item() / top_k, rel=1e-5)


def test_router_z_loss_by_hand():
    rows = [[0.0, 0.0], [1.0, 2.0], [-3.0, 5.0]]
    by_hand = sum(math.log(sum(math.exp(v) for v in row)) ** 2 for row in rows) / len(rows)
    assert router_z_loss(torch.tensor(rows)).item() == pytest.approx(by_hand, rel=1e-6)


def test_load_balancing_gradient_flows_through_probabilities_only():
    # L = E sum_i f_i mean_t p_ti with f a count: dL/dlogit_tj = (E/T) p_tj (f_j - sum_i f_i p_ti).
    tokens, num_experts = 6, 4
    logits_TE = torch.randn(tokens, num_experts, dtype=torch.float64, requires_grad=True)
    experts_TK = route(logits_TE, 2).experts_TK
    load_balancing_loss(logits_TE, experts_TK).backward()
    f_E = torch.tensor([float((experts_TK == e).sum()) for e in range(num_experts)]) / (2 * tokens)
    p_TE = torch.softmax(logits_TE.detach(), dim=-1)
    by_hand = num_experts / tokens * p_TE * (f_E - (p_TE * f_E).sum(-1, keepdim=True))
    torch.testing.assert_close(logits_TE.grad, by_hand.to(logits_TE.grad.dtype))


def test_balancing_loss_with_the_step_counts_averages_to_the_global_batch_loss():
    """global_batch: each micro batch's loss uses the counts of the whole step with its own
    probabilities; their mean is, in value and gradient, the textbook loss
    E * sum_i f_i P_i on the concatenated batch (f and P both over all tokens)."""
    num_experts, top_k, micro_batches, tokens = 4, 2, 4, 5
    torch.manual_seed(0)
    logits_TE = (torch.randn(micro_batches * tokens, num_experts) * 2
                 ).requires_grad_()
    experts_TK = route(logits_TE.detach(), top_k).experts_TK
    f_E = torch.tensor([float((experts_TK == e).sum()) for e in range(num_experts)]
                       ) / (top_k * micro_batches * tokens)
    textbook = num_experts * (f_E * torch.softmax(logits_TE, dim=-1).mean(dim=0)).sum()
    (grad_textbook,) = torch.autograd.grad(textbook, logits_TE)

    step_counts_E = torch.stack([(experts_TK == e).sum() for e in range(num_experts)])
    per_micro_batch = [route(chunk_TE, top_k, lb_slot_counts_E=step_counts_E).lb_loss
                       for chunk_TE in logits_TE.split(tokens)]
    global_loss = torch.stack(per_micro_batch).mean()
    (grad_global,) = torch.autograd.grad(global_loss, logits_TE)
    torch.testing.assert_close(global_loss, textbook)
    torch.testing.assert_close(grad_global, grad_textbook)

    # micro_batch (no counts given): the mean of per-micro-batch losses is another number
    micro_loss = torch.stack([route(chunk_TE, top_k).lb_loss
                              for chunk_TE in logits_TE.split(tokens)]).mean()
    assert abs(micro_loss.item() - textbook.item()) > 1e-3


# ----- aux-loss-free balancing (expert bias) --------------------------------------------------


@pytest.mark.parametrize("renormalize", [True, False])
def test_expert_bias_steers_the_choice_and_never_the_combine_weights(renormalize):
    torch.manual_seed(0)
    logits_TE = torch.randn(32, 4) * 2
    bias_E = torch.tensor([1.0, 0.0, -1.0, 0.05])  # expert 0 always in, expert 2 never
    routed = route(logits_TE, 2, renormalize, expert_bias_E=bias_E)
    probs_TE = torch.softmax(logits_TE, dim=-1)
    for t in range(32):
        by_score = sorted(range(4), key=lambda e: -(probs_TE[t, e] + bias_E[e]).item())[:2]
        assert routed.experts_TK[t].tolist() == by_score
        chosen = probs_TE[t, by_score]
        expected = chosen / chosen.sum() if renormalize else chosen
        torch.testing.assert_close(routed.weights_TK[t], expected)
    assert (routed.experts_TK == 0).any(dim=1).all() and not (routed.experts_TK == 2).any()
    # a zero bias routes exactly as no bias
    unbiased, zero = route(logits_TE, 2, renormalize), route(logits_TE, 2, renormalize,
                                                            expert_bias_E=torch.zeros(4))
    assert torch.equal(zero.experts_TK, unbiased.experts_TK)
    assert torch.equal(zero.weights_TK, unbiased.weights_TK)


@pytest.mark.parametrize("seed", [0, 1])
def test_bias_balancing_evens_out_a_skewed_router_within_100_steps(seed):
    """lb_coef plays no part: the router is frozen (init std 0.02) with expert 0 favoured (its
    row has a component along the inputs' mean), and only the bias updates, at the default rate
    0.001 on 1024 tokens a step, move the loads: from a busiest fraction above 0.4 (1/E = 0.25)
    to below 0.26 over steps 100..200 (loads summed over those steps: one step's 2048 slots
    alone scatter by about 0.02)."""
    cfg = ModelConfig(d_model=16, n_heads=2, n_kv_heads=2,
                      moe=MoEConfig(num_experts=4, top_k=2, d_expert=8, lb_coef=0.0,
                                    balance="bias"))
    assert cfg.moe.bias_update_rate == 0.001
    layer = random_layer(cfg, seed=seed)
    mean_D = torch.ones(16) / 4
    with torch.no_grad():
        torch.nn.init.normal_(layer.router.weight, std=0.02)
        layer.router.weight[0] += 0.5 * mean_D
    generator = torch.Generator().manual_seed(seed + 10)

    def step_loads(update: bool) -> torch.Tensor:
        x_TD = torch.randn(1024, 16, generator=generator) + mean_D
        counts_E = layer.route_tokens(x_TD).slot_counts_E
        if update:
            layer.update_expert_bias(counts_E)
        return counts_E

    def busiest(counts_E):
        return float(counts_E.max() / counts_E.sum())

    unbalanced = sum(step_loads(update=False) for _ in range(10))
    loads = [step_loads(update=True) for _ in range(200)]
    assert busiest(unbalanced) > 0.4 and busiest(loads[0]) > 0.4
    assert busiest(sum(loads[100:])) < 0.26
    assert float(layer.expert_bias[0]) < 0 < float(layer.expert_bias[1:].min())
    assert layer.router.weight.grad is None


def test_bias_update_is_the_sign_of_mean_minus_load():
    cfg = ModelConfig(d_model=16, n_heads=2, n_kv_heads=2,
                      moe=MoEConfig(num_experts=4, top_k=2, d_expert=8, balance="both",
                                    bias_update_rate=0.25))
    layer = MoEFeedForward(cfg)
    assert torch.equal(layer.expert_bias, torch.zeros(4))
    layer.update_expert_bias(torch.tensor([5, 3, 3, 1]))  # mean 3
    assert layer.expert_bias.tolist() == [-0.25, 0.0, 0.0, 0.25]
    assert "expert_bias" in layer.state_dict() and "expert_bias" not in dict(layer.named_parameters())
    assert "expert_bias" not in MoEFeedForward(moe_config()).state_dict()  # aux_loss: no buffer


# ----- routing statistics -----------------------------------------------------------------


def test_routing_stats_summary_by_hand():
    # 4 tokens, E = 4, k = 1: loads 3/4, 1/4, 0, 0.
    logits_TE = torch.tensor([
        [0.0, 0.0, 0.0, 0.0],          # uniform: entropy log 4 (tie -> expert 0)
        [math.log(3.0), 0.0, 0.0, 0.0],  # probs 1/2, 1/6, 1/6, 1/6
        [5.0, 0.0, 0.0, 0.0],
        [0.0, 2.0, 0.0, 0.0],
    ])
    experts_TK = torch.tensor([[0], [0], [0], [1]])
    summary = routing_stats(logits_TE, experts_TK).summary()

    def entropy(probs):
        return -sum(p * math.log(p) for p in probs if p > 0)

    def softmax(row):
        z = sum(math.exp(v) for v in row)
        return [math.exp(v) / z for v in row]

    rows = logits_TE.tolist()
    mean_entropy = sum(entropy(softmax(row)) for row in rows) / 4
    log_z = [math.log(sum(math.exp(v) for v in row)) for row in rows]
    loads = [0.75, 0.25, 0.0, 0.0]
    variance = sum((q - 0.25) ** 2 for q in loads) / 4  # population variance = 0.09375
    expected = {
        "busiest_fraction": 0.75,
        "usage_variance": variance,
        "usage_variance_scaled": 16 * variance,
        "routing_entropy": mean_entropy / math.log(4),
        "load_entropy": entropy(loads),
        "effective_experts": math.exp(entropy(loads)),
        "mean_log_z": sum(log_z) / 4,
        "mean_z_sq": sum(v * v for v in log_z) / 4,
        "dead_experts": 2,  # experts 2 and 3: load 0 < 1 % of the mean 1/4
        # Loads over the mean 1/4: 3, 1, 0, 0. MaxVio = 3 - 1; percentiles of the sorted
        # 0, 0, 1, 3 at positions 0.5 * 3 = 1.5 and 0.9 * 3 = 2.7, interpolated linearly.
        "max_violation": 2.0,
        "load_p50": 0.5,
        "load_p90": 1 + 0.7 * (3 - 1),
        "load_max": 3.0,
        "expert_load": loads,
    }
    assert set(summary) == set(expected)
    for key, value in expected.items():
        assert summary[key] == pytest.approx(value, rel=1e-5, abs=1e-7), key
    assert variance == pytest.approx(0.09375)


def test_routing_stats_merge_equals_stats_of_concatenation():
    torch.manual_seed(1)
    logits_a, logits_b = torch.randn(10, 8), torch.randn(7, 8)
    experts_a, experts_b = route(logits_a, 2).experts_TK, route(logits_b, 2).experts_TK
    merged = routing_stats(logits_a, experts_a).merge(routing_stats(logits_b, experts_b))
    whole = routing_stats(torch.cat([logits_a, logits_b]), torch.cat([experts_a, experts_b]))
    assert merged.num_tokens == 17
    assert merged.expert_counts.tolist() == whole.expert_counts.tolist()
    for key, value in whole.summary().items():
        assert merged.summary()[key] == pytest.approx(value, rel=1e-5), key


def test_balanced_and_collapsed_diagnostics():
    balanced = routing_stats(torch.zeros(8, 4), torch.tensor([[t % 4] for t in range(8)])).summary()
    assert balanced["busiest_fraction"] == pytest.approx(0.25)
    assert balanced["usage_variance_scaled"] == pytest.approx(0.0)
    assert balanced["effective_experts"] == pytest.approx(4.0)
    assert balanced["routing_entropy"] == pytest.approx(1.0)
    collapsed = routing_stats(torch.zeros(8, 4), torch.zeros(8, 1, dtype=torch.long)).summary()
    assert collapsed["busiest_fraction"] == 1.0
    assert collapsed["usage_variance_scaled"] == pytest.approx(4 - 1)  # E - 1
    assert collapsed["effective_experts"] == pytest.approx(1.0)
    assert (balanced["dead_experts"], collapsed["dead_experts"]) == (0, 3)


def test_dead_experts_are_those_under_one_percent_of_the_mean_load():
    # E = 4, mean load 1/4: 1 % of it is 1/400 = 0.0025 of the token-slots. 1000 slots: an
    # expert with 2 slots (0.002) is dead, one with 3 (0.003) is alive.
    counts = [995, 3, 2, 0]
    experts_TK = torch.tensor([[e] for e, c in enumerate(counts) for _ in range(c)])
    summary = routing_stats(torch.zeros(1000, 4), experts_TK).summary()
    assert summary["dead_experts"] == 2


# ----- experts implementations -------------------------------------------------------------


def _expert_inputs(tokens, num_experts, top_k, d_model=8, hidden=6, seed=0, idle=()):
    """Random inputs with a hand-made routing that never picks the experts in ``idle``."""
    gen = torch.Generator().manual_seed(seed)
    allowed = [e for e in range(num_experts) if e not in idle]
    experts_TK = torch.stack([
        torch.tensor(allowed)[torch.randperm(len(allowed), generator=gen)[:top_k]]
        for _ in range(tokens)
    ])
    tensors = dict(
        x_TD=torch.randn(tokens, d_model, generator=gen),
        weights_TK=torch.rand(tokens, top_k, generator=gen),
        w1_EHD=torch.randn(num_experts, hidden, d_model, generator=gen),
        w2_EDH=torch.randn(num_experts, d_model, hidden, generator=gen),
        w3_EHD=torch.randn(num_experts, hidden, d_model, generator=gen),
    )
    return experts_TK, {k: v.double().requires_grad_() for k, v in tensors.items()}


def _hand_loop(x_TD, weights_TK, experts_TK, w1_EHD, w2_EDH, w3_EHD):
    """Token by token, slot by slot: out_t = sum_j w_tj SwiGLU_{e_tj}(x_t)."""
    rows = []
    for t in range(x_TD.shape[0]):
        out_D = torch.zeros_like(x_TD[t])
        for j, expert in enumerate(experts_TK[t].tolist()):
            hidden_H = F.silu(w1_EHD[expert] @ x_TD[t]) * (w3_EHD[expert] @ x_TD[t])
            out_D = out_D + weights_TK[t, j] * (w2_EDH[expert] @ hidden_H)
        rows.append(out_D)
    return torch.stack(rows)


def test_reference_loop_equals_token_by_token_sums():
    experts_TK, t = _expert_inputs(11, 6, 2, idle=(4,))
    args = (t["x_TD"], t["weights_TK"], experts_TK, t["w1_EHD"], t["w2_EDH"], t["w3_EHD"])
    torch.testing.assert_close(reference_experts_forward(*args), _hand_loop(*args),
                               rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("implementation", sorted(EXPERTS_IMPLEMENTATIONS))
@pytest.mark.parametrize("num_experts,top_k,idle", [
    (1, 1, ()), (4, 1, ()), (4, 2, (1,)), (8, 2, (0, 5, 7)), (8, 8, ()), (16, 3, (2, 3, 15)),
])
@pytest.mark.parametrize("with_counts", [False, True])
def test_every_experts_implementation_equals_reference_loop(implementation, num_experts, top_k,
                                                            idle, with_counts):
    # The registry's contract, forward and backward: with or without the slot counts given.
    experts_TK, fast = _expert_inputs(13, num_experts, top_k, idle=idle)
    _, slow = _expert_inputs(13, num_experts, top_k, idle=idle)
    counts_E = torch.bincount(experts_TK.flatten(), minlength=num_experts) if with_counts else None
    out_fast = EXPERTS_IMPLEMENTATIONS[implementation](
        fast["x_TD"], fast["weights_TK"], experts_TK, fast["w1_EHD"], fast["w2_EDH"],
        fast["w3_EHD"], counts_E)
    out_slow = reference_experts_forward(slow["x_TD"], slow["weights_TK"], experts_TK,
                                         slow["w1_EHD"], slow["w2_EDH"], slow["w3_EHD"])
    torch.testing.assert_close(out_fast, out_slow, rtol=1e-10, atol=1e-10)
    upstream = torch.randn_like(out_slow)
    (out_fast * upstream).sum().backward()
    (out_slow * upstream).sum().backward()
    for name in fast:
        torch.testing.assert_close(fast[name].grad, slow[name].grad, rtol=1e-10, atol=1e-10,
                                   msg=lambda m, name=name: f"{name}: {m}")
    for expert in idle:  # an expert with no tokens gets an exact zero gradient
        assert fast["w1_EHD"].grad[expert].abs().max() == 0
        assert fast["w2_EDH"].grad[expert].abs().max() == 0


@pytest.mark.parametrize("grouped_mm", [True, False])
def test_fp32_dispatch_equals_fp64_reference_with_and_without_grouped_mm(grouped_mm, monkeypatch):
    # fp32 on a CPU with 16-byte strides runs the expert loops as torch._grouped_mm; otherwise
    # (forced here) the Python loop. Both must match the fp64 reference loop, idle experts too.
    calls = []
    if grouped_mm:
        real = torch._grouped_mm
        monkeypatch.setattr(torch, "_grouped_mm", lambda *a, **k: calls.append(1) or real(*a, **k))
    else:
        monkeypatch.setattr(moelab.moe.kernels, "_grouped_mm_applies", lambda *operands: False)
    experts_TK, ref = _expert_inputs(37, 8, 2, d_model=8, hidden=12, idle=(0, 5, 7))
    fp32 = {k: v.detach().float().requires_grad_() for k, v in ref.items()}
    args = ("x_TD", "weights_TK")
    out_ref = reference_experts_forward(*(ref[a] for a in args), experts_TK,
                                        ref["w1_EHD"], ref["w2_EDH"], ref["w3_EHD"])
    out = sorted_experts_forward(*(fp32[a] for a in args), experts_TK,
                                 fp32["w1_EHD"], fp32["w2_EDH"], fp32["w3_EHD"])
    torch.testing.assert_close(out.double(), out_ref, rtol=1e-5, atol=1e-5)
    upstream = torch.randn_like(out_ref)
    (out_ref * upstream).sum().backward()
    (out * upstream.float()).sum().backward()
    for name in ref:
        torch.testing.assert_close(fp32[name].grad.double(), ref[name].grad, rtol=1e-4, atol=1e-4,
                                   msg=lambda m, name=name: f"{name}: {m}")
    for expert in (0, 5, 7):
        assert fp32["w1_EHD"].grad[expert].abs().max() == 0
        assert fp32["w2_EDH"].grad[expert].abs().max() == 0
    assert len(calls) == (9 if grouped_mm else 0)  # products: 3 forward, 3 backward; 3 outer


def test_dispatch_falls_back_to_the_loop_where_torch_has_no_cpu_grouped_mm(monkeypatch):
    # grouped_mm is private API (absent or CUDA-only in older torch): probed once, then the loop.
    monkeypatch.delattr(torch, "_grouped_mm")
    moelab.moe.kernels._cpu_grouped_mm_works.cache_clear()
    try:
        assert not moelab.moe.kernels._cpu_grouped_mm_works()
        experts_TK, t = _expert_inputs(9, 4, 2, d_model=8, hidden=8, idle=(3,))
        args = [t[name].detach().float() for name in ("x_TD", "weights_TK")]
        weights = [t[name].detach().float() for name in ("w1_EHD", "w2_EDH", "w3_EHD")]
        torch.testing.assert_close(sorted_experts_forward(*args, experts_TK, *weights),
                                   reference_experts_forward(*args, experts_TK, *weights))
    finally:
        moelab.moe.kernels._cpu_grouped_mm_works.cache_clear()


def test_sorted_dispatch_passes_gradcheck():
    experts_TK, t = _expert_inputs(5, 4, 2, d_model=3, hidden=2, idle=(2,))
    inputs = (t["x_TD"], t["weights_TK"], experts_TK, t["w1_EHD"], t["w2_EDH"], t["w3_EHD"])
    assert torch.autograd.gradcheck(sorted_experts_forward, inputs)


def test_expert_layout_by_hand():
    # slots (t*k + j): experts [2, 0, 2, 1, 2, 0] -> stable sort: expert 0 {1, 5}, 1 {3}, 2 {0, 2, 4}
    experts_TK = torch.tensor([[2, 0], [2, 1], [2, 0]])
    layout = expert_layout(experts_TK, num_experts=4)
    assert layout.slots_per_expert.tolist() == [2, 1, 3, 0]
    assert layout.slot_of_row_R.tolist() == [1, 5, 3, 0, 2, 4]
    assert layout.row_of_slot_S.tolist() == [3, 0, 4, 2, 5, 1]
    assert layout.token_of_row_R.tolist() == [0, 2, 1, 0, 1, 2]


@pytest.mark.parametrize("num_experts,top_k", [(4, 2), (8, 1), (8, 3)])
def test_layer_sorted_equals_reference_in_forward_and_gradients(num_experts, top_k):
    cfg = moe_config(num_experts, top_k)
    fast, slow = random_layer(cfg, "sorted"), random_layer(cfg, "reference")
    x_BTD = torch.randn(3, 7, cfg.d_model)
    out_fast, aux_fast = fast(x_BTD)
    out_slow, aux_slow = slow(x_BTD)
    torch.testing.assert_close(out_fast, out_slow, rtol=1e-5, atol=1e-6)
    (out_fast.square().sum() + aux_fast.lb_loss + aux_fast.z_loss).backward()
    (out_slow.square().sum() + aux_slow.lb_loss + aux_slow.z_loss).backward()
    for (name, p_fast), (_, p_slow) in zip(fast.named_parameters(), slow.named_parameters()):
        torch.testing.assert_close(p_fast.grad, p_slow.grad, rtol=1e-4, atol=1e-5, msg=name)


def test_k_equals_e_with_identical_experts_is_a_dense_ffn():
    cfg = moe_config(num_experts=4, top_k=4)
    layer = random_layer(cfg)
    dense = FeedForward(cfg.d_model, cfg.moe.d_expert)
    with torch.no_grad():
        for name in ("w1", "w2", "w3"):
            getattr(layer, name).copy_(getattr(dense, name).weight.expand_as(getattr(layer, name)))
    x_BTD = torch.randn(2, 5, cfg.d_model)
    out, _ = layer(x_BTD)
    torch.testing.assert_close(out, dense(x_BTD)[0], rtol=1e-5, atol=1e-6)


def test_shared_experts_add_a_dense_ffn_on_every_token():
    # The seam for shared experts: any module with the FFN signature, added to the routed
    # output, its parameters registered, initialised by the layer.
    cfg = moe_config(num_experts=4, top_k=2)
    layer = random_layer(cfg)
    x_BTD = torch.randn(2, 5, cfg.d_model)
    routed_BTD, aux = layer(x_BTD)
    shared = FeedForward(cfg.d_model, 20)
    layer.shared_experts = shared
    out_BTD, aux_with_shared = layer(x_BTD)
    torch.testing.assert_close(out_BTD, routed_BTD + shared(x_BTD)[0])
    torch.testing.assert_close(aux_with_shared.lb_loss, aux.lb_loss)
    assert {"shared_experts.w1.weight", "shared_experts.w2.weight"} <= set(dict(layer.named_parameters()))
    layer.init_weights(std=1.0, residual_std=0.0)
    assert shared.w2.weight.abs().max() == 0 and layer.w2.abs().max() == 0
    assert shared.w1.weight.std().item() == pytest.approx(1.0, rel=0.2)


def test_gradients_reach_router_and_every_used_expert():
    cfg = moe_config(num_experts=8, top_k=2)
    layer = random_layer(cfg)
    x_BTD = torch.randn(4, 6, cfg.d_model).abs()  # positive inputs, so experts 6 and 7 with
    with torch.no_grad():                          # very negative router rows never win
        layer.router.weight[6:] = -50.0
    out, aux = layer(x_BTD)
    out.square().sum().backward()
    used = set(torch.nonzero(aux.routing.expert_counts).flatten().tolist())
    assert used and used.isdisjoint({6, 7})
    assert layer.router.weight.grad.abs().sum() > 0
    for expert in range(8):
        got_gradient = all(getattr(layer, w).grad[expert].abs().sum() > 0 for w in ("w1", "w2", "w3"))
        assert got_gradient == (expert in used), expert


def test_no_token_is_dropped_under_collapse():
    # Every token on expert 0: a capacity-based router would drop most; dropless keeps all.
    cfg = moe_config(num_experts=4, top_k=1)
    layer = random_layer(cfg)
    x_BTD = torch.randn(2, 9, cfg.d_model).abs()  # positive inputs ...
    with torch.no_grad():
        layer.router.weight.zero_()
        layer.router.weight[0] = 10.0  # ... so expert 0's logit always wins
    out, aux = layer(x_BTD)
    assert aux.routing.expert_counts.tolist() == [18, 0, 0, 0]
    x_TD = x_BTD.reshape(-1, cfg.d_model)
    expert0 = (F.silu(x_TD @ layer.w1[0].T) * (x_TD @ layer.w3[0].T)) @ layer.w2[0].T
    torch.testing.assert_close(out.reshape(-1, cfg.d_model), expert0, rtol=1e-5, atol=1e-6)


def test_autocast_bfloat16_runs_and_keeps_fp32_gradients():
    cfg = moe_config(num_experts=4, top_k=2)
    layer = random_layer(cfg)
    x_BTD = torch.randn(2, 8, cfg.d_model, requires_grad=True)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out, aux = layer(x_BTD)
    reference, _ = random_layer(cfg, "reference")(x_BTD.detach())
    assert out.dtype == torch.bfloat16
    torch.testing.assert_close(out.float(), reference, rtol=0.05, atol=0.05)
    out.float().square().sum().backward()
    assert all(p.grad.dtype == torch.float32 for p in layer.parameters())
    assert x_BTD.grad.dtype == torch.float32


def test_bad_experts_implementation_name_is_a_moelab_error():
    with pytest.raises(MoelabError, match="experts_implementation='fast'"):
        MoEFeedForward(moe_config(), experts_implementation="fast")


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_expert_loops_cut_rows_into_few_shapes_in_bf16_and_stay_exact(dtype):
    # bf16 on a CPU: every expert's rows are cut into whole 64-row blocks and a remainder, so the
    # matmul shapes stay few whatever the routing; the results must not change. fp32: one piece.
    counts = [0, 130, 64, 7, 200]
    for start, count in zip([0, 0, 130, 194, 201], counts):
        pieces = _row_pieces(start, count, bounded_shapes=dtype == torch.bfloat16)
        assert sum(rows for _, rows in pieces) == count and all(rows for _, rows in pieces)
        firsts = [start + sum(rows for _, rows in pieces[:i]) for i in range(len(pieces))]
        assert [first for first, _ in pieces] == firsts
        if dtype == torch.bfloat16:
            assert all(rows % ROW_BLOCK == 0 or rows < ROW_BLOCK for _, rows in pieces)
        else:
            assert len(pieces) == min(count, 1)
    generator = torch.Generator().manual_seed(0)
    rows_RA = torch.randn(sum(counts), 16, generator=generator).to(dtype)
    right_RB = torch.randn(sum(counts), 8, generator=generator).to(dtype)
    matrices_EAB = torch.randn(len(counts), 16, 8, generator=generator).to(dtype)
    slots = torch.tensor(counts)
    products = segment_matmul(rows_RA, matrices_EAB, slots)
    outer = segment_outer_products(rows_RA, right_RB, slots)
    _assert_blocks_match_fp64(products, outer, [rows_RA], [matrices_EAB], right_RB, counts,
                              tol=dict(rtol=2e-2, atol=2e-2), outer_tol=dict(rtol=2e-2, atol=5e-2))
    assert outer[0].abs().sum() == 0  # the expert without rows


def _assert_blocks_match_fp64(products, outer, rows, matrices, right_RB, counts, tol, outer_tol=None):
    """Reference in fp64, expert by expert: ``products`` = sum_i rows[i] @ matrices[i] on each
    expert's block of rows, ``outer`` = rows[0].T @ right_RB on it."""
    start = 0
    for expert, count in enumerate(counts):
        block = slice(start, start + count)
        want = sum(r[block].double() @ m[expert].double() for r, m in zip(rows, matrices))
        torch.testing.assert_close(products[block].double(), want, **tol)
        want_outer = rows[0][block].double().T @ right_RB[block].double()
        torch.testing.assert_close(outer[expert].double(), want_outer, **(outer_tol or tol))
        start += count


@pytest.mark.slow
def test_expert_loop_custom_ops_pass_opcheck_and_equal_per_expert_products():
    # What torch.compile sees of the expert loops: ops whose schema, fake (shape-only) kernel and
    # autograd registration must agree with what they do (opcheck), and whose values must be each
    # expert's block products, computed here in fp64. An idle expert (count 0) is included.
    generator = torch.Generator().manual_seed(0)
    counts = [10, 0, 30, 24]
    slots = torch.tensor(counts)
    rows_RA = torch.randn(64, 8, generator=generator)
    other_RA = torch.randn(64, 8, generator=generator)
    right_RB = torch.randn(64, 12, generator=generator)
    matrices_EAB = torch.randn(4, 8, 12, generator=generator)
    other_EAB = torch.randn(4, 8, 12, generator=generator)
    matmul_args = ([rows_RA, other_RA], [matrices_EAB, other_EAB], slots)
    outer_args = (rows_RA, right_RB, slots)
    for op, args in ((torch.ops.moelab.segment_matmul.default, matmul_args),
                     (torch.ops.moelab.segment_outer_products.default, outer_args)):
        results = torch.library.opcheck(op, args)
        assert set(results.values()) == {"SUCCESS"}, results
    products = torch.ops.moelab.segment_matmul.default(*matmul_args)
    outer = torch.ops.moelab.segment_outer_products.default(*outer_args)
    _assert_blocks_match_fp64(products, outer, *matmul_args[:2], right_RB, counts,
                              tol=dict(rtol=1e-5, atol=1e-5))
    assert outer[1].abs().sum() == 0  # the idle expert


def test_shared_expert_settings_are_checked():
    with pytest.raises(ConfigError, match=r"model.moe.num_shared_experts=-1 is invalid: must be >= 0"):
        load_config("demo", ["model.moe.num_shared_experts=-1"])
    with pytest.raises(ConfigError, match=r"model.moe.d_shared=0 is invalid: must be > 0"):
        load_config("demo", ["model.moe.d_shared=0"])
    moe = load_config("demo", ["model.moe.num_shared_experts=2"]).model.moe
    assert moe.shared_hidden == 2 * moe.d_expert  # d_shared null: d_expert each


@pytest.mark.parametrize("width", [6, 12])
def test_expert_loop_custom_ops_return_the_contiguous_layout_their_fake_kernels_promise(width):
    # torch._grouped_mm pads an output row to 16 bytes (a 6-wide fp32 row gets stride 8); the
    # compiled graph allocates by the fake kernel's contiguous layout and asserts the real
    # strides match, so a d_expert of 6 (16 experts of a 96-wide FFN) failed to train compiled.
    generator = torch.Generator().manual_seed(0)
    counts = [10, 0, 30, 24]
    slots = torch.tensor(counts)
    rows_RA = torch.randn(64, 8, generator=generator)
    # transposed, as the layer passes its expert weights (w1.transpose(1, 2))
    matrices_EAB = torch.randn(4, width, 8, generator=generator).transpose(1, 2)
    right_RB = torch.randn(64, width, generator=generator)
    products = torch.ops.moelab.segment_matmul.default([rows_RA], [matrices_EAB], slots)
    outer = torch.ops.moelab.segment_outer_products.default(rows_RA, right_RB, slots)
    assert products.shape == (64, width) and products.is_contiguous()
    assert outer.shape == (4, 8, width) and outer.is_contiguous()
    results = torch.library.opcheck(torch.ops.moelab.segment_matmul.default,
                                    ([rows_RA], [matrices_EAB], slots))
    assert set(results.values()) == {"SUCCESS"}, results
