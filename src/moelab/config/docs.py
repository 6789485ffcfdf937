"""The config's own documentation, read from where each field is defined: every key's type,
default and meaning (the attribute docstring under the field in ``moelab.config.schema``).

One source for the reference (docs/reference/config.md, generated and checked by a test) and for
``moelab config show --comments``, so the two cannot say different things.
"""

from __future__ import annotations

import ast
import dataclasses
import inspect
import itertools
import re
import textwrap
import typing
from dataclasses import dataclass
from functools import cache
from typing import Any

import yaml

from moelab.config.schema import Config

ABBREVIATIONS = ("e.g.", "i.e.", "et al.", "cf.", "vs.")
"""Periods inside a sentence: a docstring's first sentence does not end at them."""


@dataclass(frozen=True)
class KeyDoc:
    """One config key: its dotted name, type, default and documentation."""

    key: str
    type: str
    default: Any
    doc: str

    @property
    def summary(self) -> str:
        """The documentation's first sentence, one line: up to the first period followed by a
        space that does not end an abbreviation ("e.g. sample-10BT", "Hägele et al. 2024")."""
        text = " ".join(self.doc.split())
        for end in re.finditer(r"\. ", text):
            sentence = text[:end.start() + 1]
            if not sentence.endswith(ABBREVIATIONS):
                return sentence
        return text


@cache
def field_docs(cls: type) -> dict[str, str]:
    """{field name: its attribute docstring} of a dataclass, from its source."""
    tree = ast.parse(textwrap.dedent(inspect.getsource(cls)))
    body = tree.body[0].body  # type: ignore[attr-defined]
    docs = {}
    for statement, following in itertools.pairwise(body):
        if (isinstance(statement, ast.AnnAssign) and isinstance(statement.target, ast.Name)
                and isinstance(following, ast.Expr) and isinstance(following.value, ast.Constant)
                and isinstance(following.value.value, str)):
            docs[statement.target.id] = inspect.cleandoc(following.value.value)
    return docs


def _type_text(annotation: Any) -> str:
    """'int', 'one of micro_batch, global_batch', 'float or null', ..."""
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is typing.Literal:
        return "one of " + ", ".join(str(a) for a in args)
    if origin is typing.Union:
        kinds = [_type_text(a) for a in args if a is not type(None)]
        return " or ".join(kinds) + (" or null" if type(None) in args else "")
    if origin in (list, tuple):
        return f"list of {_type_text(args[0])}" if args else "list"
    if origin is dict:
        return "mapping"
    return getattr(annotation, "__name__", str(annotation))


def _section_type(annotation: Any) -> type | None:
    """The dataclass a field holds (a section), also when it may be null; else None."""
    if dataclasses.is_dataclass(annotation):
        return annotation  # type: ignore[return-value]
    if typing.get_origin(annotation) is typing.Union:
        inner = [a for a in typing.get_args(annotation) if a is not type(None)]
        if len(inner) == 1 and dataclasses.is_dataclass(inner[0]):
            return inner[0]  # type: ignore[return-value]
    return None


def keys(cls: type = Config, prefix: str = "") -> list[KeyDoc]:
    """Every key of ``cls`` (nested sections flattened to dotted keys), in field order."""
    hints = typing.get_type_hints(cls)
    docs, instance = field_docs(cls), cls()
    found = []
    for field in dataclasses.fields(cls):
        annotation = hints[field.name]
        value = getattr(instance, field.name)
        key = f"{prefix}{field.name}"
        section = _section_type(annotation)
        if section is not None:
            if section is not annotation:  # an optional section (model.moe): null by default
                found.append(KeyDoc(key, "section or null", value, docs.get(field.name, "")))
            found += keys(section, key + ".")
            continue
        found.append(KeyDoc(key, _type_text(annotation), value, docs.get(field.name, "")))
    return found


def commented_yaml(text: str) -> str:
    """``text`` (a config's YAML, as ``dump_config`` writes it) with each documented key's first
    sentence as a comment line above it; loads back as the same mapping."""
    summaries = {doc.key: doc.summary for doc in keys() if doc.summary}
    lines: list[str] = []
    path: list[str] = []
    for line in text.splitlines():
        stripped = line.lstrip(" ")
        depth = (len(line) - len(stripped)) // 2
        if stripped and not stripped.startswith("- ") and ":" in stripped:
            path = path[:depth] + [stripped.split(":", 1)[0]]
            summary = summaries.get(".".join(path))
            if summary:
                lines.append(" " * (2 * depth) + "# " + summary)
        lines.append(line)
    return "\n".join(lines) + "\n"


def reference_markdown() -> str:
    """docs/reference/config.md: every key, its type, default and meaning."""
    rows = []
    for doc in keys():
        default = yaml.safe_dump(doc.default, default_flow_style=True).strip().removesuffix("...")
        default = default.strip()
        meaning = " ".join(doc.doc.split()).replace("|", "\\|")
        rows.append(f"| `{doc.key}` | {doc.type} | `{default}` | {meaning} |")
    return ("<!-- Generated from moelab.config.schema by `python -m moelab.cli.reference`; "
            "do not edit. -->\n\n# Config reference\n\n"
            "Every key of a run's config (`moelab config show PRESET` prints them resolved; "
            "`--comments` adds each key's first sentence), with its type, its default and what "
            "it means. Override any of them with `--set key=value`.\n\n"
            "| key | type | default | meaning |\n|---|---|---|---|\n" + "\n".join(rows) + "\n")
