"""summary.json: a finished run's numbers, typed. The loop writes it once (its presence with
``"status": "complete"`` marks the run finished); the runs layer, the study and the sweep read
it through ``parse_summary``, never by key strings of their own; it is written by
``codec.to_json`` (the fields, in order).

``schema_version`` counts changes of meaning. A summary without one was written before it
existed: ``parse_summary`` upgrades it (``flops_per_token`` was ``flops_per_token_6n``; its step
time follows from train time and steps), so older run folders stay readable. Version 2 renamed
``flops_per_token_full`` to ``flops_per_token_kaplan`` (the same number, named for the attention
count it uses, ``moelab.accounting``); older summaries are read under the new name.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Optional

from moelab.codec import from_json
from moelab.errors import MoelabError, short_repr
from moelab.moe.routing import LayerRouting
from moelab.train.events import PER_LAYER
from moelab.numerics import Machine

SCHEMA_VERSION = 2


@dataclass
class RunSummary:
    """summary.json: a finished run's numbers (the module's docstring says how older files are
    read)."""

    status: str = "complete"
    """"complete": the run finished (the loop writes the file only then)."""
    best_val_loss: Optional[float] = None
    """The lowest validation loss (nats per token) over the run's evaluations."""
    best_val_step: Optional[int] = None
    """The step of that evaluation."""
    best_val_bpb: Optional[float] = None
    """Bits per UTF-8 byte at that evaluation (tokenizer-independent)."""
    final_val_loss: Optional[float] = None
    """Validation loss at the last step."""
    final_val_bpb: Optional[float] = None
    """Bits per byte at the last step."""
    total_params: Optional[int] = None
    """Every parameter, all experts and the embeddings included (``moelab.accounting``)."""
    active_params: Optional[int] = None
    """Parameters one token uses: the k routed experts of each MoE layer, not all E."""
    non_embedding_params: Optional[int] = None
    """total_params less the token embedding (and the untied head)."""
    flops_per_token_6n: Optional[int] = None
    """6 N_active: the FLOPs per token scaling laws count (``moelab.accounting``)."""
    flops_per_token_kaplan: Optional[int] = None
    """Active matmuls, attention over the context (Kaplan et al.'s count) and the unembedding,
    forward and backward (``moelab.accounting``, ``kaplan``)."""
    tokens: Optional[int] = None
    """Training tokens trained (steps x tokens_per_step)."""
    steps: Optional[int] = None
    """Optimizer steps trained."""
    tokens_per_step: Optional[int] = None
    """Tokens per optimizer step: batch_size x max_seq_len."""
    wall_time_s: Optional[float] = None
    """Wall-clock seconds of the whole run, evaluations and checkpoints included, across
    resumes."""
    train_time_s: Optional[float] = None
    """Wall time less evaluation and checkpoint pauses, across resumes."""
    train_cpu_time_s: Optional[float] = None
    """This process's CPU time (all threads) over the same span: what other jobs on a shared
    machine barely move. None for a run resumed from a checkpoint written without it."""
    tokens_per_s: Optional[float] = None
    """Tokens per second of train_time_s (wall)."""
    tokens_per_cpu_s: Optional[float] = None
    """Tokens per CPU-second of train_cpu_time_s."""
    flops_per_s: Optional[float] = None
    """tokens_per_s times flops_per_token_kaplan."""
    mfu: Optional[float] = None
    """Model FLOPs utilisation, 6 N_active per token, in the clock ``mfu_convention`` names: on
    a GPU tokens_per_s, on a CPU tokens_per_cpu_s, times flops_per_token_6n over
    peak_flops_per_s (``moelab.train.peak``)."""
    mfu_convention: Optional[str] = None
    """How mfu was computed, in words: its clock (wall on a GPU, CPU-seconds on a CPU) and the
    FLOPs it counts."""
    peak_flops_per_s: Optional[float] = None
    """On a CPU: matmul FLOPs per CPU-second of this machine (measured, cached per machine)."""
    peak_flops_source: Optional[str] = None
    """Where the peak comes from: given, a GPU's data sheet, or measured (a CPU matmul in CPU
    time: its sizes, the cache key — CPU model, torch, threads, dtype — and when)."""
    step_time_s: Optional[float] = None
    """Mean seconds per optimizer step, train_time_s / steps."""
    peak_memory_bytes: Optional[int] = None
    """Peak allocated GPU memory, or the process's peak resident memory on a CPU."""
    seed: Optional[int] = None
    """train.seed: the weight init (and the data order unless data_seed is set)."""
    data_seed: Optional[int] = None
    """The seed of the training-batch order used: train.data_seed, or seed when unset."""
    world_size: Optional[int] = None
    """Processes that trained the run (1 unless torchrun)."""
    torch_threads: Optional[int] = None
    """torch's intra-op threads: on a CPU a run's losses depend on them."""
    device: Optional[str] = None
    """The device trained on, e.g. cpu or cuda:0."""
    versions: dict[str, str] = field(default_factory=dict)
    """moelab, torch, numpy and Python versions, by name."""
    machine: Optional[Machine] = None
    """The CPU, torch's kernel set, torch and BLAS versions, threads and numerics the run
    trained with (moelab.numerics); None in summaries written before it was recorded."""
    routing: list[dict[str, Any]] = field(default_factory=list,
                                          metadata={PER_LAYER: LayerRouting})
    """Per MoE layer, the final evaluation's routing diagnostics; [] for a dense model."""
    collapse: bool = False
    """Whether some layer's busiest_fraction exceeded train.collapse_threshold at the final
    evaluation."""
    schema_version: int = SCHEMA_VERSION
    """Counts changes of this file's meaning (the module's docstring); older files are read under
    today's names."""

    def require(self, names: tuple[str, ...], path: Path | str) -> RunSummary:
        """Refuse, naming them, the fields a reader needs that this summary lacks."""
        missing = [name for name in names if getattr(self, name) is None]
        if missing:
            raise MoelabError(f"{path} lacks {', '.join(missing)}: it was written by an older "
                              "moelab; delete the run folder to retrain it")
        return self


def parse_summary(record: dict[str, Any], path: Path | str = "summary.json") -> RunSummary:
    """The summary a summary.json holds, upgraded to today's names; a number that is not a
    finite number, or routing that is not a list of layers, is a one-line error naming the file."""
    record = _upgraded(record)
    for name in _NUMBERS:
        value = record.get(name)
        if value is not None and not is_finite_number(value):
            raise MoelabError(f"{path} is corrupt ({name}={short_repr(value)} is not a finite number)")
        if name in _LOSSES and value is not None and value < 0:  # cross-entropies, never below 0
            raise MoelabError(f"{path} is corrupt ({name}={short_repr(value)} is not a loss: "
                              f"allowed >= 0)")
    routing = record.get("routing")
    if routing is None:
        record.pop("routing", None)
    elif not (isinstance(routing, list) and all(isinstance(layer, dict) for layer in routing)):
        raise MoelabError(f"{path} is corrupt (routing is not a list of layers)")
    return from_json(RunSummary, record)


_NUMBERS = tuple(f.name for f in fields(RunSummary)
                 if f.name not in ("status", "device", "versions", "machine", "routing", "collapse",
                                   "schema_version", "mfu_convention", "peak_flops_source"))


_LOSSES = ("best_val_loss", "best_val_bpb", "final_val_loss", "final_val_bpb")


def _upgraded(record: dict[str, Any]) -> dict[str, Any]:
    """A summary written by an older schema version, in today's names."""
    record = dict(record)
    if record.get("schema_version", 0) < 2 and "flops_per_token_full" in record:
        record.setdefault("flops_per_token_kaplan", record.pop("flops_per_token_full"))
    if "schema_version" in record:
        return record
    if "flops_per_token_6n" not in record and "flops_per_token" in record:
        record["flops_per_token_6n"] = record["flops_per_token"]  # the same 6 N_active number
    train_s, steps = record.get("train_time_s"), record.get("steps")
    if record.get("step_time_s") is None and is_finite_number(train_s) and \
            is_finite_number(steps) and steps:
        record["step_time_s"] = train_s / steps
    record["schema_version"] = 0
    return record


def is_finite_number(value: Any) -> bool:
    return (isinstance(value, (int, float)) and not isinstance(value, bool)
            and math.isfinite(value))
