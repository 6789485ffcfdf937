"""Token budgets written the way people say them: ``40.5M``, ``426.3M``, ``1B``, ``500K``.

Kept here, below the study and the sweep, so both read and label budgets the same way.
"""

from __future__ import annotations

from decimal import Decimal, InvalidOperation
from typing import Annotated, Any

from moelab.config import Parsed
from moelab.errors import ConfigError, MoelabError, short_repr

_SUFFIXES = {"": 1, "K": 10**3, "M": 10**6, "B": 10**9}


def parse_token_count(text: str | int | float) -> int:
    """``"40.5M"`` -> 40_500_000. Plain numbers (``1000000``, ``1e6``) are accepted too."""
    raw = str(text).strip()
    number, multiplier = raw, 1
    if raw and raw[-1].upper() in "KMB":
        number, multiplier = raw[:-1], _SUFFIXES[raw[-1].upper()]
    try:  # Decimal, not float: 0.1M must be exactly 100000
        tokens = Decimal(number) * multiplier
    except InvalidOperation:
        tokens = Decimal(0)
    if not tokens.is_finite() or tokens <= 0 or tokens != tokens.to_integral_value():
        raise MoelabError(
            f"token budget {short_repr(raw)} is invalid: expected a positive whole number of tokens, "
            "e.g. 426300000, 40.5M, 1.2B or 500K"
        )
    return int(tokens)


def _token_count_setting(value: Any, key: str) -> int:
    try:
        return parse_token_count(value)
    except MoelabError as exc:
        raise ConfigError(f"{key}: {exc}") from None


TokenCount = Annotated[int, Parsed(_token_count_setting)]
"""A config field type: a token count written as parse_token_count reads it (40.5M, 500K)."""


def parse_budget_list(text: str) -> list[int]:
    """``"40.5M,426.3M"`` -> sorted, de-duplicated token counts."""
    items = [item for item in str(text).split(",") if item.strip()]
    if not items:
        raise MoelabError(f"--budgets {short_repr(text)} is invalid: "
                          "expected a comma-separated list like 40.5M,426.3M")
    return sorted({parse_token_count(item) for item in items})


def format_token_count(tokens: int) -> str:
    """The shortest exact label: 40_500_000 -> ``40.5M``, 1_000 -> ``1K``, 1234 -> ``1234``."""
    for suffix in ("B", "M", "K"):
        scaled = tokens / _SUFFIXES[suffix]
        if scaled >= 1:
            label = f"{scaled:.6f}".rstrip("0").rstrip(".")
            if parse_token_count(label + suffix) == tokens:
                return label + suffix
    return str(tokens)
