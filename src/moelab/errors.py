"""The one exception type users see, and the one line each error of bad input is told in.

Anything raised as ``MoelabError`` is a problem with the user's input (a bad config value, a
missing file, a corrupt cache); the CLI prints its message on one line and exits with code 2.
So are the error classes that bad input raises before a check names it better
(``bad_input_message``). Everything else is a bug and keeps its traceback.
"""

from __future__ import annotations

import json
import sys

import yaml


class MoelabError(Exception):
    """A user-facing error: the message names the bad value and what is allowed."""


class ConfigError(MoelabError):
    """An invalid configuration key or value."""


MAX_SHOWN_CHARS = 80
"""The most characters of a value an error message shows: a 100 KB value must not become a
100 KB line."""


def short_repr(value: object) -> str:
    """``repr(value)``, elided in the middle to at most ``MAX_SHOWN_CHARS`` characters: what
    every error message shows of a value the user gave."""
    return short_text(repr(value))


def short_text(text: str) -> str:
    """``text`` elided in the middle to at most ``MAX_SHOWN_CHARS`` characters."""
    if len(text) <= MAX_SHOWN_CHARS:
        return text
    keep = (MAX_SHOWN_CHARS - 3) // 2
    return f"{text[:keep]}...{text[-keep:]}"


def warn(message: str) -> None:
    """A one-line warning on stderr: something the command got past, named for the user."""
    print(f"moelab: warning: {message}", file=sys.stderr)


EXIT_PREEMPTED = 75
"""The exit code of a run or study stopped by SIGTERM or SIGUSR1 after saving its checkpoint:
sysexits.h's EX_TEMPFAIL, "a temporary failure, retry"; distinct from 0, 1 (a bug), 2 (bad
input), 130 (Ctrl-C) and 143 (killed by SIGTERM before it could save), so that a job script
can requeue exactly the runs that will resume (docs/cluster.md)."""


EXIT_INCOMPLETE = 3
"""The exit code of a command that finished but did not do all it was asked: some of its runs
failed or were never trained. Its outputs are written, and say themselves that they are partial
(a report's "Partial results" section, failures.json); distinct from 0 (all done), 1 (a bug),
2 (bad input) and 75 (preempted, will resume)."""


def incomplete(message: str) -> int:
    """Tell on stderr, on one line, what a command left undone; returns ``EXIT_INCOMPLETE``."""
    print(f"moelab: incomplete: {message}", file=sys.stderr)
    return EXIT_INCOMPLETE


class Preempted(BaseException):
    """A run or study stopped at a step boundary on request, its checkpoints saved.

    Not an ``Exception``: it must pass the handlers that keep one failed run from stopping a
    study's others (like ``KeyboardInterrupt``), up to the CLI, which exits ``EXIT_PREEMPTED``."""


def bad_input_message(exc: BaseException) -> str | None:
    """The one-line message of an error that bad input causes, or None for a bug.

    A ``MoelabError`` names the value already; the other classes are the fallback for input
    that reaches a library before any check (the command's own checks name the value better):
    text that is not UTF-8, a number too large to convert, a malformed JSON or YAML file, a
    file that cannot be read, memory a config asks for that the machine does not have.
    """
    if isinstance(exc, MoelabError):
        message = str(exc)
    elif isinstance(exc, UnicodeDecodeError):
        message = (f"the input is not UTF-8 text ({exc.reason} at byte {exc.start}: "
                   f"{short_repr(exc.object[exc.start:exc.start + 4])})")
    elif isinstance(exc, UnicodeError):
        message = f"the input is not valid text ({exc})"
    elif isinstance(exc, OverflowError):
        message = f"a number is too large ({exc})"
    elif isinstance(exc, json.JSONDecodeError):
        message = f"a JSON file is malformed ({exc.msg} at line {exc.lineno} column {exc.colno})"
    elif isinstance(exc, yaml.YAMLError):
        message = f"a YAML file is malformed ({str(exc).splitlines()[0] if str(exc) else exc})"
    elif isinstance(exc, OSError):
        what = f" {exc.filename}" if exc.filename else ""
        message = f"cannot access{what}: {exc.strerror or exc}"
    elif isinstance(exc, RecursionError):
        message = "the input nests too deeply"
    elif isinstance(exc, MemoryError) or _is_torch_out_of_memory(exc):
        message = (f"out of memory ({str(exc).splitlines()[0] if str(exc) else type(exc).__name__}"
                   f"): the input asks for more memory than this machine has")
    else:
        return None
    return "; ".join(line.strip() for line in message.splitlines() if line.strip())


def _is_torch_out_of_memory(exc: BaseException) -> bool:
    torch = sys.modules.get("torch")  # loaded by whatever raised it; never imported just for this
    return torch is not None and isinstance(exc, getattr(torch, "OutOfMemoryError", ()))
