"""The fast settings of a CUDA device, applied where training picks its device.

- TF32 for fp32 matmuls and convolutions: fp32 weights stay fp32, their products run on tensor
  cores with a 10-bit mantissa (the master copy and the optimizer keep full precision). torch
  turns it off by default for matmuls since 1.12; nanoGPT, torchtitan and most training code
  turn it on.
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
    matmul = torch.backends.cuda.matmul
    if hasattr(matmul, "fp32_precision"):  # torch >= 2.9 names the precision
        matmul.fp32_precision = "tf32"
        torch.backends.cudnn.conv.fp32_precision = "tf32"
    else:
        matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    torch.backends.cuda.enable_flash_sdp(True)
    torch.backends.cuda.enable_mem_efficient_sdp(True)
