"""Validation loss (nats/token and bits/byte) and routing diagnostics over fixed windows;
the zero-shot tasks of ``train.eval_tasks`` at the end of a run (``score_run_tasks``).

Bits per byte are exact: the summed loss of the scored target tokens over the UTF-8 bytes those
very tokens stand for (``scored_bytes``), not over an average bytes/token of the whole split,
which the few fixed windows need not match.
"""

from __future__ import annotations

from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

import torch

from moelab.data import Tokenizer
from moelab.data.units import nats_to_bits_per_byte
from moelab.errors import MoelabError, short_repr
from moelab.fileio import atomic_write_json
from moelab.moe import RoutingStats
from moelab.tasks import TRAINING_RESULTS_FILE, longest_continuation, score_tasks
from moelab.train.cuda import host_to_device


@dataclass
class EvalResult:
    step: Optional[int] = field(default=None, kw_only=True, metadata={"omit_none": True})
    """The step evaluated, once a run's state records the result (trainer_state.json's
    ``last_eval`` has it first); None, and not written, before."""
    val_loss: float
    """Mean cross-entropy (nats/token) over every target token of the validation windows."""
    bits_per_byte: float
    """The same loss in bits per UTF-8 byte of the scored target tokens."""
    routing: list[dict[str, Any]] = field(default_factory=list)
    """Per-layer ``RoutingStats.summary()`` over the whole eval set; [] for a dense model."""


def scored_bytes(windows_NT: torch.Tensor, tokenizer: Tokenizer) -> int:
    """UTF-8 bytes of the targets ``evaluate`` scores (``windows_NT[:, 1:]``), a separator
    counting as its line of text, as in the split's byte count."""
    bytes_per_id_V = torch.from_numpy(tokenizer.token_byte_lengths())
    return int(bytes_per_id_V[windows_NT[:, 1:]].sum())


@torch.no_grad()
def evaluate(model: torch.nn.Module, windows_NT: torch.Tensor, target_bytes: int,
             batch_size: int, device: torch.device, autocast=nullcontext) -> EvalResult:
    """Evaluate on ``windows_NT`` ((N, T + 1) tokens: inputs are [:, :-1], targets [:, 1:]).

    ``target_bytes`` is ``scored_bytes(windows_NT, tokenizer)``, computed once by the caller.
    Every window has the same length, so the mean of per-batch mean losses weighted by batch
    size is the mean over all tokens. Routing statistics are sums, merged exactly across
    batches before the diagnostics are computed. The host syncs once, at the end.
    """
    was_training = model.training
    model.eval()
    loss_sum = torch.zeros((), dtype=torch.float64, device=device)
    routing: list[RoutingStats] = []
    for chunk_BT in windows_NT.split(batch_size):
        chunk_BT = host_to_device(chunk_BT, device)
        with autocast():
            out = model(chunk_BT[:, :-1], chunk_BT[:, 1:])
        loss_sum += out.ce_loss.double() * chunk_BT.shape[0]
        routing = list(out.routing) if not routing else [a.merge(b) for a, b in zip(routing, out.routing)]
    model.train(was_training)
    val_loss = float(loss_sum) / windows_NT.shape[0]
    target_tokens = windows_NT[:, 1:].numel()
    return EvalResult(val_loss=val_loss,
                      bits_per_byte=nats_to_bits_per_byte(val_loss, target_bytes / target_tokens),
                      routing=[stats.summary() for stats in routing])


def is_collapsed(routing: list[dict[str, float]], threshold: float) -> bool:
    """True when, in any layer, one expert takes more than ``threshold`` of the token-slots."""
    return any(layer["busiest_fraction"] > threshold for layer in routing)


def check_tasks_fit(names: list[str], max_seq_len: int, tokenizer: Tokenizer) -> None:
    """Refuse, before a run trains, a task whose longest continuation exceeds the context:
    scoring it at the end would fail after all the training."""
    for name in names:
        longest = longest_continuation(name, tokenizer)
        if longest > max_seq_len:
            raise MoelabError(f"train.eval_tasks: task {short_repr(name)} needs model.max_seq_len >= "
                              f"{longest} (its longest continuation in tokens of this "
                              f"tokenizer), the run has {max_seq_len}")


def score_run_tasks(run_dir: str | Path, model: torch.nn.Module, tokenizer: Tokenizer,
                    names: list[str], step: int) -> dict:
    """Score the in-memory model (a run's final weights, at ``step``) on ``names`` and write
    ``RUN/tasks.json`` atomically, in the layout of ``moelab eval --tasks``'s zero_shot.json."""
    was_training = model.training
    model.eval()
    scored = score_tasks(model, tokenizer, names)
    model.train(was_training)
    results = {"tasks": {name: {"step": step, **result} for name, result in scored.items()}}
    atomic_write_json(Path(run_dir) / TRAINING_RESULTS_FILE, results)
    return results
