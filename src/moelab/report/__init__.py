"""Report helpers shared by the study and the scaling-law reports.

``figures``: matplotlib (Agg) figures saved atomically as PNG. ``markdown``: tables and number
formatting for the markdown reports. Both know nothing of runs or studies.
"""

from moelab.report.figures import (
    discard_figure, format_token_axis, label_ticks_at, new_figure, save_figure,
)
from moelab.report.markdown import (
    format_count, format_mean_std, format_number, format_p_value, format_tick_count,
    markdown_table,
)

__all__ = [
    "new_figure", "save_figure", "discard_figure", "format_token_axis", "label_ticks_at", "format_count",
    "format_mean_std", "format_number", "format_p_value", "format_tick_count", "markdown_table",
]
