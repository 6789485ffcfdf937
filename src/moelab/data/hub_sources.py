"""Sources the ``datasets`` library reads: TinyStories from the Hugging Face hub (or the
library's cache of it), any hub dataset by name (``hf:NAME``, streamed) and folders
``save_to_disk`` wrote. Their splits are read as ``Table``s (``moelab.data.table_sources``).
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from moelab.config import DataConfig
from moelab.data.source_record import (
    BATCH_STORIES, Source, StorySplit, fingerprint_of, safe_label,
)
from moelab.data.story_text import JSONL_TEXT_FIELDS
from moelab.data.table_sources import (
    Table, dataset_source, first_line, import_optional, pick_splits, refuse_valid_split,
)
from moelab.errors import MoelabError, short_repr

HF_DATASET = "roneneldan/TinyStories"
DATA_ENV = "MOELAB_DATA"
"""A local copy of TinyStories that ``data.source: tinystories`` reads instead of the hub."""
GET_TINYSTORIES_ONLINE = (
    f"run moelab prepare-data --source tinystories once online (it downloads {HF_DATASET} "
    f"into the datasets cache), or set {DATA_ENV} to a local copy (a folder with train.txt and "
    "valid.txt)")
GET_TINYSTORIES = f"pip install 'moelab[hf]' and {GET_TINYSTORIES_ONLINE}"
HUB_PREFIX = "hf:"
"""``data.source: hf:NAME`` streams the Hugging Face dataset NAME (``load_dataset(NAME)``)."""


def hf_source(data_cfg: DataConfig, name: str = "hf") -> Source:
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
            f"data.source={name!r}: cannot load {HF_DATASET} ({first_line(exc)}); {how}"
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
    column: dict[str, str] = {}
    for wanted, dataset in splits.items():
        found = next((c for c in JSONL_TEXT_FIELDS if c in dataset.column_names), None)
        if found is None:
            raise MoelabError(
                f"data.source={short_repr(label)}: split {wanted} has columns {dataset.column_names}; "
                "needed 'text' or 'story'"
            )
        column[wanted] = found
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

    fingerprint = fingerprint_of({
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
            raise MoelabError(f"{where}: cannot read it ({first_line(exc)})") from None

    def read_column(column: str) -> Iterator[list]:
        try:
            for batch in dataset.select_columns([column]).iter(batch_size=BATCH_STORIES):
                yield batch[column]
        except MoelabError:
            raise
        except Exception as exc:  # noqa: BLE001 -- a dropped connection mid-stream: one line
            raise MoelabError(f"{where}: reading failed ({first_line(exc)})") from None

    return Table(where, list(columns), read_column)


def _source_from_splits(label: str, kind: str, splits: dict, data_cfg: DataConfig,
                        where: str, identity: dict) -> Source:
    """A ``Source`` over a mapping of split names to datasets (a DatasetDict)."""
    train_name, valid_name = pick_splits(list(splits), data_cfg, where)
    train = _hf_dataset_table(splits[train_name], f"split {train_name!r} of {where}")
    valid = (None if valid_name is None else
             _hf_dataset_table(splits[valid_name], f"split {valid_name!r} of {where}"))
    return dataset_source(label, {"kind": kind, **identity,
                                   "splits": [train_name, valid_name]}, train, valid, data_cfg)


def saved_dataset_source(folder: Path, data_cfg: DataConfig) -> Source:
    datasets = import_optional("datasets", data_cfg, "a datasets save_to_disk folder")
    try:
        with _quiet_hub_logs():
            loaded = datasets.load_from_disk(str(folder))
    except Exception as exc:  # noqa: BLE001 -- datasets' errors vary by version: one line
        raise MoelabError(f"data.source={short_repr(data_cfg.source)}: cannot load the saved "
                          f"dataset ({first_line(exc)})") from None
    label = safe_label(folder.name)
    identity: dict[str, object]
    if not isinstance(loaded, datasets.DatasetDict):  # one Dataset: one split, hold a slice out
        refuse_valid_split(data_cfg, str(folder))
        identity = {"kind": "saved", "fingerprint": _saved_fingerprint(loaded, folder)}
        return dataset_source(label, identity, _hf_dataset_table(loaded, str(folder)), None,
                               data_cfg)
    identity = {"fingerprints": {name: _saved_fingerprint(d, folder) for name, d in loaded.items()}}
    return _source_from_splits(label, "saved", dict(loaded), data_cfg, str(folder), identity)


def _saved_fingerprint(dataset, folder: Path) -> str:
    """The datasets library's fingerprint of a saved split (kept in its state.json): it
    changes whenever the saved content does."""
    return (getattr(dataset, "_fingerprint", None)
            or _dataset_content_hash(dataset, dataset.column_names[0]))


def hub_dataset_source(data_cfg: DataConfig) -> Source:
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
    import_optional("datasets", data_cfg, "a Hugging Face dataset")
    loaded: list[Source] = []

    def streamed() -> Source:
        if not loaded:
            loaded.append(_load_hub_dataset(name, data_cfg))
        return loaded[0]

    fingerprint = fingerprint_of({
        "kind": "hub", "name": name, "config": data_cfg.hf_config,
        "splits": [data_cfg.train_split, data_cfg.valid_split], "text_field": data_cfg.text_field,
        "valid_fraction": data_cfg.valid_fraction, "max_train_stories": data_cfg.max_train_stories,
    })
    return Source(safe_label(name.rstrip("/").split("/")[-1]), fingerprint,
                  load=lambda: streamed().load(), check=lambda: streamed().check())


def _load_hub_dataset(name: str, data_cfg: DataConfig) -> Source:
    """The dataset itself, its splits and columns found (the network, or the datasets cache)."""
    datasets = import_optional("datasets", data_cfg, "a Hugging Face dataset")
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
                          f"({first_line(exc)}); {remedy}") from None
    identity = {"name": name, "config": data_cfg.hf_config}
    return _source_from_splits(safe_label(name.rstrip("/").split("/")[-1]), "hub", dict(splits),
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
