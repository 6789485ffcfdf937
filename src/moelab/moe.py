"""Mixtral-style routed experts: router, dropless sorted dispatch, auxiliary losses, diagnostics.

One MoE layer replaces the dense SwiGLU FFN of a block:

1. **Route.** ``router_logits_TE = x_TD @ router.T`` in fp32; softmax over all E experts, keep
   the top-k, renormalise those k weights to sum 1 (Mixtral). With top-1 the weight is the raw
   softmax probability instead (Switch), unless the config says otherwise: a single
   renormalised weight is always 1 and the router would learn nothing from the task loss.
2. **Dispatch (dropless).** The T*k token-slots are stably sorted by expert id, so each expert's
   slots form one contiguous block of rows (``ExpertLayout``); every expert runs its SwiGLU on
   all of its rows (no capacity limit, no token is ever dropped) and the outputs are put back
   in slot order and combined with the routing weights in a fixed order (deterministic).
   Gather, expert matmuls, combine and their backward live in one autograd node
   (``_SortedSwiGLUExperts``): autograd bookkeeping for ~10 nodes per expert would dominate at
   E = 64 on a CPU. Every tensor in it has a shape fixed by T, k and the model; only the loops
   over experts depend on the routing, and torch.compile sees them as two opaque custom ops
   (``segment_matmul``, ``segment_outer_products``), so it compiles the layer once, whatever
   the routing. Inside them, fp32 on a CPU runs ``torch._grouped_mm`` (one call for all
   experts); other dtypes and devices a Python loop of matmuls. ``reference_experts_forward``
   is the plain loop-over-experts version the tests hold the fast path equal to.
3. **Losses and diagnostics** are pure functions of the router logits and the chosen experts:
   ``load_balancing_loss`` (Switch, normalised so a balanced router scores 1),
   ``router_z_loss`` and ``routing_stats`` (summable ``RoutingStats``). They are returned from
   ``forward``; nothing is stashed on the module. The layer shares one softmax and one slot
   count between routing, dispatch and the balancing loss, and skips the statistics when the
   caller does not want them (training).

Shape suffixes: B batch, T tokens (flattened B*T inside the layer), D d_model, E experts,
K top-k, H d_expert (hidden size of one expert), S = T*K token-slots, R = S rows of the
expert-major buffer (the same slots, sorted by expert).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from moelab.config import ModelConfig
from moelab.errors import MoelabError
from moelab.precision import compute_dtype

DISPATCH_MODES = ("sorted", "reference")

# --------------------------------------------------------------------------------------------
# Routing
# --------------------------------------------------------------------------------------------


def route(router_logits_TE: torch.Tensor, top_k: int,
          renormalize: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
    """Mixtral routing: softmax over all E, top-k, renormalise the k weights to sum 1
    (``renormalize=False``: keep the k softmax probabilities, as Switch does for top-1).

    Returns ``(weights_TK, experts_TK)``; weights are fp32 and carry gradients to the router.
    """
    return top_k_weights(torch.softmax(router_logits_TE.float(), dim=-1), top_k, renormalize)


def top_k_weights(probs_TE: torch.Tensor, top_k: int,
                  renormalize: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
    """``route`` from router probabilities already computed (the layer shares them with the
    load-balancing loss)."""
    top_probs_TK, experts_TK = torch.topk(probs_TE, top_k, dim=-1)
    if not renormalize:
        return top_probs_TK, experts_TK
    return top_probs_TK / top_probs_TK.sum(dim=-1, keepdim=True), experts_TK


def load_balancing_loss(router_logits_TE: torch.Tensor, experts_TK: torch.Tensor) -> torch.Tensor:
    """Switch load-balancing loss of one layer: ``E * sum_i f_i * P_i``.

    ``f_i`` is the share of the T*k token-slots routed to expert i (so sum_i f_i = 1) and ``P_i``
    the mean router probability of i. A perfectly balanced router scores 1; all tokens on one
    expert with probability 1 scores E. Gradients flow through P only (f is a count).

    Hugging Face's ``load_balancing_loss_func`` divides the counts by T instead of k*T, so on one
    layer it equals ``top_k`` times this value (its balanced score is k).
    """
    num_experts = router_logits_TE.shape[-1]
    probs_TE = torch.softmax(router_logits_TE.float(), dim=-1)
    return balancing_loss_from_counts(probs_TE, count_slots(experts_TK, num_experts))


def count_slots(experts_TK: torch.Tensor, num_experts: int) -> torch.Tensor:
    """(E,) token-slots routed to each expert: ``bincount`` with a shape torch.compile can know
    in advance (bincount's output length depends on the data, a graph break)."""
    experts_S = experts_TK.reshape(-1)
    counts_E = torch.zeros(num_experts, dtype=torch.long, device=experts_S.device)
    return counts_E.scatter_add_(0, experts_S, torch.ones_like(experts_S))


def balancing_loss_from_counts(probs_TE: torch.Tensor, slot_counts_E: torch.Tensor) -> torch.Tensor:
    """``load_balancing_loss`` from the router probabilities and per-expert slot counts."""
    mean_prob_E = probs_TE.mean(dim=0)
    slot_fraction_E = slot_counts_E.to(mean_prob_E.dtype) / slot_counts_E.sum()
    return probs_TE.shape[-1] * torch.dot(slot_fraction_E, mean_prob_E)


def router_z_loss(router_logits_TE: torch.Tensor) -> torch.Tensor:
    """Router z-loss of one layer: mean over tokens of ``logsumexp(logits)^2`` (ST-MoE)."""
    log_z_T = torch.logsumexp(router_logits_TE.float(), dim=-1)
    return log_z_T.square().mean()


# --------------------------------------------------------------------------------------------
# Diagnostics
# --------------------------------------------------------------------------------------------


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

    def merge(self, other: "RoutingStats") -> "RoutingStats":
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
        """The per-layer routing diagnostics as plain floats.

        busiest_fraction: max_i c_i / sum c (1/E when balanced, 1 when collapsed).
        usage_variance: population variance of the loads c_i / sum c; usage_variance_scaled is
            E^2 times it (scale-free: 0 balanced, E - 1 collapsed).
        routing_entropy: mean per-token entropy of the router softmax / log E (1 = uniform);
            0 when E = 1.
        load_entropy: entropy (nats) of the loads c_i / sum c; effective_experts = exp of it.
        mean_log_z, mean_z_sq: mean logsumexp of the router logits and of its square.
        expert_load: the loads c_i / sum c themselves (a list of E floats).
        """
        counts_E = self.expert_counts.detach().double().cpu()
        load_E = counts_E / counts_E.sum().clamp_min(1.0)
        load_entropy = float(-torch.special.xlogy(load_E, load_E).sum())
        num_experts = self.num_experts
        tokens = max(self.num_tokens, 1)
        mean_entropy = float(self.entropy_sum) / tokens
        return {
            "busiest_fraction": float(load_E.max()),
            "usage_variance": float(load_E.var(unbiased=False)),
            "usage_variance_scaled": float(num_experts**2 * load_E.var(unbiased=False)),
            "routing_entropy": mean_entropy / math.log(num_experts) if num_experts > 1 else 0.0,
            "load_entropy": load_entropy,
            "effective_experts": math.exp(load_entropy),
            "mean_log_z": float(self.logz_sum) / tokens,
            "mean_z_sq": float(self.z_sq_sum) / tokens,
            "expert_load": load_E.tolist(),
        }


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


# --------------------------------------------------------------------------------------------
# Expert computation: reference loop and sorted dispatch
# --------------------------------------------------------------------------------------------


def reference_experts_forward(
    x_TD: torch.Tensor,
    weights_TK: torch.Tensor,
    experts_TK: torch.Tensor,
    w1_EHD: torch.Tensor,
    w2_EDH: torch.Tensor,
    w3_EHD: torch.Tensor,
) -> torch.Tensor:
    """The plain loop over experts (slow, obviously right): the tests' reference."""
    out_TD = torch.zeros_like(x_TD)
    for expert in range(w1_EHD.shape[0]):
        token_idx, slot_idx = torch.where(experts_TK == expert)
        if token_idx.numel() == 0:
            continue
        x_ND = x_TD[token_idx]
        hidden_NH = F.silu(x_ND @ w1_EHD[expert].T) * (x_ND @ w3_EHD[expert].T)
        y_ND = hidden_NH @ w2_EDH[expert].T
        weight_N1 = weights_TK[token_idx, slot_idx].unsqueeze(-1).to(y_ND.dtype)
        out_TD = out_TD.index_add(0, token_idx, (y_ND * weight_N1).to(out_TD.dtype))
    return out_TD


@dataclass
class ExpertLayout:
    """Where each token-slot sits in the expert-major row buffer the expert matmuls run on.

    The T*k slots stably sorted by expert id: expert e owns the ``slots_per_expert[e]`` rows after
    those of experts 0..e-1. Every shape is fixed by T and k (R = S = T*k rows), whatever the
    routing: only the segment boundaries depend on it, and they stay in a tensor.
    """

    slot_of_row_R: torch.Tensor
    """Token-slot (s = t * k + j, token t's j-th expert) held by each buffer row."""
    row_of_slot_S: torch.Tensor
    """Inverse map: the buffer row of each token-slot."""
    token_of_row_R: torch.Tensor
    """Token whose input each row holds (slot // k)."""
    slots_per_expert: torch.Tensor
    """(E,) rows of each expert, on the CPU: the segment loops read it without a device sync."""


def expert_layout(experts_TK: torch.Tensor, num_experts: int,
                  slot_counts_E: torch.Tensor | None = None) -> ExpertLayout:
    """Stable sort of the T*k token-slots by expert id. ``slot_counts_E`` (``count_slots`` of
    ``experts_TK``) may be passed in when the caller already has it."""
    experts_S = experts_TK.reshape(-1)
    slot_of_row_R = torch.argsort(experts_S, stable=True)
    if slot_counts_E is None:
        slot_counts_E = count_slots(experts_TK, num_experts)
    return ExpertLayout(
        slot_of_row_R=slot_of_row_R,
        row_of_slot_S=_inverse_permutation(slot_of_row_R),
        token_of_row_R=slot_of_row_R // experts_TK.shape[-1],
        slots_per_expert=slot_counts_E.cpu(),  # one host sync per layer (a no-op on CPU)
    )


def _inverse_permutation(perm: torch.Tensor) -> torch.Tensor:
    """inverse[perm[i]] = i: a scatter, cheaper than a second argsort."""
    inverse = torch.empty_like(perm)
    inverse[perm] = torch.arange(perm.numel(), device=perm.device)
    return inverse


def sorted_experts_forward(
    x_TD: torch.Tensor,
    weights_TK: torch.Tensor,
    experts_TK: torch.Tensor,
    w1_EHD: torch.Tensor,
    w2_EDH: torch.Tensor,
    w3_EHD: torch.Tensor,
    slot_counts_E: torch.Tensor | None = None,
) -> torch.Tensor:
    """Dropless sort-based dispatch; equals ``reference_experts_forward`` (tests hold it)."""
    layout = expert_layout(experts_TK, w1_EHD.shape[0], slot_counts_E)
    return _SortedSwiGLUExperts.apply(x_TD, weights_TK, w1_EHD, w2_EDH, w3_EHD,
                                      layout.slot_of_row_R, layout.row_of_slot_S,
                                      layout.token_of_row_R, layout.slots_per_expert)


class _SortedSwiGLUExperts(torch.autograd.Function):
    """Gather, SwiGLU experts and weighted combine, forward and backward in one autograd node.

    Input rows are gathered into the expert-major buffer, each expert multiplies its rows, the
    elementwise SwiGLU runs once over the whole buffer, and each token's k outputs are summed
    with its routing weights in a fixed order (deterministic: no atomics). Backward mirrors it
    with hand-written matmuls; one node instead of ~10 per expert, whose autograd bookkeeping
    would dominate at E = 64 on a CPU, and no tiny-matrix batched matmuls for the combine.
    """

    @staticmethod
    def forward(ctx, x_TD, weights_TK, w1_EHD, w2_EDH, w3_EHD,
                slot_of_row_R, row_of_slot_S, token_of_row_R, slots_per_expert):
        ctx.input_dtypes = (x_TD.dtype, weights_TK.dtype, w1_EHD.dtype, w2_EDH.dtype, w3_EHD.dtype)
        dtype = compute_dtype(x_TD)  # honour autocast explicitly, then do the maths without it
        with torch.autocast(x_TD.device.type, enabled=False):
            x, weights, w1, w2, w3 = (t.to(dtype) for t in (x_TD, weights_TK, w1_EHD, w2_EDH, w3_EHD))
            x_RD = x.index_select(0, token_of_row_R)
            h1_RH = segment_matmul(x_RD, w1.transpose(1, 2), slots_per_expert)
            h3_RH = segment_matmul(x_RD, w3.transpose(1, 2), slots_per_expert)
            silu_h1_RH = F.silu(h1_RH)
            act_RH = silu_h1_RH * h3_RH
            y_RD = segment_matmul(act_RH, w2.transpose(1, 2), slots_per_expert)
            out_TD = _gather_sum(y_RD, row_of_slot_S.view(weights.shape), weights)
        ctx.save_for_backward(x_RD, h1_RH, h3_RH, silu_h1_RH, act_RH, y_RD, weights, w1, w2, w3,
                              slot_of_row_R, row_of_slot_S, token_of_row_R, slots_per_expert)
        return out_TD

    @staticmethod
    def backward(ctx, grad_out_TD):
        (x_RD, h1_RH, h3_RH, silu_h1_RH, act_RH, y_RD, weights_TK, w1, w2, w3,
         slot_of_row_R, row_of_slot_S, token_of_row_R, counts) = ctx.saved_tensors
        with torch.autocast(grad_out_TD.device.type, enabled=False):
            # d out_t / d weight_tj = y_tj; d out_t / d y_tj = weight_tj (per buffer row r)
            grad_out_RD = grad_out_TD.to(x_RD.dtype).index_select(0, token_of_row_R)
            grad_weight_R = torch.linalg.vecdot(y_RD, grad_out_RD)
            grad_weights_TK = grad_weight_R.index_select(0, row_of_slot_S).view(weights_TK.shape)
            weight_of_row_R = weights_TK.reshape(-1).index_select(0, slot_of_row_R)
            grad_y_RD = grad_out_RD.mul_(weight_of_row_R.unsqueeze(1))
            grad_act_RH = segment_matmul(grad_y_RD, w2, counts)
            grad_w2 = segment_outer_products(grad_y_RD, act_RH, counts)
            grad_h3_RH = grad_act_RH * silu_h1_RH
            grad_h1_RH = torch.ops.aten.silu_backward(grad_act_RH.mul_(h3_RH), h1_RH)
            grad_x_RD = segment_matmul_sum([grad_h1_RH, grad_h3_RH], [w1, w3], counts)
            grad_w1 = segment_outer_products(grad_h1_RH, x_RD, counts)
            grad_w3 = segment_outer_products(grad_h3_RH, x_RD, counts)
            grad_x_TD = _gather_sum(grad_x_RD, row_of_slot_S.view(weights_TK.shape))
        x_dtype, weights_dtype, w1_dtype, w2_dtype, w3_dtype = ctx.input_dtypes
        return (grad_x_TD.to(x_dtype), grad_weights_TK.to(weights_dtype), grad_w1.to(w1_dtype),
                grad_w2.to(w2_dtype), grad_w3.to(w3_dtype), None, None, None, None)


def _gather_sum(rows_RD: torch.Tensor, rows_of_token_TK: torch.Tensor,
                weights_TK: torch.Tensor | None = None) -> torch.Tensor:
    """out_t = sum_j weights_tj * rows[rows_of_token_tj], the k terms added in slot order
    (deterministic: no atomics). ``embedding_bag`` does the gather, the weighting and the sum in
    one pass; an index_select into a (T, k, D) buffer and a reduction over it read and write
    every row twice more."""
    return F.embedding_bag(rows_of_token_TK, rows_RD, mode="sum", per_sample_weights=weights_TK)


# The two loops over experts. Their trip counts depend on the routing, so torch.compile must not
# trace them (it would specialise on the counts and recompile as routing changes): under
# compile they are opaque custom ops whose output shapes depend only on input shapes, and the
# rest of the layer (gathers, SwiGLU, combine) compiles with the model, once. Eager code calls
# the plain functions (no dispatcher round trip). Each runs as one ``torch._grouped_mm`` call
# where that applies, else as a Python loop of matmuls.


def _segment_matmul(rows: list[torch.Tensor], matrices: list[torch.Tensor],
                    slots_per_expert: torch.Tensor) -> torch.Tensor:
    if not _grouped_mm_applies(*rows, *matrices):
        return _looped_segment_matmul(rows, matrices, slots_per_expert)
    offsets = _group_offsets(slots_per_expert)
    out_RB = torch._grouped_mm(rows[0], matrices[0], offs=offsets)
    for rows_RA, matrices_EAB in zip(rows[1:], matrices[1:]):
        out_RB += torch._grouped_mm(rows_RA, matrices_EAB, offs=offsets)
    return out_RB


def _segment_outer_products(left_RA: torch.Tensor, right_RB: torch.Tensor,
                            slots_per_expert: torch.Tensor) -> torch.Tensor:
    if not _grouped_mm_applies(left_RA.T, right_RB):
        return _looped_segment_outer_products(left_RA, right_RB, slots_per_expert)
    # An expert without rows gets exact zeros from grouped_mm too (tested).
    return torch._grouped_mm(left_RA.T, right_RB, offs=_group_offsets(slots_per_expert))


def _grouped_mm_applies(*operands: torch.Tensor) -> bool:
    """Whether ``torch._grouped_mm`` runs the loop: on a CPU in fp32, with every stride a
    multiple of 16 bytes (its requirement). There it gives the loop's results (bitwise, with
    one thread) in one call: 1-14 % faster than the Python loop per call on the benchmark's
    shapes, 3.4x on tiny matrices (BENCHMARKS.md, "MoE dispatch"). bf16/fp16 on a CPU keep
    the loop, because grouped_mm builds a oneDNN kernel for every new row count (see
    ROW_BLOCK); so do GPUs, where it takes bf16 only, on recent architectures (not measured
    here)."""
    return all(
        t.device.type == "cpu" and t.dtype == torch.float32 and t.data_ptr() % 16 == 0
        and all(stride == 1 or stride % 4 == 0 for stride in t.stride()) for t in operands
    ) and _cpu_grouped_mm_works()


@functools.cache
def _cpu_grouped_mm_works() -> bool:
    """grouped_mm is private API: older torch lacks it or runs it on CUDA only. Try it once."""
    try:
        rows, matrices = torch.ones(8, 4), torch.ones(2, 4, 4)
        out = torch._grouped_mm(rows, matrices, offs=torch.tensor([3, 8], dtype=torch.int32))
    except (AttributeError, RuntimeError, NotImplementedError):
        return False
    return bool((out == 4).all())


def _group_offsets(slots_per_expert: torch.Tensor) -> torch.Tensor:
    """End row of each expert's block: the ``offs`` of grouped_mm."""
    return slots_per_expert.cumsum(0).to(torch.int32)


ROW_BLOCK = 64
"""On a CPU, bf16 and fp16 matmuls run in oneDNN, which builds a kernel for every new matrix
shape (about 1 ms, far more than the matmul). The expert loops' row counts change with the
routing, so in those dtypes each expert's rows are cut into a multiple of ROW_BLOCK and a
remainder below it: a bounded set of shapes, all built once and then reused. (fp32 runs in a
BLAS without per-shape set-up, and GPUs have none either: no cut there.)"""


def _row_pieces(start: int, count: int, bounded_shapes: bool) -> list[tuple[int, int]]:
    """(start, rows) pieces of the rows [start, start + count)."""
    if count == 0:
        return []
    whole_blocks = count - count % ROW_BLOCK
    if not bounded_shapes or whole_blocks in (0, count):
        return [(start, count)]
    return [(start, whole_blocks), (start + whole_blocks, count - whole_blocks)]


def _needs_bounded_shapes(t: torch.Tensor) -> bool:
    return t.device.type == "cpu" and t.dtype in (torch.bfloat16, torch.float16)


def _looped_segment_matmul(rows: list[torch.Tensor], matrices: list[torch.Tensor],
                           slots_per_expert: torch.Tensor) -> torch.Tensor:
    first_rows_RA, first_matrices_EAB = rows[0], matrices[0]
    out_RB = first_rows_RA.new_empty(first_rows_RA.shape[0], first_matrices_EAB.shape[2])
    bounded = _needs_bounded_shapes(first_rows_RA)
    start = 0
    for expert, count in enumerate(slots_per_expert.tolist()):
        for first, piece_rows in _row_pieces(start, count, bounded):
            piece = slice(first, first + piece_rows)
            torch.mm(first_rows_RA[piece], first_matrices_EAB[expert], out=out_RB[piece])
            for rows_RA, matrices_EAB in zip(rows[1:], matrices[1:]):
                out_RB[piece].addmm_(rows_RA[piece], matrices_EAB[expert])
        start += count
    return out_RB


def _looped_segment_outer_products(left_RA: torch.Tensor, right_RB: torch.Tensor,
                                   slots_per_expert: torch.Tensor) -> torch.Tensor:
    out_EAB = left_RA.new_empty(slots_per_expert.numel(), left_RA.shape[1], right_RB.shape[1])
    bounded = _needs_bounded_shapes(left_RA)
    start = 0
    for expert, count in enumerate(slots_per_expert.tolist()):
        if not count:
            out_EAB[expert] = 0  # an expert without tokens gets an exact zero gradient
        for piece, (first, rows) in enumerate(_row_pieces(start, count, bounded)):
            left_rows, right_rows = left_RA[first:first + rows].T, right_RB[first:first + rows]
            if piece == 0:
                torch.mm(left_rows, right_rows, out=out_EAB[expert])
            else:
                out_EAB[expert].addmm_(left_rows, right_rows)
        start += count
    return out_EAB


# Defined with the low-level ``torch.library.Library`` rather than ``torch.library.custom_op``:
# the latter's Python wrapper costs ~20 us more per call, and a compiled MoE step makes 8 calls
# per layer (about 3 % of a compiled demo step, BENCHMARKS.md "Train step"). The schemas declare
# no mutation and fresh outputs; ``tests/test_moe.py`` runs ``torch.library.opcheck`` on both.
_LIBRARY = torch.library.Library("moelab", "DEF")
_LIBRARY.define("segment_matmul(Tensor[] rows, Tensor[] matrices, Tensor slots_per_expert) -> Tensor")
_LIBRARY.define("segment_outer_products(Tensor left, Tensor right, Tensor slots_per_expert) -> Tensor")


# The kernels look ``_segment_matmul`` / ``_segment_outer_products`` up when called, not when
# registered, so the compiled and the eager path always run the same function (a test that
# watches one watches both).
def _segment_matmul_kernel(rows, matrices, slots_per_expert):
    return _segment_matmul(rows, matrices, slots_per_expert)


def _segment_outer_products_kernel(left_RA, right_RB, slots_per_expert):
    return _segment_outer_products(left_RA, right_RB, slots_per_expert)


_LIBRARY.impl("segment_matmul", _segment_matmul_kernel, "CompositeExplicitAutograd")
_LIBRARY.impl("segment_outer_products", _segment_outer_products_kernel, "CompositeExplicitAutograd")


@torch.library.register_fake("moelab::segment_matmul", lib=_LIBRARY)
def _(rows, matrices, slots_per_expert):
    return rows[0].new_empty(rows[0].shape[0], matrices[0].shape[2])


@torch.library.register_fake("moelab::segment_outer_products", lib=_LIBRARY)
def _(left_RA, right_RB, slots_per_expert):
    return left_RA.new_empty(slots_per_expert.shape[0], left_RA.shape[1], right_RB.shape[1])


_segment_matmul_op = torch.ops.moelab.segment_matmul.default
_segment_outer_products_op = torch.ops.moelab.segment_outer_products.default


def segment_matmul(rows_RA, matrices_EAB, slots_per_expert):
    """Each expert's block of rows times its own (A, B) matrix: (R, A) -> (R, B)."""
    return segment_matmul_sum([rows_RA], [matrices_EAB], slots_per_expert)


def segment_matmul_sum(rows, matrices, slots_per_expert):
    """``sum_i segment_matmul(rows[i], matrices[i])`` as one (R, B) result (the loop
    accumulates each block in place: no second buffer)."""
    if torch.compiler.is_compiling():
        return _segment_matmul_op(rows, matrices, slots_per_expert)
    return _segment_matmul(rows, matrices, slots_per_expert)


def segment_outer_products(left_RA, right_RB, slots_per_expert):
    """Per expert, left_rows.T @ right_rows: the (E, A, B) weight gradient; exactly zero for
    experts that got no rows."""
    if torch.compiler.is_compiling():
        return _segment_outer_products_op(left_RA, right_RB, slots_per_expert)
    return _segment_outer_products(left_RA, right_RB, slots_per_expert)


# --------------------------------------------------------------------------------------------
# The layer
# --------------------------------------------------------------------------------------------


@dataclass
class RoutedTokens:
    """One batch's routing decision and its losses: what dispatch, the auxiliary losses and the
    diagnostics read (computed once and shared)."""

    router_logits_TE: torch.Tensor
    weights_TK: torch.Tensor
    experts_TK: torch.Tensor
    slot_counts_E: torch.Tensor
    lb_loss: torch.Tensor
    z_loss: torch.Tensor


@dataclass
class MoEAux:
    """What one MoE layer returns beside its output."""

    lb_loss: torch.Tensor
    z_loss: torch.Tensor
    routing: RoutingStats | None
    """None when the caller asked not to collect it."""


class MoEFeedForward(nn.Module):
    """Routed SwiGLU experts (Mixtral semantics), a drop-in for the dense FeedForward.

    Parameters: ``router`` (Linear d_model -> E, no bias) and experts stacked as
    ``w1, w3: (E, d_expert, d_model)``, ``w2: (E, d_model, d_expert)`` -- each expert's slice is
    laid out like an ``nn.Linear`` weight, and this is the layout of Hugging Face's Mixtral
    (``gate_up_proj = cat([w1, w3], dim=1)``, ``down_proj = w2``).
    """

    def __init__(self, cfg: ModelConfig, dispatch: str = "sorted"):
        super().__init__()
        if cfg.moe is None:
            raise MoelabError("model.moe=null is invalid for MoEFeedForward: give a moe section")
        if dispatch not in DISPATCH_MODES:
            raise MoelabError(f"dispatch={dispatch!r} is invalid: allowed {', '.join(DISPATCH_MODES)}")
        moe = cfg.moe
        self.num_experts, self.top_k, self.dispatch = moe.num_experts, moe.top_k, dispatch
        self.renormalize = moe.renormalizes_weights
        self.router = nn.Linear(cfg.d_model, moe.num_experts, bias=False)
        self.w1 = nn.Parameter(torch.empty(moe.num_experts, moe.d_expert, cfg.d_model))
        self.w2 = nn.Parameter(torch.empty(moe.num_experts, cfg.d_model, moe.d_expert))
        self.w3 = nn.Parameter(torch.empty(moe.num_experts, moe.d_expert, cfg.d_model))

    def forward(self, x_BTD: torch.Tensor, collect_routing: bool = True) -> tuple[torch.Tensor, MoEAux]:
        """Output and aux losses; ``collect_routing=False`` skips the routing statistics
        (``aux.routing`` None), which training does not read."""
        x_TD = x_BTD.reshape(-1, x_BTD.shape[-1])
        routed = self.route_tokens(x_TD)
        if self.dispatch == "sorted":
            y_TD = sorted_experts_forward(x_TD, routed.weights_TK, routed.experts_TK,
                                          self.w1, self.w2, self.w3, routed.slot_counts_E)
        else:
            y_TD = reference_experts_forward(x_TD, routed.weights_TK, routed.experts_TK,
                                             self.w1, self.w2, self.w3)
        return y_TD.view(x_BTD.shape), self.aux_outputs(routed, collect_routing)

    def route_tokens(self, x_TD: torch.Tensor) -> RoutedTokens:
        """Router logits (fp32, for stability), top-k weights, slot counts and the losses, one
        softmax and one slot count shared by all of them."""
        with torch.autocast(x_TD.device.type, enabled=False):
            router_logits_TE = F.linear(x_TD.float(), self.router.weight.float())
        # The softmax as exp(logits - log Z), sharing log Z with the z-loss: with E in the last
        # dimension this is 2x cheaper, forward and backward, than torch.softmax on a CPU.
        log_z_T = torch.logsumexp(router_logits_TE, dim=-1)
        probs_TE = torch.exp(router_logits_TE - log_z_T.unsqueeze(-1))
        weights_TK, experts_TK = top_k_weights(probs_TE, self.top_k, self.renormalize)
        slot_counts_E = count_slots(experts_TK, self.num_experts)
        return RoutedTokens(
            router_logits_TE, weights_TK, experts_TK, slot_counts_E,
            lb_loss=balancing_loss_from_counts(probs_TE, slot_counts_E),
            z_loss=log_z_T.square().mean(),  # router_z_loss
        )

    def aux_outputs(self, routed: RoutedTokens, collect_routing: bool) -> MoEAux:
        """The balancing and z losses, and the routing statistics if asked."""
        stats = (routing_stats(routed.router_logits_TE, routed.experts_TK)
                 if collect_routing else None)
        return MoEAux(routed.lb_loss, routed.z_loss, routing=stats)
