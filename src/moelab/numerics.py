"""Portable numerics: the same config and seed give the same losses on any x86-64 CPU with AVX2.

A CPU run's last bits depend on which kernels the machine picks, and a MoE's discrete routing
turns last-bit differences into different losses. Three libraries pick by processor: PyTorch's
own kernels (softmax, norms, the random fills of the init) by instruction set
(``ATEN_CPU_CAPABILITY``: DEFAULT, AVX2, AVX512 give different bits), MKL's GEMM by processor
(its conditional numerical reproducibility, ``MKL_CBWR``) and oneDNN by instruction set
(``ONEDNN_MAX_CPU_ISA``, ``DNNL_MAX_CPU_ISA`` in older releases). ``train.numerics``:

- ``portable`` (the default) pins all three to their AVX2 paths, which every AVX2 machine has,
  at no cost on an AVX2 machine. MKL honours a named branch on Intel CPUs only; on AMD CPUs it
  keeps its own choice, so Intel and AMD machines may still differ in GEMM's last bits;
- ``compatible`` is portable with MKL's COMPATIBLE branch, documented to agree on Intel and
  non-Intel processors alike, at the price of an SSE2 GEMM;
- ``native`` leaves them to the machine (and to the environment, which is how tests emulate
  another machine).

The variables are read when a library first computes, not when torch is imported, so
``enter_numerics`` sets them at the start of ``train`` in whatever process trains (the command
line, a launcher's child, a Ray or Slurm worker), and then checks that torch's kernels are the
pinned ones (a process that computed before cannot change them: a one-line error says so).

Not covered: GPUs (CUDA kernels follow their own rules), non-x86 CPUs (ARM has no AVX2; its
kernels differ), other torch or MKL versions (kernels change between releases), and thread
counts: torch's reductions over more than ~32K elements (the gradient norm of an embedding)
split their sums by thread, so a run's losses depend on its torch threads, which every run
records (``Machine.threads``) and ``moelab rerun`` reuses.
"""

from __future__ import annotations

import os
import platform
import re
from dataclasses import dataclass, field
from typing import Any, Optional

from moelab.errors import MoelabError

NUMERICS_MODES = ("portable", "compatible", "native")
PORTABLE_CAPABILITY = "AVX2"
"""torch.backends.cpu.get_cpu_capability() under portable (and compatible) numerics."""
PINNED_ENVIRONMENT = {
    "portable": {"ATEN_CPU_CAPABILITY": "avx2", "MKL_CBWR": "AVX2",
                 "ONEDNN_MAX_CPU_ISA": "AVX2", "DNNL_MAX_CPU_ISA": "AVX2"},
    # COMPATIBLE is the one MKL branch its documentation says gives the same results on Intel
    # and non-Intel processors: a named branch such as AVX2 falls back to MKL's own choice on
    # AMD CPUs. Its GEMM is SSE2: the demo's matmuls take about 2.6x as long
    # (benchmarks/numerics_cost.py).
    "compatible": {"ATEN_CPU_CAPABILITY": "avx2", "MKL_CBWR": "COMPATIBLE",
                   "ONEDNN_MAX_CPU_ISA": "AVX2", "DNNL_MAX_CPU_ISA": "AVX2"},
    "native": {},
}
"""The variables each mode sets in a run's process."""
NUMERICS_VARIABLES = tuple(PINNED_ENVIRONMENT["portable"])


@dataclass
class Machine:
    """The machine a run trained on, as far as its numbers depend on it."""

    cpu: str = ""
    """The CPU model (/proc/cpuinfo's model name, else the platform's processor string)."""
    capability: str = ""
    """torch's CPU kernel set in use: DEFAULT, AVX2, AVX512 (torch.backends.cpu)."""
    torch: str = ""
    """The torch version."""
    blas: str = ""
    """The BLAS torch was built with and its version, e.g. 'MKL 2024.2'."""
    threads: int = 0
    """torch's intra-op threads."""
    numerics: str = ""
    """The run's train.numerics: portable or native."""
    environment: dict[str, str] = field(default_factory=dict)
    """The numerics variables set in the process (NUMERICS_VARIABLES), unset ones left out."""

    def differences(self, other: Machine) -> list[str]:
        """'name: mine vs other' for each field where the two machines differ."""
        mine, theirs = vars(self), vars(other)
        return [f"{name}: {_shown(mine[name])} vs {_shown(theirs[name])}"
                for name in mine if mine[name] != theirs[name]]


def _shown(value: Any) -> str:
    if isinstance(value, dict):
        return ", ".join(f"{key}={item}" for key, item in value.items()) or "(none)"
    return str(value) if value != "" else "(unknown)"


def enter_numerics(mode: str) -> None:
    """Set this process's numerics for ``mode`` and check that torch's kernels follow them.

    ``portable`` and ``compatible`` set their PINNED_ENVIRONMENT over any value already set
    (the point is that the machine and its environment do not matter); ``native`` changes
    nothing. Call it before the process computes anything with torch."""
    if mode not in NUMERICS_MODES:
        raise MoelabError(f"train.numerics={mode!r} is invalid: allowed "
                          + ", ".join(NUMERICS_MODES))
    if mode == "native":
        return
    os.environ.update(PINNED_ENVIRONMENT[mode])
    import torch

    in_use = torch.backends.cpu.get_cpu_capability()
    if in_use != PORTABLE_CAPABILITY:
        raise MoelabError(
            f"train.numerics={mode} needs torch's {PORTABLE_CAPABILITY} kernels but this "
            f"process already uses {in_use} (torch computed before the run started); start the "
            "process with ATEN_CPU_CAPABILITY=avx2 set, or use train.numerics=native")


def this_machine(numerics: str) -> Machine:
    """The running process's machine record (torch imported here: the record is read after a
    run, when torch is loaded anyway)."""
    import torch

    return Machine(cpu=cpu_model(), capability=torch.backends.cpu.get_cpu_capability(),
                   torch=torch.__version__, blas=blas_version(torch.__config__.show()),
                   threads=torch.get_num_threads(), numerics=numerics,
                   environment={name: os.environ[name] for name in NUMERICS_VARIABLES
                                if name in os.environ})


def cpu_model() -> str:
    """The CPU's model name (/proc/cpuinfo on Linux), else what ``platform`` knows."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as cpuinfo:
            for line in cpuinfo:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def blas_version(build_info: str) -> str:
    """'MKL 2024.2' (or the BLAS_INFO name) from ``torch.__config__.show()``'s text."""
    mkl = re.search(r"Math Kernel Library Version ([\d.]+)", build_info)
    if mkl:
        return f"MKL {mkl.group(1)}"
    named = re.search(r"BLAS_INFO=(\w+)", build_info)
    return named.group(1) if named else ""


def describe_machines(machines: list[Optional[Machine]]) -> str:
    """One line naming the machine(s) runs trained on, with how many runs each; '' when no run
    recorded one (a folder older than the record reads as it always did)."""
    recorded = [machine for machine in machines if machine is not None]
    if not recorded:
        return ""
    counts: dict[str, int] = {}
    for machine in recorded:
        text = (f"{machine.cpu or 'unknown CPU'}, torch kernels {machine.capability}, torch "
                f"{machine.torch}, {machine.blas or 'unknown BLAS'}, {machine.threads} "
                f"thread{'s' if machine.threads != 1 else ''}, numerics {machine.numerics}")
        counts[text] = counts.get(text, 0) + 1
    parts = [f"{text} ({count} run{'s' if count != 1 else ''})" for text, count in counts.items()]
    missing = len(machines) - len(recorded)
    if missing:
        parts.append(f"not recorded ({missing} older run{'s' if missing != 1 else ''})")
    return "; ".join(parts)


def machine_bullet(machines: list[Optional[Machine]]) -> str:
    """A report's setup line naming the machines (describe_machines); '' when none recorded."""
    text = describe_machines(machines)
    return f"- Machine: {text}.\n" if text else ""
