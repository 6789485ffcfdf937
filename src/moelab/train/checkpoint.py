"""Resumable checkpoints that load without unpickling anything.

A checkpoint is a folder ``checkpoints/step_XXXXXXXX/`` holding

- ``model.safetensors``: the weights (``safetensors.torch.save_model`` handles tied tensors);
- ``trainer_state.safetensors``: optimizer moments and RNG states, as named tensors;
- ``trainer_state.json``: everything else (step, tokens, data position, best val loss, timers,
  optimizer hyper-parameters), plain JSON;
- ``config.yaml``: the resolved config, so the folder explains itself.

Each file is written atomically, then ``checkpoints/latest.json`` is atomically pointed at the
new folder and older folders are removed: a crash at any moment leaves a complete checkpoint.
The steps in ``train.keep_checkpoints_at`` are kept instead (a wsd budget family branches its
cooldowns from them): ``checkpoints/kept.json`` maps each kept folder to its
trainer_state.json's sha256, written before latest.json, and rotation spares what it lists.

Integrity: ``trainer_state.json`` records the sha256 of the other three files and
``latest.json`` the sha256 of ``trainer_state.json``; loading checks them first, so a changed
byte (a disk error, a hand edit) is a one-line error naming the file, never a silently
different run. Checkpoints written before the hashes existed carry none and load unchecked.
"""

from __future__ import annotations

import functools
import re
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any, NoReturn

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, load_model, save_file, save_model

from moelab.config import Config, save_config
from moelab.data.tokenizer import file_sha256
from moelab.errors import MoelabError, short_repr
from moelab.fileio import atomic_write, atomic_write_json, is_inside, read_json

MODEL_FILE = "model.safetensors"
TENSORS_FILE = "trainer_state.safetensors"
STATE_FILE = "trainer_state.json"
LATEST_FILE = "latest.json"
KEPT_FILE = "kept.json"
CONFIG_FILE = "config.yaml"
HASHED_FILES = (MODEL_FILE, TENSORS_FILE, CONFIG_FILE)
"""The files whose sha256 trainer_state.json records (latest.json records trainer_state.json's)."""
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
    save_config(config, folder / CONFIG_FILE)
    hashes = {name: file_sha256(folder / name) for name in HASHED_FILES}
    atomic_write_json(folder / STATE_FILE,
                      {**state, "optimizer": optimizer_structure, "sha256": hashes})
    kept = _read_kept(checkpoints_dir)
    if state["step"] in config.train.keep_checkpoints_at:  # recorded before latest.json points here
        kept[folder.name] = file_sha256(folder / STATE_FILE)
        atomic_write_json(checkpoints_dir / KEPT_FILE, kept)
    point_latest_at(folder)
    for old in checkpoints_dir.glob("step_*"):
        if old.is_dir() and old.name != folder.name and old.name not in kept:
            shutil.rmtree(old, ignore_errors=True)
    return folder


def point_latest_at(folder: Path) -> None:
    """Make the complete checkpoint ``folder`` the latest of its checkpoints folder."""
    atomic_write_json(folder.parent / LATEST_FILE, {
        "step": int(folder.name[5:]), "folder": folder.name,
        "sha256": file_sha256(folder / STATE_FILE)})


def copy_checkpoint(folder: Path, checkpoints_dir: Path) -> Path:
    """Copy the checkpoint ``folder`` into ``checkpoints_dir`` (not made the latest): every file
    is checked against its sha256 before and after the copy."""
    verify_files(folder, read_state(folder))
    target = checkpoints_dir / folder.name
    for name in (*HASHED_FILES, STATE_FILE):
        atomic_write(target / name, functools.partial(shutil.copyfile, folder / name))
    verify_files(target, read_state(target))
    if file_sha256(target / STATE_FILE) != file_sha256(folder / STATE_FILE):
        _corrupt(target / STATE_FILE, OSError("the copy differs from its source"))
    return target


def _read_kept(checkpoints_dir: Path) -> dict[str, str]:
    """kept.json: {step folder name: sha256 of its trainer_state.json}; {} when absent."""
    path = checkpoints_dir / KEPT_FILE
    if not path.is_file():
        return {}
    try:
        kept = read_json(path)
    except (OSError, ValueError):
        kept = None
    if not isinstance(kept, dict) or not all(
            isinstance(k, str) and CHECKPOINT_NAME.fullmatch(k) and isinstance(v, str)
            for k, v in kept.items()):
        raise MoelabError(f"kept-checkpoint record {path} is corrupt: restore it or delete "
                          f"{checkpoints_dir.parent} to start the run over")
    return kept


def kept_checkpoints(checkpoints_dir: Path) -> list[int]:
    """The steps whose checkpoint the run keeps (``train.keep_checkpoints_at``), ascending."""
    return sorted(int(name[5:]) for name in _read_kept(checkpoints_dir))


def kept_checkpoint(checkpoints_dir: Path, step: int) -> Path:
    """The folder of the kept checkpoint at ``step``, its trainer_state.json checked against the
    sha256 kept.json recorded and the folder confined to ``checkpoints_dir``."""
    kept, record = _read_kept(checkpoints_dir), checkpoints_dir / KEPT_FILE
    name = f"step_{step:08d}"
    if name not in kept:
        steps = ", ".join(str(s) for s in kept_checkpoints(checkpoints_dir)) or "none"
        raise MoelabError(f"run {checkpoints_dir.parent} kept no checkpoint at step {step} "
                          f"(kept: {steps}): train it with train.keep_checkpoints_at including "
                          f"{step}")
    folder = checkpoints_dir / name
    if not is_inside(folder, checkpoints_dir) or not is_inside(checkpoints_dir,
                                                               checkpoints_dir.parent):
        raise MoelabError(f"checkpoint {folder} resolves to {folder.resolve()}, outside its "
                          f"run folder {checkpoints_dir.parent}: refused")
    if not (folder / STATE_FILE).is_file():
        raise MoelabError(f"kept checkpoint {folder} named by {record} is incomplete or missing")
    _check_sha256(folder / STATE_FILE, kept[name], record)
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
        record = read_json(pointer)
        name = record["folder"]
    except (OSError, ValueError, KeyError, TypeError):  # UnicodeDecodeError is a ValueError
        raise MoelabError(f"checkpoint pointer {pointer} is corrupt: delete it to start over") from None
    if not isinstance(name, str) or not CHECKPOINT_NAME.fullmatch(name):
        raise MoelabError(f"checkpoint pointer {pointer} names folder {short_repr(name)}: allowed only a "
                          f"step_NNNNNNNN folder inside {checkpoints_dir}")
    folder = checkpoints_dir / name
    if not is_inside(folder, checkpoints_dir) or not is_inside(checkpoints_dir,
                                                               checkpoints_dir.parent):
        raise MoelabError(f"checkpoint {folder} named by {pointer} resolves to "
                          f"{folder.resolve()}, outside its run folder {checkpoints_dir.parent}: "
                          f"refused")
    if not (folder / STATE_FILE).is_file():
        raise MoelabError(f"checkpoint {folder} named by {pointer} is incomplete or missing")
    if "sha256" in record:  # absent from pointers written before checkpoints had hashes
        _check_sha256(folder / STATE_FILE, record["sha256"], pointer)
    return folder


def read_state(folder: Path) -> dict[str, Any]:
    """The checkpoint's trainer_state.json, its fields checked (a MoelabError naming it if not)."""
    path = folder / STATE_FILE
    try:
        state = read_json(path)
    except (OSError, ValueError) as exc:  # UnicodeDecodeError and JSONDecodeError are ValueErrors
        _corrupt(path, exc)
    problem = _state_problem(state, folder)
    if problem:
        raise MoelabError(f"checkpoint file {path} is corrupt ({problem}): delete "
                          f"{folder.parent.parent} to start the run over")
    return state


def _state_problem(state: Any, folder: Path) -> str:
    """What is wrong with a trainer_state.json's content ('' when nothing): a hand-edited field
    must not cut metrics.jsonl back to a negative step or fail later with a KeyError."""
    if not isinstance(state, dict):
        return "not a JSON object"
    for key in REQUIRED_STATE_KEYS:
        if key not in state:
            return f"no {short_repr(key)} entry"
    step = state["step"]
    if not _is_count(step) or step < 1 or f"step_{step:08d}" != folder.name:
        return f"step={short_repr(step)} is invalid: expected {int(folder.name[5:])}, its folder's step"
    for key, valid, expected in STATE_FIELD_CHECKS:
        value = state.get(key)
        if not valid(value):
            return f"{key}={short_repr(value)} is invalid: expected {expected}"
    return ""


def _is_count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _is_time(value: Any) -> bool:
    return _is_number(value) and 0 <= value < float("inf")


REQUIRED_STATE_KEYS = ("step", "tokens", "data", "optimizer", "train_time_s", "wall_time_s")
STATE_FIELD_CHECKS: tuple[tuple[str, Callable[[Any], bool], str], ...] = (
    ("tokens", lambda value: _is_count(value) and value >= 0, "a whole number >= 0"),
    ("train_time_s", _is_time, "a finite number >= 0"),
    ("wall_time_s", _is_time, "a finite number >= 0"),
    ("train_cpu_time_s", lambda value: value is None or _is_time(value),
     "a finite number >= 0"),  # absent in a checkpoint written before it
    ("best_val_loss", lambda value: value is None or _is_number(value), "a number or null"),
    ("best_val_bpb", lambda value: value is None or _is_number(value), "a number or null"),
    ("best_val_step", lambda value: value is None or _is_count(value), "a whole number"),
    ("data", lambda value: isinstance(value, dict), "a JSON object"),
    ("optimizer", lambda value: isinstance(value, dict), "a JSON object"),
    ("last_eval", lambda value: value is None or isinstance(value, dict), "a JSON object"),
    ("sha256", lambda value: value is None or isinstance(value, dict), "a JSON object"),
)
"""trainer_state.json's fields after the step, in the order they are checked: each field, a
test of its value (absent reads as None) and what the error says was expected."""


def verify_files(folder: Path, state: dict[str, Any], names: tuple[str, ...] = HASHED_FILES) -> None:
    """Check ``names`` against the sha256 recorded in the state (none recorded: unchecked)."""
    hashes = state.get("sha256")
    if hashes is None:  # written before checkpoints carried hashes
        return
    for name in names:
        _check_sha256(folder / name, hashes.get(name), folder / STATE_FILE)


def _check_sha256(path: Path, expected: Any, record: Path) -> None:
    try:
        actual = file_sha256(path)
    except OSError as exc:
        _corrupt(path, exc)
    if actual != expected:
        raise MoelabError(
            f"checkpoint file {path} is corrupt (its sha256 does not match the one {record.name} "
            f"recorded: changed after it was written): restore it or delete "
            f"{path.parent.parent.parent} to start the run over"
        )


def load_weights(folder: Path, model: torch.nn.Module,
                 state: dict[str, Any] | None = None) -> None:
    """Load model.safetensors into ``model`` after checking its sha256 (``state``: the
    checkpoint's read_state, read here when not given)."""
    verify_files(folder, read_state(folder) if state is None else state, (MODEL_FILE,))
    _load_model_file(folder, model)


def load_initial_weights(folder: Path, expected_sha256: str, model: torch.nn.Module) -> None:
    """Load a finetune's starting weights (``train.init_from``) after checking that its
    model.safetensors is the one its config names by sha256."""
    path = folder / MODEL_FILE
    try:
        actual = file_sha256(path)
    except OSError as exc:
        raise MoelabError(f"train.init_from={str(folder)!r} is invalid: cannot read {path} "
                          f"({exc.strerror or exc})") from None
    if actual != expected_sha256:
        raise MoelabError(f"train.init_from={str(folder)!r} is invalid: {path} has sha256 "
                          f"{actual[:12]}..., the config names {expected_sha256[:12]}... "
                          f"(the source weights changed)")
    _load_model_file(folder, model)


def _load_model_file(folder: Path, model: torch.nn.Module) -> None:
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

    Every file is checked against its sha256 before anything is loaded; a damaged file (a disk
    error, a hand edit) is a one-line MoelabError naming it.
    """
    state = read_state(folder)
    verify_files(folder, state)
    _load_model_file(folder, model)
    optimizer_structure = state.pop("optimizer")
    state.pop("sha256", None)
    try:
        tensors = load_file(folder / TENSORS_FILE)
    except (SafetensorError, OSError) as exc:
        _corrupt(folder / TENSORS_FILE, exc)
    try:
        optimizer.load_state_dict(_unflatten_optimizer(tensors, optimizer_structure))
        _restore_rng(tensors)
    except (KeyError, ValueError, TypeError, RuntimeError, AttributeError) as exc:
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
