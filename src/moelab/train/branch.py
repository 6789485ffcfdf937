"""A run that starts from another run's kept checkpoint: a wsd budget family's cooldown branch.

``branch_run(source_dir, step, config, out_dir)`` seeds ``out_dir`` with the source's kept
checkpoint at ``step`` (copied, sha256 checked before and after), its tokenizer and its metrics
up to ``step``, then trains to ``config``'s budget by the ordinary resume path. The source's
config may differ from ``config`` only in ``train.max_tokens``, the lr schedule (whose lr must
agree at every step up to ``step``) and which checkpoints are kept, so the branch is exactly a
separate run of ``config``: the same losses, evals and weights, bit for bit on a CPU.
Calling it again resumes the branch (``branch.json`` records its origin).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from moelab.codec import from_json, to_json
from moelab.config import Config, build_config, read_raw, to_dict
from moelab.data.tokenizer import file_sha256
from moelab.errors import MoelabError, short_repr
from moelab.fileio import atomic_write_json, atomic_write_text, read_json
from moelab.train.checkpoint import (
    CONFIG_FILE, STATE_FILE, copy_checkpoint, kept_checkpoint, point_latest_at, read_state,
    verify_files,
)
from moelab.train.loop import train
from moelab.train.run_folder import RunFolder, first_difference
from moelab.train.schedule import Schedule
from moelab.train.run_summary import RunSummary

BRANCH_FILE = "branch.json"
"""In a branch's run folder: the source run, the step and the checkpoint it started from."""
SCHEDULE_KEYS = ("max_tokens", "lr", "min_lr_ratio", "warmup_fraction", "warmup_steps",
                 "schedule", "decay_fraction", "decay_shape")
"""train keys that only set the lr schedule: a branch may change them where its lr agrees."""
BRANCH_FREE_KEYS = (*SCHEDULE_KEYS, "keep_checkpoints_at", "checkpoint_interval", "logging")
"""train keys a branch may change: the schedule, and what never changes the computation."""


@dataclass(frozen=True)
class BranchOrigin:
    """branch.json: the run and step a branch starts from, and the copied checkpoint's state."""

    source: str
    """The source run folder, resolved."""
    step: int
    trainer_state_sha256: Optional[str] = None


def branch_run(source_dir: str | Path, step: int, config: Config,
               out_dir: str | Path) -> RunSummary | None:
    """Branch ``out_dir`` from the kept checkpoint at ``step`` of ``source_dir`` and train it to
    ``config``'s budget; returns its summary. A second call resumes (or returns) the branch."""
    config.validate()
    if int(os.environ.get("WORLD_SIZE", "1")) > 1:
        raise MoelabError("--branch-from is invalid under torchrun: seed the branch in one "
                          "process, then resume it with torchrun ... train --resume")
    source, out = RunFolder(source_dir), RunFolder(out_dir)
    if out.has_progress():
        _check_same_origin(out, source, step)
    else:
        folder = kept_checkpoint(source.checkpoints_dir, step)
        verify_files(folder, read_state(folder))  # before its config.yaml is read
        check_branchable(_checkpoint_config(folder), config, step, source.path)
        _seed(source, folder, config, out)
    return train(config, out.path, resume=True)


def check_branchable(source_config: Config, config: Config, step: int, source_path: Path) -> None:
    """Refuse, in one line, a branch at ``step`` that would not be a separate run of ``config``:
    a step outside its run, a config that differs in anything but the lr schedule (and kept
    checkpoints), or an lr schedule that differs at some step up to ``step``."""
    total_steps = _total_steps(config)
    if not 1 <= step < total_steps:
        raise MoelabError(f"--branch-step {step} is invalid: allowed 1..{total_steps - 1}, "
                          f"before the last of the config's {total_steps} steps")
    saved, given = to_dict(source_config), to_dict(config)
    for section in (saved["train"], given["train"]):
        for key in BRANCH_FREE_KEYS:
            section.pop(key)
    difference = first_difference(saved, given)
    if difference:
        key, in_source, in_given = difference
        raise MoelabError(f"cannot branch from {source_path}: its config differs at {key} "
                          f"({short_repr(in_source)} in the source, {short_repr(in_given)} given); "
                          f"a branch may change only train.max_tokens and the lr schedule after its step")
    for index in range(step):  # 0-based: the lr of optimizer steps 1..step
        source_lr, branch_lr = _lr(source_config, index), _lr(config, index)
        if source_lr != branch_lr:
            raise MoelabError(
                f"cannot branch from {source_path} at step {step}: the lr schedules differ at "
                f"step {index + 1} ({short_repr(source_lr)} in the source, "
                f"{short_repr(branch_lr)} given); share the warmup (train.warmup_steps) and branch "
                f"at or before the decay start")


def _total_steps(config: Config) -> int:
    return config.train.max_tokens // (config.train.batch_size * config.model.max_seq_len)


def _lr(config: Config, index: int) -> float:
    return Schedule.from_config(config.train, _total_steps(config)).lr_at(index)


def _checkpoint_config(folder: Path) -> Config:
    """The config the checkpoint was trained with (its hashed config.yaml)."""
    return build_config(read_raw(folder / CONFIG_FILE))


def _seed(source: RunFolder, folder: Path, config: Config, out: RunFolder) -> None:
    """Checkpoint, tokenizer, metrics up to the step and branch.json, then latest.json last:
    until it points at the copy the folder holds no progress, and seeding starts over."""
    step = int(folder.name[5:])
    history = [e for e in source.read_metrics() if e["step"] <= step]  # before any write
    out.start(config, resume=True)  # creates the folder, takes its writer lock, config.yaml
    try:
        copied = copy_checkpoint(folder, out.checkpoints_dir)
        if not source.tokenizer_path.is_file():
            raise MoelabError(f"cannot branch from {source.path}: {source.tokenizer_path} is "
                              f"missing")
        out.save_tokenizer(source.tokenizer_path)
        atomic_write_text(out.metrics_path, "".join(json.dumps(e) + "\n" for e in history))
        atomic_write_json(out.path / BRANCH_FILE, to_json(BranchOrigin(
            str(source.path.resolve()), step, file_sha256(copied / STATE_FILE))))
        point_latest_at(copied)
    finally:
        out.writer_lock.release()  # train() takes it again


def _check_same_origin(out: RunFolder, source: RunFolder, step: int) -> None:
    """A branch folder with progress resumes only as the same branch."""
    record_path = out.path / BRANCH_FILE
    try:
        origin = from_json(BranchOrigin, read_json(record_path))
    except (OSError, ValueError, TypeError):
        raise MoelabError(f"run folder {out.path} already holds a run that is not a branch "
                          f"(no readable {BRANCH_FILE}): choose another --out") from None
    if (origin.source, origin.step) != (str(source.path.resolve()), step):
        raise MoelabError(f"run folder {out.path} is the branch of {origin.source} at step "
                          f"{origin.step}, not of {source.path.resolve()} at step {step}: choose "
                          f"another --out")
