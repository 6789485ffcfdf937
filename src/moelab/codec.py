"""One JSON codec for moelab's dataclasses: typed values inside, plain JSON at the file boundary.

``to_json(record)`` turns a dataclass (nested dataclasses, lists, tuples, dicts, numpy scalars)
into the dict ``json.dump`` writes, its keys in field order; ``from_json(Record, data)`` reads one
back, building nested dataclasses from the field types. A record's JSON therefore has exactly its
fields' names, so files written before a record became typed read back unchanged.

A field may say, in its metadata, how it is written:

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
they are skipped when read. Unknown keys are ignored when reading (a newer file read by an older
moelab); a missing key takes the field's default, and a missing key without one is an error that
names the class and the key.

A field typed as a union of records (``ParabolaBudget | SurfaceBudget``) reads as the first of them
whose required keys the object has, so records of one list may differ in shape. A dict keyed by
``float`` or ``int`` reads its keys back as numbers (JSON writes every key as a string).
"""

from __future__ import annotations

import dataclasses
import functools
import types
import typing
from typing import Any, TypeVar, Union

T = TypeVar("T")


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


def from_json(cls: type[T], data: Any) -> T:
    """The ``cls`` that ``to_json`` wrote as ``data``; raises ValueError naming a missing key."""
    return _decode(cls, data)


@functools.cache
def _field_types(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def _record_from_json(cls: type, data: Any) -> Any:
    if not isinstance(data, dict):
        raise ValueError(f"{cls.__name__}: expected an object, got {type(data).__name__}")
    hints = _field_types(cls)
    values = {}
    for field in dataclasses.fields(cls):
        if not field.init or field.metadata.get("json") is False:
            continue
        key = field.metadata.get("json_key", field.name)
        if key in data:
            values[field.name] = _decode(hints[field.name], data[key])
        elif (field.default is dataclasses.MISSING
              and field.default_factory is dataclasses.MISSING):
            raise ValueError(f"{cls.__name__}: the key {key!r} is missing")
    return cls(**values)


def _decode(kind: Any, data: Any) -> Any:
    if dataclasses.is_dataclass(kind) and isinstance(kind, type):
        return _record_from_json(kind, data)
    origin, args = typing.get_origin(kind), typing.get_args(kind)
    if origin in (Union, types.UnionType):
        if data is None:
            return None
        options = [arg for arg in args if arg is not type(None)]
        if len(options) == 1:
            return _decode(options[0], data)
        return _decode_one_of(options, data)
    if data is None:
        return None
    if origin in (list, tuple) and args:
        if origin is tuple and args[-1] is not Ellipsis:  # tuple[int, str]: one type per item
            return tuple(_decode(arg, item) for arg, item in zip(args, data))
        items = [_decode(args[0], item) for item in data]
        return items if origin is list else tuple(items)
    if origin is dict and args:
        key_type = args[0] if args[0] in (float, int) else str
        return {key_type(key): _decode(args[1], item) for key, item in data.items()}
    if kind is float and isinstance(data, int) and not isinstance(data, bool):
        return float(data)
    return data


def _decode_one_of(options: list[Any], data: Any) -> Any:
    """A union's value: the first record type whose required keys ``data`` has; plain data when
    the union holds no record type."""
    records: list[type] = [kind for kind in options
                           if isinstance(kind, type) and dataclasses.is_dataclass(kind)]
    if not records:
        return data
    for kind in records:
        if isinstance(data, dict) and all(key in data for key in _required_keys(kind)):
            return _record_from_json(kind, data)
    names = " or ".join(kind.__name__ for kind in records)
    shown = sorted(data) if isinstance(data, dict) else repr(data)
    raise ValueError(f"{names}: {shown} is neither (a required key is missing)")


def _required_keys(cls: type) -> list[str]:
    return [field.metadata.get("json_key", field.name) for field in dataclasses.fields(cls)
            if field.init and field.default is dataclasses.MISSING
            and field.default_factory is dataclasses.MISSING]
