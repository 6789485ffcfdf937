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
    residual_to_noise: list[float | None]
    """Per sparsity, the IsoFLOP parabola's residual rms over the seed noise (None: a 3-size
    window leaves no residual to test)."""
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
    trend: Verdict
    lr_sensitive: list[LrSensitivity]
    checked_budgets: list[str]
    checked_s_star: dict[str, float]
    """The best S at the rechecked budgets with each cell's own lr (isoflop_lr.json)."""
    s3_lr: list[float]
    """The lrs the check chose for the size the shared lr hurt most."""
    lr_grid: list[float]


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
                              [c["support"]["residual_to_noise"] for c in cells],
                              grid[best], optimum_verdict(grid, best, None, None),
                              max(size for c in cells for size in c["support"]["sizes_used"])))
    trend = optima["trend"]
    seeds = sorted({row.seed for row in table.rows})
    at_edge = sum(row.best == row.sparsities[-1] or row.best == row.sparsities[0] for row in rows)
    check = results.json(LR_CHECK)
    checked = sorted({run.split("/")[0] for run in check["loss_change"]["per_run"]})
    sensitive = _lr_sensitivity(results, params_by_size)
    most_hurt = min(sensitive, key=lambda s: s.lowest_change).size
    return IsoflopSparsity(
        seeds, rows,
        trend_verdict(trend["slope_per_decade"], tuple(trend["ci"]), edge_values=at_edge,
                      seeds=len(seeds)),
        sensitive, checked, {c: float(v) for c, v in check["s_star"]["tuned"].items()},
        sorted({lr for cell, lr in check["lrs"].items() if f"/{most_hurt}/" in f"/{cell}"
                and "/S0.000" not in cell}),
        sorted({float(v) for v in check["selection"][next(iter(check["selection"]))]}))


def render(record: IsoflopSparsity | None, results: ResultsRoot, findings: Findings) -> str:
    if record is None:
        return ""
    rows = [[f"{b.flops:.3g}", " / ".join(f"{m:.4f}" for m in b.minima), f"{b.best:g}",
             f"**{b.verdict.word}**",
             " / ".join("–" if r is None else f"{r:.2f}" for r in b.residual_to_noise),
             format_count(b.largest_size_used)]
            for b in record.budgets]
    grid = " / ".join(f"{s:g}" for s in record.budgets[0].sparsities)
    lr_rows = [[s.size, format_count(s.params), f"{s.lowest_change:+.3f}",
                f"{s.highest_change:+.3f}"] for s in record.lr_sensitive]
    return ("## The compute-optimal sparsity (cpu-isoflop)\n\n"
            f"IsoFLOP minimum of the loss over sizes at each budget and S = {grid} (seeds "
            f"{', '.join(record.seeds)}; `{SWEEP}/isoflop.json`), and where the best S sits:\n\n"
            + markdown_table(["C (FLOPs)", "minimum loss per S", "best S", "verdict",
                              "parabola residual / seed noise, per S", "largest size used"],
                             rows, "rrrlrr")
            + "\nThe minima are not tested against each other here (2 seeds), so a best S at the "
              "grid's edge is not located. Residual over noise above 1: the parabola misfits; "
              "'–': a 3-size window leaves no residual to test. Whether the compute-optimal S* "
              f"moves with compute: **{record.trend.word}** ({record.trend.rule}).\n\n"
              "### The shared lr\n\n"
              "Every cell trained at lr 0.01. The per-cell lr check (`isoflop_lr.json`) retrained "
              f"the budgets {', '.join(record.checked_budgets)} with each cell's own lr from "
              "{0.005, 0.01, 0.02}; the sparse runs' loss change at their own lr, per size "
              "(negative: better than at 0.01):\n\n"
            + markdown_table(["size", "N", "lowest change", "highest change"], lr_rows, "lrrr")
            + "\nWith each cell's own lr, the best S at the rechecked budgets is "
            + ", ".join(f"{s:g} at {c}" for c, s in record.checked_s_star.items()) + ".\n"
            + _unchecked_sentence(record))


def _unchecked_sentence(record: IsoflopSparsity) -> str:
    """Whether a budget the lr check left out uses the size the shared lr hurt most."""
    most_hurt = min(record.lr_sensitive, key=lambda s: s.lowest_change)
    unchecked = [b for b in record.budgets if f"C{b.flops:.3g}" not in record.checked_budgets]
    exposed = [b for b in unchecked if b.largest_size_used >= most_hurt.params * 0.99]
    if not exposed or most_hurt.lowest_change >= 0:
        return ""
    budgets = ", ".join(f"{b.flops:.3g}" for b in exposed)
    lowest = (f" (there its own lr was the check grid's lowest, {record.lr_grid[0]:g}, so the "
              "cost may be larger)" if record.s3_lr == record.lr_grid[:1] else "")
    return (f"\nThe shared lr cost {most_hurt.size}'s sparse runs most, down to "
            f"{most_hurt.lowest_change:+.3f} nats{lowest}. The budget {budgets} was not "
            f"rechecked and its sparse IsoFLOP windows use {most_hurt.size}, so its sparse minima "
            "rest on runs trained at an lr the check found too high at the smaller budgets.\n")


ANALYSIS: Analysis[ResultsRoot, IsoflopSparsity] = Analysis("isoflop_sparsity", compute, render)


def summary(record: IsoflopSparsity) -> str:
    words = sorted({b.verdict.word for b in record.budgets})
    return (f"At a fixed FLOPs budget with the size free (cpu-isoflop, 2 seeds): the best S is "
            f"{' / '.join(f'{b.best:g}' for b in record.budgets)} at the {len(record.budgets)} "
            f"budgets, **{', '.join(words)}** (untested at 2 seeds); whether it moves with "
            f"compute is **{record.trend.word}**." + (
                " The largest budget's sparse windows use the size whose sparse runs the per-cell "
                "lr check found trained at too high an lr at the two smaller budgets (not "
                "rechecked there)." if _unchecked_sentence(record) else ""))
