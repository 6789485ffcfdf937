"""Several tests as one family: Holm's step-down adjustment (Holm 1979).

numpy and scipy only: no torch, nothing else of moelab.
"""

from __future__ import annotations

import math
from typing import Optional
from collections.abc import Sequence

ADJUSTMENT = "Holm"
"""The multiple-comparison adjustment of a family of tests (``holm``)."""


def holm(p_values: Sequence[Optional[float]]) -> list[float]:
    """Holm's step-down adjusted p-values, in the order given.

    Sorted ascending, the i-th smallest (i = 0, 1, ...) of m p-values becomes
    ``min(1, max over j <= i of (m - j) p_(j))``: the running maximum keeps the adjusted values
    in the order of the raw ones, and tied raw p-values get the same adjusted one. A test that
    could not be made (NaN or None) is not one of the m and stays NaN. Rejecting where the
    adjusted p < alpha controls the chance of any false rejection at alpha.
    """
    raw = [math.nan if p is None else float(p) for p in p_values]
    tested = sorted((i for i, p in enumerate(raw) if not math.isnan(p)), key=raw.__getitem__)
    adjusted, running = [math.nan] * len(raw), 0.0
    for rank, index in enumerate(tested):
        running = max(running, min(1.0, (len(tested) - rank) * raw[index]))
        adjusted[index] = running
    return adjusted


def family_label(tests: int) -> str:
    """How a family's p-values were adjusted, as the reports name it: 'Holm, 8 tests'."""
    return f"{ADJUSTMENT}, {tests} test{'s' if tests != 1 else ''}"
