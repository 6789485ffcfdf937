"""Where stories come from: the bundled sample, TinyStories (a local copy named by
``$MOELAB_DATA``, else the Hugging Face hub), the hub itself, or the user's files.

Every source resolves to a ``Source`` (``moelab.data.source_record``): a cheap ``fingerprint`` (a
hash of the raw content and of the settings that select stories from it, computed without
parsing) and a ``load()`` that parses the stories of both splits. The fingerprint keys the
tokenizer and token caches, so ``load()`` only runs when a cache has to be built.

By kind: ``text_sources`` (the bundled files, a folder, one .txt/.jsonl file),
``table_sources`` (Parquet and Arrow files), ``hub_sources`` (what the ``datasets`` library
reads: the hub, ``hf:NAME``, save_to_disk folders); ``story_text`` is the TinyStories layout
they all parse.
"""

from __future__ import annotations

import os
from pathlib import Path

from moelab.config import DataConfig
from moelab.data.hub_sources import (
    DATA_ENV, HF_DATASET, HUB_PREFIX, hf_source, hub_dataset_source, is_saved_dataset,
    saved_dataset_source,
)
from moelab.data.source_record import Source
from moelab.data.table_sources import table_file_source
from moelab.data.text_sources import (
    ADAPTATION_FILES, ALLOWED_PATHS, file_source, folder_source, packaged_source, sample_source,
)
from moelab.errors import MoelabError, short_repr

NAMED_SOURCES = ("sample", "tinystories", "hf", "adaptation")
TABLE_SUFFIXES = (".parquet", ".arrow")


def resolve_source(data_cfg: DataConfig) -> Source:
    """The ``Source`` named by ``data.source``: 'sample', 'tinystories', 'hf', 'adaptation' or a
    path."""
    if data_cfg.source == "sample":
        return sample_source(data_cfg)
    if data_cfg.source == "adaptation":
        return packaged_source(data_cfg, "adaptation", ADAPTATION_FILES)
    if data_cfg.source == "tinystories":
        return _tinystories_source(data_cfg)
    if data_cfg.source == "hf":
        return hf_source(data_cfg)
    if data_cfg.source.startswith(HUB_PREFIX):
        return hub_dataset_source(data_cfg)
    return _path_source(Path(data_cfg.source).expanduser(), data_cfg)


def read_from_the_hub(data_cfg: DataConfig) -> bool:
    """Whether ``data.source`` is fetched from the Hugging Face hub (hf, hf:NAME, tinystories
    without ``$MOELAB_DATA``): resolving it loads the dataset, a download on first use."""
    source = data_cfg.source
    return (source == "hf" or source.startswith(HUB_PREFIX)
            or (source == "tinystories" and not os.environ.get(DATA_ENV)))


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
        return hf_source(data_cfg, "tinystories")
    path = Path(local).expanduser()
    if not path.exists():
        raise MoelabError(f"{DATA_ENV}={local!r} (the local copy data.source=tinystories reads): "
                          "no such file or folder; point it at a folder with train.txt and "
                          f"valid.txt, or unset it to read {HF_DATASET} from the hub")
    return _path_source(path, data_cfg)


def _path_source(path: Path, data_cfg: DataConfig) -> Source:
    if path.is_dir() and is_saved_dataset(path):
        return saved_dataset_source(path, data_cfg)
    if path.is_dir():
        return folder_source(path, data_cfg)
    if path.is_file() and path.suffix in TABLE_SUFFIXES:
        return table_file_source(path, data_cfg)
    if path.is_file():
        return file_source(path, data_cfg)
    raise MoelabError(f"data.source={str(path)!r}: no such file or folder; {ALLOWED_PATHS}")
