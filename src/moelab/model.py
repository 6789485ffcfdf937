"""A LLaMA-style decoder whose FFN is dense SwiGLU or Mixtral-style routed experts.

Read top to bottom: RMSNorm, RoPE (plain functions), Attention, FeedForward, TransformerBlock,
Transformer. Parameter names follow LLaMA (``tok_embeddings``, ``layers.{i}.attention.wq``,
``layers.{i}.feed_forward.w1``, ``norm``, ``output``) and the maths follows Hugging Face's
``LlamaForCausalLM`` / ``MixtralForCausalLM`` exactly in fp32 (RMSNorm in fp32, rotate-half
RoPE), so weights port to them unchanged. (Under bf16 autocast moelab applies RoPE in fp32 and
Hugging Face in bf16, so the two then differ by bf16 rounding.) The model knows nothing of
files, logging or devices.

Shape suffixes: B batch, T sequence, D d_model, H heads, G kv heads, Dh head_dim, F d_ff,
V vocabulary.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional, cast

import torch
import torch.nn.functional as F
from torch import nn

from moelab.config import ModelConfig
from moelab.errors import MoelabError
from moelab.linear_cross_entropy import linear_cross_entropy
from moelab.moe import MoEFeedForward, RoutingStats


@dataclass
class ModelOutput:
    logits: Optional[torch.Tensor]
    """(B, T, V) next-token logits; None when the call gave targets (the loss is computed
    without materialising them)."""
    lb_loss: torch.Tensor
    """Switch load-balancing loss, mean over MoE layers, unweighted (0 for a dense model)."""
    z_loss: torch.Tensor
    """Router z-loss, mean over MoE layers, unweighted (0 for a dense model)."""
    routing: list[RoutingStats]
    """One RoutingStats per MoE layer; [] for a dense model."""
    slot_counts_LE: Optional[torch.Tensor] = None
    """(MoE layers, E) token-slots each MoE layer routed to each expert (no gradient); None
    for a dense model."""
    loss: Optional[torch.Tensor] = None
    """ce_loss + lb_coef * lb_loss + z_coef * z_loss (without the lb term under balance: bias);
    None without targets."""
    ce_loss: Optional[torch.Tensor] = None
    """Mean cross-entropy over all positions; None without targets."""


class RMSNorm(nn.Module):
    """x / rms(x) * weight, computed in fp32 (as LLaMA) and cast back."""

    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    @torch.no_grad()
    def init_weights(self) -> None:
        self.weight.fill_(1.0)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x_float = x.float()
        normed = x_float * torch.rsqrt(x_float.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * normed.type_as(x)


# ----- RoPE, Hugging Face rotate-half convention: dims (i, i + Dh/2) form a rotating pair -----


def rope_cos_sin(head_dim: int, max_seq_len: int, theta: float) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin tables, each (max_seq_len, head_dim), the two halves repeating."""
    inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.int64).float() / head_dim))
    angles_TF = torch.outer(torch.arange(max_seq_len).float(), inv_freq)
    angles_TDh = torch.cat([angles_TF, angles_TF], dim=-1)
    return angles_TDh.cos(), angles_TDh.sin()


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    first, second = x.chunk(2, dim=-1)
    return torch.cat([-second, first], dim=-1)


def apply_rope(x_BHTDh: torch.Tensor, cos_TDh: torch.Tensor, sin_TDh: torch.Tensor) -> torch.Tensor:
    return x_BHTDh * cos_TDh + rotate_half(x_BHTDh) * sin_TDh


class Attention(nn.Module):
    """Causal grouped-query self-attention (G kv heads shared by H/G query heads), no biases."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.n_heads, self.n_kv_heads, self.head_dim = cfg.n_heads, cfg.n_kv_heads, cfg.head_dim
        self.wq = nn.Linear(cfg.d_model, cfg.n_heads * cfg.head_dim, bias=False)
        self.wk = nn.Linear(cfg.d_model, cfg.n_kv_heads * cfg.head_dim, bias=False)
        self.wv = nn.Linear(cfg.d_model, cfg.n_kv_heads * cfg.head_dim, bias=False)
        self.wo = nn.Linear(cfg.n_heads * cfg.head_dim, cfg.d_model, bias=False)

    @torch.no_grad()
    def init_weights(self, std: float, residual_std: float) -> None:
        """N(0, std), except the output projection wo (it writes the residual stream):
        N(0, residual_std)."""
        for linear in (self.wq, self.wk, self.wv):
            nn.init.normal_(linear.weight, mean=0.0, std=std)
        nn.init.normal_(self.wo.weight, mean=0.0, std=residual_std)

    def forward(self, x_BTD: torch.Tensor, cos_TDh: torch.Tensor, sin_TDh: torch.Tensor) -> torch.Tensor:
        B, T, _ = x_BTD.shape
        q_BHTDh = self.wq(x_BTD).view(B, T, self.n_heads, self.head_dim).transpose(1, 2)
        k_BGTDh = self.wk(x_BTD).view(B, T, self.n_kv_heads, self.head_dim).transpose(1, 2)
        v_BGTDh = self.wv(x_BTD).view(B, T, self.n_kv_heads, self.head_dim).transpose(1, 2)
        q_BHTDh = apply_rope(q_BHTDh, cos_TDh, sin_TDh).to(v_BGTDh.dtype)
        k_BGTDh = apply_rope(k_BGTDh, cos_TDh, sin_TDh).to(v_BGTDh.dtype)
        out_BHTDh = F.scaled_dot_product_attention(
            q_BHTDh, k_BGTDh, v_BGTDh, is_causal=True,
            enable_gqa=self.n_kv_heads != self.n_heads,
        )
        return self.wo(out_BHTDh.transpose(1, 2).reshape(B, T, -1))


class FeedForward(nn.Module):
    """Dense SwiGLU: w2(silu(w1 x) * w3 x); w2 is the down projection."""

    def __init__(self, d_model: int, d_ff: int):
        super().__init__()
        self.w1 = nn.Linear(d_model, d_ff, bias=False)
        self.w2 = nn.Linear(d_ff, d_model, bias=False)
        self.w3 = nn.Linear(d_model, d_ff, bias=False)

    @torch.no_grad()
    def init_weights(self, std: float, residual_std: float) -> None:
        """N(0, std), except the down projection w2 (it writes the residual stream):
        N(0, residual_std)."""
        nn.init.normal_(self.w1.weight, mean=0.0, std=std)
        nn.init.normal_(self.w2.weight, mean=0.0, std=residual_std)
        nn.init.normal_(self.w3.weight, mean=0.0, std=std)

    def forward(self, x_BTD: torch.Tensor, collect_routing: bool = True,
                lb_slot_counts_E: Optional[torch.Tensor] = None) -> tuple[torch.Tensor, None]:
        """The output and no aux: the signature of ``MoEFeedForward`` (``collect_routing`` and
        ``lb_slot_counts_E`` mean nothing here)."""
        return self.w2(F.silu(self.w1(x_BTD)) * self.w3(x_BTD)), None


class TransformerBlock(nn.Module):
    """Pre-norm block: x + attn(norm(x)), then + ffn(norm(.)). The FFN is dense or MoE."""

    def __init__(self, cfg: ModelConfig, experts_implementation: str = "auto"):
        super().__init__()
        self.attention_norm = RMSNorm(cfg.d_model, cfg.norm_eps)
        self.attention = Attention(cfg)
        self.ffn_norm = RMSNorm(cfg.d_model, cfg.norm_eps)
        self.feed_forward: FeedForward | MoEFeedForward
        if cfg.moe is None:
            self.feed_forward = FeedForward(cfg.d_model, cfg.d_ff)
        else:
            # The shared experts as one SwiGLU (num_shared_experts of them side by side).
            shared = (FeedForward(cfg.d_model, cfg.moe.shared_hidden)
                      if cfg.moe.num_shared_experts else None)
            self.feed_forward = MoEFeedForward(cfg, experts_implementation, shared)

    def init_weights(self, std: float, residual_std: float) -> None:
        self.attention_norm.init_weights()
        self.attention.init_weights(std, residual_std)
        self.ffn_norm.init_weights()
        self.feed_forward.init_weights(std, residual_std)

    def forward(self, x_BTD, cos_TDh, sin_TDh, collect_routing: bool = True,
                lb_slot_counts_E: Optional[torch.Tensor] = None):
        """Returns the new residual stream and the FFN's aux (None when dense)."""
        h_BTD = x_BTD + self.attention(self.attention_norm(x_BTD), cos_TDh, sin_TDh)
        ffn_out_BTD, aux = self.feed_forward(self.ffn_norm(h_BTD), collect_routing,
                                             lb_slot_counts_E)
        return h_BTD + ffn_out_BTD, aux


def embed_tokens(tokens_BT: torch.Tensor, weight_VD: torch.Tensor) -> torch.Tensor:
    """``F.embedding``, whose CUDA backward waits for the host once more than 3,072 indices come
    in (it sorts them and reads the segment count back; a paper step has 32,768): off a CPU the
    gradient is an ``index_add_`` instead, which never syncs (on a GPU its fp32 atomics are not
    bitwise repeatable, nor is the rest of a GPU step). A CPU keeps ``F.embedding``, whose
    backward is that sum in that order."""
    if weight_VD.device.type != "cpu":
        return _SyncFreeEmbedding.apply(tokens_BT, weight_VD)
    return F.embedding(tokens_BT, weight_VD)


class _SyncFreeEmbedding(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tokens_BT, weight_VD):
        ctx.save_for_backward(tokens_BT)
        ctx.weight_shape = weight_VD.shape
        return F.embedding(tokens_BT, weight_VD)

    @staticmethod
    def backward(ctx, grad_BTD):
        (tokens_BT,) = ctx.saved_tensors
        # Summed in fp32 (or wider), as torch's embedding backward does for bf16 and fp16.
        sum_dtype = torch.promote_types(grad_BTD.dtype, torch.float32)
        grad_VD = grad_BTD.new_zeros(ctx.weight_shape, dtype=sum_dtype)
        grad_VD.index_add_(0, tokens_BT.reshape(-1),
                           grad_BTD.reshape(-1, grad_BTD.shape[-1]).to(sum_dtype))
        return None, grad_VD.to(grad_BTD.dtype)


class Transformer(nn.Module):
    """Token embeddings, n_layers blocks, final RMSNorm, output head (tied or untied).

    ``experts_implementation`` chooses how the MoE layers run their experts
    (``moelab.moe.EXPERTS_IMPLEMENTATIONS``): "auto" (the default: "grouped" on a GPU that runs
    it fast, else "sorted"), "sorted", "grouped" or "reference" (the plain loop, for tests).
    """

    rope_cos: torch.Tensor  # buffers (register_buffer), declared for the type checker
    rope_sin: torch.Tensor

    def __init__(self, cfg: ModelConfig, experts_implementation: str = "auto"):
        super().__init__()
        self.cfg = cfg
        self.tok_embeddings = nn.Embedding(cfg.vocab_size, cfg.d_model)
        self.layers = nn.ModuleList(TransformerBlock(cfg, experts_implementation)
                                    for _ in range(cfg.n_layers))
        self.norm = RMSNorm(cfg.d_model, cfg.norm_eps)
        self.output = None if cfg.tie_embeddings else nn.Linear(cfg.d_model, cfg.vocab_size, bias=False)
        cos_TDh, sin_TDh = rope_cos_sin(cfg.head_dim, cfg.max_seq_len, cfg.rope_theta)
        # Derived from the config, so not saved in checkpoints (persistent=False).
        self.register_buffer("rope_cos", cos_TDh, persistent=False)
        self.register_buffer("rope_sin", sin_TDh, persistent=False)
        self.reset_parameters()

    @torch.no_grad()
    def reset_parameters(self) -> None:
        """N(0, init_std) everywhere; the projections that write the residual stream (attention
        wo, FFN and expert w2) get init_std / sqrt(2 n_layers) so its variance does not grow
        with depth (GPT-2); the token embedding gets embedding_init_std; RMSNorm weights 1.
        Each module initialises its own parameters, given the two stds; the order (that of
        ``named_parameters``) fixes which random numbers each parameter gets."""
        std = self.cfg.init_std
        residual_std = std / math.sqrt(2 * self.cfg.n_layers)
        nn.init.normal_(self.tok_embeddings.weight, mean=0.0, std=self.cfg.embedding_init_std or std)
        for layer in cast(list[TransformerBlock], self.layers):
            layer.init_weights(std, residual_std)
        self.norm.init_weights()
        if self.output is not None:
            nn.init.normal_(self.output.weight, mean=0.0, std=std)

    def forward(self, tokens_BT: torch.Tensor, targets_BT: Optional[torch.Tensor] = None,
                collect_routing: bool = True,
                lb_slot_counts_LE: Optional[torch.Tensor] = None) -> ModelOutput:
        """Logits for every position, or, given targets, the losses instead (targets are the
        next tokens, already shifted: position t predicts targets_BT[:, t]). With targets the
        head and the cross-entropy run fused, chunk by chunk (``linear_cross_entropy``), and
        ``logits`` is None: call without targets for them. Training passes
        ``collect_routing=False``: it reads no routing statistics, so the MoE layers skip them
        (``routing`` is then []). ``lb_slot_counts_LE``: per MoE layer, the loads its balancing
        loss uses instead of this batch's own (global-batch balancing: the counts of the whole
        optimizer step, ``routing_counts`` summed over it)."""
        h_BTD, moe_aux = self._blocks(tokens_BT, collect_routing, lb_slot_counts_LE)
        h_BTD = self.norm(h_BTD)
        if self.cfg.logit_scale != 1.0:
            h_BTD = h_BTD * self.cfg.logit_scale  # scales the logits without forming them
        out = _output_with_aux(moe_aux, collect_routing, h_BTD.device)
        head_weight_VD = self.tok_embeddings.weight if self.output is None else self.output.weight
        if targets_BT is None:
            out.logits = F.linear(h_BTD, head_weight_VD)
            return out
        out.ce_loss = linear_cross_entropy(h_BTD.flatten(0, 1), head_weight_VD, targets_BT.flatten())
        out.loss = out.ce_loss
        moe = self.cfg.moe
        if moe is not None and moe.uses_aux_loss:
            out.loss = out.ce_loss + moe.lb_coef * out.lb_loss + moe.z_coef * out.z_loss
        elif moe is not None:  # balance: bias, the balancing loss is only reported
            out.loss = out.ce_loss + moe.z_coef * out.z_loss
        return out

    @torch.no_grad()
    def routing_counts(self, tokens_BT: torch.Tensor) -> torch.Tensor:
        """(MoE layers, E) token-slots each MoE layer routes to each expert for ``tokens_BT``:
        the blocks alone, without gradients, head or statistics (global-batch balancing counts
        a step's routing before its first backward)."""
        _, moe_aux = self._blocks(tokens_BT, collect_routing=False)
        return torch.stack([aux.slot_counts_E for aux in moe_aux])

    def update_expert_bias(self, slot_counts_LE: torch.Tensor) -> None:
        """After an optimizer step, move every MoE layer's balancing bias (balance: bias or
        both) by the loads ``slot_counts_LE`` of that step (``MoEFeedForward.update_expert_bias``)."""
        moe_layers = [layer.feed_forward for layer in self.layers
                      if isinstance(layer.feed_forward, MoEFeedForward)]
        for feed_forward, slot_counts_E in zip(moe_layers, slot_counts_LE, strict=True):
            feed_forward.update_expert_bias(slot_counts_E)

    def _blocks(self, tokens_BT: torch.Tensor, collect_routing: bool,
                lb_slot_counts_LE: Optional[torch.Tensor] = None) -> tuple[torch.Tensor, list]:
        """The residual stream after the last block, and the MoE layers' aux in layer order."""
        T = tokens_BT.shape[1]
        if T > self.cfg.max_seq_len:
            raise MoelabError(f"sequence length {T} is invalid: "
                              f"allowed 1..max_seq_len ({self.cfg.max_seq_len})")
        cos_TDh, sin_TDh = self.rope_cos[:T], self.rope_sin[:T]
        h_BTD = embed_tokens(tokens_BT, self.tok_embeddings.weight)
        moe_aux: list = []
        for layer in self.layers:
            lb_slot_counts_E = None if lb_slot_counts_LE is None else lb_slot_counts_LE[len(moe_aux)]
            h_BTD, aux = layer(h_BTD, cos_TDh, sin_TDh, collect_routing, lb_slot_counts_E)
            if aux is not None:
                moe_aux.append(aux)
        return h_BTD, moe_aux


def _output_with_aux(moe_aux: list, collect_routing: bool, device: torch.device) -> ModelOutput:
    """A ModelOutput holding the MoE layers' aux losses averaged over layers (0 when dense)."""
    if not moe_aux:
        zero = torch.zeros((), device=device)
        return ModelOutput(logits=None, lb_loss=zero, z_loss=zero, routing=[])
    return ModelOutput(
        logits=None,
        lb_loss=torch.stack([aux.lb_loss for aux in moe_aux]).mean(),
        z_loss=torch.stack([aux.z_loss for aux in moe_aux]).mean(),
        routing=[aux.routing for aux in moe_aux] if collect_routing else [],
        slot_counts_LE=torch.stack([aux.slot_counts_E for aux in moe_aux]),
    )
