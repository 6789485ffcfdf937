"""Paper B's finding (b) on CPU: at a fixed FLOPs budget with the size free, which sparsity
reaches the lowest loss, and does that sparsity move with the budget?

The stored cpu-isoflop sweep (5 sizes x S in {0, 0.5, 0.75, 0.875} x 3 budgets, seeds 0-1, one
lr for every cell) gives each (budget, sparsity) an IsoFLOP minimum over sizes
(``moelab.scaling.isoflop_sparsity``, written to its isoflop.json); this page reads where the
best sparsity sits on the grid (``moelab.stats.verdicts``) and the trend of S*(C), and sets
beside them the per-cell lr check of the two smaller budgets (isoflop_lr.json).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from moelab.findings.source import ResultsRoot
from moelab.report import format_count, markdown_table
from moelab.report.analysis import Analysis, Findings
from moelab.stats.verdicts import Verdict, optimum_verdict, trend_verdict
from moelab.sweep.folder import read_results

SWEEP = "sweeps/cpu-isoflop"
LR_CHECK = "isoflop_lr.json"


@dataclass(frozen=True)
class BudgetRow:
    flops: float
    sparsities: list[float]
    minima: list[float]
    misfits: list[float]
    """Sparsities whose IsoFLOP parabola misfits (residuals above the seed noise)."""
    best: float
    verdict: Verdict
    largest_size_used: float


@dataclass(frozen=True)
class LrSensitivity:
    """How much a size's sparse runs moved when each cell got its own lr (two smaller budgets)."""

    size: str
    params: float
    lowest_change: float
    highest_change: float


@dataclass(frozen=True)
class IsoflopSparsity:
    seeds: list[str]
    budgets: list[BudgetRow]
    trend_slope: float
    trend_ci: tuple[float, float]
    trend: Verdict
    lr_sensitive: list[LrSensitivity]
    checked_budgets: list[str]


def _lr_sensitivity(results: ResultsRoot, params_by_size: dict[str, float]) -> list[LrSensitivity]:
    """Per size, the loss change of its sparse runs at their own lr (negative: better)."""
    changes: dict[str, list[float]] = defaultdict(list)
    for run, change in results.json(LR_CHECK)["loss_change"]["per_run"].items():
        _, size, cell, _ = run.split("/")
        if not cell.startswith("S0.000"):
            changes[size].append(change)
    return [LrSensitivity(size, params_by_size[size], min(values), max(values))
            for size, values in sorted(changes.items(), key=lambda item: params_by_size[item[0]])]


def compute(results: ResultsRoot, findings: Findings) -> IsoflopSparsity:
    table = read_results(results.root / SWEEP)
    if table is None:
        raise ValueError(f"{SWEEP} has no results")
    params_by_size = {row.size: row.N_total for row in table.rows if row.S == 0}
    optima = results.json(f"{SWEEP}/isoflop.json")["sparsity_optima"]
    rows = []
    for flops in optima["budgets"]:
        cells = sorted((c for c in optima["cells"] if c["flops"] == flops),
                       key=lambda c: c["sparsity"])
        grid = [c["sparsity"] for c in cells]
        minima = [c["loss"] for c in cells]
        best = minima.index(min(minima))
        rows.append(BudgetRow(flops, grid, minima,
                              [c["sparsity"] for c in cells if not c["support"]["well_supported"]],
                              grid[best], optimum_verdict(grid, best, None, None),
                              max(size for c in cells for size in c["support"]["sizes_used"])))
    trend = optima["trend"]
    checked = sorted({run.split("/")[0] for run in results.json(LR_CHECK)["loss_change"]["per_run"]})
    return IsoflopSparsity(
        sorted({row.seed for row in table.rows}), rows, trend["slope_per_decade"],
        tuple(trend["ci"]), trend_verdict(trend["slope_per_decade"], tuple(trend["ci"])),
        _lr_sensitivity(results, params_by_size), checked)


def render(record: IsoflopSparsity | None, results: ResultsRoot, findings: Findings) -> str:
    if record is None:
        return ""
    rows = [[f"{b.flops:.3g}", " / ".join(f"{m:.4f}" for m in b.minima), f"{b.best:g}",
             f"**{b.verdict.word}**",
             ", ".join(f"{s:g}" for s in b.misfits) or "–", format_count(b.largest_size_used)]
            for b in record.budgets]
    grid = " / ".join(f"{s:g}" for s in record.budgets[0].sparsities)
    lr_rows = [[s.size, format_count(s.params), f"{s.lowest_change:+.3f}",
                f"{s.highest_change:+.3f}"] for s in record.lr_sensitive]
    low, high = record.trend_ci
    return ("## The compute-optimal sparsity (cpu-isoflop)\n\n"
            f"IsoFLOP minimum of the loss over sizes at each budget and S = {grid} (seeds "
            f"{', '.join(record.seeds)}; `{SWEEP}/isoflop.json`), and where the best S sits:\n\n"
            + markdown_table(["C (FLOPs)", "minimum loss per S", "best S", "verdict",
                              "S whose parabola misfits", "largest size used"], rows, "rrrlrr")
            + f"\nS*(C)'s slope per decade of C: {record.trend_slope:+.3f} [{low:+.3f}, "
              f"{high:+.3f}] (resampling the 2 seeds), **{record.trend.word}**: these runs do not "
              "say whether the compute-optimal S* moves with compute.\n\n"
              "### The shared lr\n\n"
              "Every cell trained at lr 0.01. The per-cell lr check (`isoflop_lr.json`) retrained "
              f"the budgets {', '.join(record.checked_budgets)} with each cell's own lr from "
              "{0.005, 0.01, 0.02}; the sparse runs' loss change at their own lr, per size "
              "(negative: better than at 0.01):\n\n"
            + markdown_table(["size", "N", "lowest change", "highest change"], lr_rows, "lrrr")
            + _unchecked_sentence(record))


def _unchecked_sentence(record: IsoflopSparsity) -> str:
    """Whether a budget the lr check left out uses the size the shared lr hurt most."""
    most_hurt = min(record.lr_sensitive, key=lambda s: s.lowest_change)
    unchecked = [b for b in record.budgets if f"C{b.flops:.3g}" not in record.checked_budgets]
    exposed = [b for b in unchecked if b.largest_size_used >= most_hurt.params * 0.99]
    if not exposed or most_hurt.lowest_change >= 0:
        return ""
    budgets = ", ".join(f"{b.flops:.3g}" for b in exposed)
    return (f"\nThe shared lr cost {most_hurt.size}'s sparse runs most (down to "
            f"{most_hurt.lowest_change:+.3f} nats). The budget {budgets} was not rechecked and its "
            f"IsoFLOP windows use {most_hurt.size}, so its minima rest on runs trained at an lr "
            "the check found too high at the smaller budgets.\n")


ANALYSIS: Analysis[ResultsRoot, IsoflopSparsity] = Analysis("isoflop_sparsity", compute, render)


def summary(record: IsoflopSparsity) -> str:
    words = sorted({b.verdict.word for b in record.budgets})
    return (f"At a fixed FLOPs budget with the size free (cpu-isoflop, 2 seeds): the best S is "
            f"{' / '.join(f'{b.best:g}' for b in record.budgets)} at the {len(record.budgets)} "
            f"budgets, **{', '.join(words)}**; whether it moves with compute is "
            f"**{record.trend.word}**." + (" The largest budget rests on an lr too high for its "
                                           "largest sizes." if _unchecked_sentence(record) else ""))
