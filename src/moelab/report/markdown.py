"""Markdown tables and the number formats every report uses."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any


def markdown_table(headers: Sequence[str], rows: Sequence[Sequence[Any]], align: str = "") -> str:
    """A GitHub markdown table. ``align`` has one letter per column: l, r or c (default l)."""
    align = align.ljust(len(headers), "l")
    rule = {"l": "---", "r": "---:", "c": ":---:"}
    lines = [
        "| " + " | ".join(str(h) for h in headers) + " |",
        "|" + "|".join(rule[a] for a in align) + "|",
    ]
    for row in rows:
        cells = [str(cell).replace("|", "\\|") for cell in row]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def format_number(value: float | None, digits: int = 4) -> str:
    """Fixed decimals; '–' for a missing value."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "–"
    return f"{value:.{digits}f}"


def format_p_value(p: float | None) -> str:
    """Four decimals, and ``< 0.0001`` rather than a p that reads as exactly 0."""
    if p is not None and 0 <= p < 1e-4:
        return "< 0.0001"
    return format_number(p, 4)


def format_mean_std(mean: float, std: float, digits: int = 4) -> str:
    """``1.5788 ± 0.0020``; just the mean when there is no spread (one seed)."""
    if std is None or math.isnan(std):
        return format_number(mean, digits)
    return f"{format_number(mean, digits)} ± {format_number(std, digits)}"


def format_count(value: float | None) -> str:
    """Parameters, tokens, FLOPs: 14_770_000 -> ``14.77M``."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "–"
    for suffix, scale in (("T", 1e12), ("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if abs(value) >= scale:
            return f"{value / scale:.2f}{suffix}"
    return f"{value:g}"


def format_tick_count(value: float) -> str:
    """Axis ticks: 100_000 -> ``100K``, 2_500_000 -> ``2.5M``, 0 -> ``0`` (no padded zeros)."""
    for suffix, scale in (("T", 1e12), ("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if abs(value) >= scale:
            return f"{value / scale:.2f}".rstrip("0").rstrip(".") + suffix
    return f"{value:g}"
