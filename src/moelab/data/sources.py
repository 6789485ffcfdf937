"""Where stories come from: the bundled sample, TinyStories (a local copy named by
``$MOELAB_DATA``, else the Hugging Face hub), the hub itself, or the user's files.

Every source resolves to a ``Source``: a cheap ``fingerprint`` (a hash of the raw content and of
the settings that select stories from it, computed without parsing) and a ``load()`` that parses
the stories of both splits. The fingerprint keys the tokenizer and token caches, so ``load()``
only runs when a cache has to be built.

A story is the text between two separators with surrounding whitespace stripped; empty stories
are dropped. The TinyStories layout puts each story on its own lines followed by a line
``<|endoftext|>``. A split's ``bytes`` are counted in that layout (story + ``"\\n<|endoftext|>\\n"``
in UTF-8), which is exactly the file size of a file already in it.
"""

from __future__ import annotations

import hashlib
import importlib
import json
import logging
import lzma
import os
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Optional

from moelab.config import DataConfig
from moelab.errors import MoelabError, short_repr

EOT_TEXT = "<|endoftext|>"
# What one document separator costs in the TinyStories file layout (a line of its own).
SEPARATOR_BYTES = len(f"\n{EOT_TEXT}\n".encode())
HF_DATASET = "roneneldan/TinyStories"
DATA_ENV = "MOELAB_DATA"
"""A local copy of TinyStories that ``data.source: tinystories`` reads instead of the hub."""
GET_TINYSTORIES_ONLINE = (
    f"run moelab prepare-data --source tinystories once online (it downloads {HF_DATASET} "
    f"into the datasets cache), or set {DATA_ENV} to a local copy (a folder with train.txt and "
    "valid.txt)")
GET_TINYSTORIES = f"pip install 'moelab[hf]' and {GET_TINYSTORIES_ONLINE}"
SAMPLE_FILES = {"train": "tinystories-train.txt.xz", "valid": "tinystories-valid.txt.xz"}
ADAPTATION_FILES = {"train": "adaptation-train.txt.xz", "valid": "adaptation-valid.txt.xz"}
"""The adaptation set (``data.source: adaptation``, built by ``moelab.data.adaptation``): the
bundled validation stories rewritten in an instruction format, the text sweeps fine-tune on."""
NAMED_SOURCES = ("sample", "tinystories", "hf", "adaptation")
HUB_PREFIX = "hf:"
"""``data.source: hf:NAME`` streams the Hugging Face dataset NAME (``load_dataset(NAME)``)."""
TABLE_SUFFIXES = (".parquet", ".arrow")
VALID_SPLIT_NAMES = ("validation", "valid", "test")
JSONL_TEXT_FIELDS = ("text", "story")
# Stories per batch, the unit of work of tokenizer training and of the encoding workers
# (about 1.7 MB of TinyStories).
BATCH_STORIES = 2048


@dataclass
class StorySplit:
    """The stories of one split, readable in batches as often as needed (hf streams from Arrow)."""

    name: str
    read_batches: Callable[[], Iterator[list[str]]]
    num_stories: Optional[int] = None
    """Story count when known up front (sizes the progress bar)."""


@dataclass
class Source:
    """A resolved data source: its fingerprint now, its stories on demand."""

    label: str
    """Short readable name used in cache folder names and messages."""
    fingerprint: str
    """sha256 hex of the raw content plus the settings that pick stories from it."""
    load: Callable[[], tuple[StorySplit, StorySplit]]
    """Parse and return (train, valid)."""
    check: Callable[[], None] = lambda: None
    """Read what it takes to know that both splits have text (cheap; ``check_source``)."""


def resolve_source(data_cfg: DataConfig) -> Source:
    """The ``Source`` named by ``data.source``: 'sample', 'tinystories', 'hf', 'adaptation' or a
    path."""
    if data_cfg.source == "sample":
        return _sample_source(data_cfg)
    if data_cfg.source == "adaptation":
        return _packaged_source(data_cfg, "adaptation", ADAPTATION_FILES)
    if data_cfg.source == "tinystories":
        return _tinystories_source(data_cfg)
    if data_cfg.source == "hf":
        return _hf_source(data_cfg)
    if data_cfg.source.startswith(HUB_PREFIX):
        return _hub_dataset_source(data_cfg)
    return _path_source(Path(data_cfg.source).expanduser(), data_cfg)



DATASET_SETTINGS = {
    "hf_config": "only hf:NAME sources have configurations",
    "text_field": "only dataset sources (hf, hf:NAME, .parquet, .arrow, a save_to_disk folder) "
                  "have columns",
    "train_split": "only hf, hf:NAME and a saved DatasetDict have named splits",
    "valid_split": "only hf, hf:NAME and a saved DatasetDict have named splits",
}
"""The data settings that pick text out of a dataset, and what reads each."""


def check_settings_read(data_cfg: DataConfig) -> None:
    """Refuse a dataset setting given for a source that does not read it (``moelab prepare-data
    --text-field`` on a .txt file, say), which would otherwise be ignored without a word. A
    fine-tune keeps its source run's settings on new data, so only the command line asks."""
    reads = _settings_read(data_cfg)
    defaults = DataConfig()
    for name, why in DATASET_SETTINGS.items():
        value = getattr(data_cfg, name)
        if name not in reads and value != getattr(defaults, name):
            raise MoelabError(f"data.{name}={short_repr(value)} is invalid for data source "
                              f"{data_cfg.source}: {why}")


def _settings_read(data_cfg: DataConfig) -> tuple[str, ...]:
    """The DATASET_SETTINGS the source reads (all of them where the source is not found: its
    own error says so)."""
    source = data_cfg.source
    if source.startswith(HUB_PREFIX):
        return tuple(DATASET_SETTINGS)
    if source == "tinystories" and os.environ.get(DATA_ENV):
        source = os.environ[DATA_ENV]
    elif source in ("hf", "tinystories"):
        return ("text_field", "train_split", "valid_split")
    if source in NAMED_SOURCES:
        return ()
    path = Path(source).expanduser()
    if (path / "dataset_dict.json").is_file():
        return ("text_field", "train_split", "valid_split")
    if (path.is_dir() and is_saved_dataset(path)) or (path.is_file() and path.suffix in TABLE_SUFFIXES):
        return ("text_field",)
    return () if path.exists() else tuple(DATASET_SETTINGS)


def _tinystories_source(data_cfg: DataConfig) -> Source:
    """``$MOELAB_DATA`` when set, else the hub. The local copy is read exactly as
    ``data.source=PATH`` would read it, so both resolve to the same fingerprint, the same token
    cache, and runs of the same config train to the same losses either way."""
    local = os.environ.get(DATA_ENV)
    if not local:
        return _hf_source(data_cfg, "tinystories")
    path = Path(local).expanduser()
    if not path.exists():
        raise MoelabError(f"{DATA_ENV}={local!r} (the local copy data.source=tinystories reads): "
                          "no such file or folder; point it at a folder with train.txt and "
                          f"valid.txt, or unset it to read {HF_DATASET} from the hub")
    return _path_source(path, data_cfg)


# --------------------------------------------------------------------------------------------
# Parsing text
# --------------------------------------------------------------------------------------------


def split_stories(text: str) -> list[str]:
    """Stories of a TinyStories-layout text: split on ``<|endoftext|>``, strip, drop empties."""
    return [story for story in (piece.strip() for piece in text.split(EOT_TEXT)) if story]


def decode_utf8(raw: bytes, where: str) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise MoelabError(
            f"{where} is not UTF-8 text: invalid byte 0x{raw[exc.start]:02x} at offset "
            f"{exc.start}; allowed: UTF-8 encoded .txt or .jsonl"
        ) from None


def jsonl_stories(text: str, where: str) -> list[str]:
    """Stories of a ``.jsonl`` text: one JSON object per line with a 'text' or 'story' field."""
    stories = []
    for line_number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except (json.JSONDecodeError, RecursionError):
            raise MoelabError(f"{where} line {line_number} is not valid JSON") from None
        fields = [f for f in JSONL_TEXT_FIELDS if isinstance(record, dict) and f in record]
        field = fields[0] if fields else None
        if field is None or not isinstance(record[field], str):
            raise MoelabError(
                f"{where} line {line_number} has no string field 'text' or 'story'"
            )
        story = record[field].strip()
        if story:
            stories.append(story)
    return stories


def split_bytes(stories: Sequence[str]) -> int:
    """UTF-8 size of ``stories`` in the TinyStories layout (each followed by a separator line)."""
    return sum(len(story.encode("utf-8")) for story in stories) + SEPARATOR_BYTES * len(stories)


def held_out_mask(num_stories: int, valid_fraction: float) -> list[bool]:
    """Which stories of a single file are validation: evenly spread, about ``valid_fraction``.

    Story i is held out when floor((i + 1) * f) > floor(i * f), i.e. once every 1/f stories,
    so the validation slice samples the whole file rather than only its tail.
    """
    return [int((i + 1) * valid_fraction) > int(i * valid_fraction) for i in range(num_stories)]


def _list_split(name: str, stories: list[str]) -> StorySplit:
    def read_batches() -> Iterator[list[str]]:
        for start in range(0, len(stories), BATCH_STORIES):
            yield stories[start : start + BATCH_STORIES]

    return StorySplit(name, read_batches, len(stories))


def _limit(stories: list[str], max_stories: Optional[int]) -> list[str]:
    return stories if max_stories is None else stories[:max_stories]


def _fingerprint(parts: dict) -> str:
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode("utf-8")).hexdigest()


def _content_hash(raw: bytes) -> str:
    return hashlib.sha256(raw).hexdigest()


# --------------------------------------------------------------------------------------------
# The bundled sample
# --------------------------------------------------------------------------------------------


def sample_path(split: str, files: dict[str, str] = SAMPLE_FILES):
    """The compressed file of ``split`` ('train' or 'valid') inside the package: the sample's,
    or with ``files=ADAPTATION_FILES`` the adaptation set's."""
    return resources.files("moelab.data").joinpath("sample").joinpath(files[split])


def _sample_source(data_cfg: DataConfig) -> Source:
    return _packaged_source(data_cfg, "sample", SAMPLE_FILES)


def _packaged_source(data_cfg: DataConfig, kind: str, files: dict[str, str]) -> Source:
    """Two xz-compressed TinyStories-layout files shipped in ``moelab/data/sample/``."""
    compressed = {split: sample_path(split, files).read_bytes() for split in files}

    def load() -> tuple[StorySplit, StorySplit]:
        stories = {
            split: split_stories(lzma.decompress(raw).decode("utf-8"))
            for split, raw in compressed.items()
        }
        train = _limit(stories["train"], data_cfg.max_train_stories)
        return _list_split("train", train), _list_split("valid", stories["valid"])

    fingerprint = _fingerprint({
        "kind": kind,
        "content": {split: _content_hash(raw) for split, raw in compressed.items()},
        "max_train_stories": data_cfg.max_train_stories,
    })
    return Source(kind, fingerprint, load)


# --------------------------------------------------------------------------------------------
# The Hugging Face hub
# --------------------------------------------------------------------------------------------


def _hf_source(data_cfg: DataConfig, name: str = "hf") -> Source:
    """TinyStories from the hub (or the datasets library's cache of it); ``name`` is the
    data.source that asked, for messages."""
    try:
        import datasets
    except ImportError:
        raise MoelabError(f"data.source={name!r} needs the 'datasets' package: " + (
            GET_TINYSTORIES if name == "tinystories" else "pip install 'moelab[hf]'")) from None
    try:
        with _quiet_hub_logs():  # offline, the hub client logs each retry; the error says it all
            dataset_dict = datasets.load_dataset(HF_DATASET)
    except Exception as exc:  # noqa: BLE001 -- network, auth, missing cache: all user-facing
        how = _damaged_cache_remedy(exc, datasets) or (
            GET_TINYSTORIES_ONLINE if name == "tinystories" else
            "use data.source=sample or a local path when offline")
        raise MoelabError(
            f"data.source={name!r}: cannot load {HF_DATASET} ({_first_line(exc)}); {how}"
        ) from None
    return source_from_dataset_dict(dataset_dict, data_cfg, label="hf")


@contextmanager
def _quiet_hub_logs() -> Iterator[None]:
    """Only errors from the loggers of datasets and huggingface_hub while loading."""
    loggers = [logging.getLogger(name) for name in ("datasets", "huggingface_hub")]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        for logger, level in zip(loggers, levels):
            logger.setLevel(level)


def source_from_dataset_dict(dataset_dict, data_cfg: DataConfig, label: str = "hf") -> Source:
    """A ``Source`` over a loaded ``datasets.DatasetDict`` with 'train' and 'validation' splits.

    Stories are read from the 'text' (or 'story') column in Arrow batches, so a 2 M-story
    dataset is never held as Python strings. The fingerprint uses the datasets library's own
    fingerprint of each split (hashing ~2 GB of text on every run would be slow).
    """
    splits = {}
    for wanted, names in (("train", ("train",)), ("valid", ("validation", "valid", "test"))):
        name = next((n for n in names if n in dataset_dict), None)
        if name is None:
            raise MoelabError(
                f"data.source={short_repr(label)}: the dataset has splits {sorted(dataset_dict)}; "
                f"needed 'train' and 'validation'"
            )
        splits[wanted] = dataset_dict[name]
    column = {}
    for wanted, dataset in splits.items():
        column[wanted] = next((c for c in JSONL_TEXT_FIELDS if c in dataset.column_names), None)
        if column[wanted] is None:
            raise MoelabError(
                f"data.source={short_repr(label)}: split {wanted} has columns {dataset.column_names}; "
                "needed 'text' or 'story'"
            )
    limits = {"train": data_cfg.max_train_stories, "valid": None}

    def dataset_split(wanted: str) -> StorySplit:
        dataset = splits[wanted]
        limit = limits[wanted]
        if limit is not None:
            dataset = dataset.select(range(min(limit, len(dataset))))

        def read_batches() -> Iterator[list[str]]:
            for batch in dataset.iter(batch_size=BATCH_STORIES):
                stories = [s.strip() for s in batch[column[wanted]] if s and s.strip()]
                if stories:
                    yield stories

        return StorySplit(wanted, read_batches, len(dataset))

    fingerprint = _fingerprint({
        "kind": label,
        "splits": {w: getattr(d, "_fingerprint", None) or _dataset_content_hash(d, column[w])
                   for w, d in splits.items()},
        "max_train_stories": data_cfg.max_train_stories,
    })
    return Source(label, fingerprint, lambda: (dataset_split("train"), dataset_split("valid")))


def _dataset_content_hash(dataset, column: str) -> str:
    digest = hashlib.sha256()
    for batch in dataset.iter(batch_size=BATCH_STORIES):
        for story in batch[column]:
            digest.update((story or "").encode("utf-8") + b"\0")
    return digest.hexdigest()


# --------------------------------------------------------------------------------------------
# Local paths
# --------------------------------------------------------------------------------------------

ALLOWED_PATHS = (
    "allowed: sample, tinystories, hf, hf:NAME, adaptation, a folder with train.txt and valid.txt "
    "(or .jsonl), a datasets save_to_disk folder, or one .txt/.jsonl/.parquet/.arrow file"
)


def _path_source(path: Path, data_cfg: DataConfig) -> Source:
    if path.is_dir() and is_saved_dataset(path):
        return _saved_dataset_source(path, data_cfg)
    if path.is_dir():
        return _folder_source(path, data_cfg)
    if path.is_file() and path.suffix in TABLE_SUFFIXES:
        return _table_file_source(path, data_cfg)
    if path.is_file():
        return _file_source(path, data_cfg)
    raise MoelabError(f"data.source={str(path)!r}: no such file or folder; {ALLOWED_PATHS}")


def _split_file(folder: Path, split: str) -> Path:
    for suffix in (".txt", ".jsonl"):
        candidate = folder / f"{split}{suffix}"
        if candidate.is_file():
            return candidate
    raise MoelabError(
        f"data.source={str(folder)!r}: the folder has no {split}.txt; {ALLOWED_PATHS}"
    )


MAX_SOURCE_FILE_BYTES = 4 * 2**30
"""The largest text file a source may be: it is read whole into memory (its content hash, its
stories). TinyStories' train.txt is 1.9 GB; larger corpora come through data.source=hf."""


def _read_raw(path: Path) -> bytes:
    try:
        size = path.stat().st_size
        if size > MAX_SOURCE_FILE_BYTES:
            raise MoelabError(f"{path} is {size / 1e9:.1f} GB: allowed at most "
                              f"{MAX_SOURCE_FILE_BYTES / 2**30:.0f} GiB per source file, which is "
                              "read into memory whole (split it, or give a Hugging Face dataset)")
        return path.read_bytes()
    except OSError as exc:
        raise MoelabError(f"cannot read {path}: {exc.strerror or exc}") from None


def _parse_file(path: Path, raw: bytes) -> list[str]:
    text = decode_utf8(raw, str(path))
    stories = jsonl_stories(text, str(path)) if path.suffix == ".jsonl" else split_stories(text)
    if not stories:
        raise MoelabError(f"{path} contains no stories: the file is empty or only separators")
    return stories


def _folder_source(folder: Path, data_cfg: DataConfig) -> Source:
    paths = {split: _split_file(folder, split) for split in ("train", "valid")}
    raw = {split: _read_raw(path) for split, path in paths.items()}

    def load() -> tuple[StorySplit, StorySplit]:
        train = _limit(_parse_file(paths["train"], raw["train"]), data_cfg.max_train_stories)
        valid = _parse_file(paths["valid"], raw["valid"])
        return _list_split("train", train), _list_split("valid", valid)

    fingerprint = _fingerprint({
        "kind": "folder",
        "files": {s: [paths[s].name, len(raw[s]), _content_hash(raw[s])] for s in paths},
        "max_train_stories": data_cfg.max_train_stories,
    })
    return Source(_safe_label(folder.name), fingerprint, load)


def _file_source(path: Path, data_cfg: DataConfig) -> Source:
    if path.suffix not in (".txt", ".jsonl"):
        raise MoelabError(
            f"data.source={str(path)!r}: unknown file type {short_repr(path.suffix)}; {ALLOWED_PATHS}"
        )
    raw = _read_raw(path)

    def load() -> tuple[StorySplit, StorySplit]:
        stories = _parse_file(path, raw)
        is_valid = held_out_mask(len(stories), data_cfg.valid_fraction)
        valid = [s for s, held in zip(stories, is_valid) if held]
        train = [s for s, held in zip(stories, is_valid) if not held]
        if not valid or not train:
            raise MoelabError(
                f"{path} has {len(stories)} stories, too few to hold out "
                f"data.valid_fraction={data_cfg.valid_fraction} for validation: separate "
                f"stories with a line {EOT_TEXT}, raise data.valid_fraction, or give a folder "
                "with train.txt and valid.txt"
            )
        train = _limit(train, data_cfg.max_train_stories)
        return _list_split("train", train), _list_split("valid", valid)

    fingerprint = _fingerprint({
        "kind": "file",
        "file": [path.name, len(raw), _content_hash(raw)],
        "valid_fraction": data_cfg.valid_fraction,
        "max_train_stories": data_cfg.max_train_stories,
    })
    return Source(_safe_label(path.stem), fingerprint, load)


def _safe_label(name: str) -> str:
    label = "".join(c if c.isalnum() or c in "-_" else "_" for c in name)[:32]
    return label or "data"


# --------------------------------------------------------------------------------------------
# Datasets: Parquet and Arrow files, save_to_disk folders, any hub dataset by name
# --------------------------------------------------------------------------------------------
#
# Each is read as tables of rows; one column (data.text_field, else 'text' or 'story') holds a
# document per row. A dataset with a validation split validates on it; one without holds out
# data.valid_fraction of its training documents as a single file does. data.max_train_stories
# stops the read after that many training documents, so a streamed corpus is sliced, not
# downloaded whole.


@dataclass
class Table:
    """One split of a tabular dataset: its column names, and one column read in batches."""

    where: str
    """How messages name it: the file, or the dataset and its split."""
    columns: list[str]
    read_column: Callable[[str], Iterator[list]]
    """The values of one column, batch by batch."""


def _import_optional(module: str, data_cfg: DataConfig, what: str):
    """``module``, or one line naming the extra that installs it."""
    try:
        return importlib.import_module(module)
    except ImportError:
        package = module.split(".")[0]
        raise MoelabError(f"data.source={short_repr(data_cfg.source)} ({what}) needs the "
                          f"{package!r} package: pip install 'moelab[hf]'") from None


def _first_line(exc: BaseException) -> str:
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


def _dataset_source(label: str, identity: dict, train: Table, valid: Optional[Table],
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

    fingerprint = _fingerprint({
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
    table = train if split == "train" else valid
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


def _refuse_valid_split(data_cfg: DataConfig, where: str) -> None:
    if data_cfg.valid_split is not None:
        raise MoelabError(f"data.valid_split={short_repr(data_cfg.valid_split)} is invalid for "
                          f"{where}: it has one split; null holds out data.valid_fraction of it")


# Files --------------------------------------------------------------------------------------


def _table_file_source(path: Path, data_cfg: DataConfig) -> Source:
    """One .parquet or .arrow file: one split, a slice held out for validation."""
    _refuse_valid_split(data_cfg, str(path))
    read_table = _parquet_table if path.suffix == ".parquet" else _arrow_table
    table = read_table(path, data_cfg)
    identity = {"kind": path.suffix[1:], "file": [path.name, path.stat().st_size, _file_hash(path)]}
    return _dataset_source(_safe_label(path.stem), identity, table, None, data_cfg)


def _file_hash(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _parquet_table(path: Path, data_cfg: DataConfig) -> Table:
    parquet = _import_optional("pyarrow.parquet", data_cfg, "a Parquet file")
    try:
        columns = parquet.ParquetFile(path).schema_arrow.names
    except Exception as exc:  # noqa: BLE001 -- pyarrow's ArrowInvalid, OSError: the user's file
        raise MoelabError(f"{path} is not a readable Parquet file ({_first_line(exc)})") from None

    def read_column(column: str) -> Iterator[list]:
        for batch in parquet.ParquetFile(path).iter_batches(batch_size=BATCH_STORIES,
                                                            columns=[column]):
            yield batch.column(0).to_pylist()

    return Table(str(path), list(columns), read_column)


def _arrow_table(path: Path, data_cfg: DataConfig) -> Table:
    """An Arrow IPC file, in the file format or the stream format (the one datasets writes)."""
    pyarrow = _import_optional("pyarrow", data_cfg, "an Arrow file")

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
        raise MoelabError(f"{path} is not a readable Arrow file ({_first_line(exc)})") from None

    def read_column(column: str) -> Iterator[list]:
        for batch in record_batches():
            yield batch.column(batch.schema.get_field_index(column)).to_pylist()

    return Table(str(path), list(columns), read_column)


# save_to_disk folders and the hub ---------------------------------------------------------


def is_saved_dataset(folder: Path) -> bool:
    """A folder ``Dataset.save_to_disk`` or ``DatasetDict.save_to_disk`` wrote."""
    return (folder / "dataset_dict.json").is_file() or (folder / "state.json").is_file()


def _hf_dataset_table(dataset, where: str) -> Table:
    """A ``datasets`` Dataset or IterableDataset as a ``Table``; a failure while reading (a
    dropped connection mid-stream) is one line too."""
    columns = dataset.column_names
    if columns is None:  # a stream whose features are unknown until a row is read
        try:
            columns = list(next(iter(dataset), {}))
        except Exception as exc:  # noqa: BLE001 -- whatever the stream raises: one line
            raise MoelabError(f"{where}: cannot read it ({_first_line(exc)})") from None

    def read_column(column: str) -> Iterator[list]:
        try:
            for batch in dataset.select_columns([column]).iter(batch_size=BATCH_STORIES):
                yield batch[column]
        except MoelabError:
            raise
        except Exception as exc:  # noqa: BLE001 -- a dropped connection mid-stream: one line
            raise MoelabError(f"{where}: reading failed ({_first_line(exc)})") from None

    return Table(where, list(columns), read_column)


def _source_from_splits(label: str, kind: str, splits: dict, data_cfg: DataConfig,
                        where: str, identity: dict) -> Source:
    """A ``Source`` over a mapping of split names to datasets (a DatasetDict)."""
    train_name, valid_name = pick_splits(list(splits), data_cfg, where)
    train = _hf_dataset_table(splits[train_name], f"split {train_name!r} of {where}")
    valid = (None if valid_name is None else
             _hf_dataset_table(splits[valid_name], f"split {valid_name!r} of {where}"))
    return _dataset_source(label, {"kind": kind, **identity,
                                   "splits": [train_name, valid_name]}, train, valid, data_cfg)


def _saved_dataset_source(folder: Path, data_cfg: DataConfig) -> Source:
    datasets = _import_optional("datasets", data_cfg, "a datasets save_to_disk folder")
    try:
        with _quiet_hub_logs():
            loaded = datasets.load_from_disk(str(folder))
    except Exception as exc:  # noqa: BLE001 -- datasets' errors vary by version: one line
        raise MoelabError(f"data.source={short_repr(data_cfg.source)}: cannot load the saved "
                          f"dataset ({_first_line(exc)})") from None
    label = _safe_label(folder.name)
    if not isinstance(loaded, datasets.DatasetDict):  # one Dataset: one split, hold a slice out
        _refuse_valid_split(data_cfg, str(folder))
        identity = {"kind": "saved", "fingerprint": _saved_fingerprint(loaded, folder)}
        return _dataset_source(label, identity, _hf_dataset_table(loaded, str(folder)), None,
                               data_cfg)
    identity = {"fingerprints": {name: _saved_fingerprint(d, folder) for name, d in loaded.items()}}
    return _source_from_splits(label, "saved", dict(loaded), data_cfg, str(folder), identity)


def _saved_fingerprint(dataset, folder: Path) -> str:
    """The datasets library's fingerprint of a saved split (kept in its state.json): it
    changes whenever the saved content does."""
    return (getattr(dataset, "_fingerprint", None)
            or _dataset_content_hash(dataset, dataset.column_names[0]))


def _hub_dataset_source(data_cfg: DataConfig) -> Source:
    """``hf:NAME``: ``datasets.load_dataset(NAME, data.hf_config)``, streamed, so that
    data.max_train_stories reads a slice of a corpus too big to download. Offline
    (HF_DATASETS_OFFLINE=1 or HF_HUB_OFFLINE=1) it is read, not streamed, from the datasets
    cache, where an earlier online run or a download left it.

    A hub dataset is keyed by the settings that select its text (its name, config, splits,
    text field, cap and held-out fraction), not by its content, which would have to be
    downloaded to be hashed; so the hub is asked nothing until a cache has to be built, and a
    built token cache trains offline.
    """
    name = data_cfg.source[len(HUB_PREFIX):].strip()
    if not name:
        raise MoelabError(f"data.source={short_repr(data_cfg.source)} is invalid: name a dataset "
                          "after hf:, e.g. hf:HuggingFaceFW/fineweb-edu")
    _import_optional("datasets", data_cfg, "a Hugging Face dataset")
    loaded: list[Source] = []

    def streamed() -> Source:
        if not loaded:
            loaded.append(_load_hub_dataset(name, data_cfg))
        return loaded[0]

    fingerprint = _fingerprint({
        "kind": "hub", "name": name, "config": data_cfg.hf_config,
        "splits": [data_cfg.train_split, data_cfg.valid_split], "text_field": data_cfg.text_field,
        "valid_fraction": data_cfg.valid_fraction, "max_train_stories": data_cfg.max_train_stories,
    })
    return Source(_safe_label(name.rstrip("/").split("/")[-1]), fingerprint,
                  load=lambda: streamed().load(), check=lambda: streamed().check())


def _load_hub_dataset(name: str, data_cfg: DataConfig) -> Source:
    """The dataset itself, its splits and columns found (the network, or the datasets cache)."""
    datasets = _import_optional("datasets", data_cfg, "a Hugging Face dataset")
    where = HUB_PREFIX + name + (f" (config {data_cfg.hf_config})" if data_cfg.hf_config else "")
    offline = _hub_offline(datasets)
    try:
        with _quiet_hub_logs():
            splits = datasets.load_dataset(name, data_cfg.hf_config, streaming=not offline)
    except Exception as exc:  # noqa: BLE001 -- no network, unknown dataset or config, no cache
        remedy = (offline and _damaged_cache_remedy(exc, datasets)) or (
            "it is not in the datasets cache (offline)" if offline else
            "check the name and data.hf_config, and the network")
        raise MoelabError(f"data.source={short_repr(data_cfg.source)}: cannot load the dataset "
                          f"({_first_line(exc)}); {remedy}") from None
    identity = {"name": name, "config": data_cfg.hf_config}
    return _source_from_splits(_safe_label(name.rstrip("/").split("/")[-1]), "hub", dict(splits),
                               data_cfg, where, identity)


def _damaged_cache_remedy(exc: Exception, datasets) -> str:
    """What to do when ``load_dataset`` found its cached copy but could not read it (a file cut
    short: pyarrow's or json's errors); '' for any other failure (the dataset not reached or
    not found, an unknown config), which the caller words."""
    import pyarrow  # datasets stands on it

    if not isinstance(exc, (pyarrow.ArrowException, json.JSONDecodeError)):
        return ""
    return (f"its copy in the datasets cache cannot be read: delete it from "
            f"{datasets.config.HF_DATASETS_CACHE} and load it again online")


def _hub_offline(datasets) -> bool:
    """Whether the datasets library is set to work offline (its config reads the variables)."""
    config = datasets.config
    return bool(getattr(config, "HF_HUB_OFFLINE", False) or
                getattr(config, "HF_DATASETS_OFFLINE", False))
