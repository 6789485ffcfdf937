"""Figures: matplotlib with the Agg backend (no display needed), saved atomically as PNG."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # a headless backend: reports are built on servers and in CI

import matplotlib.pyplot as plt  # noqa: E402  (after choosing the backend)

from moelab.fileio import atomic_write  # noqa: E402

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
