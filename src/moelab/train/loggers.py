"""Optional TensorBoard and Weights & Biases logging (imported only when asked for).

A W&B run is named by the config (``train.logging.wandb_project``, ``_entity``, ``_group``,
``_name``, ``_tags``; a study or sweep fills in the group, name and tags of each of its runs)
and its id is kept in the run folder, so that a resumed run continues the same W&B run.
"""

from __future__ import annotations

import os
import secrets
from typing import Any

from moelab.config import Config, to_dict
from moelab.errors import MoelabError, short_repr, short_text
from moelab.fileio import atomic_write_json, read_json
from moelab.train.run_folder import RunFolder

DEFAULT_WANDB_PROJECT = "moelab"
PER_LAYER_KEYS = ("routing", "balance")
"""Event keys holding one dict per MoE layer, logged as ``<key>/layer<i>/<name>``."""
SUMMARY_KEYS = ("tokens_per_s", "tokens_per_cpu_s", "flops_per_s", "mfu", "mfu_convention",
                "peak_flops_per_s", "peak_flops_source", "total_params", "active_params", "tokens",
                "final_val_loss")


class ExternalLoggers:
    """Mirrors every metrics event's numbers to TensorBoard and/or W&B, if the config asks."""

    def __init__(self, config: Config, run: RunFolder, continuing: bool = False):
        """``continuing``: the run goes on from a checkpoint, so its W&B run (if it has one)
        goes on too; otherwise a new W&B run starts."""
        self._tensorboard = self._wandb_run = None
        if config.train.logging.tensorboard:
            try:
                from torch.utils.tensorboard import SummaryWriter
            except ImportError:
                raise MoelabError(
                    "train.logging.tensorboard=true needs the tensorboard package: pip install tensorboard"
                ) from None
            self._tensorboard = SummaryWriter(log_dir=str(run.path / "tensorboard"))
        if config.train.logging.wandb:
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
        raise MoelabError("train.logging.wandb=true needs the wandb package: "
                          "pip install 'moelab[wandb]'") from None
    # Offline unless the user chose otherwise: runs work without a network and can be synced
    # later with `wandb sync`.
    os.environ.setdefault("WANDB_MODE", "offline")
    os.environ.setdefault("WANDB_SILENT", "true")  # moelab's own lines say what happens
    _keep_wandb_files_in(run.path / "wandb")
    run_id = _stored_wandb_id(run) if continuing else None
    if run_id is None:
        run_id = secrets.token_hex(6)  # W&B's own id helper moves between its versions
        atomic_write_json(run.wandb_run_path, {"id": run_id})  # before W&B holds anything
    tc = config.train.logging
    timeout = _wandb_init_timeout()
    try:
        return wandb.init(
            dir=str(run.path), id=run_id, resume="allow",
            project=tc.wandb_project or os.environ.get("WANDB_PROJECT") or DEFAULT_WANDB_PROJECT,
            entity=tc.wandb_entity, group=tc.wandb_group, name=tc.wandb_name or run.path.name,
            tags=tc.wandb_tags or None, config=to_dict(config),
            settings=wandb.Settings(init_timeout=timeout))
    except Exception as exc:  # noqa: BLE001 -- W&B's errors (network, auth, server) vary by version
        detail = next((line.strip() for line in str(exc).splitlines() if line.strip()),
                      type(exc).__name__)
        raise MoelabError(
            f"W&B did not start in {timeout:g} s (WANDB_MODE={os.environ.get('WANDB_MODE')}): "
            f"{short_text(detail)}; check the server and key, or set WANDB_MODE=offline to "
            f"log locally and `wandb sync` later ({INIT_TIMEOUT_ENV} sets the wait)") from None


INIT_TIMEOUT_ENV = "WANDB_INIT_TIMEOUT"
"""Seconds W&B may take to start a run (its own variable); an unreachable server is then a
one-line error instead of a hang."""
DEFAULT_INIT_TIMEOUT_S = 60.0

WANDB_FILE_VARIABLES = {"WANDB_CACHE_DIR": "cache", "WANDB_CONFIG_DIR": "config",
                        "WANDB_DATA_DIR": "data", "WANDB_ARTIFACT_DIR": "artifacts"}
"""Where W&B keeps files beside the run's own (default: the user's home): set to folders in
the run's wandb/ unless the user set them, so that a run writes nothing outside its folder."""
_set_here: dict[str, str] = {}
"""The values this process gave those variables (a later run moves them to its own folder)."""


def _keep_wandb_files_in(folder) -> None:
    for variable, name in WANDB_FILE_VARIABLES.items():
        current = os.environ.get(variable)
        if current is None or current == _set_here.get(variable):
            _set_here[variable] = os.environ[variable] = str(folder / name)


def _wandb_init_timeout() -> float:
    text = os.environ.get(INIT_TIMEOUT_ENV)
    try:
        value = float(text) if text else DEFAULT_INIT_TIMEOUT_S
    except ValueError:
        value = -1.0
    if not 0 < value <= 3600:
        raise MoelabError(f"{INIT_TIMEOUT_ENV}={short_repr(text)} is invalid: allowed seconds in "
                          "(0, 3600]")
    return value


def _stored_wandb_id(run: RunFolder):
    """The W&B run id kept in the run folder; None when there is none (a run first logged to
    W&B now). A damaged one is refused: starting a new W&B run would split the resumed run's
    curves in two, silently."""
    path = run.wandb_run_path
    if not path.exists():
        return None
    try:
        run_id = read_json(path).get("id")
    except (OSError, ValueError, AttributeError):
        run_id = None
    if not (isinstance(run_id, str) and run_id.isalnum()):
        raise MoelabError(f"{path} is corrupt (no W&B run id in it): it names the W&B run this "
                          "run continues; restore it, or delete it to log the rest to a new W&B "
                          "run")
    return run_id
