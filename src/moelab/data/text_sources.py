"""Sources of plain text: the bundled sample and adaptation set, a folder with train and valid
files, or one .txt/.jsonl file of which a slice is held out for validation. Each is read whole
(its content hash keys the caches), so a file is capped at ``MAX_SOURCE_FILE_BYTES``.
"""

from __future__ import annotations

import lzma
from importlib import resources
from pathlib import Path

from moelab.config import DataConfig
from moelab.data.source_record import (
    Source, StorySplit, content_hash, fingerprint_of, limit_stories, list_split, safe_label,
)
from moelab.data.story_text import (
    EOT_TEXT, decode_utf8, held_out_mask, jsonl_stories, split_stories,
)
from moelab.errors import MoelabError, short_repr

SAMPLE_FILES = {"train": "tinystories-train.txt.xz", "valid": "tinystories-valid.txt.xz"}
ADAPTATION_FILES = {"train": "adaptation-train.txt.xz", "valid": "adaptation-valid.txt.xz"}
"""The adaptation set (``data.source: adaptation``, built by ``moelab.data.adaptation``): the
bundled validation stories rewritten in an instruction format, the text sweeps fine-tune on."""

ALLOWED_PATHS = (
    "allowed: sample, tinystories, hf, hf:NAME, adaptation, a folder with train.txt and valid.txt "
    "(or .jsonl), a datasets save_to_disk folder, or one .txt/.jsonl/.parquet/.arrow file"
)


def sample_path(split: str, files: dict[str, str] = SAMPLE_FILES):
    """The compressed file of ``split`` ('train' or 'valid') inside the package: the sample's,
    or with ``files=ADAPTATION_FILES`` the adaptation set's."""
    return resources.files("moelab.data").joinpath("sample").joinpath(files[split])


def sample_source(data_cfg: DataConfig) -> Source:
    return packaged_source(data_cfg, "sample", SAMPLE_FILES)


def packaged_source(data_cfg: DataConfig, kind: str, files: dict[str, str]) -> Source:
    """Two xz-compressed TinyStories-layout files shipped in ``moelab/data/sample/``."""
    compressed = {split: sample_path(split, files).read_bytes() for split in files}

    def load() -> tuple[StorySplit, StorySplit]:
        stories = {
            split: split_stories(lzma.decompress(raw).decode("utf-8"))
            for split, raw in compressed.items()
        }
        train = limit_stories(stories["train"], data_cfg.max_train_stories)
        return list_split("train", train), list_split("valid", stories["valid"])

    fingerprint = fingerprint_of({
        "kind": kind,
        "content": {split: content_hash(raw) for split, raw in compressed.items()},
        "max_train_stories": data_cfg.max_train_stories,
    })
    return Source(kind, fingerprint, load)


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


def folder_source(folder: Path, data_cfg: DataConfig) -> Source:
    paths = {split: _split_file(folder, split) for split in ("train", "valid")}
    raw = {split: _read_raw(path) for split, path in paths.items()}

    def load() -> tuple[StorySplit, StorySplit]:
        train = limit_stories(_parse_file(paths["train"], raw["train"]), data_cfg.max_train_stories)
        valid = _parse_file(paths["valid"], raw["valid"])
        return list_split("train", train), list_split("valid", valid)

    fingerprint = fingerprint_of({
        "kind": "folder",
        "files": {s: [paths[s].name, len(raw[s]), content_hash(raw[s])] for s in paths},
        "max_train_stories": data_cfg.max_train_stories,
    })
    return Source(safe_label(folder.name), fingerprint, load)


def _too_few_to_hold_out(path: Path, stories: int, valid_fraction: float) -> str:
    """The refusal of a file whose stories leave nothing for validation. One story cannot be
    split at any data.valid_fraction (stories are held out whole), so only the fixes that make
    more stories are named; with a few, a larger fraction holds one out."""
    fraction_fix = "" if stories <= 1 else "raise data.valid_fraction, "
    return (f"{path} has {stories} {'story' if stories == 1 else 'stories'}, too few to hold out "
            f"data.valid_fraction={valid_fraction} for validation: separate stories with a line "
            f"{EOT_TEXT}, {fraction_fix}or give a folder with train.txt and valid.txt")


def file_source(path: Path, data_cfg: DataConfig) -> Source:
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
            raise MoelabError(_too_few_to_hold_out(path, len(stories), data_cfg.valid_fraction))
        train = limit_stories(train, data_cfg.max_train_stories)
        return list_split("train", train), list_split("valid", valid)

    fingerprint = fingerprint_of({
        "kind": "file",
        "file": [path.name, len(raw), content_hash(raw)],
        "valid_fraction": data_cfg.valid_fraction,
        "max_train_stories": data_cfg.max_train_stories,
    })
    return Source(safe_label(path.stem), fingerprint, load)
