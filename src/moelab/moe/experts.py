"""The experts implementations: given the routing, run every token's k SwiGLU experts and sum
their outputs with the combine weights.

Each implementation has one signature and the same semantics; the layer picks one by name from
``EXPERTS_IMPLEMENTATIONS``:

- ``reference``: the plain loop over experts below (slow, obviously right; Hugging Face's
  eager Mixtral experts), the one the tests hold every other implementation equal to, forward
  and backward.
- ``sorted`` (the default): dropless sort-based dispatch with a hand-written backward
  (``moelab.moe.kernels``), the fast path on a CPU.

A new implementation (a CUDA grouped GEMM, say) is one function with this signature and one
entry in the dict; ``tests/test_moe.py`` runs every entry against ``reference``.
"""

from __future__ import annotations

from typing import Callable

import torch
import torch.nn.functional as F

from moelab.moe.kernels import sorted_experts_forward

ExpertsForward = Callable[..., torch.Tensor]
"""``(x_TD, weights_TK, experts_TK, w1_EHD, w2_EDH, w3_EHD, slot_counts_E=None) -> y_TD``.
``slot_counts_E`` is ``count_slots(experts_TK, E)`` when the caller already has it (an
implementation may ignore it)."""


def reference_experts_forward(
    x_TD: torch.Tensor,
    weights_TK: torch.Tensor,
    experts_TK: torch.Tensor,
    w1_EHD: torch.Tensor,
    w2_EDH: torch.Tensor,
    w3_EHD: torch.Tensor,
    slot_counts_E: torch.Tensor | None = None,
) -> torch.Tensor:
    """The plain loop over experts: each expert's SwiGLU on the tokens that chose it, weighted
    and added into those tokens' outputs."""
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


EXPERTS_IMPLEMENTATIONS: dict[str, ExpertsForward] = {
    "sorted": sorted_experts_forward,
    "reference": reference_experts_forward,
}
