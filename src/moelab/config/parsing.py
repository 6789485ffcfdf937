"""Dicts and dotted overrides into typed configs: ``from_dict`` (keys, types, one-line errors),
``Parsed`` for a value with its own notation, ``apply_overrides`` and ``override``.

The same parser reads the other typed sections of moelab (a study preset's ``study:``, the
sparsity-sweep grids); the rules a field's type sets are in the package docstring.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import yaml

from moelab.config.legacy import logging_key, move_flat_logging_keys
from moelab.config.schema import Config
from moelab.errors import ConfigError, short_repr, short_text


@dataclass(frozen=True)
class Parsed:
    """``Annotated[T, Parsed(fn)]``: a value with its own notation (``40.5M`` tokens, a seed
    count or list). ``fn(value, key)`` gets the raw value, null included, and the dotted key;
    it returns the value or raises a ConfigError naming the key."""

    fn: Callable[[Any, str], Any]


def to_dict(obj: Any) -> Any:
    """A plain, YAML-safe dict of a config (nested dataclasses become dicts, lists are copied)."""
    if dataclasses.is_dataclass(obj):
        return {f.name: to_dict(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, list):
        return [to_dict(item) for item in obj]
    return obj


def from_dict(cls: type, data: Any, prefix: str = "") -> Any:
    """Build dataclass ``cls`` from ``data``, checking keys and types; missing keys keep defaults
    (a field without a default is required). ``prefix`` is the dotted path in messages."""
    where = prefix or "config"
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(f"{where}={short_repr(data)} is invalid: expected a mapping of keys")
    hints = typing.get_type_hints(cls, include_extras=True)
    names = [f.name for f in dataclasses.fields(cls)]
    unknown = [key for key in data if key not in names]
    if unknown:
        raise ConfigError(
            f"{_join(prefix, str(unknown[0]))} is not a known key: allowed {', '.join(names)}"
        )
    required = [f.name for f in dataclasses.fields(cls)
                if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING]
    missing = [name for name in required if name not in data]
    if missing:
        raise ConfigError(f"{_join(prefix, missing[0])} is missing: required keys are "
                          f"{', '.join(required)}")
    kwargs = {key: _coerce(hints[key], value, _join(prefix, key)) for key, value in data.items()}
    return cls(**kwargs)


def _coerce(hint: Any, value: Any, key: str) -> Any:
    if typing.get_origin(hint) is typing.Annotated:
        parsed = [m for m in hint.__metadata__ if isinstance(m, Parsed)]
        if parsed:
            return parsed[0].fn(value, key)
        hint = typing.get_args(hint)[0]
    optional, inner = _unwrap_optional(hint)
    if value is None:
        if optional:
            return None
        if typing.get_origin(inner) is typing.Literal:  # null is none of the names: name them
            raise ConfigError(f"{key}=null is invalid: allowed {_choices(typing.get_args(inner))}")
        raise ConfigError(f"{key}=null is invalid: expected {_type_name(inner)}")
    if isinstance(inner, type) and dataclasses.is_dataclass(inner):
        return from_dict(inner, value, key)
    if typing.get_origin(inner) is list:
        return _coerce_list(typing.get_args(inner)[0], value, key)
    if typing.get_origin(inner) is typing.Literal:
        return _coerce_literal(typing.get_args(inner), value, key)
    return _coerce_scalar(inner, value, key)


def _coerce_list(item_hint: Any, value: Any, key: str) -> list:
    if isinstance(value, str):  # --set key=a,b: YAML reads a,b as one string
        value = [item.strip() for item in value.split(",") if item.strip()]
    elif isinstance(value, (int, float)) and not isinstance(value, bool):  # --set key=5: [5]
        value = [value]
    if not isinstance(value, list):
        raise ConfigError(f"{key}={short_repr(value)} is invalid: expected {_type_name(list[item_hint])}")
    return [_coerce(item_hint, item, f"{key}[{index}]") for index, item in enumerate(value)]


def _coerce_literal(allowed: tuple, value: Any, key: str) -> Any:
    # Compare types too: YAML's 1 must not pass for a literal True, nor "1" for 1.
    if any(value == choice and type(value) is type(choice) for choice in allowed):
        return value
    raise ConfigError(f"{key}={short_repr(value)} is invalid: allowed {_choices(allowed)}")


def _choices(allowed: tuple) -> str:
    return ", ".join(map(str, allowed))


def _coerce_scalar(hint: Any, value: Any, key: str) -> Any:
    if hint in (int, float) and isinstance(value, str):
        value = _parse_number(value)  # YAML 1.1 reads 3e-4 (no dot) as a string
    if hint is bool:
        if isinstance(value, bool):
            return value
    elif hint is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        if isinstance(value, float) and value.is_integer():  # 1e6 in YAML is a float
            return int(value)
    elif hint is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
    elif hint is str:  # noqa: SIM102 -- one branch per type, like those above
        if isinstance(value, (str, int, float)) and not isinstance(value, bool):
            return str(value)
    raise ConfigError(f"{key}={short_repr(value)} is invalid: expected {_type_name(hint)}")


def _parse_number(text: str) -> Any:
    try:
        return float(text.replace("_", ""))
    except ValueError:
        return text


def _unwrap_optional(hint: Any) -> tuple[bool, Any]:
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        return True, args[0]
    return False, hint


_SCALAR_NAMES = {int: "a whole number", float: "a number", bool: "true or false",
                 str: "a string"}
_PLURAL_NAMES = {int: "whole numbers", float: "numbers", bool: "true or false values",
                 str: "strings"}


def _type_name(hint: Any) -> str:
    if dataclasses.is_dataclass(hint):
        return "a mapping"
    if typing.get_origin(hint) is list:
        item = typing.get_args(hint)[0]
        plural = "mappings" if dataclasses.is_dataclass(item) else _PLURAL_NAMES.get(item, "values")
        return f"a list of {plural}"
    return _SCALAR_NAMES.get(hint, str(hint))


def _join(prefix: str, key: str) -> str:
    return f"{prefix}.{key}" if prefix else key


MAX_YAML_CHARS = 64 * 1024
"""The longest YAML text read (64 KiB). The largest bundled preset is 0.6 KB and a run's
config.yaml about 1.5 KB, so this is 40 times any real config; PyYAML parses in pure Python, so
the densest 64 KiB (a flow list of 30,000 numbers) already takes about a second."""
MAX_YAML_DEPTH = 32
"""The deepest nesting of YAML collections read: a config nests three levels (model.moe.x)."""


class RefusedYAML(yaml.MarkedYAMLError):
    """YAML that moelab refuses though PyYAML would read it: a key given twice, an alias, text
    over ``MAX_YAML_CHARS`` or nesting over ``MAX_YAML_DEPTH``. Its ``problem`` is one line."""


class _StrictLoader(yaml.SafeLoader):
    """``yaml.SafeLoader`` that refuses a key given twice in one mapping (PyYAML keeps the last
    one silently, so a typo'd copy of a key would override the intended value), aliases (no
    config needs one, and nested aliases expand a few hundred bytes into gigabytes) and
    collections nested deeper than ``MAX_YAML_DEPTH``."""

    _depth = 0

    def compose_node(self, parent, index):
        event = self.peek_event()
        if isinstance(event, yaml.AliasEvent) and event.anchor in self.anchors:
            # an undefined alias stays PyYAML's error: `--set data.source=*x` reads as text
            raise RefusedYAML(None, None, f"aliases (*{str(event.anchor)[:20]}) are not allowed",
                              event.start_mark)  # type: ignore[arg-type]  # the stubs' two Marks
        if isinstance(event, yaml.CollectionStartEvent) and self._depth >= MAX_YAML_DEPTH:
            raise RefusedYAML(None, None, f"it nests too deeply (more than {MAX_YAML_DEPTH} "
                              f"levels)", event.start_mark)  # type: ignore[arg-type]
        self._depth += 1
        try:
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1

    def construct_mapping(self, node, deep=False):
        seen = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            try:
                duplicate = key in seen
                seen.add(key)
            except TypeError:  # an unhashable key: the base class reports it
                break
            if duplicate:
                raise RefusedYAML(None, None, f"key {short_repr(key)} is given twice",
                                  key_node.start_mark)
        return super().construct_mapping(node, deep=deep)


def yaml_problem(exc: yaml.YAMLError) -> str:
    """One line for a YAML error: its problem and line (``RefusedYAML`` says what moelab
    refuses; PyYAML's own problems quote the text, so they are cut short)."""
    problem = getattr(exc, "problem", None) or (str(exc).splitlines() or ["malformed"])[0]
    mark = getattr(exc, "problem_mark", None)
    return short_text(problem) + (f" at line {mark.line + 1}" if mark else "")


def load_yaml(text: str):
    """``yaml.safe_load`` within moelab's bounds (``yaml.YAMLError``; ``RefusedYAML`` for
    what only moelab refuses: duplicate keys, aliases, too long or too deep)."""
    if len(text) > MAX_YAML_CHARS:
        raise RefusedYAML(None, None, f"it is {len(text):,} characters long: allowed at most "
                          f"{MAX_YAML_CHARS:,} (64 KiB)")
    return yaml.load(text, Loader=_StrictLoader)  # noqa: S506 -- a SafeLoader subclass


def apply_overrides(raw: dict, overrides: list[str]) -> dict:
    """Apply ``key.path=value`` strings to a raw config dict (values parsed as YAML).

    Walking through a missing or null section creates it, so ``model.moe.top_k=1`` on a dense
    config gives an MoE with default settings and top_k=1. A flat logging key of older configs
    (``train.progress``) sets its ``train.logging`` key, with a note (``moelab.config.legacy``).
    """
    for item in overrides:
        key, sep, text = item.partition("=")
        key = logging_key(key.strip())
        if not sep or not key:
            raise ConfigError(f"override {short_repr(item)} is invalid: "
                              "expected KEY=VALUE, e.g. model.d_model=256")
        try:
            value = load_yaml(text) if text.strip() else None
        except RefusedYAML as exc:
            raise ConfigError(f"override {short_repr(item)} is invalid: {exc.problem}") from None
        except yaml.YAMLError:
            value = text
        node = raw
        parts = key.split(".")
        for part in parts[:-1]:
            if not isinstance(node.get(part), dict):
                node[part] = {}
            node = node[part]
        node[parts[-1]] = value
    return move_flat_logging_keys(raw)  # a whole train section given: train={progress: false}


def build_config(raw: dict) -> Config:
    """A validated Config from a raw dict (a YAML file's, after overrides). Flat logging keys
    of older configs load silently: a config a run folder holds is a record, not an input."""
    return from_dict(Config, move_flat_logging_keys(raw, note=False)).validate()


def override(config: Config, overrides: list[str]) -> Config:
    """A validated copy of ``config`` with dotted ``key=value`` overrides applied."""
    return build_config(apply_overrides(to_dict(config), overrides))
