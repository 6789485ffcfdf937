"""What several of the sweep's analyses share: the figures' palette, how an optimum's tokens
per parameter read, and the line naming IsoFLOP vertices the data support poorly. Not an
analysis itself."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from moelab.report.analysis import Findings
from moelab.scaling.isoflop import BudgetOptimum
from moelab.scaling.isoflop_sparsity import IsoflopCell
from moelab.sweep.folder import SweepFolder
from moelab.sweep.results_csv import ResultRow


def no_record(folder: SweepFolder, findings: Findings) -> None:
    """The compute of an analysis that renders the folder's own files and stores nothing."""
    return None


def palette(count: int, low: float = 0.0, high: float = 0.9) -> list:
    """``count`` colours along viridis from ``low`` to ``high``."""
    import matplotlib

    cmap = matplotlib.colormaps["viridis"]
    return [cmap(x) for x in np.linspace(low, high, count)]


def format_tokens_per_param(tokens: float, total: float, active: float) -> str:
    """Tokens per total and per active parameter, e.g. ``12.5 / 20.1``."""
    return f"{tokens / total:.3g} / {tokens / active:.3g}"


def optimum_tokens_per_param(flops: float, total: float, active: float | None) -> str:
    """D*/N* of an optimum at compute C: its tokens D = C / (6 N_active) per total and per
    active parameter; '–' without N_active."""
    if not active or not total:
        return "–"
    return format_tokens_per_param(flops / (6 * active), total, active)


def tokens_per_param_caption(rows: list[ResultRow]) -> str:
    """The sentence under a figure: how long the runs trained for their size."""
    if not rows:
        return ""
    per_total = [r.D / r.N_total for r in rows]
    per_active = [r.D / r.N_active for r in rows]
    return (f"Tokens per parameter of the runs: D/N_total {min(per_total):.3g} to "
            f"{max(per_total):.3g}, D/N_active {min(per_active):.3g} to {max(per_active):.3g}.\n")


def poorly_supported_text(what: str, rows: Sequence[BudgetOptimum | IsoflopCell]) -> str:
    """The IsoFLOP vertices (``what``) the data support poorly, and why: one line naming each
    row's budget (and its sparsity, for the per-sparsity minima) with its warnings; "" when
    none."""
    def where(row: BudgetOptimum | IsoflopCell) -> str:
        per_sparsity = f", S = {row.sparsity:g}" if isinstance(row, IsoflopCell) else ""
        return f"C = {row.flops:.3g}" + per_sparsity

    flagged = [row for row in rows if row.warnings]
    if not flagged:
        return ""
    return (f"\n**Poorly supported {what}**: "
            + "; ".join(f"{where(row)}: {', '.join(row.warnings)}" for row in flagged) + ".\n")


def joined(*sections: str) -> str:
    """An analysis's sections as the report joins them: the non-empty ones, a line apart."""
    return "\n".join(section for section in sections if section)


def several_sparsities(folder: SweepFolder) -> bool:
    """Whether the runs have two sparsities or more (the law's S terms are then measured)."""
    return len(np.unique(folder.law_columns()["S"])) >= 2
