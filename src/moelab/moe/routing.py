"""Routing: router logits, top-k weights, the Switch balancing loss, the router z-loss and the
routing statistics. Pure functions of tensors; the layer (``layer.py``) owns the router weight.

``route`` is what the layer runs: one softmax (as exp(logits - log Z), sharing log Z with the
z-loss) and one slot count serve the top-k weights and both losses. ``load_balancing_loss``
and ``router_z_loss`` compose the same pieces from logits alone, for callers (and tests) that
have no ``Routing``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from moelab.codec import to_json
from moelab.precision import autocast_off


@dataclass
class Routing:
    """One batch's routing decision and its two losses, computed once and shared by dispatch,
    the losses and the diagnostics."""

    router_logits_TE: torch.Tensor
    """fp32 router logits."""
    weights_TK: torch.Tensor
    """Combine weights of the chosen experts (fp32, carry gradients to the router)."""
    experts_TK: torch.Tensor
    """Chosen expert ids, best first."""
    slot_counts_E: torch.Tensor
    """Token-slots routed to each expert (``count_slots``)."""
    lb_loss: torch.Tensor
    """Switch balancing loss (``balancing_loss``), its loads from ``slot_counts_E`` or from the
    counts the caller gave ``route``."""
    z_loss: torch.Tensor
    """Router z-loss (``z_loss_from_log_z``)."""


def router_logits(x_TD: torch.Tensor, router_weight_ED: torch.Tensor) -> torch.Tensor:
    """``x_TD @ router.T`` in fp32 whatever the autocast (routing decisions are sensitive to
    rounding)."""
    with autocast_off(x_TD):
        return F.linear(x_TD.float(), router_weight_ED.float())


def route(router_logits_TE: torch.Tensor, top_k: int, renormalize: bool = True,
          lb_slot_counts_E: torch.Tensor | None = None,
          expert_bias_E: torch.Tensor | None = None) -> Routing:
    """Mixtral routing with its losses: softmax over all E, top-k, renormalise the k weights to
    sum 1 (``renormalize=False``: keep the k softmax probabilities, as Switch does for top-1).

    ``lb_slot_counts_E``: the loads the balancing loss uses instead of this batch's own counts
    (global-batch balancing passes the counts of the whole optimizer step); None: this batch's.
    ``expert_bias_E``: the aux-loss-free balancing bias, added to the probabilities for the
    top-k choice only (``top_k_weights``).
    """
    probs_TE, log_z_T = router_probs(router_logits_TE)
    weights_TK, experts_TK = top_k_weights(probs_TE, top_k, renormalize, expert_bias_E)
    slot_counts_E = count_slots(experts_TK, router_logits_TE.shape[-1])
    return Routing(
        router_logits_TE, weights_TK, experts_TK, slot_counts_E,
        lb_loss=balancing_loss(probs_TE, slot_counts_E if lb_slot_counts_E is None
                               else lb_slot_counts_E),
        z_loss=z_loss_from_log_z(log_z_T),
    )


def router_probs(router_logits_TE: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``(softmax(logits), logsumexp(logits))`` in fp32, the softmax as exp(logits - log Z) so
    that the z-loss reuses log Z (cheaper on a CPU than ``torch.softmax`` with E in the last
    dimension, forward and backward: BENCHMARKS.md, "MoE dispatch")."""
    logits_TE = router_logits_TE.float()
    log_z_T = torch.logsumexp(logits_TE, dim=-1)
    return torch.exp(logits_TE - log_z_T.unsqueeze(-1)), log_z_T


def top_k_weights(probs_TE: torch.Tensor, top_k: int, renormalize: bool = True,
                  expert_bias_E: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """``(weights_TK, experts_TK)``: the k most probable experts and their combine weights.

    With ``expert_bias_E`` (DeepSeek-V3's aux-loss-free balancing) the k experts are those of
    the largest ``p_ti + b_i``, but their weights are still their probabilities ``p_ti``
    (renormalised as without a bias): the bias steers which experts a token goes to, never how
    much each contributes, and gets no gradient.
    """
    if expert_bias_E is None:
        top_probs_TK, experts_TK = torch.topk(probs_TE, top_k, dim=-1)
    else:
        _, experts_TK = torch.topk(probs_TE + expert_bias_E.to(probs_TE.dtype), top_k, dim=-1)
        top_probs_TK = probs_TE.gather(-1, experts_TK)
    if not renormalize:
        return top_probs_TK, experts_TK
    return top_probs_TK / top_probs_TK.sum(dim=-1, keepdim=True), experts_TK


def count_slots(experts_TK: torch.Tensor, num_experts: int) -> torch.Tensor:
    """(E,) token-slots routed to each expert: ``bincount`` with a shape torch.compile can know
    in advance (bincount's output length depends on the data, a graph break)."""
    experts_S = experts_TK.reshape(-1)
    counts_E = torch.zeros(num_experts, dtype=torch.long, device=experts_S.device)
    return counts_E.scatter_add_(0, experts_S, torch.ones_like(experts_S))


def balancing_loss(probs_TE: torch.Tensor, slot_counts_E: torch.Tensor) -> torch.Tensor:
    """Switch load-balancing loss of one layer: ``E * sum_i f_i * P_i``.

    ``f_i`` is the share of the T*k token-slots routed to expert i (so sum_i f_i = 1) and ``P_i``
    the mean router probability of i. A perfectly balanced router scores 1; all tokens on one
    expert with probability 1 scores E. Gradients flow through P only (f is a count).

    Hugging Face's ``load_balancing_loss_func`` divides the counts by T instead of k*T, so on one
    layer it equals ``top_k`` times this value (its balanced score is k).

    ``slot_counts_E`` may count more tokens than ``probs_TE`` holds: global-batch balancing
    passes the counts of the whole optimizer step with one micro batch's probabilities, and the
    mean of these per-micro-batch values is the loss of the whole step (docs/training.md,
    "Balancing scope").
    """
    mean_prob_E = probs_TE.mean(dim=0)
    slot_fraction_E = slot_counts_E.to(mean_prob_E.dtype) / slot_counts_E.sum()
    return probs_TE.shape[-1] * torch.dot(slot_fraction_E, mean_prob_E)


def load_balancing_loss(router_logits_TE: torch.Tensor, experts_TK: torch.Tensor) -> torch.Tensor:
    """``balancing_loss`` from the router logits and the chosen experts."""
    probs_TE, _ = router_probs(router_logits_TE)
    return balancing_loss(probs_TE, count_slots(experts_TK, router_logits_TE.shape[-1]))


def z_loss_from_log_z(log_z_T: torch.Tensor) -> torch.Tensor:
    """Router z-loss of one layer (ST-MoE): mean over tokens of ``logsumexp(logits)^2``."""
    return log_z_T.square().mean()


def router_z_loss(router_logits_TE: torch.Tensor) -> torch.Tensor:
    """``z_loss_from_log_z`` from the router logits."""
    return z_loss_from_log_z(torch.logsumexp(router_logits_TE.float(), dim=-1))


# --------------------------------------------------------------------------------------------
# Diagnostics
# --------------------------------------------------------------------------------------------

DEAD_EXPERT_LOAD = 0.01
"""An expert is dead when its load is under this fraction of the mean load 1/E."""


@dataclass(frozen=True)
class LoadBalance:
    """How evenly one layer's token-slots fall on its experts: the numbers peer tools report.

    Loads are relative to the mean load (c_i / mean_j c_j), so 1 is a perfectly balanced
    expert whatever E: ``load_p50`` and ``load_p90`` are percentiles across the E experts
    (linear interpolation, numpy's default), ``load_max`` the busiest expert's.
    """

    max_violation: float
    """MaxVio = max_i c_i / mean_j c_j - 1 (Wang et al. 2024, arXiv 2408.15664): 0 balanced,
    E - 1 when every slot goes to one expert."""
    load_p50: float
    """Median over the E experts of load / mean load."""
    load_p90: float
    """90th percentile over the E experts of load / mean load."""
    load_max: float
    """The busiest expert's load / mean load."""
    dead_experts: int
    """Experts whose load is under DEAD_EXPERT_LOAD (1 %) of the mean."""


def load_balance(slot_counts_E: torch.Tensor) -> LoadBalance:
    """``LoadBalance`` of one layer from its token-slots per expert (host floats: a sync)."""
    counts_E = slot_counts_E.detach().double().cpu()
    relative_E = counts_E / counts_E.mean().clamp_min(1e-300)
    p50, p90 = torch.quantile(relative_E, torch.tensor([0.5, 0.9], dtype=torch.float64)).tolist()
    load_max = float(relative_E.max())
    return LoadBalance(max_violation=load_max - 1.0, load_p50=p50, load_p90=p90,
                       load_max=load_max,
                       dead_experts=int((relative_E < DEAD_EXPERT_LOAD).sum()))


def max_violation(slot_counts_LE: torch.Tensor) -> torch.Tensor:
    """(L,) MaxVio of each layer's slot counts, on their device (no sync): what a micro batch's
    balance is measured by before its counts are summed into the step's."""
    counts_LE = slot_counts_LE.float()
    return counts_LE.amax(dim=-1) / counts_LE.mean(dim=-1).clamp_min(1e-30) - 1.0


@dataclass
class RoutingStats:
    """Detached, summable sufficient statistics of one MoE layer's routing.

    Sums (not means) so that stats of several batches add up exactly to the stats of their
    concatenation; ``summary()`` turns them into the diagnostics. Tensors stay on the device
    they were computed on, so collecting them costs no host sync.
    """

    num_tokens: int
    expert_counts: torch.Tensor
    """(E,) token-slots routed to each expert (sums to num_tokens * k)."""
    prob_sum: torch.Tensor
    """(E,) router probabilities summed over tokens."""
    entropy_sum: torch.Tensor
    """Per-token routing entropy (nats) summed over tokens."""
    logz_sum: torch.Tensor
    """logsumexp(router logits) summed over tokens."""
    z_sq_sum: torch.Tensor
    """logsumexp(router logits)^2 summed over tokens."""

    @property
    def num_experts(self) -> int:
        return self.expert_counts.numel()

    def merge(self, other: RoutingStats) -> RoutingStats:
        """Stats of both batches together (exact: every field is a sum)."""
        return RoutingStats(
            num_tokens=self.num_tokens + other.num_tokens,
            expert_counts=self.expert_counts + other.expert_counts.to(self.expert_counts.device),
            prob_sum=self.prob_sum + other.prob_sum.to(self.prob_sum.device),
            entropy_sum=self.entropy_sum + other.entropy_sum.to(self.entropy_sum.device),
            logz_sum=self.logz_sum + other.logz_sum.to(self.logz_sum.device),
            z_sq_sum=self.z_sq_sum + other.z_sq_sum.to(self.z_sq_sum.device),
        )

    __add__ = merge

    def summary(self) -> dict[str, float | list[float]]:
        """The per-layer routing diagnostics as plain floats: a ``LayerRouting``'s keys."""
        counts_E = self.expert_counts.detach().double().cpu()
        load_E = counts_E / counts_E.sum().clamp_min(1.0)
        load_entropy = float(-torch.special.xlogy(load_E, load_E).sum())
        num_experts = self.num_experts
        tokens = max(self.num_tokens, 1)
        mean_entropy = float(self.entropy_sum) / tokens
        balance = load_balance(counts_E)
        return to_json(LayerRouting(
            busiest_fraction=float(load_E.max()),
            usage_variance=float(load_E.var(unbiased=False)),
            usage_variance_scaled=float(num_experts**2 * load_E.var(unbiased=False)),
            routing_entropy=mean_entropy / math.log(num_experts) if num_experts > 1 else 0.0,
            load_entropy=load_entropy,
            effective_experts=math.exp(load_entropy),
            mean_log_z=float(self.logz_sum) / tokens,
            mean_z_sq=float(self.z_sq_sum) / tokens,
            dead_experts=int((load_E < DEAD_EXPERT_LOAD / num_experts).sum()),
            max_violation=balance.max_violation, load_p50=balance.load_p50,
            load_p90=balance.load_p90, load_max=balance.load_max,
            expert_load=load_E.tolist(),
        ))


@dataclass(frozen=True)
class LayerRouting:
    """One MoE layer's routing diagnostics over an evaluation's tokens, c_i being the
    token-slots expert i received (an eval line's ``routing``, per layer; summary.json's)."""

    busiest_fraction: float
    """max_i c_i / sum c: 1/E when balanced, 1 when collapsed onto one expert."""
    usage_variance: float
    """Population variance of the loads c_i / sum c."""
    usage_variance_scaled: float
    """E^2 times usage_variance: scale-free, 0 balanced, E - 1 collapsed."""
    routing_entropy: float
    """Mean per-token entropy of the router softmax over log E (1 = uniform); 0 when E = 1."""
    load_entropy: float
    """Entropy (nats) of the loads c_i / sum c."""
    effective_experts: float
    """exp(load_entropy): E when balanced, 1 when collapsed."""
    mean_log_z: float
    """Mean over tokens of logsumexp of the router logits."""
    mean_z_sq: float
    """Mean over tokens of its square (what the z-loss penalises)."""
    dead_experts: int
    """Experts with c_i / sum c under DEAD_EXPERT_LOAD (1 %) of the mean load 1/E."""
    max_violation: float
    """MaxVio, max load / mean load - 1 (``LoadBalance``)."""
    load_p50: float
    """Median over experts of load / mean load (``LoadBalance``)."""
    load_p90: float
    """90th percentile over experts of load / mean load (``LoadBalance``)."""
    load_max: float
    """The busiest expert's load / mean load (``LoadBalance``)."""
    expert_load: list[float]
    """The loads c_i / sum c themselves, one per expert."""


@torch.no_grad()
def routing_stats(router_logits_TE: torch.Tensor, experts_TK: torch.Tensor) -> RoutingStats:
    """Sufficient statistics of one layer's routing from its logits and chosen experts."""
    logits_TE = router_logits_TE.detach().float()
    log_probs_TE = torch.log_softmax(logits_TE, dim=-1)
    probs_TE = log_probs_TE.exp()
    log_z_T = torch.logsumexp(logits_TE, dim=-1)
    return RoutingStats(
        num_tokens=logits_TE.shape[0],
        expert_counts=count_slots(experts_TK, logits_TE.shape[-1]),
        prob_sum=probs_TE.sum(dim=0),
        entropy_sum=-(probs_TE * log_probs_TE).sum(),
        logz_sum=log_z_T.sum(),
        z_sq_sum=log_z_T.square().sum(),
    )
