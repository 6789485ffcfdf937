"""Keys older configs spell otherwise, read into today's sections.

The logging keys (``progress``, ``tensorboard``, ``wandb``, ``wandb_*``) were flat ``train``
keys before they moved into ``train.logging``. A config file, a preset or a ``--set`` that
still spells one flat loads as before, with a one-line note on stderr (once per key and
process); a config moelab wrote itself into a run, study or sweep folder loads silently: those
files are records, not something to edit.
"""

from __future__ import annotations

import dataclasses
import sys
from typing import Any

from moelab.config.schema import LoggingConfig
from moelab.errors import ConfigError, short_repr

LOGGING_KEYS = tuple(f.name for f in dataclasses.fields(LoggingConfig))
"""The keys of ``train.logging``, each once a flat ``train`` key."""

_noted: set[str] = set()
"""Flat keys already noted in this process: a sweep applies its overrides once per run."""


def note_flat_key(name: str) -> None:
    """The one-line deprecation note of the flat ``train.NAME`` (once per process)."""
    if name not in _noted:
        _noted.add(name)
        print(f"moelab: note: train.{name} is deprecated: use train.logging.{name}",
              file=sys.stderr)


def logging_key(key: str, note: bool = True) -> str:
    """A dotted override key with a flat logging key spelt as today (``train.progress`` ->
    ``train.logging.progress``); any other key as given."""
    parts = key.split(".")
    if len(parts) == 2 and parts[0] == "train" and parts[1] in LOGGING_KEYS:
        if note:
            note_flat_key(parts[1])
        return f"train.logging.{parts[1]}"
    return key


def spelt_as_today(override: str) -> str:
    """A ``KEY=VALUE`` override with a flat logging key spelt as today, silently (a sweep grid
    recorded before the keys moved is the same grid); any other override as given."""
    key, sep, value = override.partition("=")
    today = logging_key(key.strip(), note=False)
    return f"{today}={value}" if sep and today != key.strip() else override


def move_flat_logging_keys(raw: Any, note: bool = True) -> Any:
    """``raw`` (a config as a dict) with its flat ``train`` logging keys moved into
    ``train.logging``, changed in place; anything else (a train section that is not a mapping)
    as given, for the parser to refuse. A key given both flat and in ``train.logging`` with
    another value is a ConfigError: which one was meant is unknown."""
    train = raw.get("train") if isinstance(raw, dict) else None
    if not isinstance(train, dict):
        return raw
    flat = [name for name in LOGGING_KEYS if name in train]
    if not flat:
        return raw
    section = train.get("logging")
    if section is None:
        section = train["logging"] = {}
    if not isinstance(section, dict):  # else the parser would call the flat key unknown
        raise ConfigError(f"train.logging={short_repr(section)} is invalid: expected a mapping "
                          f"of keys")
    for name in flat:
        value = train.pop(name)
        if name in section and section[name] != value:
            raise ConfigError(f"train.{name}={short_repr(value)} and train.logging.{name}="
                              f"{short_repr(section[name])} are both given: keep "
                              f"train.logging.{name}")
        if note:
            note_flat_key(name)
        section[name] = value
    return raw


def without_logging(config: Any) -> Any:
    """A config dict (``to_dict``, or a file's raw dict) less how its run is shown: the
    ``train.logging`` section and the flat keys older configs spell it with. What a run
    computes is the rest: a resumed run, a branch and a rerun plan may differ only here."""
    train = config.get("train") if isinstance(config, dict) else None
    if not isinstance(train, dict):
        return config
    return {**config, "train": {key: value for key, value in train.items()
                                if key != "logging" and key not in LOGGING_KEYS}}


NUMERICS_OF_OLD_RUNS = "native"
"""``train.numerics`` of every config written before the key existed: those runs trained with
the CPU's native kernels (moelab.numerics), whatever today's default is."""


def with_numerics_of_its_day(planned: Any) -> Any:
    """A config moelab wrote into a folder (as a dict), with ``train.numerics`` set to what its
    runs trained with when it predates the key; so a resume today is compared against the
    numerics they really used, not the new default, and is not mixed with other numerics."""
    train = planned.get("train") if isinstance(planned, dict) else None
    if not isinstance(train, dict) or "numerics" in train:
        return planned
    return {**planned, "train": {**train, "numerics": NUMERICS_OF_OLD_RUNS}}
