"""S* at fixed total (or active) parameters, read off the runs: per size and budget the sparsity
tried of lowest mean best validation loss (the loss of the runs table, the IsoFLOP curves and
the law fits, so the section, its figure and the rest of the report read one statistic), with
intervals resampling seeds as whole wsd families, the ordinal tests of "S* rises with N" and "S*
falls with C" (``moelab.scaling.fixed_size``), and a figure of loss against S per size at one
budget with each S* marked. Written as ``fixed_size.json`` (grids with two sparsities or more
per size and budget)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from moelab.report import markdown_table, new_figure, save_figure
from moelab.report.analysis import Analysis, Findings
from moelab.report.axes import loss_label
from moelab.scaling.fixed_size import (
    CellOptimum, FixedSizeAnalysis, Run, TrendTest, fixed_size_optima,
)
from moelab.sweep.analyses.common import palette
from moelab.sweep.folder import SweepFolder
from moelab.sweep.results_csv import ResultRow


@dataclass
class FixedSizeRecord(FixedSizeAnalysis):
    """fixed_size.json: the analysis of ``moelab.scaling.fixed_size`` and the grid's mode."""

    mode: str = "fixed_total"
    """The grid's ``mode``: fixed_total (N fixed across S) or fixed_expert (N_active fixed)."""


LOSS_COLUMN = "best_val_loss"
"""The loss each run is read at: its best validation loss, what every other table of the report
and the law fits read. (fixed_size.json files written before read the final loss; their
``loss_column`` says so, and the section names that column as it always has, so a stored
report renders again byte for byte; the figure's axis says it in words.)"""
LOSS_LABELS = {"best_val_loss": "best validation loss", "final_val_loss": "final validation loss"}
FIGURE = "fixed_size.png"


def fixed_size_record(rows: list[ResultRow], mode: str,
                      top_k: int = 1) -> FixedSizeRecord | None:
    """fixed_size.json: None when no (size, budget) cell has two sparsities. A grid with
    several k (``top_ks``) is read at its ``top_k`` alone: one curve of loss against S."""
    rows = [row for row in rows if row.S == 0.0 or (row.k or top_k) == top_k]
    runs = [Run(size=row.size, budget=row.budget, flops=row.C, params=row.N_total,
                active=row.N_active, sparsity=row.S, seed=row.seed, loss=row.best_val_loss)
            for row in rows]
    holds_fixed = "N" if mode == "fixed_total" else "N_active"
    budget_kind = "C" if all(row.C_budget is not None for row in rows) else "D"
    analysis = fixed_size_optima(runs, holds_fixed=holds_fixed, budget_kind=budget_kind,
                                 loss_column=LOSS_COLUMN)
    return None if analysis is None else FixedSizeRecord(**vars(analysis), mode=mode)


def fixed_size_section(record: FixedSizeRecord, figure_path: Path) -> str:
    """The report's section: the question, the table of S* per cell, the two trend tests and
    the figure (drawn at ``figure_path``)."""
    figure = fixed_size_figure(figure_path, record)
    fixed = record.holds_fixed
    title = ("S* at fixed total parameters" if fixed == "N"
             else "S* at fixed active parameters (N grows with S)")
    draws = (f"every one of the {record.draws} distinct draws of the {len(record.seeds)} "
             "seeds with replacement, with its exact probability" if record.exact
             else f"{record.draws} sampled draws of the seeds with replacement")
    intervals = ("Intervals: the 2.5-97.5 % quantiles of S* over " + draws + "; a draw takes "
                 "each drawn seed's whole wsd budget family (every budget of a size, S and seed "
                 "shares one trunk), the same draw for every cell." if len(record.seeds) > 1
                 else "One seed: no intervals.")
    rows = [[c.budget, c.size, _params_text(c, fixed), _loss_row(c), c.text,
             ", ".join(f"{seed}: {star:g}" for seed, star in c.seed_s_star.items())]
            for c in record.cells]
    headers = ["budget", "size", "N" if fixed == "N" else "N_active",
               "mean loss at S = " + ", ".join(f"{s:g}" for s in record.sparsities),
               "S* [95 %]", "each seed's S*"]
    text = (f"## {title}\n\n"
            f"Per size and budget, {record.question}. S* is the sparsity tried of lowest "
            f"mean {record.loss_column} over seeds (no curve fitted); at the grid's largest S "
            "it is a bound, \"S* ≥ edge, unbounded\", not an estimate. "
            f"{intervals} `fixed_size.json`.\n\n"
            + markdown_table(headers, rows, "llrlll") + "\n"
            + "".join(f"- {note}.\n" for note in record.notes)
            + "\n" + _trend_text(record.rises_with_size, "two sizes at one budget",
                                  f"S* rises with {fixed} at fixed {record.budget_kind}")
            + _trend_text(record.falls_with_budget, "two budgets of one size",
                          f"S* falls with {record.budget_kind} at fixed {fixed}"))
    if figure is not None:
        text += f"\n![loss against S per size]({Path('figures') / FIGURE})\n"
    return text


def _loss_name(column: str) -> str:
    """The words for a results.csv loss column (the column itself for any other)."""
    return LOSS_LABELS.get(column, column)


def _params_text(cell: CellOptimum, fixed: str) -> str:
    """The cell's N (fixed_total; the router adds a few hundred across S) or N_active."""
    values = cell.params if fixed == "N" else cell.active
    low, high = min(values), max(values)
    return f"{low:,.0f}" if high - low < 0.01 * high else f"{low:,.0f}-{high:,.0f}"


def _loss_row(cell: CellOptimum) -> str:
    return ", ".join(f"{loss:.3f}" for loss in cell.mean_loss)


def _trend_text(trend: TrendTest | None, needs: str, claim: str) -> str:
    if trend is None:
        return f"**{claim}**: not tested, the grid has no {needs}.\n\n"
    axis = trend.axis
    verdict = {"rises": f"S* rises with {axis}", "falls": f"S* falls with {axis}",
               "undetermined": "undetermined"}[trend.verdict]
    groups = ", ".join(f"{name}: {value:+d}" for name, value in trend.per_group.items())
    interval = ("" if trend.interval is None
                else f" [{trend.interval[0]:+g}, {trend.interval[1]:+g}]")
    share = ("" if trend.share_in_claimed_direction is None else
             f"; {trend.share_in_claimed_direction:.0%} of draws in the claimed direction")
    return (f"**{trend.claim}** (the claim tested): {verdict}. The sum of the signs of "
            f"S*(larger {axis}) - S*(smaller) over {trend.pairs} ordered pairs of cells is "
            f"{trend.statistic:+d}{interval} ({groups}); {trend.undetermined_pairs} of "
            f"the pairs have both S* at the same edge and count 0{share}.\n\n")


def fixed_size_figure(path: Path, record: FixedSizeRecord) -> Path | None:
    """Loss against S per size at the budget with the most sizes (the largest such budget),
    each seed's runs as points, the mean as a line, S* marked (hollow when at the edge)."""
    by_budget: dict[str, list[CellOptimum]] = {}
    for cell in record.cells:
        by_budget.setdefault(cell.budget, []).append(cell)
    if not by_budget:
        return None
    budget = max(by_budget, key=lambda b: (len(by_budget[b]), by_budget[b][0].flops))
    fig, ax = new_figure(width_in=6.0)
    colours = palette(len(by_budget[budget]), 0.05, 0.85)
    for colour, cell in zip(colours, by_budget[budget]):
        ax.plot(cell.sparsities, cell.mean_loss, marker="o", color=colour, label=f"{cell.size}")
        for losses in cell.seed_loss.values():
            points = [(s, v) for s, v in zip(cell.sparsities, losses) if v is not None]
            ax.scatter(*zip(*points), color=colour, s=10, alpha=0.5)
        best = cell.mean_loss[cell.sparsities.index(cell.s_star)]
        ax.scatter([cell.s_star], [best], s=160, marker="*", zorder=3,
                   facecolor="none" if cell.censored else colour, edgecolor=colour)
    ax.set_xlabel("sparsity S")
    ax.set_ylabel(loss_label(_loss_name(record.loss_column)))
    fixed = "N" if record.holds_fixed == "N" else "N_active"
    ax.set_title(f"budget {budget}: loss against S at fixed {fixed} and {record.budget_kind} "
                 "(star: S*, hollow at the edge)",
                 fontsize=9)
    ax.legend(fontsize=8)
    return save_figure(fig, path)


def compute(folder: SweepFolder, findings: Findings) -> FixedSizeRecord | None:
    if folder.results is None:
        return None
    return fixed_size_record(folder.rows, folder.grid.mode, folder.grid.top_k)


def render(record: FixedSizeRecord | None, folder: SweepFolder, findings: Findings) -> str:
    if record is None or folder.results is None:
        return ""
    return fixed_size_section(record, folder.figure(FIGURE))


ANALYSIS: Analysis[SweepFolder, FixedSizeRecord] = Analysis(
    "fixed_size", compute, render, file="fixed_size.json", record_type=FixedSizeRecord)
