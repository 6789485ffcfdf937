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
import json
import logging
import lzma
import os
from contextlib import contextmanager
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Callable, Iterator, Optional, Sequence

from moelab.config import DataConfig
from moelab.errors import MoelabError, short_repr

EOT_TEXT = "<|endoftext|>"
# What one document separator costs in the TinyStories file layout (a line of its own).
SEPARATOR_BYTES = len(f"\n{EOT_TEXT}\n".encode("utf-8"))
HF_DATASET = "roneneldan/TinyStories"
DATA_ENV = "MOELAB_DATA"
"""A local copy of TinyStories that ``data.source: tinystories`` reads instead of the hub."""
GET_TINYSTORIES = (
    f"pip install 'moelab[hf]' and run moelab prepare-data --source tinystories once online "
    f"(it downloads {HF_DATASET} into the datasets cache), or set {DATA_ENV} to a local copy "
    "(a folder with train.txt and valid.txt)")
SAMPLE_FILES = {"train": "tinystories-train.txt.xz", "valid": "tinystories-valid.txt.xz"}
ADAPTATION_FILES = {"train": "adaptation-train.txt.xz", "valid": "adaptation-valid.txt.xz"}
"""The adaptation set (``data.source: adaptation``, built by ``moelab.data.adaptation``): the
bundled validation stories rewritten in an instruction format, the text sweeps fine-tune on."""
NAMED_SOURCES = ("sample", "tinystories", "hf", "adaptation")
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
    return _path_source(Path(data_cfg.source).expanduser(), data_cfg)


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
    return resources.files("moelab.data").joinpath("sample", files[split])


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
    how = GET_TINYSTORIES if name == "tinystories" else (
        "use data.source=sample or a local path when offline")
    try:
        import datasets
    except ImportError:
        raise MoelabError(f"data.source={name!r} needs the 'datasets' package: "
                          + (how if name == "tinystories" else "pip install 'moelab[hf]'")) from None
    try:
        with _quiet_hub_logs():  # offline, the hub client logs each retry; the error says it all
            dataset_dict = datasets.load_dataset(HF_DATASET)
    except Exception as exc:  # network, auth, missing cache: all user-facing
        first_line = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise MoelabError(
            f"data.source={name!r}: cannot load {HF_DATASET} ({first_line}); {how}"
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
        if limits[wanted] is not None:
            dataset = dataset.select(range(min(limits[wanted], len(dataset))))

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
    "allowed: sample, tinystories, hf, adaptation, a folder with train.txt and valid.txt (or .jsonl), "
    "or one .txt/.jsonl file"
)


def _path_source(path: Path, data_cfg: DataConfig) -> Source:
    if path.is_dir():
        return _folder_source(path, data_cfg)
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
