"""Fine-tuning: a finished run's final weights trained on new text, in a run folder of its own.

``finetune(run_dir, data, out_dir, overrides)`` writes a run whose config is the source's with

- ``data.source`` the new text, tokenized with the source run's tokenizer into a token cache
  inside the new run folder (``data.cache_dir``), validated on that text's held-out split;
- ``train.init_from`` the source's final checkpoint and ``train.init_sha256`` its weights'
  sha256: the run starts from those weights (checked) with a fresh optimizer and schedule;
- ``--set`` overrides of the train and data keys (the model is the source's and stays so).

Before training it scores the source's weights on the same validation windows, the reference
the fine-tuned val loss is read against (``finetune.json``, a ``FinetuneReference``); the
result is a ``FinetuneSummary``: the run's summary and that reference. Calling it again resumes.
"""

from __future__ import annotations

import copy
import os
import shutil
from dataclasses import asdict, dataclass, fields
from functools import partial
from pathlib import Path

import torch

from moelab.config import Config, apply_overrides, build_config, to_dict
from moelab.data import prepare_data, validation_windows
from moelab.data.cache import TOKENIZER_FILE, cache_folder_name, has_manifest
from moelab.data.sources import NAMED_SOURCES, resolve_source
from moelab.data.tokenizer import file_sha256
from moelab.errors import MoelabError, short_text
from moelab.fileio import atomic_write, atomic_write_json, read_json
from moelab.train.checkpoint import MODEL_FILE, latest_checkpoint, read_state, verify_files
from moelab.train.evaluation import evaluate, scored_bytes
from moelab.train.loop import train
from moelab.train.run_folder import RunFolder
from moelab.train.trained_run import load_run
from moelab.train.run_summary import RunSummary

FINETUNE_FILE = "finetune.json"
"""In a finetune's run folder: the source run and checkpoint, and the source's val loss on the
new text (the reference)."""
CACHE_FOLDER = "data_cache"
"""The finetune's token cache, inside its run folder: the new text in the source's tokens."""
SET_BY_FINETUNE = ("train.init_from", "train.init_sha256", "data.cache_dir")


@dataclass(frozen=True)
class FinetuneReference:
    """finetune.json: where a finetune started, and the source's weights scored on the new
    text's validation windows, before any step (what the fine-tuned loss is read against)."""

    source_run: str
    source_checkpoint: str
    source_step: int
    source_model_sha256: str
    data: str
    """The new text's ``data.source``."""
    source_val_loss: float
    source_val_bpb: float
    windows: int


@dataclass(frozen=True)
class FinetuneSummary:
    """What ``finetune`` returns: the finetune run's summary (its summary.json) and its
    reference (its finetune.json)."""

    run: RunSummary
    reference: FinetuneReference


def finetune(run_dir: str | Path, data: str | Path, out_dir: str | Path,
             overrides: list[str] | tuple[str, ...] = ()) -> FinetuneSummary:
    """Fine-tune the final weights of the finished run ``run_dir`` on ``data`` into ``out_dir``;
    returns the run's summary with its reference (the source's weights on the same validation
    windows)."""
    if int(os.environ.get("WORLD_SIZE", "1")) > 1:
        raise MoelabError("moelab finetune runs in one process: it is invalid under torchrun")
    source, out = RunFolder(run_dir), RunFolder(out_dir)
    checkpoint = _final_checkpoint(source)
    config = finetune_config(source.read_config(), data, out.path, checkpoint, list(overrides))
    if not out.has_progress():
        out.start(config, resume=True)  # the folder, its writer lock and config.yaml first
        try:
            _build_token_cache(source, config)
            _write_reference(source, checkpoint, config, out)
        finally:
            out.writer_lock.release()  # train() takes it again
    summary = train(config, out.path, resume=True)
    if summary is None:  # only a DDP rank other than 0 gets none, and torchrun is refused above
        raise RuntimeError("a finetune's single process trained without a summary")
    return FinetuneSummary(summary, _read_reference(out))


def finetune_config(source_config: Config, data: str | Path, out_path: Path, checkpoint: Path,
                    overrides: list[str]) -> Config:
    """The source's config on the new data, starting from ``checkpoint``, with ``overrides``."""
    data_path = Path(data).expanduser()
    named = str(data) in NAMED_SOURCES  # 'adaptation' is the packaged set, not ./adaptation
    raw = to_dict(source_config)
    raw["data"].update(source=str(data_path.resolve()) if data_path.exists() and not named
                       else str(data),
                       cache_dir=str((out_path / CACHE_FOLDER).resolve()),
                       max_train_stories=None)
    raw["train"].update(init_from=str(checkpoint.resolve()),
                        init_sha256=file_sha256(checkpoint / MODEL_FILE),
                        keep_checkpoints_at=[], warmup_steps=None)
    config = build_config(apply_overrides(_checked_overrides(raw, overrides), overrides))
    resolve_source(config.data)  # a missing path is refused before anything is written
    if config.tokenizer_vocab_size != source_config.tokenizer_vocab_size:
        raise MoelabError(f"data.vocab_size={config.data.vocab_size} is invalid in a finetune: "
                          f"the tokenizer is the source run's "
                          f"({source_config.tokenizer_vocab_size} tokens)")
    return config


def _checked_overrides(raw: dict, overrides: list[str]) -> dict:
    """``raw``, once each override is known to leave the model and ``SET_BY_FINETUNE`` as the
    finetune set them. Checked by what an override does, not by how its key is spelt: a whole
    section (``train={...}``, ``data={...}``) replaces every key of it, ``train.init_from``
    among them, as surely as the dotted key does."""
    fixed = _set_by_finetune(raw)
    applied = copy.deepcopy(raw)
    for item in overrides:
        applied = apply_overrides(applied, [item])
        changed = next((key for key, value in _set_by_finetune(applied).items()
                        if value != fixed[key]), None)
        if changed is not None:
            raise MoelabError(
                f"--set {short_text(item)} is invalid in a finetune: it changes {changed}, which "
                f"is the source run's (the model) or set by the finetune "
                f"({', '.join(SET_BY_FINETUNE)}); allowed: other train and data keys, one "
                f"dotted key at a time (e.g. train.max_tokens=50000)")
    return raw


def _set_by_finetune(raw: dict) -> dict[str, object]:
    """The values a finetune's overrides must leave alone: the model and SET_BY_FINETUNE."""
    values: dict[str, object] = {"model": raw.get("model")}
    for key in SET_BY_FINETUNE:
        node: object = raw
        for part in key.split("."):
            node = node.get(part) if isinstance(node, dict) else None
        values[key] = node
    return values


def _final_checkpoint(source: RunFolder) -> Path:
    """The finished source run's final checkpoint, its weights checked against their sha256."""
    if not source.config_path.is_file():
        raise MoelabError(f"{source.path} is not a run folder: it has no config.yaml")
    if not source.is_complete():
        raise MoelabError(f"run {source.path} has not finished (no complete summary.json): a "
                          f"finetune starts from a finished run's final weights")
    folder = latest_checkpoint(source.checkpoints_dir)
    if folder is None:
        raise MoelabError(f"run {source.path} has no checkpoint: its final weights are gone")
    verify_files(folder, read_state(folder), (MODEL_FILE,))
    return folder


def _set_by_finetune_key(value: str | None, key: str) -> str:
    """The value of a key in ``SET_BY_FINETUNE``: ``finetune_config`` sets it and no override may
    change it, so it is never null."""
    if value is None:
        raise RuntimeError(f"{key} is null in a finetune's config, which finetune_config sets")
    return value


def _build_token_cache(source: RunFolder, config: Config) -> None:
    """Encode the new text with the source's tokenizer: placed in the cache folder before the
    build, it is the tokenizer the build uses (it trains one only when none is there)."""
    if not source.tokenizer_path.is_file():
        raise MoelabError(f"cannot fine-tune {source.path}: {source.tokenizer_path} is missing")
    vocab_size = config.tokenizer_vocab_size
    cache_root = Path(_set_by_finetune_key(config.data.cache_dir, "data.cache_dir"))
    cache_dir = cache_root / cache_folder_name(resolve_source(config.data), vocab_size)
    if not has_manifest(cache_dir):
        atomic_write(cache_dir / TOKENIZER_FILE,
                     lambda tmp: shutil.copyfile(source.tokenizer_path, tmp))
    prepared = prepare_data(config.data, vocab_size, progress=config.train.logging.progress)
    if prepared.tokenizer.sha256() != file_sha256(source.tokenizer_path):
        raise MoelabError(f"the token cache {cache_dir} holds another tokenizer than run "
                          f"{source.path}'s: delete it and fine-tune again")


def _write_reference(source: RunFolder, checkpoint: Path, config: Config, out: RunFolder) -> None:
    """finetune.json: where the run came from, and the source's val loss on the new text,
    scored on the finetune's own validation windows as the loop will score them."""
    tc, seq_len = config.train, config.model.max_seq_len
    prepared = prepare_data(config.data, config.tokenizer_vocab_size, progress=False)
    model, tokenizer = load_run(source.path, tc.device)
    device = next(model.parameters()).device
    windows_NT = validation_windows(prepared.valid.tokens, seq_len, tc.eval_windows)
    autocast = partial(torch.autocast, device.type, dtype=torch.bfloat16,
                       enabled=tc.dtype == "bfloat16")
    result = evaluate(model, windows_NT, scored_bytes(windows_NT, tokenizer),
                      tc.micro_batch_size or tc.batch_size, device, autocast)
    reference = FinetuneReference(
        source_run=str(source.path.resolve()), source_checkpoint=str(checkpoint.resolve()),
        source_step=read_state(checkpoint)["step"],
        source_model_sha256=_set_by_finetune_key(tc.init_sha256, "train.init_sha256"),
        data=config.data.source, source_val_loss=result.val_loss,
        source_val_bpb=result.bits_per_byte, windows=int(windows_NT.shape[0]))
    atomic_write_json(out.path / FINETUNE_FILE, asdict(reference))


def read_finetune_reference(run_dir: str | Path) -> FinetuneReference:
    """A finetune run folder's finetune.json (a one-line error when missing or corrupt)."""
    return _read_reference(RunFolder(run_dir))


def _read_reference(out: RunFolder) -> FinetuneReference:
    path = out.path / FINETUNE_FILE
    try:
        record = read_json(path)
        return FinetuneReference(**{f.name: record[f.name] for f in fields(FinetuneReference)})
    except (OSError, ValueError, KeyError, TypeError):
        raise MoelabError(f"{path} is missing or corrupt: delete {out.path} and fine-tune "
                          f"again") from None
