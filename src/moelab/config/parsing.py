"""Dicts and dotted overrides into typed configs: ``apply_overrides``, ``override``,
``build_config``, and YAML read within bounds (``load_yaml``).

A dict becomes a typed section through the codec's strict mode (``moelab.codec.from_dict``:
keys, types, one-line errors; ``Parsed`` for a value with its own notation), the one converter
that also reads stored records leniently. The same parser reads the other typed sections of
moelab (a study preset's ``study:``, the sparsity-sweep grids); the rules a field's type sets
are in the package docstring.
"""

from __future__ import annotations

from typing import Any

import yaml

from moelab.codec import from_dict, to_json
from moelab.config.legacy import logging_key, move_flat_logging_keys
from moelab.config.schema import Config
from moelab.errors import ConfigError, short_repr, short_text


def to_dict(obj: Any) -> Any:
    """A plain, YAML-safe dict of a config (nested dataclasses become dicts, lists are copied):
    the codec's writer, which every record goes through."""
    return to_json(obj)


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
