"""docs/reference/outputs.md: the files a run, a study and a sweep write, from their typed records.

Each file is a dataclass at its boundary (``moelab.codec`` writes it, in field order), so its
keys, their types and their meanings are read here from the record itself: the fields, their
type hints, their attribute docstrings (``moelab.config.docs.field_docs``) and the codec's
metadata (a key left out when null or empty, a key spelled differently). Every record a field
refers to is documented once, in the page's last part, and linked. Nothing here is typed by
hand but which record each file holds.
"""

from __future__ import annotations

import dataclasses
import typing
from dataclasses import dataclass
from typing import Any

from moelab.config.docs import field_docs
from moelab.train.events import PER_LAYER as RECORD_OF


UNDOCUMENTED = "(not documented yet)"
"""A field without a docstring: said so in the page, and counted by the reference test."""


@dataclass(frozen=True)
class FieldDoc:
    """One key of a record: its name in the file, its type and its meaning."""

    key: str
    type: str
    doc: str


@dataclass(frozen=True)
class OutputFile:
    """One file a command writes: its name, who writes it, and the record it holds."""

    name: str
    writer: str
    record: type | None
    note: str = ""


def anchor(cls: type) -> str:
    return cls.__name__.lower()


def _link(cls: type) -> str:
    return f"[{cls.__name__}](#{anchor(cls)})"


def type_text(hint: Any, found: list[type]) -> str:
    """How a field's type reads in the page; each record it names is appended to ``found``."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if dataclasses.is_dataclass(hint) and isinstance(hint, type):
        found.append(hint)
        return _link(hint)
    if origin is typing.Annotated:
        return type_text(args[0], found)
    if origin is typing.Literal:
        return "one of " + ", ".join(str(a) for a in args)
    if origin in (typing.Union, getattr(__import__("types"), "UnionType", None)):
        kinds = [type_text(a, found) for a in args if a is not type(None)]
        return " or ".join(kinds) + (" or null" if type(None) in args else "")
    if origin in (list, tuple) or hint in (list, tuple):
        inner = [a for a in args if a is not Ellipsis]
        return f"list of {type_text(inner[0], found)}" if inner else "list"
    if origin is dict or hint is dict:
        if not args:
            return "mapping"
        return f"mapping {type_text(args[0], found)} → {type_text(args[1], found)}"
    if hint is Any:
        return "any"
    return getattr(hint, "__name__", str(hint))


def docstrings(cls: type) -> dict[str, str]:
    """{field: its attribute docstring} of ``cls`` and the dataclasses it extends."""
    docs: dict[str, str] = {}
    for base in reversed(cls.__mro__):
        if dataclasses.is_dataclass(base) and base is not object:
            docs.update(field_docs(base))
    return docs


def record_fields(cls: type, found: list[type]) -> list[FieldDoc]:
    """Every key ``cls`` writes, in the file's order, with its type and meaning."""
    hints, docs = typing.get_type_hints(cls, include_extras=True), docstrings(cls)
    rows = []
    for field in dataclasses.fields(cls):
        if field.metadata.get("json") is False:  # bookkeeping, never written
            continue
        if "written_as" in field.metadata:  # a record whose keys the file holds at this level
            inner = typing.get_type_hints(hints[field.name])
            nested = {row.key: row for row in record_fields(hints[field.name], found)}
            rows += [FieldDoc(name, nested[name].type, nested[name].doc) for name in
                     field.metadata["written_as"] if name in inner]
            continue
        kind = type_text(hints[field.name], found)
        if RECORD_OF in field.metadata:
            kind += f" (each with the keys of {type_text(field.metadata[RECORD_OF], found)})"
        doc = " ".join((docs.get(field.name) or UNDOCUMENTED).split())
        rows.append(FieldDoc(field.metadata.get("json_key", field.name), kind,
                             doc + _presence(field)))
    extra = getattr(cls, "JSON_EXTRA", ())
    for name in extra:
        prop = getattr(cls, name)
        doc = " ".join((getattr(prop, "__doc__", None) or "").split())
        kind = type_text(typing.get_type_hints(prop.fget).get("return", Any), found)
        rows.append(FieldDoc(name, kind, doc))
    return rows


def _presence(field: dataclasses.Field) -> str:
    """When the codec leaves the key out (its metadata), said in the meaning."""
    if field.metadata.get("omit_none"):
        return " (Left out when null.)"
    if field.metadata.get("omit_empty"):
        return " (Left out when empty.)"
    if "omit_with" in field.metadata:
        return f" (Left out when {field.metadata['omit_with']} is null.)"
    return ""


def field_table(rows: list[FieldDoc]) -> list[str]:
    escape = str.maketrans({"|": "\\|"})
    return ["| key | type | meaning |", "|---|---|---|",
            *(f"| `{row.key}` | {row.type.translate(escape)} | {row.doc.translate(escape)} |"
              for row in rows)]


def class_doc(cls: type) -> str:
    """The record's own docstring, one line; "" for the signature a dataclass makes up."""
    doc = " ".join((cls.__dict__.get("__doc__") or "").split())
    return "" if doc.startswith(f"{cls.__name__}(") else doc


def record_section(cls: type, found: list[type]) -> list[str]:
    doc = class_doc(cls) or UNDOCUMENTED
    return [f"### {cls.__name__}", "", f"`{cls.__module__}.{cls.__qualname__}`: {doc}", "",
            *field_table(record_fields(cls, found)), ""]


def undocumented(records: list[type]) -> list[str]:
    """``Record.field`` for every written field without a docstring (``Record`` itself when the
    class has none)."""
    missing = [cls.__name__ for cls in records if not class_doc(cls)]
    for cls in records:
        docs = docstrings(cls)
        missing += [f"{cls.__name__}.{f.name}" for f in dataclasses.fields(cls)
                    if f.metadata.get("json") is not False and not docs.get(f.name)]
    return missing


def reachable(roots: list[Any]) -> list[type]:
    """``roots`` and every record their fields name, each once, in the order first met."""
    seen: list[type] = []
    queue: list[type] = []
    for root in roots:
        type_text(root, queue)
    while queue:
        cls = queue.pop(0)
        if cls in seen:
            continue
        seen.append(cls)
        found: list[type] = []
        record_fields(cls, found)
        queue += found
    return seen


def run_files() -> list[OutputFile]:
    from moelab.train.events import EvalEvent, TrainEvent
    from moelab.train.run_summary import RunSummary

    return [
        OutputFile("config.yaml", "the run's folder before it trains", None,
                   "The run's resolved config: every key, its type and meaning in "
                   "[config.md](config.md)."),
        OutputFile("summary.json", "the training loop, once, after the last evaluation",
                   RunSummary, "Its presence with `\"status\": \"complete\"` marks the run "
                   "finished."),
        OutputFile("metrics.jsonl (`\"kind\": \"train\"` lines)", "the training loop, every "
                   "`train.log_interval` steps and after the last", TrainEvent),
        OutputFile("metrics.jsonl (`\"kind\": \"eval\"` lines)", "the training loop, every "
                   "`train.eval_interval` steps and after the last", EvalEvent),
    ]


def study_files() -> list[OutputFile]:
    from moelab.study.results import StudyResults

    return [
        OutputFile("results.json", "`moelab study`, `moelab ablate-routing`, `moelab report`",
                   StudyResults, "With `--tune-lr` it also holds `lr_selection`, with "
                   "`--until-resolved` `sequential` (`moelab.study.analyses`: `lr_tuning`, `rounds`)."),
        OutputFile("results.csv", "the same commands", None),
    ]


def sweep_files() -> list[OutputFile]:
    from moelab.sweep.analyses import ANALYSES
    from moelab.sweep.folder import AnalysisSettings

    files = [OutputFile("results.csv", "`moelab sweep-sparsity`, `moelab report`, `moelab merge`",
                        None),
             OutputFile("analysis.json", "the sweep's analysis", AnalysisSettings)]
    files += [OutputFile(analysis.file, f"the `{analysis.name}` analysis; absent when the runs "
                         "support no answer", analysis.record_type)
              for analysis in ANALYSES if analysis.file and analysis.record_type]
    return files


def results_csv_section() -> list[str]:
    """A sweep's results.csv: ResultRow's fields are its columns, in order, with the optional
    groups said where they go."""
    from moelab.sweep.results_csv import (
        FINETUNE_COLUMNS, GRANULARITY_COLUMNS, MACHINE_COLUMNS, RESULT_COLUMNS, ResultRow,
    )

    found: list[type] = []
    rows = record_fields(ResultRow, found)
    groups = {name: group for group, names in (
        ("granularity", GRANULARITY_COLUMNS), ("machine", MACHINE_COLUMNS),
        ("finetune", FINETUNE_COLUMNS)) for name in names}
    table = ["| column | type | group | meaning |", "|---|---|---|---|"]
    for row in rows:
        key = "zero_shot_<task>" if row.key == "zero_shot" else row.key
        group = groups.get(row.key, "zero-shot" if row.key == "zero_shot" else "every file")
        meaning = row.doc.replace("|", "\\|")
        table.append(f"| `{key}` | {row.type} | {group} | {meaning} |")
    return [f"Every file has the {len(RESULT_COLUMNS)} columns of group *every file*, in this "
            "order; the optional groups go where `moelab.sweep.results_csv.result_columns` puts "
            "them: *granularity* after `d_expert` when the runs split experts differently, "
            "*machine* after `device` when some run recorded its machine, one `zero_shot_<task>` "
            "column per task some run scored, then *finetune* when some run has a complete "
            "finetune. One row per complete run (`ResultRow`, `moelab.sweep.results_csv`).", "",
            *table, ""]


def study_csv_section() -> list[str]:
    """A study's results.csv: one row per run, its columns' meanings from the records they
    copy (``RunResult``, ``ArmResult``) or ``CSV_COLUMN_DOCS``."""
    from moelab.study.results import (
        CSV_COLUMN_DOCS, CSV_COLUMNS, MACHINE_CSV_COLUMNS, ArmResult, RunResult,
    )

    found: list[type] = []
    known = {row.key: row for cls in (ArmResult, RunResult) for row in record_fields(cls, found)}
    table = ["| column | type | meaning |", "|---|---|---|"]
    for column in CSV_COLUMNS:
        row = known.get(column)
        kind, doc = (row.type, row.doc) if row else CSV_COLUMN_DOCS[column]
        table.append(f"| `{column}` | {kind} | {doc.replace('|', chr(92) + '|')} |")
    return [f"One row per complete run, every budget: the {len(CSV_COLUMNS)} columns below, then "
            f"{', '.join(f'`{c}`' for c in MACHINE_CSV_COLUMNS)} (the run's "
            "[Machine](#machine)) when some run recorded its machine.", "", *table, ""]


def _file_sections(title: str, files: list[OutputFile], roots: list[Any],
                   special: dict[str, list[str]], shown: list[type]) -> list[str]:
    """Each file's section: who writes it and its keys (a record's table right there, anchored
    for the links; a mapping of records names them, documented under Records)."""
    lines = [f"## {title}", ""]
    for output in files:
        lines += [f"### {output.name}", "", f"Written by {output.writer}."
                  + (f" {output.note}" if output.note else ""), ""]
        if output.record is None:
            lines += special[output.name]
            continue
        roots.append(output.record)
        found: list[type] = []
        if isinstance(output.record, type) and output.record not in shown:
            shown.append(output.record)
            lines += [f'<a id="{anchor(output.record)}"></a>`{output.record.__qualname__}` '
                      f"(`{output.record.__module__}`): {class_doc(output.record)}", "",
                      *field_table(record_fields(output.record, found)), ""]
        else:
            lines += [f"Holds {type_text(output.record, found)}.", ""]
    return lines


def outputs_markdown() -> str:
    """docs/reference/outputs.md."""
    roots: list[Any] = []
    shown: list[type] = []
    lines = ["# Output file reference", "",
             "Every file a run, a study and a sweep writes that you read, each key with its type "
             "and meaning, generated from the typed record the file is written from (its "
             "dataclass fields and their docstrings). Figures and report.md are rendered from "
             "these files.", ""]
    lines += _file_sections("A run's folder", run_files(), roots, {"config.yaml": []}, shown)
    lines += _file_sections("A study's folder", study_files(), roots,
                            {"results.csv": study_csv_section()}, shown)
    lines += _file_sections("A sweep's folder", sweep_files(), roots,
                            {"results.csv": results_csv_section()}, shown)
    lines += ["## Records", "", "The records the files' keys hold, each once; a key typed with a "
              "record holds an object of it.", ""]
    for cls in reachable(roots):
        if cls not in shown:
            lines += record_section(cls, [])
    return ("<!-- Generated from the records by `python -m moelab.cli.reference`; do not edit. "
            "-->\n\n" + "\n".join(lines).rstrip("\n") + "\n")
