"""The experts implementations: given the routing, run every token's k SwiGLU experts and sum
their outputs with the combine weights.

Each implementation has one signature and the same semantics; the layer picks one by name from
``EXPERTS_IMPLEMENTATIONS``:

- ``reference``: the plain loop over experts below (slow, obviously right; Hugging Face's
  eager Mixtral experts), the one the tests hold every other implementation equal to, forward
  and backward.
- ``sorted``: dropless sort-based dispatch with a hand-written backward
  (``moelab.moe.kernels``), the fast path on a CPU.
- ``grouped``: ``torch._grouped_mm`` on a padded expert-major buffer laid out on the device
  (``moelab.moe.grouped``): static shapes, no host sync, the GPU path (bf16 on sm90/sm100). It runs
  wherever torch has grouped_mm (a CPU too, where the tests run it).

The layer's default name, ``auto``, is not an entry but a choice made per call from the device
and dtype (``auto_experts_implementation``): ``grouped`` on a GPU whose grouped_mm has the fast
kernel for the dtype, ``sorted`` everywhere else (on a GPU with a one-line warning saying why).

A new implementation is one function with this signature and one
entry in the dict; ``tests/test_moe.py`` runs every entry against ``reference``.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable

import torch
import torch.nn.functional as F

from moelab.moe.grouped import grouped_experts_forward
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
    "grouped": grouped_experts_forward,
}

AUTO = "auto"
EXPERTS_CHOICES = (AUTO, *EXPERTS_IMPLEMENTATIONS)
"""What ``MoEFeedForward(experts_implementation=...)`` accepts."""

GROUPED_CAPABILITY_MAJORS = (9, 10)
"""On CUDA, torch._grouped_mm has a kernel that reads the offsets on the device (CUTLASS) for
bf16 on sm90 (Hopper) and sm100/sm103 (datacenter Blackwell) only; elsewhere (sm80, sm12x, fp32,
fp16) it falls back to a loop over groups that copies the offsets to the host first: a sync per
call, 9 per MoE layer, no better than ``sorted``."""


def auto_experts_implementation(device_type: str, dtype: torch.dtype,
                                device_problem: str | None) -> tuple[str, str | None]:
    """``auto``: the implementation for a call on ``device_type`` computing in ``dtype``, and a
    warning when a GPU falls back. ``device_problem`` (``grouped_problem``) says why the grouped
    kernel cannot run on this GPU at all (None: it can)."""
    if device_type != "cuda":
        return "sorted", None  # the measured fast path on a CPU (BENCHMARKS.md, "MoE dispatch")
    problem = device_problem
    if problem is None and dtype != torch.bfloat16:
        problem = f"torch._grouped_mm has no sync-free kernel for {str(dtype).removeprefix('torch.')}"
    if problem is None:
        return "grouped", None
    return "sorted", f"experts: {problem}; running the sorted experts (a host sync per MoE layer)"


def grouped_problem(device_index: int, feature_sizes: tuple[int, ...] = (),
                    capability: Callable[[int], tuple[int, int]] | None = None,
                    has_grouped_mm: bool | None = None) -> str | None:
    """Why CUDA device ``device_index`` cannot run the grouped experts fast, or None.
    ``feature_sizes`` (d_model, d_expert) must be multiples of 8: grouped_mm needs every stride
    16-byte aligned in bf16. ``capability`` and ``has_grouped_mm`` default to this machine's
    (tests pass others)."""
    if has_grouped_mm is None:
        has_grouped_mm = hasattr(torch, "_grouped_mm")
    if not has_grouped_mm:
        return f"torch {torch.__version__} has no torch._grouped_mm"
    major, minor = (capability or torch.cuda.get_device_capability)(device_index)
    if major not in GROUPED_CAPABILITY_MAJORS:
        return (f"cuda:{device_index} is sm{major}{minor}; torch._grouped_mm's sync-free kernel "
                f"is built for sm90 and sm100 only")
    unaligned = [size for size in feature_sizes if size % 8]
    if unaligned:
        return f"sizes {unaligned} are not multiples of 8 (torch._grouped_mm's 16-byte strides)"
    return None


@functools.cache
def cuda_grouped_problems(feature_sizes: tuple[int, ...]) -> dict[int, str | None]:
    """``grouped_problem`` of every visible GPU, looked up once (the layer reads the answer in
    forward, where torch.compile must not trace a device query). Empty without CUDA."""
    if not torch.cuda.is_available():
        return {}
    return {index: grouped_problem(index, feature_sizes) for index in range(torch.cuda.device_count())}


_WARNED: set[str] = set()


def warn_once(message: str) -> None:
    """One line on stderr, the first time each message comes up."""
    if message not in _WARNED:
        _WARNED.add(message)
        print(f"moelab: warning: {message}", file=sys.stderr)
