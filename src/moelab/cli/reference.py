"""docs/reference/: the reference pages generated from the code, so they cannot drift from it.

``cli.md`` from the argparse parsers (every command, argument, default and help line),
``config.md`` from the config dataclasses (``moelab.config.docs``) and ``outputs.md`` from the
records the output files are written from (``moelab.cli.reference_outputs``). ``python -m
moelab.cli.reference`` writes them; ``--check`` (run by the test suite) exits 1 naming each page
that differs from a fresh render.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

GENERATED = ("<!-- Generated from the argparse parsers by `python -m moelab.cli.reference`; "
             "do not edit. -->\n\n")


def _subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:  # argparse keeps its sub-parsers only here
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def _argument_row(action: argparse.Action) -> str | None:
    if isinstance(action, argparse._HelpAction) or action.help == argparse.SUPPRESS:
        return None
    if action.option_strings:
        name = ", ".join(f"`{flag}`" for flag in action.option_strings)
        if action.nargs != 0:
            name += f" `{action.metavar or action.dest.upper()}`"
    else:
        name = f"`{action.metavar or action.dest}`"
    default = ("" if action.default in (None, argparse.SUPPRESS, False, [])
               or not action.option_strings else f"`{action.default}`")
    choices = f" (one of {', '.join(map(str, action.choices))})" if action.choices else ""
    text = " ".join((action.help or "").split())
    if "%(" in text:  # argparse's own placeholders, filled as --help fills them
        text = text % {**vars(action), "prog": "moelab"}
    text = text.replace("%%", "%").replace("|", "\\|")
    return f"| {name} | {default} | {text}{choices} |"


def _command_section(path: str, parser: argparse.ArgumentParser) -> list[str]:
    lines = [f"## `{path}`", ""]
    if parser.description:
        lines += [" ".join(parser.description.split()), ""]
    subcommands = _subcommands(parser)
    rows = [row for row in map(_argument_row, parser._actions) if row]
    if rows and not subcommands:
        lines += ["| argument | default | meaning |", "|---|---|---|", *rows, ""]
    for name, sub in subcommands.items():
        lines += _command_section(f"{path} {name}", sub)
    return lines


def cli_markdown(parser: argparse.ArgumentParser) -> str:
    """cli.md: every command of ``parser`` with its arguments."""
    lines = ["# Command reference", "",
             "Every `moelab` command, its arguments, their defaults and what they do, as "
             "`moelab COMMAND --help` prints them. Bad input is one line and exit code 2.", ""]
    for name, sub in _subcommands(parser).items():
        lines += _command_section(f"moelab {name}", sub)
    return GENERATED + "\n".join(lines)


def render() -> dict[str, str]:
    """{file name under docs/reference/: markdown}."""
    from moelab.cli import build_parser
    from moelab.cli.reference_outputs import outputs_markdown
    from moelab.config.docs import reference_markdown

    return {"cli.md": cli_markdown(build_parser()), "config.md": reference_markdown(),
            "outputs.md": outputs_markdown()}


def stale(reference_dir: Path) -> list[str]:
    """The pages that differ from a fresh render, or are missing."""
    return [name for name, text in render().items()
            if not (reference_dir / name).is_file()
            or (reference_dir / name).read_text(encoding="utf-8") != text]


def main(argv: list[str] | None = None) -> int:
    from moelab.fileio import atomic_write_text

    parser = argparse.ArgumentParser(prog="python -m moelab.cli.reference",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default="docs/reference", help="where the pages go")
    parser.add_argument("--check", action="store_true", help="compare, write nothing")
    args = parser.parse_args(argv)
    out = Path(args.out)
    if args.check:
        for name in stale(out):
            print(f"{out / name} differs from a fresh render", file=sys.stderr)
        return 1 if stale(out) else 0
    out.mkdir(parents=True, exist_ok=True)
    for name, text in render().items():
        atomic_write_text(out / name, text)
        print(out / name)
    return 0


if __name__ == "__main__":
    sys.exit(main())
