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

from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

from moelab.errors import MoelabError, short_repr
from moelab.fileio import parse_json

EVENT_KINDS = ("train", "eval")
EVENT_SHAPE = '{"kind": "train" or "eval", "step": N, "tokens": N, ...}'


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
