"""What every figure's axes share: the loss unit, short tick labels for counts and FLOPs, and
colourbars that say what their colour means.

Counts (tokens, parameters) read as ``1.6M`` and FLOPs as ``3.2e15``: two significant digits,
more only where two would give distinct ticks the same label.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

from matplotlib.ticker import FuncFormatter, LogLocator, MaxNLocator, NullFormatter, NullLocator

LOSS_UNIT = "nats/token"
"""Every loss moelab reports is the mean next-token cross-entropy, natural log."""

COUNT_SUFFIXES = (("T", 1e12), ("B", 1e9), ("M", 1e6), ("K", 1e3))
SIGNIFICANT_DIGITS = 2
LOCATED_TICK_DIGITS = 3
"""Ticks a locator placed are round numbers (1.25M, 12.5M): three digits show them exactly."""


def loss_label(what: str = "validation loss") -> str:
    """An axis label for a loss with its unit: ``validation loss (nats/token)``."""
    return f"{what} ({LOSS_UNIT})"


def _significant(value: float, digits: int) -> str:
    """``value`` to ``digits`` significant digits, never dropping integer digits, no padding
    zeros: 1.6384 -> 1.6, 163.84 -> 164, 2.0 -> 2."""
    if value == 0:
        return "0"
    decimals = max(0, digits - 1 - math.floor(math.log10(abs(value))))
    text = f"{value:.{decimals}f}"
    return text.rstrip("0").rstrip(".") if "." in text else text


def format_count_tick(value: float, digits: int = SIGNIFICANT_DIGITS) -> str:
    """Tokens or parameters: 1_638_400 -> ``1.6M``, 20_576 -> ``21K``, 512 -> ``512``."""
    if abs(value) >= 1000:  # round first, so 999_999 reads 1M, not 1000K
        value = float(f"{value:.{digits - 1}e}")
    for suffix, scale in COUNT_SUFFIXES:
        if abs(value) >= scale:
            return _significant(value / scale, digits) + suffix
    return _significant(value, digits)


def format_flops_tick(value: float, digits: int = SIGNIFICANT_DIGITS) -> str:
    """FLOPs in powers of ten: 3.2e15 -> ``3.2e15``, 1e9 -> ``1e9``, 0 -> ``0``."""
    if value == 0:
        return "0"
    mantissa, exponent = f"{value:.{digits - 1}e}".split("e")
    mantissa = mantissa.rstrip("0").rstrip(".") if "." in mantissa else mantissa
    return f"{mantissa}e{int(exponent)}"


def distinct_labels(values: Sequence[float], formatter: Callable[..., str]) -> list[str]:
    """Labels for ``values`` with the fewest significant digits (two or more) that keep
    different values apart: budgets of 1.6384M and 1.64M need three digits, 1M and 2M one."""
    distinct = len(set(values))
    for digits in range(SIGNIFICANT_DIGITS, 13):
        labels = [formatter(value, digits) for value in values]
        if len(set(labels)) == distinct:
            return labels
    return labels


def label_ticks(axis, values: Sequence[float], formatter: Callable[..., str]) -> None:
    """Ticks only at ``values`` (say, a sweep's token budgets), labelled short but distinct."""
    axis.set_ticks(list(values), labels=distinct_labels(list(values), formatter))
    axis.set_minor_locator(NullLocator())


class OneTwoFiveLocator(LogLocator):
    """Log ticks at 1, 2 and 5 per decade over a narrow range (a sweep's sizes span one or
    two decades, where decades alone give one tick or none), at decades over a wider one."""

    WIDEST_ONE_TWO_FIVE = 2.5
    """Decades up to which 1-2-5 ticks fit; beyond, labels like 100K 200K run together."""

    def tick_values(self, vmin, vmax):
        low, high = sorted((vmin, vmax))
        narrow = low > 0 and math.log10(high / low) <= self.WIDEST_ONE_TWO_FIVE
        self.set_params(subs=(1.0, 2.0, 5.0) if narrow else (1.0,))
        return super().tick_values(vmin, vmax)


def format_axis(axis, formatter: Callable[..., str], max_ticks: int = 5) -> None:
    """Short labels from ``formatter`` on ``axis`` (``ax.xaxis``), linear or log (ticks from
    ``OneTwoFiveLocator``, the minor ones unlabelled)."""
    if axis.get_scale() == "log":
        axis.set_major_locator(OneTwoFiveLocator(numticks=max_ticks + 2))
        axis.set_minor_formatter(NullFormatter())
    else:
        axis.set_major_locator(MaxNLocator(nbins=max_ticks, steps=[1, 2, 2.5, 5, 10]))
    axis.set_major_formatter(
        FuncFormatter(lambda value, _position: formatter(value, LOCATED_TICK_DIGITS)))


def labelled_colourbar(fig, image, ax, label: str):
    """A colourbar beside ``ax`` for ``image`` that names what the colour is."""
    if not label.strip():
        raise ValueError("a colourbar needs a label saying what its colour means")
    colourbar = fig.colorbar(image, ax=ax, fraction=0.046)
    colourbar.set_label(label)
    return colourbar
