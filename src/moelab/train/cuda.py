"""The fast settings of a CUDA device, applied where training picks its device.

- TF32 for fp32 matmuls: fp32 weights stay fp32, their products run on tensor cores with a
  10-bit mantissa (the master copy and the optimizer keep full precision). torch turns it off by
  default for matmuls since 1.12; nanoGPT, torchtitan and most training code turn it on. It is set
  through ``torch.set_float32_matmul_precision`` alone: once the per-backend ``fp32_precision``
  API has been used, ``torch.get_float32_matmul_precision()`` (which inductor reads under
  max-autotune) and the legacy ``allow_tf32`` getters raise. (cuDNN convolutions take TF32 by
  default; the model has none.)
- Flash and memory-efficient SDPA kernels allowed (torch's default; set again so that nothing
  earlier in the process has switched them off): the causal attention takes flash in bf16.

bf16 autocast (``train.dtype=bfloat16``), ``train.compile=true``, fused AdamW
(``moelab.train.optim``) and the grouped experts (``moelab.moe.experts``, chosen per call) are
set elsewhere. None of it was measured on a GPU yet (BENCHMARKS.md, "GPU"). A CPU is left as it
is: its numbers must not move.
"""

from __future__ import annotations

import torch


def configure_cuda(device: torch.device) -> None:
    """Apply the settings above when ``device`` is a GPU (a no-op on a CPU)."""
    if device.type != "cuda":
        return
    torch.set_float32_matmul_precision("high")  # "high": TF32
    torch.backends.cuda.enable_flash_sdp(True)
    torch.backends.cuda.enable_mem_efficient_sdp(True)


def host_to_device(tensor: torch.Tensor, device: torch.device) -> torch.Tensor:
    """``tensor`` on ``device``; onto a GPU from pinned memory without blocking the host (a copy
    from pageable memory is staged and waits, whatever ``non_blocking`` says). torch's pinned
    allocator keeps the buffer until the copy is done."""
    if device.type != "cuda":
        return tensor.to(device)
    return tensor.pin_memory().to(device, non_blocking=True)
