"""CPU kernels of the ``sorted`` experts: the expert-major layout, one autograd node for the
whole SwiGLU-experts computation, and the per-expert segment products it runs on.

The T*k token-slots are stably sorted by expert id, so each expert's slots form one contiguous
block of rows (``ExpertLayout``); every expert runs its SwiGLU on all of its rows (no capacity
limit, no token is ever dropped) and the outputs are put back in slot order and combined with
the routing weights in a fixed order (deterministic). Gather, expert matmuls, combine and their
backward live in one autograd node (``_SortedSwiGLUExperts``): autograd bookkeeping for ~10
nodes per expert would dominate at large E on a CPU. Every tensor in it has a shape fixed by T,
k and the model; only the loops over experts depend on the routing, and torch.compile sees
them as two opaque custom ops (``segment_matmul``, ``segment_outer_products``), so it compiles
the layer once, whatever the routing. Inside them, fp32 on a CPU runs ``torch._grouped_mm``
(one call for all experts); other dtypes and devices a Python loop of matmuls.

What each of these choices was measured to buy is in BENCHMARKS.md ("MoE dispatch", "Train
step"). Shape suffixes as in ``moelab.moe``.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from moelab.moe.routing import count_slots
from moelab.precision import autocast_off, compute_dtype


def sorted_experts_forward(
    x_TD: torch.Tensor,
    weights_TK: torch.Tensor,
    experts_TK: torch.Tensor,
    w1_EHD: torch.Tensor,
    w2_EDH: torch.Tensor,
    w3_EHD: torch.Tensor,
    slot_counts_E: torch.Tensor | None = None,
) -> torch.Tensor:
    """Dropless sort-based dispatch: the ``sorted`` experts, equal to the ``reference`` loop
    (``moelab.moe.experts``; tests hold it). ``slot_counts_E`` (``count_slots`` of
    ``experts_TK``) may be passed in when the caller already has it."""
    layout = expert_layout(experts_TK, w1_EHD.shape[0], slot_counts_E)
    return _SortedSwiGLUExperts.apply(x_TD, weights_TK, w1_EHD, w2_EDH, w3_EHD,
                                      layout.slot_of_row_R, layout.row_of_slot_S,
                                      layout.token_of_row_R, layout.slots_per_expert)


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
        with autocast_off(x_TD):
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
        with autocast_off(grad_out_TD):
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
    # grouped_mm pads an output row to 16 bytes (6 floats get a stride of 8); the fake kernel
    # promises a contiguous tensor, and a compiled graph asserts the strides it promised.
    return out_RB.contiguous()


def _segment_outer_products(left_RA: torch.Tensor, right_RB: torch.Tensor,
                            slots_per_expert: torch.Tensor) -> torch.Tensor:
    if not _grouped_mm_applies(left_RA.T, right_RB):
        return _looped_segment_outer_products(left_RA, right_RB, slots_per_expert)
    # An expert without rows gets exact zeros from grouped_mm too (tested). Contiguous, as the
    # fake kernel promises (see _segment_matmul).
    return torch._grouped_mm(left_RA.T, right_RB,
                             offs=_group_offsets(slots_per_expert)).contiguous()


def _grouped_mm_applies(*operands: torch.Tensor) -> bool:
    """Whether ``torch._grouped_mm`` runs the loop: on a CPU in fp32, with every stride a
    multiple of 16 bytes (its requirement). There it gives the loop's results (bitwise, with
    one thread) in one call, faster than the Python loop (BENCHMARKS.md, "MoE dispatch").
    bf16/fp16 on a CPU keep the loop, because grouped_mm builds a oneDNN kernel for every new
    row count (see ROW_BLOCK); so do GPUs, where it takes bf16 only, on recent architectures
    (not measured here)."""
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
shape (costing far more than the matmul: BENCHMARKS.md, "Train step"). The expert loops' row
counts change with the routing, so in those dtypes each expert's rows are cut into a multiple
of ROW_BLOCK and a remainder below it: a bounded set of shapes, all built once and then reused.
(fp32 runs in a BLAS without per-shape set-up, and GPUs have none either: no cut there.)"""


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
# the latter's Python wrapper costs more per call, and a compiled MoE step makes 8 calls per
# layer (BENCHMARKS.md, "Train step"). The schemas declare no mutation and fresh outputs;
# ``tests/test_moe.py`` runs ``torch.library.opcheck`` on both.
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

