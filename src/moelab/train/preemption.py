"""Graceful preemption: SIGTERM or SIGUSR1 stop a run at the next step boundary, checkpointed.

Schedulers preempt a job with SIGTERM, and SLURM sends a chosen signal a set time before a
job's end (``sbatch --signal=USR1@90``). Inside ``preemptible()`` either signal only notes the
request: the training loop saves a checkpoint at the end of the step it is in and raises
``Preempted`` (the CLI exits ``EXIT_PREEMPTED``), a local study forwards it to its child runs
and stops once they have saved. ``--resume`` (or the study rerun) continues bit for bit.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator
from typing import Optional

PREEMPTION_SIGNALS = (signal.SIGTERM, signal.SIGUSR1)

_received: list[int] = []
_depth = 0


@contextlib.contextmanager
def preemptible() -> Iterator[None]:
    """Within the block, PREEMPTION_SIGNALS note a request (``preemption_requested``) instead
    of killing the process; the previous handlers come back after it. Nested blocks share the
    outermost's handlers; off the main thread (where Python cannot handle signals) nothing
    changes."""
    global _depth
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = ({} if _depth else
                {number: signal.signal(number, _note) for number in PREEMPTION_SIGNALS})
    _depth += 1
    try:
        yield
    finally:
        _depth -= 1
        if not _depth:
            _received.clear()
            for number, handler in previous.items():
                signal.signal(number, handler)


def preemption_requested() -> Optional[str]:
    """The name of the first preemption signal received in the block (SIGTERM), else None."""
    return signal.Signals(_received[0]).name if _received else None


def _note(number: int, frame) -> None:
    _received.append(number)  # a handler only notes: the loop stops where it is consistent
