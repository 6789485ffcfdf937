"""The events of a run's metrics.jsonl: one schema, read alike by resume, branches, eval and the
reports.

Each line is one JSON object ``{"kind": "train" | "eval", "step": S, "tokens": T, ...}``: step
a whole number >= 0, tokens (which training always logs) one too where given, and an eval's
``val_loss`` a number; other keys are free (the losses, lr, routing statistics). A run killed
in the middle of an append leaves a torn last line (the last line, without its newline, and not
JSON): readers skip it and say so (``MetricsLog.torn_tail``). Any other line that is not an
event is a one-line error naming the file and the line.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional, cast

from moelab.errors import MoelabError, short_repr
from moelab.fileio import parse_json
from moelab.moe.routing import LayerRouting, LoadBalance

EVENT_KINDS = ("train", "eval")
EVENT_SHAPE = '{"kind": "train" or "eval", "step": N, "tokens": N, ...}'


PER_LAYER = "record"
"""Field metadata: the record whose keys each per-layer mapping of the list has (they stay
plain mappings for their many readers; docs/reference/outputs.md documents the keys)."""


@dataclass(frozen=True, kw_only=True)
class TrainEvent:
    """A ``"kind": "train"`` line of metrics.jsonl: one logged optimizer step."""

    kind: str = "train"
    """Always "train"."""
    step: int
    """Optimizer steps done."""
    tokens: int
    """Training tokens seen so far (step x tokens per step)."""
    loss: float
    """The step's training objective: ce_loss plus the weighted balancing and z losses,
    averaged over its micro batches and processes."""
    ce_loss: float
    """Cross-entropy of the next token (nats), the part the validation loss measures."""
    lb_loss: float
    """The Switch load-balancing loss, before its weight model.moe.lb_coef (0 for dense)."""
    z_loss: float
    """The router z-loss, before its weight model.moe.z_coef (0 for dense)."""
    lr: float
    """The learning rate the step used."""
    grad_norm: float
    """Global gradient norm before clipping."""
    tokens_per_s: float
    """Training tokens per wall-clock second since the previous logged step."""
    tokens_per_cpu_s: Optional[float]
    """The same per CPU-second of this process; null where CPU time is not counted."""
    flops_per_s: float
    """tokens_per_s times the Kaplan FLOPs per token (``moelab.accounting``)."""
    mfu: Optional[float] = field(default=None, metadata={"omit_none": True})
    """Model FLOPs utilisation, 6 N_active per token over the peak (as summary.json's)."""
    balance: list[dict[str, float]] = field(default_factory=list,
                                            metadata={PER_LAYER: LoadBalance})
    """Per MoE layer, the load balance of the whole step; with gradient accumulation or several
    processes also ``micro_max_violation``, the mean MaxVio of its micro batches. [] for a
    dense model."""


@dataclass(frozen=True, kw_only=True)
class EvalEvent:
    """A ``"kind": "eval"`` line of metrics.jsonl: one validation pass over fixed windows."""

    kind: str = "eval"
    """Always "eval"."""
    step: int
    """Optimizer steps done when it was evaluated."""
    tokens: int
    """Training tokens seen so far."""
    val_loss: float
    """Validation cross-entropy, nats per token."""
    val_bpb: float
    """The same in bits per UTF-8 byte of the validation text (tokenizer-independent)."""
    best_val_loss: Optional[float]
    """The lowest val_loss of the run so far, this one included."""
    routing: list[dict[str, Any]] = field(default_factory=list,
                                          metadata={PER_LAYER: LayerRouting})
    """Per MoE layer, its routing diagnostics over the validation tokens; [] for dense."""
    collapse: bool
    """Whether some layer's busiest_fraction exceeds train.collapse_threshold."""


@dataclass(frozen=True)
class MetricsEvent:
    kind: str
    """"train" (a logged training step) or "eval" (a validation pass)."""
    step: int
    tokens: int | None
    fields: dict[str, Any]
    """The whole line as logged, kind, step and tokens included."""
    line: int
    """Its line number in the file (from 1), for messages."""


@dataclass(frozen=True)
class MetricsLog:
    events: list[MetricsEvent]
    torn_tail: bool
    """Whether a torn last line (a killed append) was skipped."""

    def evals(self) -> list[dict[str, Any]]:
        """The eval lines, as logged."""
        return [event.fields for event in self.events if event.kind == "eval"]


def parse_event(line: str, path: Path, lineno: int) -> MetricsEvent:
    """One line of ``path`` as an event; a line that is none is a one-line error naming both."""
    try:
        record = parse_json(line)
    except ValueError:
        raise _not_an_event(path, lineno, "is not valid JSON") from None
    if not isinstance(record, dict):
        raise _not_an_event(path, lineno, f"is not a JSON object (it is {short_repr(record)})")
    kind, step, tokens = record.get("kind"), record.get("step"), record.get("tokens")
    if not isinstance(kind, str) or kind not in EVENT_KINDS:
        raise _not_an_event(path, lineno, f"has kind={short_repr(kind)}: allowed "
                                          f"{', '.join(EVENT_KINDS)}")
    for name, value in (("step", step), ("tokens", tokens)):
        if not _is_count(value) and not (name == "tokens" and value is None):
            raise _not_an_event(path, lineno, f"has {name}={short_repr(value)}: expected a "
                                              f"whole number >= 0")
    if kind == "eval" and not _is_number(record.get("val_loss")):
        raise _not_an_event(path, lineno, f"is an eval with val_loss="
                                         f"{short_repr(record.get('val_loss'))}: expected a number")
    return MetricsEvent(kind, cast(int, step), tokens, record, lineno)


def read_events(path: Path) -> MetricsLog:
    """Every event of a metrics.jsonl (none without the file), a torn last line skipped."""
    if not path.is_file():
        return MetricsLog([], torn_tail=False)
    try:
        lines = path.read_text("utf-8").split("\n")
    except UnicodeDecodeError as exc:
        raise MoelabError(f"{path} cannot be read: not UTF-8 text at byte {exc.start}; fix or "
                          f"remove the damaged line") from None
    torn_tail = lines[-1] != "" and not _is_json(lines[-1])  # no newline after it: torn
    if torn_tail:
        lines.pop()
    events = [parse_event(line, path, lineno) for lineno, line in enumerate(lines, start=1)
              if line.strip()]
    return MetricsLog(events, torn_tail)


def _not_an_event(path: Path, lineno: int, problem: str) -> MoelabError:
    return MoelabError(f"{path} line {lineno} {problem}; every line is a metrics event "
                      f"{EVENT_SHAPE}: fix or remove that line")


def _is_json(line: str) -> bool:
    try:
        parse_json(line)
    except ValueError:
        return False
    return True


def _is_count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)
