"""Config files: YAML read and written, the bundled presets, and ``load_config``.

A study preset is a config file with a ``study:`` section that may name the preset it extends
(``study.base``): ``load_config`` reads it as its MoE arm, the base merged in and the section
dropped (``moelab.study.settings`` reads the section itself).
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

import yaml

from moelab.config.legacy import move_flat_logging_keys
from moelab.config.parsing import (
    MAX_YAML_CHARS, RefusedYAML, apply_overrides, build_config, load_yaml, to_dict,
)
from moelab.config.schema import Config
from moelab.errors import ConfigError, short_repr
from moelab.fileio import atomic_write_text


def preset_names(folder: str = "") -> list[str]:
    """The YAML presets in moelab/presets/ (config and study presets) or in one of its folders."""
    return sorted(p.name[: -len(".yaml")] for p in _presets(folder).iterdir()
                  if p.name.endswith(".yaml"))


def _presets(folder: str):
    root = resources.files("moelab.presets")
    return root.joinpath(folder) if folder else root


def read_yaml_text(path: Path) -> str:
    """The text of a YAML file of at most ``MAX_YAML_CHARS`` bytes (``RefusedYAML`` when
    longer, after reading one byte past the cap: a huge file is never read whole)."""
    with open(path, "rb") as f:
        data = f.read(MAX_YAML_CHARS + 1)
    if len(data) > MAX_YAML_CHARS:
        raise RefusedYAML(None, None, f"it is larger than {MAX_YAML_CHARS:,} bytes (64 KiB), "
                          "the most a YAML file may hold")
    return data.decode("utf-8")


def read_yaml(path: Path):
    """A YAML file's content within moelab's bounds (``load_yaml``); ``OSError``,
    ``UnicodeDecodeError`` or ``yaml.YAMLError`` when it cannot be."""
    return load_yaml(read_yaml_text(path))


def read_raw(source: str | Path, what: str = "config", folder: str = "") -> dict:
    """The raw dict of a YAML file, or of a named preset (in ``folder`` of moelab/presets/) when
    no such file exists. ``what`` names the file in messages ("config", "sweep grid")."""
    path = Path(source)
    shown = f"{what} {str(source)!r}"
    if path.is_file():
        try:
            text = read_yaml_text(path)
        except RefusedYAML as exc:
            raise ConfigError(f"{shown} is invalid: {exc.problem}") from None
        except UnicodeDecodeError as exc:
            raise ConfigError(f"{shown} is not UTF-8 text (byte {exc.start}: "
                              f"{short_repr(exc.object[exc.start:exc.start + 1])})") from None
        except OSError as exc:
            raise ConfigError(f"{shown} cannot be read: {exc.strerror or exc}") from None
    elif str(source) in preset_names(folder):
        text = _presets(folder).joinpath(f"{source}.yaml").read_text("utf-8")
    else:
        raise ConfigError(f"{shown} is neither a file nor a preset: presets are "
                          f"{', '.join(preset_names(folder))}")
    try:
        raw = load_yaml(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark else ""
        why = f": {exc.problem}" if isinstance(exc, RefusedYAML) else ""
        raise ConfigError(f"{shown} is not valid YAML{where}{why}") from None
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise ConfigError(f"{shown} is invalid: expected a mapping at the top level")
    return raw


MAX_BASE_DEPTH = 8


def read_with_base(source: str | Path, depth: int = 0) -> dict:
    """The raw dict of ``source`` merged over the preset or file named by its ``study.base``.

    A study preset extends another config through its ``study:`` section (the study layer
    reads the rest of that section); the merged dict keeps the section, without ``base``.
    """
    raw = move_flat_logging_keys(read_raw(source))  # each file's own, before they merge
    study = raw.get("study") or {}
    if not isinstance(study, dict):
        raise ConfigError(f"study={short_repr(study)} is invalid: expected a mapping of study settings")
    base = study.pop("base", None)
    if base is None:
        return raw
    if depth >= MAX_BASE_DEPTH:
        raise ConfigError(f"study.base={short_repr(base)} is invalid: bases nest too deep (a cycle?)")
    return deep_merge(read_with_base(base, depth + 1), raw)


def deep_merge(base: dict, top: dict) -> dict:
    """``top`` over ``base``, merging nested mappings key by key."""
    merged = dict(base)
    for key, value in top.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = deep_merge(merged[key], value)
        else:
            merged[key] = value
    return merged


def load_config(source: str | Path | None = None, overrides: list[str] | None = None) -> Config:
    """Load a YAML file or preset (None: all defaults), apply overrides, validate.

    A study preset loads as its MoE arm: its ``study.base`` is merged in and its ``study:``
    section (read only by the study commands) is dropped.
    """
    raw = read_with_base(source) if source is not None else {}
    raw.pop("study", None)
    return build_config(apply_overrides(raw, list(overrides or [])))


def dump_config(config: Config) -> str:
    """The YAML of a config, every key in its section's field order."""
    return yaml.safe_dump(to_dict(config), sort_keys=False)


def save_config(config: Config, path: str | Path) -> Path:
    return atomic_write_text(path, dump_config(config))
