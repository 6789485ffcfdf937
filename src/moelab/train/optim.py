"""AdamW with weight decay on matrices only (the lr of each step: ``moelab.train.schedule``)."""

from __future__ import annotations

from typing import Any

import torch

from moelab.config import TrainConfig


def build_optimizer(model: torch.nn.Module, train_cfg: TrainConfig) -> torch.optim.AdamW:
    """AdamW; weight decay on parameters with >= 2 dims (matrices, stacked experts), not on norms.

    The fused kernel (one launch for all parameters) exists on CPU and CUDA in recent torch.
    """
    params = [p for p in model.parameters() if p.requires_grad]
    groups = [
        {"params": [p for p in params if p.dim() >= 2], "weight_decay": train_cfg.weight_decay},
        {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0},
    ]
    kwargs: dict[str, Any] = dict(lr=train_cfg.lr, betas=(train_cfg.beta1, train_cfg.beta2))
    try:
        return torch.optim.AdamW(groups, fused=True, **kwargs)
    except (RuntimeError, TypeError):  # a device or torch build without the fused kernel
        return torch.optim.AdamW(groups, foreach=True, **kwargs)
