"""Report helpers shared by the study and the scaling-law reports.

``figures``: matplotlib (Agg) figures saved atomically as PNG. ``markdown``: tables and number
formatting for the markdown reports. Both know nothing of runs or studies.

The figure helpers load matplotlib when first used (``__getattr__``), not on import: the
command line formats counts with ``markdown`` and must start without matplotlib
(docs/architecture.md, cli).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from moelab.report.markdown import (
    format_count, format_mean_std, format_number, format_p_value, format_tick_count,
    markdown_table,
)

if TYPE_CHECKING:  # imported on first use, below
    from moelab.report.figures import (
        discard_figure, format_token_axis, label_ticks_at, new_figure, save_figure,
    )

_FIGURE_NAMES = ("new_figure", "save_figure", "discard_figure", "format_token_axis",
                 "label_ticks_at")

__all__ = [
    "new_figure", "save_figure", "discard_figure", "format_token_axis", "label_ticks_at", "format_count",
    "format_mean_std", "format_number", "format_p_value", "format_tick_count", "markdown_table",
]


def __getattr__(name: str) -> Any:
    if name in _FIGURE_NAMES:
        return getattr(importlib.import_module("moelab.report.figures"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
