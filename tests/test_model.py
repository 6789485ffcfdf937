"""The decoder against Hugging Face's LlamaForCausalLM / MixtralForCausalLM with copied weights,
plus causality, init, loss composition and parameter names."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from transformers import LlamaConfig, LlamaForCausalLM, MixtralConfig, MixtralForCausalLM
from transformers.models.mixtral.modeling_mixtral import load_balancing_loss_func

from moelab.config import ModelConfig, MoEConfig
from moelab.errors import MoelabError
from moelab.model import Transformer


def tiny_config(moe: MoEConfig | None = None, **changes) -> ModelConfig:
    base = dict(vocab_size=97, d_model=32, n_layers=2, n_heads=4, n_kv_heads=2, d_ff=40,
                max_seq_len=24, tie_embeddings=True, rope_theta=500.0, norm_eps=1e-5, moe=moe)
    base.update(changes)
    return ModelConfig(**base)


def build(cfg: ModelConfig, seed: int = 0, experts_implementation: str = "sorted") -> Transformer:
    torch.manual_seed(seed)
    model = Transformer(cfg, experts_implementation)
    with torch.no_grad():  # bigger weights than the init, so any mismatch shows in the logits
        for name, param in model.named_parameters():
            if not name.endswith("norm.weight"):
                param.normal_(0.0, 0.2)
            else:
                param.uniform_(0.5, 1.5)
    return model.eval()


def hf_common(cfg: ModelConfig) -> dict:
    return dict(
        vocab_size=cfg.vocab_size, hidden_size=cfg.d_model, num_hidden_layers=cfg.n_layers,
        num_attention_heads=cfg.n_heads, num_key_value_heads=cfg.n_kv_heads,
        max_position_embeddings=cfg.max_seq_len, rms_norm_eps=cfg.norm_eps,
        rope_parameters={"rope_type": "default", "rope_theta": cfg.rope_theta},
        tie_word_embeddings=cfg.tie_embeddings, attn_implementation="eager",
    )


def copy_attention_and_norms(ours: Transformer, hf_model) -> None:
    """Our LLaMA names -> Hugging Face names; the FFN is copied by the caller."""
    hf = hf_model.model
    hf.embed_tokens.weight.copy_(ours.tok_embeddings.weight)
    hf.norm.weight.copy_(ours.norm.weight)
    if ours.output is not None:
        hf_model.lm_head.weight.copy_(ours.output.weight)
    for layer, hf_layer in zip(ours.layers, hf.layers):
        for mine, theirs in (("wq", "q_proj"), ("wk", "k_proj"), ("wv", "v_proj"), ("wo", "o_proj")):
            getattr(hf_layer.self_attn, theirs).weight.copy_(getattr(layer.attention, mine).weight)
        hf_layer.input_layernorm.weight.copy_(layer.attention_norm.weight)
        hf_layer.post_attention_layernorm.weight.copy_(layer.ffn_norm.weight)


@torch.no_grad()
def to_llama(ours: Transformer) -> LlamaForCausalLM:
    cfg = ours.cfg
    hf_model = LlamaForCausalLM(LlamaConfig(
        intermediate_size=cfg.d_ff, attention_bias=False, mlp_bias=False, **hf_common(cfg)))
    copy_attention_and_norms(ours, hf_model)
    for layer, hf_layer in zip(ours.layers, hf_model.model.layers):
        hf_layer.mlp.gate_proj.weight.copy_(layer.feed_forward.w1.weight)
        hf_layer.mlp.up_proj.weight.copy_(layer.feed_forward.w3.weight)
        hf_layer.mlp.down_proj.weight.copy_(layer.feed_forward.w2.weight)
    return hf_model.eval()


@torch.no_grad()
def to_mixtral(ours: Transformer) -> MixtralForCausalLM:
    cfg = ours.cfg
    hf_model = MixtralForCausalLM(MixtralConfig(
        intermediate_size=cfg.moe.d_expert, num_local_experts=cfg.moe.num_experts,
        num_experts_per_tok=cfg.moe.top_k, router_aux_loss_coef=cfg.moe.lb_coef,
        output_router_logits=True, experts_implementation="eager", **hf_common(cfg)))
    copy_attention_and_norms(ours, hf_model)
    for layer, hf_layer in zip(ours.layers, hf_model.model.layers):
        ffn = layer.feed_forward
        hf_layer.mlp.gate.weight.copy_(ffn.router.weight)
        hf_layer.mlp.experts.gate_up_proj.copy_(torch.cat([ffn.w1, ffn.w3], dim=1))
        hf_layer.mlp.experts.down_proj.copy_(ffn.w2)
    return hf_model.eval()


def random_tokens(cfg: ModelConfig, batch=3, seq=None, seed=1) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    return torch.randint(0, cfg.vocab_size, (batch, seq or cfg.max_seq_len), generator=gen)


# ----- against Hugging Face ---------------------------------------------------------------


@pytest.mark.parametrize("changes", [
    dict(tie_embeddings=True),
    dict(tie_embeddings=False),
    dict(n_kv_heads=4),                 # plain multi-head
    dict(n_kv_heads=1, n_layers=3),     # multi-query
])
def test_dense_logits_equal_llama(changes):
    ours = build(tiny_config(**changes))
    hf_model = to_llama(ours)
    tokens = random_tokens(ours.cfg)
    with torch.no_grad():
        torch.testing.assert_close(ours(tokens).logits, hf_model(tokens).logits,
                                   rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("num_experts,top_k,tie", [(4, 2, True), (8, 2, False), (4, 1, True)])
def test_moe_logits_equal_mixtral(num_experts, top_k, tie):
    # Mixtral renormalises even a single weight (to 1): say so for top-1 (moelab's default
    # there is Switch's raw probability).
    cfg = tiny_config(MoEConfig(num_experts=num_experts, top_k=top_k, d_expert=24,
                                norm_topk_prob=True), tie_embeddings=tie)
    ours = build(cfg)
    hf_model = to_mixtral(ours)
    tokens = random_tokens(cfg)
    with torch.no_grad():
        torch.testing.assert_close(ours(tokens).logits, hf_model(tokens).logits,
                                   rtol=1e-4, atol=1e-4)


def test_one_layer_lb_loss_is_hf_aux_loss_over_k():
    # With one layer HF pools nothing; its aux_loss counts slots per token (balanced = k).
    cfg = tiny_config(MoEConfig(num_experts=4, top_k=2, d_expert=24), n_layers=1)
    ours = build(cfg)
    hf_model = to_mixtral(ours)
    tokens = random_tokens(cfg)
    with torch.no_grad():
        hf_aux = hf_model(tokens).aux_loss
        lb_loss = ours(tokens).lb_loss
    assert lb_loss.item() == pytest.approx(hf_aux.item() / 2, rel=1e-5)


# ----- behaviour ----------------------------------------------------------------------------


@pytest.mark.parametrize("moe", [None, MoEConfig(num_experts=4, top_k=2, d_expert=24)])
def test_changing_a_future_token_leaves_earlier_logits_unchanged(moe):
    model = build(tiny_config(moe))
    tokens = random_tokens(model.cfg, batch=2)
    changed = tokens.clone()
    changed[:, 15] = (changed[:, 15] + 1) % model.cfg.vocab_size
    with torch.no_grad():
        before, after = model(tokens).logits, model(changed).logits
    torch.testing.assert_close(before[:, :15], after[:, :15], rtol=0, atol=0)
    assert (before[:, 15:] - after[:, 15:]).abs().max() > 1e-3  # the change is visible later


def swiglu(x, w1, w2, w3):
    """Hand SwiGLU with nn.Linear-laid-out weights: w2 (silu(w1 x) * w3 x)."""
    return (F.silu(x @ w1.T) * (x @ w3.T)) @ w2.T


def test_shared_experts_add_each_shared_swiglu_to_the_routed_output():
    # Reference: the same layer without shared experts (its routed output), plus two separate
    # SwiGLU experts of d_shared = 6 computed by hand from the halves of the fused weights.
    moe = MoEConfig(num_experts=4, top_k=2, d_expert=16, num_shared_experts=2, d_shared=6)
    model = build(tiny_config(moe))
    layer = model.layers[0].feed_forward
    shared = layer.shared_experts
    assert tuple(shared.w1.weight.shape) == (12, 32) and tuple(shared.w2.weight.shape) == (32, 12)
    x_BTD = torch.randn(2, 5, 32)
    with torch.no_grad():
        y_BTD, aux = layer(x_BTD)
        layer.shared_experts = None
        routed_BTD, routed_aux = layer(x_BTD)
        layer.shared_experts = shared
        by_hand = routed_BTD + sum(
            swiglu(x_BTD, shared.w1.weight[h], shared.w2.weight[:, h], shared.w3.weight[h])
            for h in (slice(0, 6), slice(6, 12)))
    torch.testing.assert_close(y_BTD, by_hand, rtol=1e-5, atol=1e-5)
    assert torch.equal(aux.slot_counts_E, routed_aux.slot_counts_E)  # routing is untouched
    assert (shared(x_BTD)[0].abs().max() > 1e-2)  # the shared part is not negligible


def test_no_shared_experts_leave_the_model_as_before():
    moe = MoEConfig(num_experts=4, top_k=2, d_expert=16)
    names = [name for name, _ in Transformer(tiny_config(moe)).named_parameters()]
    assert not any("shared" in name for name in names)
    assert Transformer(tiny_config(moe)).layers[0].feed_forward.shared_experts is None


@pytest.mark.parametrize("moe", [MoEConfig(num_experts=4, top_k=2, d_expert=256), None,
                                 MoEConfig(num_experts=4, top_k=2, d_expert=256,
                                           num_shared_experts=1)])
def test_init_follows_the_spec(moe):
    cfg = ModelConfig(vocab_size=512, d_model=128, n_layers=4, n_heads=4, n_kv_heads=4, d_ff=512,
                      tie_embeddings=False, moe=moe)
    torch.manual_seed(0)
    params = dict(Transformer(cfg).named_parameters())
    residual_std = 0.02 / math.sqrt(2 * 4)
    residual = ("attention.wo.weight", "feed_forward.w2", "feed_forward.w2.weight",
                "shared_experts.w2.weight")
    shared = 1 if moe is not None and moe.num_shared_experts else 0
    assert sum(name.endswith(residual) for name in params) == (2 + shared) * 4
    for name, param in params.items():
        if name.endswith("norm.weight"):
            assert torch.all(param == 1.0), name
            continue
        expected_std = residual_std if name.endswith(residual) else 0.02
        # 5 standard errors of a sample std / mean of n normal draws
        n = param.numel()
        assert param.std().item() == pytest.approx(expected_std, rel=5 / math.sqrt(2 * n)), name
        assert abs(param.mean().item()) < 5 * expected_std / math.sqrt(n), name


def test_same_seed_same_model_same_loss():
    cfg = tiny_config(MoEConfig(num_experts=4, top_k=2, d_expert=24))
    tokens = random_tokens(cfg)
    losses = []
    for _ in range(2):
        torch.manual_seed(7)
        losses.append(Transformer(cfg)(tokens[:, :-1], tokens[:, 1:]).loss.item())
    assert losses[0] == losses[1]


def test_loss_is_cross_entropy_plus_weighted_aux_losses():
    moe = MoEConfig(num_experts=4, top_k=2, d_expert=24, lb_coef=0.5, z_coef=0.25)
    model = build(tiny_config(moe))
    tokens = random_tokens(model.cfg, seq=9)
    out = model(tokens[:, :-1], tokens[:, 1:])
    assert out.logits is None  # the head and the loss ran fused
    logits = model(tokens[:, :-1]).logits.reshape(-1, model.cfg.vocab_size)
    log_probs = logits - logits.logsumexp(-1, keepdim=True)
    by_hand_ce = -log_probs.gather(1, tokens[:, 1:].reshape(-1, 1)).mean()
    torch.testing.assert_close(out.ce_loss, by_hand_ce)
    torch.testing.assert_close(out.loss, by_hand_ce + 0.5 * out.lb_loss + 0.25 * out.z_loss)
    assert len(out.routing) == model.cfg.n_layers


def test_aux_losses_are_the_mean_over_layers_of_each_layers_loss():
    # Each layer's balancing loss from Hugging Face's function (one layer: k x ours) and its
    # z-loss by hand, from the router logits recomputed from the layer's captured input.
    cfg = tiny_config(MoEConfig(num_experts=4, top_k=2, d_expert=24), n_layers=3)
    model = build(cfg)
    inputs = []
    for layer in model.layers:
        layer.feed_forward.register_forward_pre_hook(lambda module, args: inputs.append(args[0]))
    tokens = random_tokens(cfg, seq=9)
    with torch.no_grad():
        out = model(tokens[:, :-1], tokens[:, 1:])
        lb, z = [], []
        for layer, x_BTD in zip(model.layers, inputs):
            logits_TE = x_BTD.reshape(-1, cfg.d_model) @ layer.feed_forward.router.weight.T
            lb.append(load_balancing_loss_func((logits_TE,), 4, 2) / 2)
            z.append((logits_TE.exp().sum(-1).log() ** 2).mean())
    assert len(inputs) == 3
    torch.testing.assert_close(out.lb_loss, torch.stack(lb).mean())
    torch.testing.assert_close(out.z_loss, torch.stack(z).mean())


def test_skipping_routing_stats_changes_nothing_else():
    # Training skips the statistics; the losses and gradients must not depend on that.
    model = build(tiny_config(MoEConfig(num_experts=4, top_k=2, d_expert=24)))
    tokens = random_tokens(model.cfg, seq=9)
    grads = []
    for collect in (True, False):
        model.zero_grad(set_to_none=True)
        out = model(tokens[:, :-1], tokens[:, 1:], collect_routing=collect)
        out.loss.backward()
        grads.append([p.grad.clone() for p in model.parameters()])
        assert len(out.routing) == (model.cfg.n_layers if collect else 0)
        if collect:
            with_stats = out
    torch.testing.assert_close(out.loss, with_stats.loss, rtol=0, atol=0)
    for with_grad, without_grad in zip(*grads):
        torch.testing.assert_close(with_grad, without_grad, rtol=0, atol=0)


def test_dense_output_has_zero_aux_and_no_routing():
    model = build(tiny_config())
    tokens = random_tokens(model.cfg, seq=8)
    out = model(tokens)
    assert out.loss is None and out.ce_loss is None
    assert out.lb_loss.item() == 0.0 and out.z_loss.item() == 0.0 and out.routing == []
    assert out.logits.shape == (3, 8, model.cfg.vocab_size)


def test_parameter_names_are_llama_style():
    cfg = tiny_config(MoEConfig(num_experts=4, top_k=2, d_expert=24), n_layers=1,
                      tie_embeddings=False)
    expected = {
        "tok_embeddings.weight", "norm.weight", "output.weight",
        "layers.0.attention.wq.weight", "layers.0.attention.wk.weight",
        "layers.0.attention.wv.weight", "layers.0.attention.wo.weight",
        "layers.0.attention_norm.weight", "layers.0.ffn_norm.weight",
        "layers.0.feed_forward.router.weight", "layers.0.feed_forward.w1",
        "layers.0.feed_forward.w2", "layers.0.feed_forward.w3",
    }
    model = Transformer(cfg)
    assert set(model.state_dict()) == expected
    assert model.layers[0].feed_forward.w1.shape == (4, 24, 32)
    assert model.layers[0].feed_forward.w2.shape == (4, 32, 24)
    dense = Transformer(tiny_config(n_layers=1))
    assert {n for n in dense.state_dict() if "feed_forward" in n} == {
        "layers.0.feed_forward.w1.weight", "layers.0.feed_forward.w2.weight",
        "layers.0.feed_forward.w3.weight"}
    assert "output.weight" not in dense.state_dict()  # tied head


def test_too_long_sequence_is_a_moelab_error():
    model = Transformer(tiny_config())
    with pytest.raises(MoelabError, match="sequence length 25"):
        model(torch.zeros(1, 25, dtype=torch.long))


@pytest.mark.parametrize("tie", [True, False])
def test_logit_scale_multiplies_the_logits_and_the_loss_sees_them(tie):
    scale = 0.125
    scaled = build(tiny_config(tie_embeddings=tie, logit_scale=scale))
    plain = Transformer(tiny_config(tie_embeddings=tie)).eval()
    plain.load_state_dict(scaled.state_dict())
    tokens = random_tokens(scaled.cfg, seq=8)
    with torch.no_grad():
        torch.testing.assert_close(scaled(tokens).logits, scale * plain(tokens).logits)
        targets = torch.roll(tokens, -1, dims=1)
        expected = F.cross_entropy((scale * plain(tokens).logits).flatten(0, 1), targets.flatten())
        torch.testing.assert_close(scaled(tokens, targets).ce_loss, expected)


def test_embedding_init_std_sets_only_the_embedding():
    torch.manual_seed(0)
    model = Transformer(tiny_config(vocab_size=2000, d_model=64, embedding_init_std=1.0))
    assert model.tok_embeddings.weight.std().item() == pytest.approx(1.0, rel=0.02)
    assert model.layers[0].attention.wq.weight.std().item() == pytest.approx(0.02, rel=0.05)
    torch.manual_seed(0)
    default = Transformer(tiny_config(vocab_size=2000, d_model=64))  # null: init_std
    assert default.tok_embeddings.weight.std().item() == pytest.approx(0.02, rel=0.02)
