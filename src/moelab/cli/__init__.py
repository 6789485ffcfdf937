"""The ``moelab`` command line: argument parsing and printing only.

Each module in this package registers its sub-commands with ``register(subparsers)``; a
sub-command stores its handler as ``func`` (``handler(args) -> int | None``). A ``MoelabError``
from anywhere below is printed as one line and the process exits with code 2.
"""

from __future__ import annotations

import argparse
import sys

from moelab.errors import MoelabError

# Modules with a register(subparsers) function, in the order their commands are listed.
COMMAND_MODULES = ("model", "data", "train", "study", "scaling")


class _Parser(argparse.ArgumentParser):
    """argparse exits 2 on bad arguments already; keep its message to one line."""

    def error(self, message: str) -> None:  # noqa: D102
        self.exit(2, f"{self.prog}: error: {message}\n")


def build_parser() -> argparse.ArgumentParser:
    import importlib

    parser = _Parser(prog="moelab", description="Dense-vs-sparse (MoE) pretraining studies.")
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
    try:
        return int(args.func(args) or 0)
    except MoelabError as exc:
        print(f"moelab: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("moelab: interrupted", file=sys.stderr)
        return 130


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


def _whole_number(text: str, minimum: int, allowed: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = minimum - 1
    if value < minimum:
        raise argparse.ArgumentTypeError(f"{text} is invalid: must be a whole number {allowed}")
    return value
