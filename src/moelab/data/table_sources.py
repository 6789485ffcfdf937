"""Sources read as tables of rows: Parquet and Arrow files here, and the ``datasets`` library's
splits (``moelab.data.hub_sources``) through the same ``Table``.

One column (data.text_field, else 'text' or 'story') holds a document per row. A dataset with a
validation split validates on it; one without holds out data.valid_fraction of its training
documents as a single file does. data.max_train_stories stops the read after that many training
documents, so a streamed corpus is sliced, not downloaded whole.
"""

from __future__ import annotations

import hashlib
import importlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from moelab.config import DataConfig
from moelab.data.source_record import (
    BATCH_STORIES, Source, StorySplit, fingerprint_of, safe_label,
)
from moelab.data.story_text import JSONL_TEXT_FIELDS
from moelab.errors import MoelabError, short_repr

VALID_SPLIT_NAMES = ("validation", "valid", "test")


@dataclass
class Table:
    """One split of a tabular dataset: its column names, and one column read in batches."""

    where: str
    """How messages name it: the file, or the dataset and its split."""
    columns: list[str]
    read_column: Callable[[str], Iterator[list]]
    """The values of one column, batch by batch."""


def import_optional(module: str, data_cfg: DataConfig, what: str):
    """``module``, or one line naming the extra that installs it."""
    try:
        return importlib.import_module(module)
    except ImportError:
        package = module.split(".")[0]
        raise MoelabError(f"data.source={short_repr(data_cfg.source)} ({what}) needs the "
                          f"{package!r} package: pip install 'moelab[hf]'") from None


def first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]


def text_column(table: Table, data_cfg: DataConfig) -> str:
    """The column holding the text: data.text_field, else 'text', else 'story'."""
    if data_cfg.text_field is not None:
        if data_cfg.text_field in table.columns:
            return data_cfg.text_field
        raise MoelabError(f"data.text_field={short_repr(data_cfg.text_field)} is not a column of "
                          f"{table.where}; its columns: {', '.join(table.columns) or 'none'}")
    found = next((c for c in JSONL_TEXT_FIELDS if c in table.columns), None)
    if found is None:
        raise MoelabError(f"{table.where} has no 'text' or 'story' column (its columns: "
                          f"{', '.join(table.columns) or 'none'}): set data.text_field to the "
                          "one holding the text")
    return found


def table_documents(table: Table, column: str) -> Iterator[list[str]]:
    """The stripped, non-empty texts of ``column`` in batches (nulls skipped); a value that is
    not a string is refused: a number or a list is no document."""
    for values in table.read_column(column):
        stories = []
        for value in values:
            if value is None:
                continue
            if not isinstance(value, str):
                raise MoelabError(f"column {column!r} of {table.where} holds "
                                  f"{type(value).__name__} values, not text: set "
                                  "data.text_field to a string column")
            story = value.strip()
            if story:
                stories.append(story)
        if stories:
            yield stories


def capped_stream(batches: Iterator[list[str]], cap: Optional[int]) -> Iterator[list[str]]:
    """The first ``cap`` stories of ``batches`` (all when None), in batches of BATCH_STORIES;
    the source is not read past them."""
    return held_out_stream(batches, 0.0, want_valid=False, max_train=cap)


def held_out_stream(batches: Iterator[list[str]], valid_fraction: float, want_valid: bool,
                    max_train: Optional[int]) -> Iterator[list[str]]:
    """The training or the held-out stories of one stream, in batches of BATCH_STORIES.

    Story i is held out as ``held_out_mask`` says (one in every 1/f, over the whole stream).
    With ``max_train`` the stream is read up to its max_train-th training story and no
    further; the stories held out before it are the validation ones, so both reads stop at
    the same place.
    """
    index = trained = 0
    chosen: list[str] = []
    for batch in batches:
        for story in batch:
            held = int((index + 1) * valid_fraction) > int(index * valid_fraction)
            index += 1
            if held == want_valid:
                chosen.append(story)
            trained += not held
            if max_train is not None and trained >= max_train:
                if chosen:
                    yield chosen
                return
            if len(chosen) == BATCH_STORIES:
                yield chosen
                chosen = []
    if chosen:
        yield chosen


def dataset_source(label: str, identity: dict, train: Table, valid: Optional[Table],
                    data_cfg: DataConfig) -> Source:
    """A ``Source`` over a training table and a validation table (None: hold one out)."""
    columns = {"train": text_column(train, data_cfg)}
    if valid is not None:
        columns["valid"] = text_column(valid, data_cfg)
    cap = data_cfg.max_train_stories

    def stream(split: str) -> Iterator[list[str]]:
        documents = table_documents(train, columns["train"])
        if valid is None:
            return held_out_stream(documents, data_cfg.valid_fraction, split == "valid", cap)
        if split == "train":
            return capped_stream(documents, cap)
        return _rebatched(table_documents(valid, columns["valid"]))

    def check() -> None:
        for split in ("train", "valid"):
            if next(stream(split), None) is None:
                raise MoelabError(_empty_split_message(split, label, train, valid, data_cfg))

    def load() -> tuple[StorySplit, StorySplit]:
        check()  # before the cache folder is written
        return (StorySplit("train", lambda: stream("train")),
                StorySplit("valid", lambda: stream("valid")))

    fingerprint = fingerprint_of({
        **identity,
        "text_columns": columns,
        "valid_fraction": data_cfg.valid_fraction if valid is None else None,
        "max_train_stories": cap,
    })
    return Source(label, fingerprint, load, check)


def _empty_split_message(split: str, label: str, train: Table, valid: Optional[Table],
                         data_cfg: DataConfig) -> str:
    if split == "valid" and valid is None:
        return (f"{train.where} has too few documents to hold out data.valid_fraction="
                f"{data_cfg.valid_fraction} for validation (one in every "
                f"{1 / data_cfg.valid_fraction:g}): raise data.max_train_stories or "
                "data.valid_fraction, or name data.valid_split")
    table = valid if split == "valid" and valid is not None else train
    return f"{table.where} has no text: the split is empty or its documents are blank"


def _rebatched(batches: Iterator[list[str]]) -> Iterator[list[str]]:
    return held_out_stream(batches, 0.0, want_valid=False, max_train=None)


def pick_splits(available: Sequence[str], data_cfg: DataConfig, where: str
                ) -> tuple[str, Optional[str]]:
    """(training split, validation split or None to hold one out) among ``available``."""
    for setting, name in (("train_split", data_cfg.train_split),
                          ("valid_split", data_cfg.valid_split)):
        if name is not None and name not in available:
            raise MoelabError(f"data.{setting}={short_repr(name)} is not a split of {where}; "
                              f"its splits: {', '.join(available)}")
    if data_cfg.valid_split is not None:
        return data_cfg.train_split, data_cfg.valid_split
    valid = next((n for n in VALID_SPLIT_NAMES if n in available and n != data_cfg.train_split),
                 None)
    return data_cfg.train_split, valid


def refuse_valid_split(data_cfg: DataConfig, where: str) -> None:
    if data_cfg.valid_split is not None:
        raise MoelabError(f"data.valid_split={short_repr(data_cfg.valid_split)} is invalid for "
                          f"{where}: it has one split; null holds out data.valid_fraction of it")


def table_file_source(path: Path, data_cfg: DataConfig) -> Source:
    """One .parquet or .arrow file: one split, a slice held out for validation."""
    refuse_valid_split(data_cfg, str(path))
    read_table = _parquet_table if path.suffix == ".parquet" else _arrow_table
    table = read_table(path, data_cfg)
    identity = {"kind": path.suffix[1:], "file": [path.name, path.stat().st_size, _file_hash(path)]}
    return dataset_source(safe_label(path.stem), identity, table, None, data_cfg)


def _file_hash(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _parquet_table(path: Path, data_cfg: DataConfig) -> Table:
    parquet = import_optional("pyarrow.parquet", data_cfg, "a Parquet file")
    try:
        columns = parquet.ParquetFile(path).schema_arrow.names
    except Exception as exc:  # noqa: BLE001 -- pyarrow's ArrowInvalid, OSError: the user's file
        raise MoelabError(f"{path} is not a readable Parquet file ({first_line(exc)})") from None

    def read_column(column: str) -> Iterator[list]:
        for batch in parquet.ParquetFile(path).iter_batches(batch_size=BATCH_STORIES,
                                                            columns=[column]):
            yield batch.column(0).to_pylist()

    return Table(str(path), list(columns), read_column)


def _arrow_table(path: Path, data_cfg: DataConfig) -> Table:
    """An Arrow IPC file, in the file format or the stream format (the one datasets writes)."""
    pyarrow = import_optional("pyarrow", data_cfg, "an Arrow file")

    def record_batches() -> Iterator:
        source = pyarrow.memory_map(str(path))
        try:
            reader = pyarrow.ipc.open_file(source)
            return (reader.get_batch(i) for i in range(reader.num_record_batches))
        except pyarrow.ArrowInvalid:
            return iter(pyarrow.ipc.open_stream(pyarrow.memory_map(str(path))))

    try:
        columns = next(record_batches()).schema.names
    except StopIteration:
        columns = []
    except Exception as exc:  # noqa: BLE001 -- not Arrow at all
        raise MoelabError(f"{path} is not a readable Arrow file ({first_line(exc)})") from None

    def read_column(column: str) -> Iterator[list]:
        for batch in record_batches():
            yield batch.column(batch.schema.get_field_index(column)).to_pylist()

    return Table(str(path), list(columns), read_column)
