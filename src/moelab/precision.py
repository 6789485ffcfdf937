"""Autocast for hand-written autograd Functions.

Code inside ``torch.autograd.Function.forward`` is still under an enclosing autocast region, and
its backward runs outside it; so the MoE experts and the fused head read the autocast dtype
once, cast their inputs to it themselves, and run their maths with autocast off, in forward and
backward alike.
"""

from __future__ import annotations

import torch


def compute_dtype(x: torch.Tensor) -> torch.dtype:
    """The dtype a matmul on ``x`` runs in here: autocast's when it is on, else x's own."""
    device_type = x.device.type
    if torch.is_autocast_enabled(device_type):
        return torch.get_autocast_dtype(device_type)
    return x.dtype
