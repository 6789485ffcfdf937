"""Figures: matplotlib with the Agg backend (no display needed), saved atomically as PNG."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # a headless backend: reports are built on servers and in CI

import matplotlib.pyplot as plt

from matplotlib.ticker import FuncFormatter, MaxNLocator, NullLocator

from moelab.fileio import atomic_write
from moelab.report.markdown import format_tick_count

DPI = 120


def new_figure(ncols: int = 1, nrows: int = 1, width_in: float = 6.0, height_in: float = 4.0):
    """A figure and its axes (a flat list when there are several), sized per panel."""
    fig, axes = plt.subplots(
        nrows, ncols, figsize=(width_in * ncols, height_in * nrows), squeeze=False
    )
    flat = list(axes.flat)
    return fig, flat if len(flat) > 1 else flat[0]


def save_figure(fig, path: str | Path) -> Path:
    """Write ``fig`` as a PNG at ``path`` (atomically) and close it."""
    try:
        fig.tight_layout()
        return atomic_write(path, lambda tmp: fig.savefig(tmp, format="png", dpi=DPI))
    finally:
        plt.close(fig)


def discard_figure(fig) -> None:
    """Close ``fig`` unsaved (nothing was drawn on it); returns None, as a figure not drawn."""
    plt.close(fig)


def format_token_axis(axis, max_ticks: int = 5) -> None:
    """Token counts on a linear ``axis`` (``ax.xaxis``) as 100K / 1M / 2.5M, with at most
    ``max_ticks`` ticks: full numbers like 1500000 run into each other on narrow panels."""
    axis.set_major_locator(MaxNLocator(nbins=max_ticks, steps=[1, 2, 2.5, 5, 10]))
    axis.set_major_formatter(FuncFormatter(lambda value, _position: format_tick_count(value)))


def label_ticks_at(axis, values, labels) -> None:
    """Ticks only at ``values`` (say, the token budgets of a sweep on a log axis), labelled."""
    axis.set_ticks(list(values), labels=list(labels))
    axis.set_minor_locator(NullLocator())
