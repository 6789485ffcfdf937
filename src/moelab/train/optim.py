"""AdamW with decay on matrices only, and the learning-rate schedule as a pure function."""

from __future__ import annotations

import math

import torch

from moelab.config import TrainConfig


def lr_at(step: int, total_steps: int, warmup_steps: int, lr_peak: float,
          min_lr_ratio: float) -> float:
    """Learning rate of optimizer step ``step`` (0-based): linear warmup, then cosine decay.

    Warmup rises linearly to ``lr_peak`` over ``warmup_steps`` steps (the first step already
    gets lr_peak / warmup_steps, never 0); the cosine then falls from ``lr_peak`` to
    ``min_lr_ratio * lr_peak`` at the last step.
    """
    if step < warmup_steps:
        return lr_peak * (step + 1) / warmup_steps
    lr_floor = min_lr_ratio * lr_peak
    decay_steps = total_steps - 1 - warmup_steps
    if decay_steps <= 0:  # warmup took every step but the last, which sits on the floor
        return lr_floor
    progress = min((step - warmup_steps) / decay_steps, 1.0)
    return lr_floor + 0.5 * (1.0 + math.cos(math.pi * progress)) * (lr_peak - lr_floor)


def warmup_steps_for(train_cfg: TrainConfig, total_steps: int) -> int:
    return int(train_cfg.warmup_fraction * total_steps)


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
