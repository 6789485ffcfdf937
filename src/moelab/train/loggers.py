"""Optional TensorBoard and Weights & Biases logging (imported only when asked for)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from moelab.config import Config, to_dict
from moelab.errors import MoelabError


class ExternalLoggers:
    """Mirrors every metrics event's numbers to TensorBoard and/or W&B, if the config asks."""

    def __init__(self, config: Config, run_dir: Path):
        self._tensorboard = self._wandb_run = None
        if config.train.tensorboard:
            try:
                from torch.utils.tensorboard import SummaryWriter
            except ImportError:
                raise MoelabError(
                    "train.tensorboard=true needs the tensorboard package: pip install tensorboard"
                ) from None
            self._tensorboard = SummaryWriter(log_dir=str(run_dir / "tensorboard"))
        if config.train.wandb:
            try:
                import wandb
            except ImportError:
                raise MoelabError("train.wandb=true needs the wandb package: pip install wandb") from None
            # Offline unless the user chose otherwise: runs work without a network and can be
            # synced later with `wandb sync`.
            os.environ.setdefault("WANDB_MODE", "offline")
            self._wandb_run = wandb.init(dir=str(run_dir), name=run_dir.name,
                                         config=to_dict(config))

    def log(self, event: dict[str, Any]) -> None:
        scalars = {f"{event['kind']}/{key}": value for key, value in event.items()
                   if key not in ("kind", "step") and isinstance(value, (int, float))
                   and not isinstance(value, bool)}
        for layer, stats in enumerate(event.get("routing", [])):
            scalars.update({f"routing/layer{layer}/{key}": v for key, v in stats.items()
                            if isinstance(v, (int, float))})  # expert_load is a list
        if self._tensorboard is not None:
            for key, value in scalars.items():
                self._tensorboard.add_scalar(key, value, event["step"])
        if self._wandb_run is not None:
            self._wandb_run.log(scalars, step=event["step"])

    def close(self) -> None:
        if self._tensorboard is not None:
            self._tensorboard.close()
        if self._wandb_run is not None:
            self._wandb_run.finish()
