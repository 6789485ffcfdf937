"""The one converter between moelab's dataclasses and plain data, in two modes.

``to_json(record)`` turns a dataclass (nested dataclasses, lists, tuples, dicts, numpy scalars)
into the dict ``json.dump`` (or ``yaml.safe_dump``) writes, its keys in field order. Reading
builds a dataclass back from the field types, nested records included, in one of two modes:

- **lenient**, ``from_json(Record, data)``, for stored records (the JSON files moelab wrote):
  unknown keys are ignored (a newer file read by an older moelab), values are taken as stored
  (an int where a float is declared becomes a float), and a problem is a ``ValueError`` naming
  the class and the key: a corrupt file, not the user's input.
- **strict**, ``from_dict(Section, data, prefix)``, for what a user writes (a config, a study
  section, a sweep grid): an unknown key, a missing required key or a value its field's type does
  not allow is a ``ConfigError`` whose one line names the dotted key, the value and what is
  allowed. A field's type says what it takes: ``int``, ``float``, ``bool``, ``str`` (numbers in
  YAML 1.1's string spelling, ``3e-4``, are read as numbers), ``Optional[...]`` (null allowed),
  ``Literal[...]`` (one of the values), ``list[...]`` (a list, or a comma-separated string from
  ``--set``), a nested dataclass (a mapping), or ``Annotated[T, Parsed(fn)]`` for a value with its
  own notation (``40.5M`` tokens, a seed list). Missing keys keep their defaults.

A record's JSON has exactly its fields' names, so files written before a record became typed
read back unchanged. A field may say, in its metadata, how it is written:

- ``json_key``: the key in the file when it is not a Python name (``"C*"``);
- ``omit_none``: leave the key out when the value is None (an optional key of an older file);
- ``omit_empty``: leave the key out when the value is an empty list or dict (a key only some
  files have, e.g. results only a variant of an experiment records);
- ``key_format``: a dict's keys written through this format spec (``"g"``: the lr 0.01 as
  ``"0.01"``, 1.0 as ``"1"``), as files keyed by a formatted number have them.
- ``omit_with``: the name of another field: leave the key out when that field is None, and
  write it (null included) otherwise (a key that only some variants of a record carry).
- ``json``: False for a field that is bookkeeping, never written (and never read back: it
  takes its default).

A class may list derived properties to write after its fields (``JSON_EXTRA = ("well_supported",)``);
they are skipped when read. A field typed as a union of records (``ParabolaBudget | SurfaceBudget``)
reads as the first of them whose required keys the object has, so records of one list may differ
in shape. A dict keyed by ``float`` or ``int`` reads its keys back as numbers (JSON writes every
key as a string).
"""

from __future__ import annotations

import dataclasses
import functools
import types
import typing
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar, Union

from moelab.errors import ConfigError, short_repr

T = TypeVar("T")


# --------------------------------------------------------------------------------------------
# Writing
# --------------------------------------------------------------------------------------------


def to_json(value: Any) -> Any:
    """``value`` as plain JSON values: dataclasses become dicts in field order."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return _record_to_json(value)
    if isinstance(value, dict):
        return {key: to_json(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [to_json(item) for item in value]
    if hasattr(value, "item") and callable(value.item):  # a numpy scalar or 0-d array
        return value.item()
    return value


def _record_to_json(record: Any) -> dict[str, Any]:
    return {key: to_json(value) for key, value in _record_items(record)}


def _record_items(record: Any) -> list[tuple[str, Any]]:
    """The (key, value) pairs ``to_json`` writes for ``record``, in order, values not yet
    converted."""
    items = []
    for field in dataclasses.fields(record):
        value = getattr(record, field.name)
        if field.metadata.get("json") is False:  # bookkeeping, never written
            continue
        if value is None and field.metadata.get("omit_none"):
            continue
        if "omit_with" in field.metadata and getattr(record, field.metadata["omit_with"]) is None:
            continue
        if not value and field.metadata.get("omit_empty") and isinstance(value, (list, dict)):
            continue
        if "key_format" in field.metadata and isinstance(value, dict):
            value = {format(key, field.metadata["key_format"]): item for key, item in value.items()}
        items.append((field.metadata.get("json_key", field.name), value))
    for name in getattr(type(record), "JSON_EXTRA", ()):
        items.append((name, getattr(record, name)))
    return items


# --------------------------------------------------------------------------------------------
# Reading: one walk over the field types, two modes
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Parsed:
    """``Annotated[T, Parsed(fn)]``: a value with its own notation (``40.5M`` tokens, a seed
    count or list). In strict mode ``fn(value, key)`` gets the raw value, null included, and the
    dotted key; it returns the value or raises a ConfigError naming the key. A stored record
    reads the value as ``T``."""

    fn: Callable[[Any, str], Any]


def from_json(cls: type[T], data: Any) -> T:
    """The ``cls`` that ``to_json`` wrote as ``data`` (lenient: unknown keys ignored); raises
    ValueError naming a missing key."""
    return _read(cls, data, "", strict=False)


def from_dict(cls: type[T], data: Any, prefix: str = "") -> T:
    """Build dataclass ``cls`` from a user's ``data`` (strict: keys and types checked, a
    ConfigError of one line); missing keys keep defaults (a field without a default is
    required). ``prefix`` is the dotted path in messages."""
    return _read_record(cls, {} if data is None else data, prefix, strict=True)


@functools.cache
def _field_types(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls, include_extras=True)


@functools.cache
def _readable_fields(cls: type) -> dict[str, dataclasses.Field]:
    """The fields a file or a user may give, by their key (bookkeeping fields are not read)."""
    return {field.metadata.get("json_key", field.name): field for field in dataclasses.fields(cls)
            if field.init and field.metadata.get("json") is not False}


def _required_keys(cls: type) -> list[str]:
    return [key for key, field in _readable_fields(cls).items()
            if field.default is dataclasses.MISSING and field.default_factory is dataclasses.MISSING]


def _read_record(cls: type, data: Any, prefix: str, strict: bool) -> Any:
    if not isinstance(data, dict):
        if strict:
            raise ConfigError(f"{prefix or 'config'}={short_repr(data)} is invalid: "
                              "expected a mapping of keys")
        raise ValueError(f"{cls.__name__}: expected an object, got {type(data).__name__}")
    fields = _readable_fields(cls)
    unknown = [key for key in data if key not in fields]
    if unknown and strict:
        raise ConfigError(f"{_join(prefix, str(unknown[0]))} is not a known key: "
                          f"allowed {', '.join(fields)}")
    required = _required_keys(cls)
    missing = [key for key in required if key not in data]
    if missing and strict:
        raise ConfigError(f"{_join(prefix, missing[0])} is missing: required keys are "
                          f"{', '.join(required)}")
    if missing:
        raise ValueError(f"{cls.__name__}: the key {missing[0]!r} is missing")
    hints = _field_types(cls)
    values = {fields[key].name: _read(hints[fields[key].name], value, _join(prefix, key), strict)
              for key, value in data.items() if key in fields}
    return cls(**values)


def _read(hint: Any, value: Any, key: str, strict: bool) -> Any:
    """``value`` read as type ``hint``; ``key`` is its dotted path, for strict mode's errors."""
    if typing.get_origin(hint) is typing.Annotated:
        parsed = [m for m in hint.__metadata__ if isinstance(m, Parsed)]
        if parsed and strict:
            return parsed[0].fn(value, key)
        hint = typing.get_args(hint)[0]
    optional, options = _union_options(hint)
    if len(options) > 1:
        return None if value is None else _read_one_of(options, value, strict)
    kind = options[0]
    if value is None and (optional or not (strict or _is_record(kind))):
        return None  # a stored null stands, except where a record is required
    if value is None and strict:
        raise ConfigError(f"{key}=null is invalid: {_allowed(kind)}")
    if _is_record(kind):
        return _read_record(kind, value, key, strict)
    origin, args = typing.get_origin(kind), typing.get_args(kind)
    if origin in (list, tuple) and args:
        return _read_sequence(kind, value, key, strict)
    if origin is dict and args:
        return _read_mapping(kind, value, key, strict)
    if origin is typing.Literal:
        return _check_literal(args, value, key) if strict else value
    if strict:
        return _check_scalar(kind, value, key)
    if kind is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    return value


def _union_options(hint: Any) -> tuple[bool, list[Any]]:
    """Whether ``hint`` allows None, and the types it allows besides."""
    if typing.get_origin(hint) in (Union, types.UnionType):
        args = typing.get_args(hint)
        return type(None) in args, [a for a in args if a is not type(None)]
    return False, [hint]


def _is_record(kind: Any) -> bool:
    return isinstance(kind, type) and dataclasses.is_dataclass(kind)


def _read_sequence(kind: Any, value: Any, key: str, strict: bool) -> Any:
    origin, args = typing.get_origin(kind), typing.get_args(kind)
    if strict:
        value = _as_list(kind, value, key)
    if origin is tuple and args[-1] is not Ellipsis:  # tuple[int, str]: one type per item
        return tuple(_read(arg, item, f"{key}[{index}]", strict)
                     for index, (arg, item) in enumerate(zip(args, value)))
    items = [_read(args[0], item, f"{key}[{index}]", strict) for index, item in enumerate(value)]
    return items if origin is list else tuple(items)


def _read_mapping(kind: Any, value: Any, key: str, strict: bool) -> dict:
    key_type, item_type = typing.get_args(kind)
    if strict and not isinstance(value, dict):
        raise ConfigError(f"{key}={short_repr(value)} is invalid: expected a mapping")
    cast = key_type if key_type in (float, int) else str  # JSON writes every key as a string
    return {cast(name): _read(item_type, item, _join(key, str(name)), strict)
            for name, item in value.items()}


def _read_one_of(options: list[Any], data: Any, strict: bool) -> Any:
    """A union's value: the first record type whose required keys ``data`` has; plain data when
    the union holds no record type (strict mode reads such a union only through ``Parsed``)."""
    records: list[type] = [kind for kind in options if _is_record(kind)]
    if strict:
        raise TypeError(f"a union of {options} is read from user input only through Parsed")
    if not records:
        return data
    for kind in records:
        if isinstance(data, dict) and all(key in data for key in _required_keys(kind)):
            return _read_record(kind, data, "", strict)
    names = " or ".join(kind.__name__ for kind in records)
    shown = sorted(data) if isinstance(data, dict) else repr(data)
    raise ValueError(f"{names}: {shown} is neither (a required key is missing)")


# --------------------------------------------------------------------------------------------
# Strict mode's checks: a user's value against its type, each problem one line
# --------------------------------------------------------------------------------------------


def _as_list(kind: Any, value: Any, key: str) -> list:
    if isinstance(value, str):  # --set key=a,b: YAML reads a,b as one string
        value = [item.strip() for item in value.split(",") if item.strip()]
    elif isinstance(value, (int, float)) and not isinstance(value, bool):  # --set key=5: [5]
        value = [value]
    if not isinstance(value, list):
        raise ConfigError(f"{key}={short_repr(value)} is invalid: expected {_type_name(kind)}")
    return value


def _check_literal(allowed: tuple, value: Any, key: str) -> Any:
    # Compare types too: YAML's 1 must not pass for a literal True, nor "1" for 1.
    if any(value == choice and type(value) is type(choice) for choice in allowed):
        return value
    raise ConfigError(f"{key}={short_repr(value)} is invalid: allowed {_choices(allowed)}")


def _check_scalar(hint: Any, value: Any, key: str) -> Any:
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


def _allowed(kind: Any) -> str:
    """What a field of type ``kind`` allows, for the message of a null it does not."""
    if typing.get_origin(kind) is typing.Literal:  # null is none of the names: name them
        return f"allowed {_choices(typing.get_args(kind))}"
    return f"expected {_type_name(kind)}"


def _choices(allowed: tuple) -> str:
    return ", ".join(map(str, allowed))


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
