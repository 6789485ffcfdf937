"""Optional TensorBoard and Weights & Biases logging (imported only when asked for).

A W&B run is named by the config (``train.wandb_project``, ``_entity``, ``_group``,
``_name``, ``_tags``; a study or sweep fills in the group, name and tags of each of its runs)
and its id is kept in the run folder, so that a resumed run continues the same W&B run.
"""

from __future__ import annotations

import json
import os
import secrets
from typing import Any

from moelab.config import Config, to_dict
from moelab.errors import MoelabError
from moelab.fileio import atomic_write_json
from moelab.train.run_folder import RunFolder

DEFAULT_WANDB_PROJECT = "moelab"
PER_LAYER_KEYS = ("routing", "balance")
"""Event keys holding one dict per MoE layer, logged as ``<key>/layer<i>/<name>``."""
SUMMARY_KEYS = ("tokens_per_s", "flops_per_s", "mfu", "mfu_convention", "peak_flops_per_s",
                "peak_flops_source", "total_params", "active_params", "tokens", "final_val_loss")


class ExternalLoggers:
    """Mirrors every metrics event's numbers to TensorBoard and/or W&B, if the config asks."""

    def __init__(self, config: Config, run: RunFolder, continuing: bool = False):
        """``continuing``: the run goes on from a checkpoint, so its W&B run (if it has one)
        goes on too; otherwise a new W&B run starts."""
        self._tensorboard = self._wandb_run = None
        if config.train.tensorboard:
            try:
                from torch.utils.tensorboard import SummaryWriter
            except ImportError:
                raise MoelabError(
                    "train.tensorboard=true needs the tensorboard package: pip install tensorboard"
                ) from None
            self._tensorboard = SummaryWriter(log_dir=str(run.path / "tensorboard"))
        if config.train.wandb:
            self._wandb_run = _start_wandb_run(config, run, continuing)

    def log(self, event: dict[str, Any]) -> None:
        scalars = {f"{event['kind']}/{key}": value for key, value in event.items()
                   if key not in ("kind", "step") and isinstance(value, (int, float))
                   and not isinstance(value, bool)}
        for name in PER_LAYER_KEYS:  # routing at evals, the step's load balance at logs
            for layer, stats in enumerate(event.get(name, [])):
                scalars.update({f"{name}/layer{layer}/{key}": v for key, v in stats.items()
                                if isinstance(v, (int, float))})  # expert_load is a list
        if self._tensorboard is not None:
            for key, value in scalars.items():
                self._tensorboard.add_scalar(key, value, event["step"])
        if self._wandb_run is not None:
            self._wandb_run.log(scalars, step=event["step"])

    def summarize(self, summary: dict[str, Any]) -> None:
        """The run summary's throughput numbers (tokens/s, MFU and its peak) into the W&B
        run's summary, where its table of runs shows them."""
        if self._wandb_run is not None:
            shown = {key: summary.get(key) for key in SUMMARY_KEYS}
            self._wandb_run.summary.update({f"summary/{key}": value for key, value in shown.items()
                                            if value is not None})

    def close(self) -> None:
        if self._tensorboard is not None:
            self._tensorboard.close()
        if self._wandb_run is not None:
            self._wandb_run.finish()


def _start_wandb_run(config: Config, run: RunFolder, continuing: bool):
    try:
        import wandb
    except ImportError:
        raise MoelabError("train.wandb=true needs the wandb package: pip install 'moelab[wandb]'") from None
    # Offline unless the user chose otherwise: runs work without a network and can be synced
    # later with `wandb sync`.
    os.environ.setdefault("WANDB_MODE", "offline")
    run_id = _stored_wandb_id(run) if continuing else None
    if run_id is None:
        run_id = secrets.token_hex(6)  # W&B's own id helper moves between its versions
        atomic_write_json(run.wandb_run_path, {"id": run_id})  # before W&B holds anything
    tc = config.train
    return wandb.init(
        dir=str(run.path), id=run_id, resume="allow",
        project=tc.wandb_project or os.environ.get("WANDB_PROJECT") or DEFAULT_WANDB_PROJECT,
        entity=tc.wandb_entity, group=tc.wandb_group, name=tc.wandb_name or run.path.name,
        tags=tc.wandb_tags or None, config=to_dict(config))


def _stored_wandb_id(run: RunFolder):
    """The W&B run id kept in the run folder; None when there is none (a run first logged to
    W&B now) or it is unreadable (a new W&B run is better than no run)."""
    try:
        run_id = json.loads(run.wandb_run_path.read_text("utf-8")).get("id")
    except (OSError, ValueError, AttributeError):
        return None
    return run_id if isinstance(run_id, str) and run_id.isalnum() else None
