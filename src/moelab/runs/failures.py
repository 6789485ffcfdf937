"""How a failed run is told: the one line failures.json records for it.

A run that raises where its launcher can catch the exception (in this process, in a Ray task,
in a SLURM job) is recorded as ``Type: message`` (``raised_error_line``). A child process of
the local launcher tells its parent in a ``ChildFailure`` record, a small JSON file, in the
words ``moelab train`` ends with for that error (``child_error_line``); a child that leaves no
record was killed, or failed before it started, and its parent says which.
"""

from __future__ import annotations

import traceback
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Optional

from moelab.errors import bad_input_message
from moelab.fileio import atomic_write_json, read_json


def raised_error_line(exc: BaseException) -> str:
    """``Type: message`` on one line: what failures.json records for a run that raised."""
    text = f"{type(exc).__name__}: {exc}".strip()
    return (text.splitlines() or [type(exc).__name__])[0]


def child_error_line(exc: BaseException) -> str:
    """The last line ``moelab train`` prints for a run that raised: ``moelab: error: MESSAGE``
    for bad input, ``moelab: interrupted`` for Ctrl-C, else the traceback's last line."""
    if isinstance(exc, KeyboardInterrupt):
        return "moelab: interrupted"
    message = bad_input_message(exc)
    if message is not None:
        return f"moelab: error: {message}"
    lines = "".join(traceback.format_exception_only(type(exc), exc)).strip().splitlines()
    return lines[-1] if lines else type(exc).__name__


@dataclass(frozen=True)
class ChildFailure:
    """What a child process leaves its parent when the run it trained raised."""

    error: str
    """The line failures.json records (``child_error_line``)."""

    def write(self, path: Path) -> None:
        atomic_write_json(path, asdict(self))

    @classmethod
    def read(cls, path: Path) -> Optional[ChildFailure]:
        """The record at ``path``; None where the child left none (an empty or missing file)."""
        try:
            record = read_json(path)
        except (OSError, ValueError):
            return None
        error = record.get("error") if isinstance(record, dict) else None
        return cls(error) if isinstance(error, str) else None
