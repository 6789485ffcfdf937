"""Resumable checkpoints that load without unpickling anything.

A checkpoint is a folder ``checkpoints/step_XXXXXXXX/`` holding

- ``model.safetensors``: the weights (``safetensors.torch.save_model`` handles tied tensors);
- ``trainer_state.safetensors``: optimizer moments and RNG states, as named tensors;
- ``trainer_state.json``: everything else (step, tokens, data position, best val loss, timers,
  optimizer hyper-parameters), plain JSON;
- ``config.yaml``: the resolved config, so the folder explains itself.

Each file is written atomically, then ``checkpoints/latest.json`` is atomically pointed at the
new folder and older folders are removed: a crash at any moment leaves a complete checkpoint.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Any, NoReturn

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, load_model, save_file, save_model

from moelab.config import Config, save_config
from moelab.errors import MoelabError
from moelab.fileio import atomic_write, atomic_write_json, is_inside

MODEL_FILE = "model.safetensors"
TENSORS_FILE = "trainer_state.safetensors"
STATE_FILE = "trainer_state.json"
LATEST_FILE = "latest.json"
CHECKPOINT_NAME = re.compile(r"step_\d{8,}")


def save_checkpoint(checkpoints_dir: Path, model: torch.nn.Module,
                    optimizer: torch.optim.Optimizer, state: dict[str, Any],
                    config: Config) -> Path:
    """Write a checkpoint for ``state["step"]`` and make it the latest one."""
    folder = checkpoints_dir / f"step_{state['step']:08d}"
    optimizer_tensors, optimizer_structure = _flatten_optimizer(optimizer)
    tensors = {**optimizer_tensors, **_rng_tensors()}
    _atomic_safetensors(folder / MODEL_FILE, lambda tmp: save_model(model, tmp))
    _atomic_safetensors(folder / TENSORS_FILE, lambda tmp: save_file(tensors, tmp))
    save_config(config, folder / "config.yaml")
    atomic_write_json(folder / STATE_FILE, {**state, "optimizer": optimizer_structure})
    atomic_write_json(checkpoints_dir / LATEST_FILE, {"step": state["step"], "folder": folder.name})
    for old in checkpoints_dir.glob("step_*"):
        if old.is_dir() and old.name != folder.name:
            shutil.rmtree(old, ignore_errors=True)
    return folder


def _atomic_safetensors(path: Path, save) -> None:
    """``atomic_write`` for safetensors, whose I/O errors (a full disk) are not OSErrors."""
    def write(tmp: str) -> None:
        try:
            save(tmp)
        except SafetensorError as exc:
            raise OSError(str(exc)) from None

    atomic_write(path, write)


def latest_checkpoint(checkpoints_dir: Path) -> Path | None:
    """The folder of the latest complete checkpoint, or None when there is none.

    The pointer may only name a ``step_NNNNNNNN`` folder inside ``checkpoints_dir`` (symlinks
    resolved): a hand-edited or copied pointer must not load another run's weights.
    """
    pointer = checkpoints_dir / LATEST_FILE
    if not pointer.is_file():
        return None
    try:
        name = json.loads(pointer.read_text(encoding="utf-8"))["folder"]
    except (OSError, ValueError, KeyError, TypeError):  # UnicodeDecodeError is a ValueError
        raise MoelabError(f"checkpoint pointer {pointer} is corrupt: delete it to start over") from None
    if not isinstance(name, str) or not CHECKPOINT_NAME.fullmatch(name):
        raise MoelabError(f"checkpoint pointer {pointer} names folder {name!r}: allowed only a "
                          f"step_NNNNNNNN folder inside {checkpoints_dir}")
    folder = checkpoints_dir / name
    if not is_inside(folder, checkpoints_dir) or not is_inside(checkpoints_dir,
                                                               checkpoints_dir.parent):
        raise MoelabError(f"checkpoint {folder} named by {pointer} resolves to "
                          f"{folder.resolve()}, outside its run folder {checkpoints_dir.parent}: "
                          f"refused")
    if not (folder / STATE_FILE).is_file():
        raise MoelabError(f"checkpoint {folder} named by {pointer} is incomplete or missing")
    return folder


def load_weights(folder: Path, model: torch.nn.Module) -> None:
    path = folder / MODEL_FILE
    try:
        missing, unexpected = load_model(model, path, strict=False)
    except (SafetensorError, OSError) as exc:
        _corrupt(path, exc)
    if missing or unexpected:
        raise MoelabError(
            f"checkpoint {folder} does not fit the model: missing {sorted(missing)[:3]}, "
            f"unexpected {sorted(unexpected)[:3]}"
        )


def load_checkpoint(folder: Path, model: torch.nn.Module,
                    optimizer: torch.optim.Optimizer) -> dict[str, Any]:
    """Restore weights, optimizer and RNG states; return the JSON state (step, data, ...).

    A damaged file (a disk error, a hand edit) is a one-line MoelabError naming it.
    """
    load_weights(folder, model)
    try:
        state = json.loads((folder / STATE_FILE).read_text())
        optimizer_structure = state.pop("optimizer")
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        _corrupt(folder / STATE_FILE, exc)
    try:
        tensors = load_file(folder / TENSORS_FILE)
    except (SafetensorError, OSError) as exc:
        _corrupt(folder / TENSORS_FILE, exc)
    try:
        optimizer.load_state_dict(_unflatten_optimizer(tensors, optimizer_structure))
        _restore_rng(tensors)
    except (KeyError, ValueError, TypeError, RuntimeError) as exc:
        _corrupt(folder / TENSORS_FILE, exc, also=STATE_FILE)
    return state


def _corrupt(path: Path, exc: Exception, also: str = "") -> NoReturn:
    what = f"{path} (or {path.parent / also})" if also else str(path)
    detail = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
    raise MoelabError(f"checkpoint file {what} is corrupt ({type(exc).__name__}: {detail}): "
                      f"delete {path.parent.parent} to start the run over") from None


def _flatten_optimizer(optimizer: torch.optim.Optimizer) -> tuple[dict, dict]:
    """Optimizer state as named tensors ``optimizer.<param index>.<name>`` plus JSON structure."""
    state_dict = optimizer.state_dict()
    tensors, scalars = {}, {}
    for index, param_state in state_dict["state"].items():
        for name, value in param_state.items():
            if isinstance(value, torch.Tensor):
                tensors[f"optimizer.{index}.{name}"] = value.detach().cpu().contiguous()
            else:
                scalars[f"{index}.{name}"] = value
    groups = [{k: list(v) if isinstance(v, tuple) else v for k, v in group.items()}
              for group in state_dict["param_groups"]]
    return tensors, {"param_groups": groups, "scalars": scalars}


def _unflatten_optimizer(tensors: dict[str, torch.Tensor], structure: dict) -> dict:
    state: dict[int, dict[str, Any]] = {}
    for key, value in tensors.items():
        if key.startswith("optimizer."):
            _, index, name = key.split(".", 2)
            state.setdefault(int(index), {})[name] = value
    for key, value in structure["scalars"].items():
        index, name = key.split(".", 1)
        state.setdefault(int(index), {})[name] = value
    groups = [{k: tuple(v) if k == "betas" else v for k, v in group.items()}
              for group in structure["param_groups"]]
    return {"state": state, "param_groups": groups}


def _rng_tensors() -> dict[str, torch.Tensor]:
    tensors = {"rng.cpu": torch.get_rng_state()}
    if torch.cuda.is_available():
        for index, cuda_state in enumerate(torch.cuda.get_rng_state_all()):
            tensors[f"rng.cuda.{index}"] = cuda_state
    return tensors


def _restore_rng(tensors: dict[str, torch.Tensor]) -> None:
    torch.set_rng_state(tensors["rng.cpu"])
    cuda_keys = sorted((k for k in tensors if k.startswith("rng.cuda.")),
                       key=lambda k: int(k.rsplit(".", 1)[1]))
    cuda_states = [tensors[k] for k in cuda_keys]
    if cuda_states and torch.cuda.is_available() and len(cuda_states) == torch.cuda.device_count():
        torch.cuda.set_rng_state_all(cuda_states)
