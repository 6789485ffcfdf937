"""The ``grouped`` experts: every expert's SwiGLU as three ``torch._grouped_mm`` calls on one
padded, expert-major buffer whose layout is computed on the device (the GPU path).

The ``sorted`` experts (``moelab.moe.kernels``) read the per-expert row counts on the host to
drive a loop of matmuls: one device-to-host sync per MoE layer on a GPU, and 9 E kernel
launches per layer and step. Here nothing leaves the device and no shape depends on the routing:

- The buffer has a fixed ``padded_rows(S, E)`` = S + E (ROW_ALIGN - 1) rows, S = T*k token-slots.
  Each expert's block starts at a multiple of ROW_ALIGN (grouped_mm reads a group's rows from an
  address it needs 16-byte aligned, also when they are the reduction dimension of the weight
  gradient); the rows between blocks, and those after the last, hold zeros and belong to the
  expert before them, so every row is defined and the zeros add nothing to any gradient.
- The group offsets (``offs``, each expert's end row) stay a device tensor: grouped_mm takes
  them as data, so the routing can change every step without a sync, a recompile or a new shape.
- Gather, products, SwiGLU and the weighted combine are ordinary differentiable ops (grouped_mm
  has its own backward), so torch.compile traces the whole layer as one graph.

The gathers avoid scatter-adds with repeated indices (atomics on a GPU, so not deterministic):
each token-slot owns exactly one buffer row, the input is written into the buffer with
``index_copy`` (its backward a gather) and the output read back with ``index_select`` (its
backward a scatter of distinct rows), and a token's k outputs are summed in slot order.

Where ``torch._grouped_mm`` does not take the dtype (float64, used by the tests to check this
layout tightly against the reference loop) or is missing (old torch), ``grouped_mm`` runs an
equivalent masked product: E times the work, still no sync. Which implementation the model
uses on which device is decided in ``moelab.moe.experts``. Shape suffixes as in ``moelab.moe``;
P = padded rows of the buffer.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from moelab.moe.routing import count_slots
from moelab.precision import autocast_off, compute_dtype

ROW_ALIGN = 8
"""Rows per alignment unit of an expert's block: 8 rows of bf16 are 16 bytes (torchtitan's
token-group alignment for bf16 is the same 8); fp32 needs 4, so 8 serves both."""

GROUPED_MM_DTYPES = (torch.bfloat16, torch.float16, torch.float32)
"""What ``torch._grouped_mm`` accepts (torch >= 2.9; on CUDA only bf16 has the fast kernel
without a host sync, see ``moelab.moe.experts``)."""


def grouped_experts_forward(
    x_TD: torch.Tensor,
    weights_TK: torch.Tensor,
    experts_TK: torch.Tensor,
    w1_EHD: torch.Tensor,
    w2_EDH: torch.Tensor,
    w3_EHD: torch.Tensor,
    slot_counts_E: torch.Tensor | None = None,
) -> torch.Tensor:
    """The ``grouped`` experts: equal to the ``reference`` loop (``moelab.moe.experts``), with
    every shape fixed by T, k and the model and no host sync. ``slot_counts_E`` (``count_slots``
    of ``experts_TK``) may be passed in when the caller already has it."""
    layout = padded_layout(experts_TK, w1_EHD.shape[0], slot_counts_E)
    num_tokens, top_k = experts_TK.shape
    dtype = compute_dtype(x_TD)  # honour autocast explicitly, then do the maths without it
    with autocast_off(x_TD):
        x, weights, w1, w2, w3 = (t.to(dtype) for t in (x_TD, weights_TK, w1_EHD, w2_EDH, w3_EHD))
        x_SD = x.unsqueeze(1).expand(-1, top_k, -1).reshape(-1, x.shape[1])
        x_PD = x.new_zeros(layout.rows, x.shape[1]).index_copy(0, layout.row_of_slot_S, x_SD)
        h1_PH = grouped_mm(x_PD, w1.transpose(1, 2), layout.group_end_E)
        h3_PH = grouped_mm(x_PD, w3.transpose(1, 2), layout.group_end_E)
        y_PD = grouped_mm(F.silu(h1_PH) * h3_PH, w2.transpose(1, 2), layout.group_end_E)
        y_TKD = y_PD.index_select(0, layout.row_of_slot_S).view(num_tokens, top_k, -1)
        return (y_TKD * weights.unsqueeze(-1)).sum(1)


@dataclass
class PaddedLayout:
    """Where each token-slot sits in the padded expert-major buffer."""

    rows: int
    """Buffer rows, ``padded_rows(S, E)``: fixed by the shapes, not by the routing."""
    row_of_slot_S: torch.Tensor
    """Buffer row of each token-slot (s = t * k + j, token t's j-th expert); all distinct."""
    group_end_E: torch.Tensor
    """(E,) int32 end row of each expert's block (grouped_mm's ``offs``); the last is ``rows``."""


def padded_rows(num_slots: int, num_experts: int, align: int = ROW_ALIGN) -> int:
    """Rows enough for any routing: each expert's block rounds up by at most align - 1."""
    return num_slots + num_experts * (align - 1)


def padded_layout(experts_TK: torch.Tensor, num_experts: int,
                  slot_counts_E: torch.Tensor | None = None,
                  align: int = ROW_ALIGN) -> PaddedLayout:
    """The slots stably sorted by expert, each expert's block starting at a multiple of
    ``align``: all on the device, from the routing alone."""
    experts_S = experts_TK.reshape(-1)
    if slot_counts_E is None:
        slot_counts_E = count_slots(experts_TK, num_experts)
    rows = padded_rows(experts_S.numel(), num_experts, align)
    block_rows_E = (slot_counts_E + align - 1) // align * align
    block_end_E = block_rows_E.cumsum(0)
    block_start_E = block_end_E - block_rows_E
    sorted_start_E = slot_counts_E.cumsum(0) - slot_counts_E  # where the expert starts unpadded
    slot_at_S = torch.argsort(experts_S, stable=True)  # sorted position -> slot
    expert_at_S = experts_S.index_select(0, slot_at_S)
    position_S = torch.arange(experts_S.numel(), device=experts_S.device)
    row_at_S = block_start_E[expert_at_S] + position_S - sorted_start_E[expert_at_S]
    row_of_slot_S = torch.empty_like(row_at_S).scatter_(0, slot_at_S, row_at_S)
    # The last expert's block runs to the end of the buffer: grouped_mm leaves rows past the last
    # offset undefined, and these hold zeros (no gradient), so they may as well be its.
    group_end_E = torch.cat((block_end_E[:-1], block_end_E.new_full((1,), rows)))
    return PaddedLayout(rows, row_of_slot_S, group_end_E.to(torch.int32))


def grouped_mm(rows_PA: torch.Tensor, matrices_EAB: torch.Tensor,
               group_end_E: torch.Tensor) -> torch.Tensor:
    """Each expert's block of rows times its own (A, B) matrix: (P, A) -> (P, B), blocks ending
    at ``group_end_E``. ``torch._grouped_mm`` where it takes the dtype, else the masked product."""
    if rows_PA.dtype in GROUPED_MM_DTYPES and hasattr(torch, "_grouped_mm"):
        return torch._grouped_mm(rows_PA, matrices_EAB, offs=group_end_E)
    return _masked_grouped_mm(rows_PA, matrices_EAB, group_end_E)


def _masked_grouped_mm(rows_PA: torch.Tensor, matrices_EAB: torch.Tensor,
                       group_end_E: torch.Tensor) -> torch.Tensor:
    """Every row times every expert's matrix, each row keeping its own expert's product: slow,
    any dtype, and the same shapes and no host sync as grouped_mm."""
    row_P = torch.arange(rows_PA.shape[0], device=rows_PA.device, dtype=group_end_E.dtype)
    expert_of_row_P = torch.searchsorted(group_end_E, row_P, right=True)
    products_EPB = torch.matmul(rows_PA, matrices_EAB)
    index_1PB = expert_of_row_P.view(1, -1, 1).expand(1, -1, products_EPB.shape[2])
    return products_EPB.gather(0, index_1PB).squeeze(0)
