"""A trained run put to use: its model and tokenizer loaded from its run folder, evaluated on any
data or on the zero-shot tasks."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import numpy as np
import torch

from moelab.config import Config
from moelab.data import Tokenizer, prepare_data, validation_windows
from moelab.data.prepare import cache_base
from moelab.data.sources import resolve_source
from moelab.errors import MoelabError
from moelab.fileio import atomic_write_json, is_inside
from moelab.model import Transformer
from moelab.tasks import RESULTS_FILE, read_results, score_tasks
from moelab.train.checkpoint import latest_checkpoint, load_weights, read_state
from moelab.train.distributed import resolve_device
from moelab.train.evaluation import evaluate, scored_bytes
from moelab.train.memory import check_weights_fit
from moelab.train.run_folder import RunFolder


def load_run(run_dir: str | Path, device: str = "cpu") -> tuple[Transformer, Tokenizer]:
    """The run's latest weights (in eval mode) and its tokenizer: ``model(tokens).logits``."""
    run = RunFolder(run_dir)
    config = run.read_config()
    folder = _latest_checkpoint(run)
    target = resolve_device(device, key="device")
    check_weights_fit(config.model, target, f"run {run.path}")
    tokenizer = Tokenizer(run.tokenizer_path)
    if tokenizer.largest_id() >= config.model.vocab_size:  # its ids would index past the model
        raise MoelabError(
            f"{run.tokenizer_path} has token id {tokenizer.largest_id()}, beyond the run's "
            f"model.vocab_size={config.model.vocab_size}: it is not the tokenizer the run was "
            f"trained with")
    model = Transformer(config.model)
    load_weights(folder, model)
    return model.to(target).eval(), tokenizer


def _latest_checkpoint(run: RunFolder) -> Path:
    folder = latest_checkpoint(run.checkpoints_dir)
    if folder is None:
        raise MoelabError(f"run {run.path} has no checkpoint yet: train it first")
    return folder


@dataclass(frozen=True)
class RunEvaluation:
    """``moelab eval``'s result (``--json`` prints it with these keys, in this order)."""

    val_loss: float
    """nats/token over the scored windows."""
    bits_per_byte: float
    windows: int
    routing: list[dict[str, float]]
    """Per MoE layer, the routing diagnostics over the windows; [] for a dense model."""


def evaluate_run(run_dir: str | Path, data: str | Path | None = None,
                 device: str = "auto", cache_dir: str | Path | None = None,
                 windows: int | None = None) -> RunEvaluation:
    """Val loss (nats/token) and bits/byte of the run's final weights.

    ``data=None`` scores the run's own validation windows (as during training); a path scores
    the validation split of that source, as ``data.source=PATH`` defines it (a folder's
    valid.txt, or the held-out stories of one file), tokenized with the run's tokenizer.
    Bits/byte divide by the bytes of the scored target tokens, exactly as in training.
    ``cache_dir`` replaces the run's data.cache_dir (which must otherwise lie inside the run
    folder or the configured cache root, ``trusted_cache_dir``). ``windows`` replaces the run's
    train.eval_windows: more windows measure the weights with less sampling noise.
    """
    run = RunFolder(run_dir)
    config = run.read_config()
    model, tokenizer = load_run(run_dir, device)
    if data is None:
        tokens = _own_validation_split(config, run, cache_dir)
    else:
        tokens = _encode_validation_split(config, tokenizer, data)
    windows_NT = (validation_windows(tokens, config.model.max_seq_len, config.train.eval_windows)
                  if windows is None else
                  validation_windows(tokens, config.model.max_seq_len, windows, setting="--windows"))
    weights_device = next(model.parameters()).device
    autocast = partial(torch.autocast, weights_device.type, dtype=torch.bfloat16,
                       enabled=config.train.dtype == "bfloat16")  # as in training
    batch_size = config.train.micro_batch_size or config.train.batch_size
    result = evaluate(model, windows_NT, scored_bytes(windows_NT, tokenizer), batch_size,
                      weights_device, autocast)
    return RunEvaluation(val_loss=result.val_loss, bits_per_byte=result.bits_per_byte,
                         windows=int(windows_NT.shape[0]), routing=result.routing)


def evaluate_tasks(run_dir: str | Path, names: list[str], device: str = "cpu",
                   batch_size: int = 16) -> dict:
    """Score a run's latest weights on ``names`` and merge them into ``RUN/zero_shot.json``.

    Each task's entry records the checkpoint step it scored, so entries written at different
    steps of a resumed run stay told apart.
    """
    run = RunFolder(run_dir)
    model, tokenizer = load_run(run.path, device)
    step = read_state(_latest_checkpoint(run))["step"]
    path = run.path / RESULTS_FILE
    results = read_results(path)  # a corrupt file fails before the scoring, not after
    scored = score_tasks(model, tokenizer, names, batch_size)
    for name, result in scored.items():
        results["tasks"][name] = {"step": step, **result}
    atomic_write_json(path, results)
    return {"path": str(path), "step": step, "tasks": scored}


def trusted_cache_dir(run: RunFolder, cache_dir: str | None) -> str | None:
    """The data.cache_dir of a run's config.yaml if it may be used: null (the default root), or
    a folder inside the run folder or the configured cache root (``cache_base()``). The config
    was read back from the run folder, not given by the user, so a copied or hand-edited one
    must not make ``eval`` build a token cache anywhere else."""
    if cache_dir is None:
        return None
    path = Path(cache_dir).expanduser()
    if is_inside(path, run.path) or is_inside(path, cache_base()):
        return cache_dir
    raise MoelabError(
        f"data.cache_dir={cache_dir} in {run.config_path} lies outside the run folder and the "
        f"cache root {cache_base()} ($MOELAB_CACHE): refused; pass --cache-dir DIR to use a "
        f"cache folder of your choice"
    )


def _own_validation_split(config: Config, run: RunFolder,
                          cache_dir: str | Path | None = None) -> np.ndarray:
    if cache_dir is None:
        cache_dir = trusted_cache_dir(run, config.data.cache_dir)
    data_cfg = dataclasses.replace(config.data, cache_dir=None if cache_dir is None else str(cache_dir))
    prepared = prepare_data(data_cfg, config.tokenizer_vocab_size, progress=False)
    run.check_same_tokenizer(prepared.tokenizer, remedy="evaluate with --data PATH instead")
    return prepared.valid.tokens


def _encode_validation_split(config: Config, tokenizer: Tokenizer, data: str | Path) -> np.ndarray:
    data_cfg = dataclasses.replace(config.data, source=str(data), max_train_stories=None)
    _, valid = resolve_source(data_cfg).load()
    ids: list[int] = []
    for batch in valid.read_batches():
        for story in batch:  # the layout of the training stream: each story, then the separator
            ids.extend(tokenizer.encode(story))
            ids.append(tokenizer.eot_id)
    return np.asarray(ids, dtype=np.int64)
