"""Autocast for hand-written autograd Functions.

Code inside ``torch.autograd.Function.forward`` is still under an enclosing autocast region, and
its backward runs outside it; so the MoE experts and the fused head read the autocast dtype
once, cast their inputs to it themselves, and run their maths with autocast off, in forward and
backward alike. (The ``meta`` device, on which a test runs the grouped experts to prove they
never read data on the host, has no autocast at all.)
"""

from __future__ import annotations

import contextlib

import torch

AUTOCAST_DEVICE_TYPES = frozenset(
    device_type
    for device_type in ("cpu", "cuda", "xpu", "mps", "hpu", "mtia", "xla", "ipu", "maia")
    if torch.amp.is_autocast_available(device_type)
)
"""The device types that have autocast, asked once: torch 2.11's torch.compile cannot trace
``torch.amp.is_autocast_available`` (every call is a graph break), a set lookup it can."""


def compute_dtype(x: torch.Tensor) -> torch.dtype:
    """The dtype a matmul on ``x`` runs in here: autocast's when it is on, else x's own."""
    device_type = x.device.type
    if _autocast_enabled(device_type):
        return torch.get_autocast_dtype(device_type)
    return x.dtype


def autocast_off(x: torch.Tensor) -> contextlib.AbstractContextManager:
    """A region where ``x``'s device runs without autocast.

    Where autocast is off already (or the device has none) this is a null context rather than
    a second ``torch.autocast``: a compiled fp32 graph then holds no autocast nodes, which
    AOTAutograd's on-disk cache refuses, so a warm-cache compile skips re-tracing the joint
    graph."""
    device_type = x.device.type
    if _autocast_enabled(device_type):
        return torch.autocast(device_type, enabled=False)
    return contextlib.nullcontext()


def _autocast_enabled(device_type: str) -> bool:
    return device_type in AUTOCAST_DEVICE_TYPES and torch.is_autocast_enabled(device_type)
