"""Parameter and FLOP accounting from a config alone, and dense baselines matched to an MoE.

Definitions (tests hold them equal to the built model and to hand counts):

- **total**: every stored parameter (the sum of ``numel`` over the model).
- **active**: the parameters one token uses: total minus the (E - k) routed experts it skips in
  every MoE layer, i.e. per MoE layer the shared experts + k routed experts + the router. For a
  dense model active == total.
- **embedding**: the token-embedding matrix, plus the output matrix when it is not tied.
- **non_embedding**: total - embedding.

FLOPs per token of training (forward + backward = 3 x forward, 2 FLOPs per multiply-add). Three
counts, named for where they come from; they differ only in the attention over the context:

- ``six_n`` = 6 * active, embeddings included. The budget convention of scaling-law work
  (Kaplan et al. 2020's C = 6 N D, Chinchilla) and of Abnar et al. 2025 (C = 6 N_active D):
  every moelab budget, IsoFLOP curve and S* uses it.
- ``kaplan`` = 6 * active_non_embedding + 6 * n_layers * n_ctx * d_model + 6 * d_model * vocab:
  the weight matmuls of the active path, the attention over a context of n_ctx as Kaplan et al.
  2020 (Table 1) count it, 2 n_layers n_ctx d_model per token forward (one n_ctx x d_model
  product per layer), and the unembedding matmul; the embedding lookup costs nothing. The
  FLOP/s a run logs use it. (Summaries before schema version 2 called it ``full``.)
- ``palm`` = the same with the attention at 12 * n_layers * n_ctx * d_model: QK^T and AV, each
  2 n_ctx d_model per token and layer forward, without halving for the causal mask. This is
  PaLM's count (Chowdhery et al. 2022, App. B: 6N + 12 L H Q T), the one Abnar et al. 2025's
  eq. 9 (App. C) uses for FLOPs per token.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Literal

from moelab.config import ModelConfig
from moelab.errors import ConfigError, short_repr

Criterion = Literal["active", "total", "flops"]
CRITERIA: tuple[str, ...] = ("active", "total", "flops")


@dataclass(frozen=True)
class ParamCounts:
    total: int
    active: int
    embedding: int
    non_embedding: int
    active_non_embedding: int


@dataclass(frozen=True)
class FlopCounts:
    six_n: int
    """6 * active params (embeddings included): the budget count (C = 6 N_active D)."""
    kaplan: int
    """Active weight matmuls + attention at 6 n_layers n_ctx d_model + unembedding."""
    palm: int
    """As ``kaplan`` with the attention at 12 n_layers n_ctx d_model (PaLM; Abnar et al. eq. 9)."""


def _attention_params(cfg: ModelConfig) -> int:
    kv_dim = cfg.n_kv_heads * cfg.head_dim
    return 2 * cfg.d_model * cfg.d_model + 2 * cfg.d_model * kv_dim  # wq, wo + wk, wv


def _expert_params(cfg: ModelConfig) -> int:
    """One SwiGLU expert (w1, w2, w3)."""
    assert cfg.moe is not None
    return 3 * cfg.d_model * cfg.moe.d_expert


def _ffn_params(cfg: ModelConfig) -> int:
    """All stored FFN parameters of one layer (dense SwiGLU, or router + E experts)."""
    if cfg.moe is None:
        return 3 * cfg.d_model * cfg.d_ff
    router = cfg.d_model * cfg.moe.num_experts
    shared = 3 * cfg.d_model * cfg.moe.shared_hidden  # every token uses them
    return router + shared + cfg.moe.num_experts * _expert_params(cfg)


def count_params(cfg: ModelConfig) -> ParamCounts:
    """Exact parameter counts of ``Transformer(cfg)``, without building it."""
    norms_per_layer = 2 * cfg.d_model  # attention_norm, ffn_norm
    per_layer = _attention_params(cfg) + _ffn_params(cfg) + norms_per_layer
    token_embedding = cfg.vocab_size * cfg.d_model
    output = 0 if cfg.tie_embeddings else cfg.vocab_size * cfg.d_model
    total = token_embedding + cfg.n_layers * per_layer + cfg.d_model + output  # + final norm
    skipped = 0
    if cfg.moe is not None:
        skipped = cfg.n_layers * (cfg.moe.num_experts - cfg.moe.top_k) * _expert_params(cfg)
    embedding = token_embedding + output
    return ParamCounts(
        total=total,
        active=total - skipped,
        embedding=embedding,
        non_embedding=total - embedding,
        active_non_embedding=total - skipped - embedding,
    )


def flops_per_token(cfg: ModelConfig, seq_len: int | None = None) -> FlopCounts:
    """Training FLOPs per token (see the module doc); ``seq_len`` defaults to max_seq_len."""
    n_ctx = cfg.max_seq_len if seq_len is None else seq_len
    counts = count_params(cfg)
    weights = 6 * counts.active_non_embedding + 6 * cfg.d_model * cfg.vocab_size  # + unembedding
    attention_one_product = 6 * cfg.n_layers * n_ctx * cfg.d_model  # QK^T or AV, fwd + bwd
    return FlopCounts(
        six_n=6 * counts.active,
        kaplan=weights + attention_one_product,
        palm=weights + 2 * attention_one_product,
    )


# --------------------------------------------------------------------------------------------
# Matched dense baselines
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class MatchedDense:
    """A dense config matched to an MoE config on one criterion by choosing ``d_ff``."""

    config: ModelConfig
    criterion: str
    target: int
    """The MoE's value of the criterion (params, or training FLOPs per token)."""
    achieved: int
    """The dense model's value of the criterion."""

    @property
    def mismatch(self) -> float:
        """Relative residual mismatch, (dense - moe) / moe."""
        return (self.achieved - self.target) / self.target


def criterion_value(cfg: ModelConfig, criterion: str) -> int:
    """The number a matched baseline equalises: active params, total params or FLOPs/token (the
    ``kaplan`` count; every count gives the same matched model, see ``match_dense``)."""
    if criterion == "active":
        return count_params(cfg).active
    if criterion == "total":
        return count_params(cfg).total
    if criterion == "flops":
        return flops_per_token(cfg).kaplan
    raise ConfigError(f"criterion={short_repr(criterion)} is invalid: allowed {', '.join(CRITERIA)}")


def match_dense(moe_cfg: ModelConfig, criterion: str, step: int = 32) -> MatchedDense:
    """The dense config equal to ``moe_cfg`` except for its FFN, nearest on ``criterion``.

    Only ``d_ff`` changes (and ``moe`` becomes null), searched over positive multiples of
    ``step``; the nearest value wins, the smaller one on a tie. Every criterion is affine in
    d_ff, so the optimum is one of the two multiples around the exact real-valued solution.
    Both FLOP counts are 6 x the active parameters plus terms that do not depend on the FFN,
    so matching on "flops" gives the same model as matching on "active".
    """
    if moe_cfg.moe is None:
        raise ConfigError("model.moe=null is invalid for matching: the config must be an MoE")
    if step <= 0:
        raise ConfigError(f"step={step} is invalid: must be a positive integer")
    target = criterion_value(moe_cfg, criterion)

    def dense_with(d_ff: int) -> ModelConfig:
        return dataclasses.replace(moe_cfg, moe=None, d_ff=d_ff)

    base = criterion_value(dense_with(step), criterion)
    slope = (criterion_value(dense_with(2 * step), criterion) - base) / step
    exact_d_ff = step + (target - base) / slope
    low = max(step, math.floor(exact_d_ff / step) * step)
    candidates = [dense_with(d_ff) for d_ff in (low, low + step)]
    best = min(candidates, key=lambda c: (abs(criterion_value(c, criterion) - target), c.d_ff))
    return MatchedDense(best, criterion, target, criterion_value(best, criterion))


def equal_compute_tokens(moe_cfg: ModelConfig, dense_cfg: ModelConfig, dense_tokens: int,
                         tokens_per_step: int) -> int:
    """The tokens an MoE trains on to spend the training FLOPs of ``dense_cfg`` trained on
    ``dense_tokens``: D_moe = D_dense * N_dense / N_moe,active under the ``six_n`` count
    (C = 6 * N_active * D), in whole steps of ``tokens_per_step``, the nearest (the smaller on a
    tie), at least one. The count is the one the study's tables use; under the ``kaplan`` or
    ``palm`` count the attention and unembedding terms, equal for both models, make the ratio
    closer to 1.

    Both runs train whole steps, so ``dense_tokens`` counts the dense run's whole steps too.
    """
    if tokens_per_step <= 0:
        raise ConfigError(f"tokens_per_step={tokens_per_step} is invalid: must be > 0")
    dense_steps = dense_tokens // tokens_per_step
    dense_flops = 6 * count_params(dense_cfg).active * dense_steps * tokens_per_step
    moe_flops_per_step = 6 * count_params(moe_cfg).active * tokens_per_step
    low = dense_flops // moe_flops_per_step
    steps = min((low, low + 1), key=lambda s: (abs(s * moe_flops_per_step - dense_flops), s))
    return max(1, steps) * tokens_per_step
