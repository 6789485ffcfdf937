"""Field checks the config sections' ``validate`` methods share: one-line ConfigErrors that
name the key, the value and what is allowed."""

from __future__ import annotations

import math
from typing import Any

from moelab.errors import ConfigError


def require_positive(obj: Any, prefix: str, *names: str) -> None:
    """Each named field of ``obj`` is a finite number > 0 (``prefix.name`` in the message)."""
    for name in names:
        value = getattr(obj, name)
        require(f"{prefix}.{name}", value, is_finite(value) and value > 0, "> 0")


def require_non_negative(obj: Any, prefix: str, *names: str) -> None:
    """Each named field of ``obj`` is a finite number >= 0."""
    for name in names:
        value = getattr(obj, name)
        require(f"{prefix}.{name}", value, is_finite(value) and value >= 0, ">= 0")


def require(key: str, value: Any, holds: bool, allowed: str) -> None:
    if not holds:  # nan fails both comparisons; inf would pass "> 0" without the finite check
        finite = "" if is_finite(value) else "a finite number "
        raise ConfigError(f"{key}={value} is invalid: must be {finite}{allowed}")


def is_sha256(text: str) -> bool:
    """64 lowercase hex digits."""
    return len(text) == 64 and all(c in "0123456789abcdef" for c in text)


def is_finite(value: Any) -> bool:
    """Not nan or inf (anything but a float is finite here)."""
    return not isinstance(value, float) or math.isfinite(value)
