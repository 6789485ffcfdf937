"""AdamW with decay on matrices only, and the learning-rate schedule as a pure function."""

from __future__ import annotations

import math

import torch

from moelab.config import TrainConfig


def lr_at(step: int, total_steps: int, warmup_steps: int, lr_peak: float,
          min_lr_ratio: float, *, schedule: str = "cosine", decay_steps: int = 0,
          decay_shape: str = "sqrt") -> float:
    """Learning rate of optimizer step ``step`` (0-based): linear warmup, then the decay.

    Warmup rises linearly to ``lr_peak`` over ``warmup_steps`` steps (the first step already
    gets lr_peak / warmup_steps, never 0). With ``schedule="cosine"`` a cosine then falls from
    ``lr_peak`` to ``min_lr_ratio * lr_peak`` at the last step. With ``"wsd"`` (warmup-stable-
    decay) the lr stays at ``lr_peak`` until the last ``decay_steps`` steps, which fall from
    ``lr_peak`` (their first) to the same floor (the last step): linearly, or as 1 - sqrt(t)
    with ``decay_shape="sqrt"`` (Hägele et al. 2024).
    """
    if schedule not in ("cosine", "wsd"):
        raise ValueError(f"schedule={schedule!r} is invalid: allowed cosine, wsd")
    if step < warmup_steps:
        return lr_peak * (step + 1) / warmup_steps
    lr_floor = min_lr_ratio * lr_peak
    if schedule == "wsd":
        return _wsd_after_warmup(step, total_steps, decay_steps, lr_peak, lr_floor, decay_shape)
    decay_steps = total_steps - 1 - warmup_steps
    if decay_steps <= 0:  # warmup took every step but the last, which sits on the floor
        return lr_floor
    progress = min((step - warmup_steps) / decay_steps, 1.0)
    return lr_floor + 0.5 * (1.0 + math.cos(math.pi * progress)) * (lr_peak - lr_floor)


def _wsd_after_warmup(step: int, total_steps: int, decay_steps: int, lr_peak: float,
                      lr_floor: float, decay_shape: str) -> float:
    decay_start = total_steps - max(decay_steps, 1)  # the last step always sits on the floor
    if step < decay_start:
        return lr_peak
    decay_intervals = total_steps - 1 - decay_start
    if decay_intervals <= 0:  # a one-step decay: just the floor
        return lr_floor
    progress = min((step - decay_start) / decay_intervals, 1.0)
    if decay_shape == "sqrt":
        remaining = 1.0 - math.sqrt(progress)
    elif decay_shape == "linear":
        remaining = 1.0 - progress
    else:
        raise ValueError(f"decay_shape={decay_shape!r} is invalid: allowed linear, sqrt")
    return lr_floor + remaining * (lr_peak - lr_floor)


def warmup_steps_for(train_cfg: TrainConfig, total_steps: int) -> int:
    """train.warmup_steps when set (a budget family's shared warmup), else the fraction."""
    if train_cfg.warmup_steps is not None:
        return train_cfg.warmup_steps
    return int(train_cfg.warmup_fraction * total_steps)


def decay_start_step(train_cfg: TrainConfig, total_steps: int) -> int:
    """Steps trained before the wsd decay begins: the lr of every earlier step is the same
    for every budget that shares the warmup."""
    return total_steps - max(decay_steps_for(train_cfg, total_steps), 1)


def decay_steps_for(train_cfg: TrainConfig, total_steps: int) -> int:
    """Steps of the wsd final decay (0 for cosine, whose decay is every step after warmup)."""
    if train_cfg.schedule != "wsd":
        return 0
    return int(train_cfg.decay_fraction * total_steps)


def build_optimizer(model: torch.nn.Module, train_cfg: TrainConfig) -> torch.optim.AdamW:
    """AdamW; weight decay on parameters with >= 2 dims (matrices, stacked experts), not on norms.

    The fused kernel (one launch for all parameters) exists on CPU and CUDA in recent torch.
    """
    params = [p for p in model.parameters() if p.requires_grad]
    groups = [
        {"params": [p for p in params if p.dim() >= 2], "weight_decay": train_cfg.weight_decay},
        {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0},
    ]
    kwargs = dict(lr=train_cfg.lr, betas=(train_cfg.beta1, train_cfg.beta2))
    try:
        return torch.optim.AdamW(groups, fused=True, **kwargs)
    except (RuntimeError, TypeError):  # a device or torch build without the fused kernel
        return torch.optim.AdamW(groups, foreach=True, **kwargs)
