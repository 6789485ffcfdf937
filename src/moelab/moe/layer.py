"""The MoE feed-forward layer: router, routed SwiGLU experts, and room for a shared FFN."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

import torch
from torch import nn

from moelab.config import ModelConfig
from moelab.errors import MoelabError, short_repr
from moelab.moe.experts import (
    AUTO,
    EXPERTS_CHOICES,
    EXPERTS_IMPLEMENTATIONS,
    ExpertsForward,
    auto_experts_implementation,
    cuda_grouped_problems,
    warn_once,
)
from moelab.moe.routing import Routing, RoutingStats, route, router_logits, routing_stats
from moelab.precision import compute_dtype


class SharedExperts(Protocol):
    """What ``MoEFeedForward`` runs beside its routed experts: a module with the FFN signature
    (the model's dense SwiGLU) that initialises its own weights."""

    def __call__(self, x_BTD: torch.Tensor) -> tuple[torch.Tensor, Any]: ...

    def init_weights(self, std: float, residual_std: float) -> None: ...


@dataclass
class MoEAux:
    """What one MoE layer returns beside its output."""

    lb_loss: torch.Tensor
    z_loss: torch.Tensor
    slot_counts_E: torch.Tensor
    """Token-slots routed to each expert in this batch (no gradient)."""
    routing: RoutingStats | None
    """None when the caller asked not to collect it."""


class MoEFeedForward(nn.Module):
    """Routed SwiGLU experts (Mixtral semantics), a drop-in for the dense FeedForward: both
    return ``(y, aux)``, aux None for the dense one.

    Parameters: ``router`` (Linear d_model -> E, no bias) and experts stacked as
    ``w1, w3: (E, d_expert, d_model)``, ``w2: (E, d_model, d_expert)`` -- each expert's slice is
    laid out like an ``nn.Linear`` weight, and this is the layout of Hugging Face's Mixtral
    (``gate_up_proj = cat([w1, w3], dim=1)``, ``down_proj = w2``).

    ``experts_implementation`` names the function that runs the experts
    (``EXPERTS_IMPLEMENTATIONS``: "sorted", "grouped" or "reference", the plain loop), or
    "auto" (the default): per call, "grouped" on a GPU that runs it fast, else "sorted"
    (``moelab.moe.experts.auto_experts_implementation``).
    ``shared_experts``, a module with the FFN signature (the model passes its dense SwiGLU of
    hidden size ``moe.shared_hidden`` when ``moe.num_shared_experts`` > 0), runs on every token
    and is added to the routed output: y = shared(x) + sum_k w_k expert_k(x) (DeepSeekMoE).
    None: Mixtral has none.
    """

    def __init__(self, cfg: ModelConfig, experts_implementation: str = AUTO,
                 shared_experts: SharedExperts | None = None):
        super().__init__()
        if cfg.moe is None:
            raise MoelabError("model.moe=null is invalid for MoEFeedForward: give a moe section")
        if experts_implementation not in EXPERTS_CHOICES:
            raise MoelabError(f"experts_implementation={short_repr(experts_implementation)} is invalid: "
                              f"allowed {', '.join(EXPERTS_CHOICES)}")
        moe = cfg.moe
        self.num_experts, self.top_k = moe.num_experts, moe.top_k
        self.renormalize = moe.renormalizes_weights
        self.experts_implementation = experts_implementation
        # What "auto" needs to know of the GPUs (``grouped_problem``), asked when the weights
        # reach one (``_apply``): never in forward, where torch.compile would trace the query.
        self._feature_sizes = (cfg.d_model, moe.d_expert)
        self._cuda_grouped_problems: dict[int, str | None] = {}
        self.router = nn.Linear(cfg.d_model, moe.num_experts, bias=False)
        self.w1 = nn.Parameter(torch.empty(moe.num_experts, moe.d_expert, cfg.d_model))
        self.w2 = nn.Parameter(torch.empty(moe.num_experts, cfg.d_model, moe.d_expert))
        self.w3 = nn.Parameter(torch.empty(moe.num_experts, moe.d_expert, cfg.d_model))
        self.shared_experts = shared_experts
        # Aux-loss-free balancing (balance: bias | both): a buffer, not a parameter (no
        # gradient; ``update_expert_bias`` moves it), so it is checkpointed with the weights.
        # Absent otherwise, so the state dict of a model without it is unchanged.
        self.bias_update_rate = moe.bias_update_rate
        self.expert_bias: torch.Tensor | None
        if moe.uses_expert_bias:
            self.register_buffer("expert_bias", torch.zeros(moe.num_experts))
        else:
            self.expert_bias = None
        self._probe_gpus()  # built on a GPU already (under ``torch.device("cuda")``)

    def _apply(self, fn, recurse=True):
        """``.to()``, ``.cuda()``, ...: after a move onto a GPU, probe the GPUs for "auto"."""
        moved = super()._apply(fn, recurse)
        self._probe_gpus()
        return moved

    def _probe_gpus(self) -> None:
        if self.experts_implementation == AUTO and self.w1.device.type == "cuda":
            self._cuda_grouped_problems = cuda_grouped_problems(self._feature_sizes)

    @torch.no_grad()
    def init_weights(self, std: float, residual_std: float) -> None:
        """N(0, std), except the experts' output projections w2: N(0, residual_std)."""
        nn.init.normal_(self.w1, mean=0.0, std=std)
        nn.init.normal_(self.w2, mean=0.0, std=residual_std)
        nn.init.normal_(self.w3, mean=0.0, std=std)
        nn.init.normal_(self.router.weight, mean=0.0, std=std)
        if self.expert_bias is not None:
            self.expert_bias.zero_()
        if self.shared_experts is not None:
            self.shared_experts.init_weights(std, residual_std)

    def forward(self, x_BTD: torch.Tensor, collect_routing: bool = True,
                lb_slot_counts_E: torch.Tensor | None = None) -> tuple[torch.Tensor, MoEAux]:
        """Output and aux losses; ``collect_routing=False`` skips the routing statistics
        (``aux.routing`` None), which training does not read. ``lb_slot_counts_E``: the loads
        the balancing loss uses instead of this batch's (``route``)."""
        x_TD = x_BTD.reshape(-1, x_BTD.shape[-1])
        routing = self.route_tokens(x_TD, lb_slot_counts_E)
        y_TD = self.experts_forward_for(x_TD)(x_TD, routing.weights_TK, routing.experts_TK,
                                              self.w1, self.w2, self.w3, routing.slot_counts_E)
        y_BTD = y_TD.view(x_BTD.shape)
        if self.shared_experts is not None:
            shared_BTD, _ = self.shared_experts(x_BTD)
            y_BTD = y_BTD + shared_BTD
        stats = (routing_stats(routing.router_logits_TE, routing.experts_TK)
                 if collect_routing else None)
        return y_BTD, MoEAux(routing.lb_loss, routing.z_loss, routing.slot_counts_E, routing=stats)

    def experts_forward_for(self, x_TD: torch.Tensor) -> ExpertsForward:
        """The experts implementation that runs on ``x_TD`` (its device and compute dtype)."""
        if self.experts_implementation != AUTO:
            return EXPERTS_IMPLEMENTATIONS[self.experts_implementation]
        problem = self._cuda_grouped_problems.get(x_TD.device.index or 0, "no GPU probed")
        name, warning = auto_experts_implementation(x_TD.device.type, compute_dtype(x_TD), problem)
        if warning and not torch.compiler.is_compiling():
            warn_once(warning)
        return EXPERTS_IMPLEMENTATIONS[name]

    def route_tokens(self, x_TD: torch.Tensor,
                     lb_slot_counts_E: torch.Tensor | None = None) -> Routing:
        """Router logits (fp32), top-k weights and experts, slot counts and both losses."""
        return route(router_logits(x_TD, self.router.weight), self.top_k, self.renormalize,
                     lb_slot_counts_E, self.expert_bias)

    @torch.no_grad()
    def update_expert_bias(self, slot_counts_E: torch.Tensor) -> None:
        """DeepSeek-V3's bias step: ``b_i += rate * sign(mean_j c_j - c_i)`` from the loads
        ``c`` of one optimizer step (the caller sums them over micro batches and ranks):
        an overloaded expert's bias goes down, an underloaded one's up."""
        if self.expert_bias is None:
            raise ValueError("update_expert_bias: this layer balances without an expert bias")
        load_E = slot_counts_E.to(self.expert_bias.dtype)
        self.expert_bias += self.bias_update_rate * torch.sign(load_E.mean() - load_E)
