"""The peak FLOP/s that model FLOPs utilisation (MFU) divides by: given, looked up, or measured.

MFU counts the useful work per token as 6 x the active parameters (``flops_per_token(...).six_n``;
PaLM's appendix B convention with the parameters a token uses, the attention FLOPs not
counted), so two runs' MFU compare the useful work they do per second, whatever their kernels.
Its clock depends on the device, and ``MFU_CONVENTION``/``MFU_CONVENTION_CPU`` say which, in
every summary that shows one:

- **a GPU**: tokens per second of wall time x 6 N_active / the peak: ``train.peak_flops`` when
  given, else the dense bf16 tensor-core peak of the vendor's data sheet for a known NVIDIA
  GPU; an unknown GPU has no peak (MFU is left out) unless one is given.
- **a CPU**: tokens per CPU-second x 6 N_active / the matmul FLOPs per CPU-second of this
  machine (``train.peak_flops``, when given, is read in that unit: one thread's rate). CPU time
  (``time.process_time``, all the process's threads) is what a machine shared with other jobs
  barely moves: wall time there measures the other jobs too (identical runs read 14-49 % MFU in
  wall time). A CPU has no data-sheet number that its BLAS reaches, so the peak is measured:
  the best rate of square matmuls in the run's dtype and thread count over sizes that grow until
  the rate stops growing (a 1024 matmul alone sits below the large-matrix rate), each timed in
  CPU time. It is measured once per machine and cached (``peak_flops.json`` in moelab's cache
  root, ``moelab.data.prepare.cache_base``), keyed by the CPU model, torch version, thread count
  and dtype; the summary names the key and when it was measured.
"""

from __future__ import annotations

import functools
import time
from dataclasses import dataclass
from pathlib import Path
from collections.abc import Callable
from typing import Optional

import torch

from moelab.data.prepare import cache_base
from moelab.fileio import atomic_write_json, read_json
from moelab.numerics import cpu_model

MFU_CONVENTION = "6 * N_active * tokens/s (wall) / peak FLOP/s (attention FLOPs not counted)"
MFU_CONVENTION_CPU = ("6 * N_active * tokens per CPU-second / matmul FLOPs per CPU-second "
                      "(attention FLOPs not counted)")

# Dense (no 2:4 sparsity) bf16 tensor-core peaks from NVIDIA's data sheets, in FLOP/s; the
# first name that the device name contains wins, so longer names come first.
GPU_BF16_PEAKS = (
    ("GB200", 2.5e15), ("B200", 2.25e15), ("H200", 989e12), ("H100 PCIe", 756e12),
    ("H100", 989e12), ("H800", 989e12), ("GH200", 989e12), ("A100", 312e12), ("A800", 312e12),
    ("L40S", 362e12), ("L4", 121e12), ("A10G", 70e12), ("RTX 4090", 165e12),
    ("RTX 3090", 71e12), ("V100", 125e12), ("T4", 65e12),
)
MEASURE_SIZES = (256, 512, 1024, 2048)
"""Sides of the square matmuls a CPU's peak is measured with, smallest first."""
MEASURE_CALLS = 5
MEASURE_CPU_S = 0.5
"""Per size: up to ``MEASURE_CALLS`` calls, fewer once this much CPU time is spent (bf16 on a
CPU without bf16 units runs about 1 GFLOP/s: one 1024 matmul takes 2 s)."""
ALWAYS_UP_TO = 1024
"""Sizes up to this one are always measured: a lucky reading at a small size under load must not
stop the search below the large-matrix rate (BENCHMARKS.md, "Peak and MFU on a shared CPU")."""
GAIN_TO_GO_ON = 1.03
"""Beyond ``ALWAYS_UP_TO``, a larger size is tried while the last one raised the best rate by at
least 3 %."""
PEAK_CACHE_FILE = "peak_flops.json"
READINGS = 3
"""Readings of the peak kept per cache key, each by the first processes that need it: a
reading taken while other jobs thrash the caches reads low (11-15 % below the others in one
case, BENCHMARKS.md), and the best of readings at different times is the machine's."""


@dataclass(frozen=True)
class PeakFlops:
    flops_per_s: Optional[float]
    """None where no peak is known: MFU is then left out. On a CPU: FLOPs per CPU-second."""
    source: str
    """Where the number comes from: 'given', 'data sheet: <GPU> bf16 dense', 'measured: ...'."""
    clock: str = "wall"
    """What MFU's tokens/s is counted in: 'wall' (a GPU) or 'cpu' (CPU-seconds, a CPU)."""

    @property
    def convention(self) -> str:
        return MFU_CONVENTION_CPU if self.clock == "cpu" else MFU_CONVENTION

    @property
    def flops_per_cpu_s(self) -> Optional[float]:
        return self.flops_per_s if self.clock == "cpu" else None


def gpu_peak(device_name: str) -> Optional[PeakFlops]:
    """The data-sheet bf16 peak of the GPU called ``device_name``, None if unknown."""
    for name, peak in GPU_BF16_PEAKS:
        if name.lower() in device_name.lower():
            return PeakFlops(peak, f"data sheet: {name} bf16 dense")
    return None


def peak_flops(device: torch.device, dtype: torch.dtype, given: Optional[float]) -> PeakFlops:
    """The peak MFU divides by on ``device`` (see the module doc)."""
    clock = "wall" if device.type == "cuda" else "cpu"
    if given is not None:
        return PeakFlops(float(given), "given (train.peak_flops)", clock)
    if device.type == "cuda":
        name = torch.cuda.get_device_name(device)
        return gpu_peak(name) or PeakFlops(None, f"unknown GPU {name}: set train.peak_flops")
    return measured_cpu_peak(dtype, torch.get_num_threads())


def mfu(tokens_per_s: float, tokens_per_cpu_s: Optional[float], flops_per_token: int,
        peak: PeakFlops) -> Optional[float]:
    """Model FLOPs utilisation in the peak's clock (``peak.convention``), None without a peak
    or, on a CPU, without a CPU time."""
    rate = tokens_per_cpu_s if peak.clock == "cpu" else tokens_per_s
    if not peak.flops_per_s or rate is None:
        return None
    return rate * flops_per_token / peak.flops_per_s


def matmul_flops(m: int, k: int, n: int) -> int:
    """FLOPs of an (m, k) x (k, n) product: one multiply and one add per term."""
    return 2 * m * k * n


# --------------------------------------------------------------------------------------------
# A CPU's peak: measured in CPU time, cached per machine
# --------------------------------------------------------------------------------------------


def peak_cache_key(dtype: torch.dtype, threads: int, cpu: str | None = None,
                   torch_version: str | None = None) -> str:
    """What a measured peak depends on: the CPU, the torch build (its BLAS), threads, dtype."""
    dtype_name = str(dtype).removeprefix("torch.")
    return (f"{cpu or cpu_model()} | torch {torch_version or torch.__version__} | "
            f"{threads} thread{'s' if threads != 1 else ''} | {dtype_name}")


def peak_cache_path() -> Path:
    return cache_base() / PEAK_CACHE_FILE


@functools.cache
def measured_cpu_peak(dtype: torch.dtype, threads: int) -> PeakFlops:
    """This machine's matmul FLOPs per CPU-second in ``dtype`` with ``threads`` threads: the best
    of ``READINGS`` readings (``measure_cpu_peak``), each taken by a different process and kept
    in the cache file; once the cache holds them all, read from it. Once per process."""
    key, path = peak_cache_key(dtype, threads), peak_cache_path()
    readings = _valid_readings(_read_cache(path).get(key))
    if len(readings) < READINGS:
        rates = measure_cpu_peak(dtype)
        readings.append({"flops_per_cpu_s": max(rates.values()),
                         "rate_by_size": {str(n): rate for n, rate in rates.items()},
                         "measured": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())})
        best = max(readings, key=lambda reading: reading["flops_per_cpu_s"])
        # Another process may add its own key meanwhile; the later write wins and the loser
        # measures again next time: a few seconds, never a wrong number.
        atomic_write_json(path, {**_read_cache(path),
                                 key: {"flops_per_cpu_s": best["flops_per_cpu_s"],
                                       "readings": readings}})
    best = max(readings, key=lambda reading: reading["flops_per_cpu_s"])
    sizes = ", ".join(best.get("rate_by_size", {})) or "?"
    return PeakFlops(float(best["flops_per_cpu_s"]),
                     f"measured: CPU matmul FLOPs per CPU-second, the best of {len(readings)} "
                     f"of {READINGS} readings (square sizes {sizes}) [{key}], the best on "
                     f"{best.get('measured', '?')}, cached in {PEAK_CACHE_FILE} in the cache "
                     f"root", clock="cpu")


def _valid_readings(entry: object) -> list[dict]:
    """The cached readings of one key; anything damaged counts as none (measured again)."""
    readings = entry.get("readings") if isinstance(entry, dict) else None
    if not isinstance(readings, list):
        return []
    return [r for r in readings if isinstance(r, dict) and isinstance(
        r.get("flops_per_cpu_s"), (int, float)) and r["flops_per_cpu_s"] > 0][:READINGS]


def _read_cache(path: Path) -> dict:
    """The cache's entries; a missing or unreadable file is an empty cache (measured again)."""
    try:
        entries = read_json(path)
    except (OSError, ValueError):  # UnicodeDecodeError and JSONDecodeError are ValueErrors
        return {}
    return entries if isinstance(entries, dict) else {}


def measure_cpu_peak(dtype: torch.dtype, sizes: tuple[int, ...] = MEASURE_SIZES,
                     clock: Callable[[], float] = time.process_time,
                     always_up_to: int = ALWAYS_UP_TO) -> dict[int, float]:
    """Matmul FLOPs per CPU-second at each size tried, in ``clock``'s seconds: every size up to
    ``always_up_to``, then larger ones while the best rate still grows by ``GAIN_TO_GO_ON``.
    Draws from its own generator, so the run's random streams are untouched."""
    generator = torch.Generator().manual_seed(0)
    rates: dict[int, float] = {}
    for n in sizes:
        a = torch.randn(n, n, generator=generator).to(dtype)
        b = torch.randn(n, n, generator=generator).to(dtype)
        rates[n] = _best_rate(a, b, clock)
        best_before = max((rate for size, rate in rates.items() if size < n), default=0.0)
        if n >= always_up_to and best_before and rates[n] < GAIN_TO_GO_ON * best_before:
            break
    return rates


def _best_rate(a: torch.Tensor, b: torch.Tensor, clock: Callable[[], float]) -> float:
    torch.mm(a, b)  # warm-up: the first call pays for allocation and kernel selection
    flops = matmul_flops(a.shape[0], a.shape[1], b.shape[1])
    best, spent = float("inf"), 0.0
    for _ in range(MEASURE_CALLS):
        start = clock()
        torch.mm(a, b)
        seconds = clock() - start
        best, spent = min(best, seconds), spent + seconds
        if spent > MEASURE_CPU_S:
            break
    return flops / max(best, 1e-9)
