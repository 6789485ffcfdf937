"""The ``moelab`` command line: argument parsing and printing only.

Each module in this package registers its sub-commands with ``register(subparsers)``; a
sub-command stores its handler as ``func`` (``handler(args) -> int | None``). A ``MoelabError``
from anywhere below is printed as one line and the process exits with code 2; so are the error
classes that bad input raises before a check names it better (``moelab.errors.bad_input_message``).
Anything else is a bug and keeps its traceback.

Every command builds every parser, so ``moelab --help`` pays for what any cli module imports at
its top: import there only what a parser needs, and the engine (torch, scipy, matplotlib:
``moelab.train``, ``moelab.study.commands``, ``moelab.scaling...``) inside the handler, after
its arguments are checked. ``tests/test_cli_start.py`` fails when ``--help``, ``--version``, a
command's ``--help`` or an argument error imports one of them (docs/architecture.md, cli).
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Callable
from typing import NoReturn

from moelab.errors import (
    EXIT_PREEMPTED, MoelabError, Preempted, bad_input_message, short_repr, short_text,
)
from moelab.version import __version__

# Modules with a register(subparsers) function, in the order their commands are listed.
COMMAND_MODULES = ("model", "data", "train", "study", "fit", "sweep", "findings")


class _Parser(argparse.ArgumentParser):
    """argparse exits 2 on bad arguments already; keep its message to one line."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message}\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="moelab", description="Dense-vs-sparse (MoE) pretraining studies.")
    parser.add_argument("--version", action="version", version=f"moelab {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    for name in COMMAND_MODULES:
        module = importlib.import_module(f"moelab.cli.{name}")
        module.register(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    return run_command(lambda: _checked_call(args))


def _checked_call(args: argparse.Namespace) -> int | None:
    check_text_arguments(args)
    return args.func(args)


def run_command(command: Callable[[], int | None], prog: str = "moelab") -> int:
    """Call ``command`` as a program's body and return its exit code: bad input is one line on
    stderr and 2, a preempted run 75, Ctrl-C 130; anything else is a bug and keeps its
    traceback. The one way ``moelab`` and the scripts in experiments/ end."""
    try:
        return int(command() or 0)
    except Preempted as exc:
        print(f"{prog}: {exc}", file=sys.stderr)
        return EXIT_PREEMPTED
    except KeyboardInterrupt:
        print(f"{prog}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # `moelab ... | head` closed the pipe: stop quietly, as cat does
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no error at exit
        return 141
    except Exception as exc:
        message = bad_input_message(exc)
        if message is None:
            raise
        print(f"{prog}: error: {message}", file=sys.stderr)
        return 2


def check_text_arguments(args: argparse.Namespace) -> None:
    """Refuse an argument that is not UTF-8 text (bytes the shell passed that no encoding
    reads reach Python as lone surrogates) before anything is written: moelab records paths
    and overrides in UTF-8 files, and a path it cannot record would fail halfway, blamed on
    whatever wrote it first (the tokenizer, a JSON record)."""
    for dest, value in vars(args).items():
        for text in value if isinstance(value, list) else [value]:
            if isinstance(text, str) and not _is_utf8(text):
                shown = "--" + dest.replace("_", "-") if dest != "func" else dest
                raise MoelabError(f"{shown} {short_repr(text)} is invalid: not UTF-8 text; "
                                  "allowed: paths and values that are UTF-8")


def _is_utf8(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def add_config_arguments(parser: argparse.ArgumentParser) -> None:
    """CONFIG (a YAML file or preset name) plus repeatable ``--set key=value`` overrides."""
    parser.add_argument("config", metavar="CONFIG", help="a YAML file or a preset name")
    parser.add_argument(
        "--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
        help="override a config key, e.g. --set model.d_model=256 (repeatable)",
    )


def positive_int(text: str) -> int:
    """argparse type for counts (``--jobs``, ``--top-k``): a whole number > 0."""
    return _whole_number(text, minimum=1, allowed="> 0")


def non_negative_int(text: str) -> int:
    """argparse type for counts that may be 0 (``--bootstrap``, ``--max-new-tokens``)."""
    return _whole_number(text, minimum=0, allowed=">= 0")


def seed_int(text: str) -> int:
    """argparse type for seeds (``--seed``): a whole number in 0..2^63 - 1 (torch's range)."""
    return _whole_number(text, minimum=0, allowed="in 0..2^63-1", maximum=2**63 - 1)


def bounded_int(maximum: int):
    """argparse type for counts that may be 0, up to ``maximum`` (``--bootstrap``)."""
    def parse(text: str) -> int:
        return _whole_number(text, minimum=0, allowed=f">= 0, at most {maximum:,}",
                             maximum=maximum)

    return parse


def _whole_number(text: str, minimum: int, allowed: str, maximum: int | None = None) -> int:
    try:
        value = int(text)
    except ValueError:
        value = minimum - 1
    if value < minimum or (maximum is not None and value > maximum):
        raise argparse.ArgumentTypeError(f"{short_text(text)} is invalid: must be a whole number "
                                         f"{allowed}")
    return value
