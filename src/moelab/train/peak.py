"""The peak FLOP/s that model FLOPs utilisation (MFU) divides by: given, looked up, or measured.

MFU = achieved model FLOP/s / peak FLOP/s, the achieved FLOP/s counted as tokens/s x 6 x the
active parameters (``flops_per_token(...).six_n``; PaLM's appendix B convention with the
parameters a token uses, the attention FLOPs not counted). So two runs' MFU compare the useful
work they do per second, whatever their kernels.

The peak is ``train.peak_flops`` when given; on a known NVIDIA GPU its dense bf16 tensor-core
peak from the vendor's data sheet; on a CPU it is measured once per process with a square
matmul in the run's dtype and thread count, and named as measured: a CPU has no data-sheet
number that its BLAS reaches, so MFU there says how close training comes to this machine's
own matmul. An unknown GPU has no peak (MFU is left out) unless one is given.
"""

from __future__ import annotations

import functools
import time
from dataclasses import dataclass
from typing import Optional

import torch

MFU_CONVENTION = "6 * active params * tokens/s / peak (attention FLOPs not counted)"

# Dense (no 2:4 sparsity) bf16 tensor-core peaks from NVIDIA's data sheets, in FLOP/s; the
# first name that the device name contains wins, so longer names come first.
GPU_BF16_PEAKS = (
    ("GB200", 2.5e15), ("B200", 2.25e15), ("H200", 989e12), ("H100 PCIe", 756e12),
    ("H100", 989e12), ("H800", 989e12), ("GH200", 989e12), ("A100", 312e12), ("A800", 312e12),
    ("L40S", 362e12), ("L4", 121e12), ("A10G", 70e12), ("RTX 4090", 165e12),
    ("RTX 3090", 71e12), ("V100", 125e12), ("T4", 65e12),
)
MEASURE_SIZE = 1024
"""The side of the square matmul a CPU's peak is measured with."""
MEASURE_REPEATS = 5


@dataclass(frozen=True)
class PeakFlops:
    flops_per_s: Optional[float]
    """None where no peak is known: MFU is then left out."""
    source: str
    """Where the number comes from: 'given', 'data sheet: <GPU> bf16 dense', 'measured: ...'."""


def gpu_peak(device_name: str) -> Optional[PeakFlops]:
    """The data-sheet bf16 peak of the GPU called ``device_name``, None if unknown."""
    for name, peak in GPU_BF16_PEAKS:
        if name.lower() in device_name.lower():
            return PeakFlops(peak, f"data sheet: {name} bf16 dense")
    return None


def peak_flops(device: torch.device, dtype: torch.dtype, given: Optional[float]) -> PeakFlops:
    """The peak MFU divides by on ``device`` (see the module doc)."""
    if given is not None:
        return PeakFlops(float(given), "given (train.peak_flops)")
    if device.type == "cuda":
        name = torch.cuda.get_device_name(device)
        return gpu_peak(name) or PeakFlops(None, f"unknown GPU {name}: set train.peak_flops")
    flops = measured_cpu_peak(dtype, torch.get_num_threads())
    dtype_name = str(dtype).removeprefix("torch.")
    return PeakFlops(flops, f"measured: CPU {MEASURE_SIZE}x{MEASURE_SIZE} {dtype_name} matmul, "
                            f"{torch.get_num_threads()} threads")


@functools.cache
def measured_cpu_peak(dtype: torch.dtype, threads: int) -> float:
    """FLOP/s of the fastest of a few square matmuls on this CPU (2 n^3 FLOPs each), measured
    once per process, dtype and thread count. It draws from its own generator, so the run's
    random streams are untouched."""
    generator = torch.Generator().manual_seed(0)
    a = torch.randn(MEASURE_SIZE, MEASURE_SIZE, generator=generator).to(dtype)
    b = torch.randn(MEASURE_SIZE, MEASURE_SIZE, generator=generator).to(dtype)
    torch.mm(a, b)  # warm-up: the first call pays for allocation and kernel selection
    best = float("inf")
    for _ in range(MEASURE_REPEATS):
        start = time.perf_counter()
        torch.mm(a, b)
        best = min(best, time.perf_counter() - start)
    return 2 * MEASURE_SIZE**3 / max(best, 1e-9)


def mfu(tokens_per_s: float, flops_per_token: int, peak: PeakFlops) -> Optional[float]:
    """Model FLOPs utilisation, None without a peak."""
    if not peak.flops_per_s:
        return None
    return tokens_per_s * flops_per_token / peak.flops_per_s
