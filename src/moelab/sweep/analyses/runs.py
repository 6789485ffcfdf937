"""The runs themselves, from results.csv's rows (and plan.json): what a wsd budget family
trained, how far a point's seeds disagree, and the table of every run."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from moelab.report import format_count, format_number, markdown_table
from moelab.report.analysis import Analysis, Findings
from moelab.runs.families import count_family_tokens, planned_branch_steps
from moelab.sweep.analyses.common import format_tokens_per_param, joined, no_record
from moelab.sweep.folder import SweepFolder
from moelab.sweep.results_csv import ResultRow


def budget_family_text(folder: SweepFolder) -> str:
    """Under a wsd budget family (plan.json names each branch's source and step): what the
    smaller budgets are, the tokens trained against one run per budget, and what sharing a run
    means for the points' noise; empty without branches."""
    branch_steps = planned_branch_steps(folder.plan, key="run_dir")
    if not branch_steps:
        return ""
    rows = folder.rows
    text = ("Under `train.schedule: wsd` each size and sparsity of a seed is one budget family: "
            "its largest budget's run is trained in full and each smaller budget's run is a "
            f"cooldown branch from it ({len(branch_steps)} branches, plan.json), the same run as "
            "a separate wsd run of that budget. ")
    steps = [step for row in rows if (step := row.tokens_per_step)]
    if rows and len(steps) == len(rows):  # older files lack the column
        trained, separate = count_family_tokens(
            branch_steps, [(row.run, int(row.D), int(step)) for row, step in zip(rows, steps)])
        text += (f"The runs in results.csv trained {trained:,} tokens against {separate:,} for one "
                 f"run per budget ({1 - trained / separate:.0%} fewer). ")
    return text + ("The budgets of one family share its run up to each decay, and so its seed "
                   "noise: its points are not independent draws, and the bootstrap, which "
                   "resamples points, treats them as if they were.\n")


def runs_table(rows: list[ResultRow]) -> str:
    body = [[r.size, r.budget, str(r.S), str(r.E), r.seed, format_count(r.N_total),
             format_count(r.N_active), format_count(r.D),
             format_tokens_per_param(r.D, r.N_total, r.N_active),
             f"{r.C:.3g}", format_number(r.best_val_loss)] for r in rows]
    return "## Runs\n\n" + seed_spread_text(rows) + markdown_table(
        ["size", "budget", "S", "E", "seed", "N total", "N active", "D",
         "D/N (total / active)", "C", "best val loss"], body, "llrrrrrrrrr")


@dataclass(frozen=True)
class SeedSpread:
    """Std over seeds of each point's loss, over the points with several runs."""

    points: int
    median_std: float
    rms_std: float
    """Root mean square."""
    max_std: float


def seed_spread(rows: list[ResultRow]) -> SeedSpread | None:
    """The seed std of each point with several runs: the median, root mean square and largest
    over points; None with one seed per point."""
    losses: dict[tuple, list[float]] = {}
    for row in rows:
        losses.setdefault(row.point, []).append(row.best_val_loss)
    stds = np.array([np.std(values, ddof=1) for values in losses.values() if len(values) > 1])
    if not len(stds):
        return None
    return SeedSpread(points=len(stds), median_std=float(np.median(stds)),
                      rms_std=float(np.sqrt(np.mean(stds ** 2))), max_std=float(stds.max()))


def seed_spread_text(rows: list[ResultRow]) -> str:
    """How far a point's seeds disagree, the noise under any fit's error on single runs."""
    spread = seed_spread(rows)
    if spread is None:
        return ""
    return (f"Each of {spread.points} points has runs of several seeds. Their seed std, over "
            f"those points: median {format_number(spread.median_std)}, root mean square "
            f"{format_number(spread.rms_std)}, largest {format_number(spread.max_std)} "
            "nats. The fit pools every run, and a law's error on single runs cannot fall far "
            "below this spread.\n\n")


def render(record: None, folder: SweepFolder, findings: Findings) -> str:
    if folder.results is None:
        return ""
    return joined(budget_family_text(folder), runs_table(folder.rows))


ANALYSIS: Analysis[SweepFolder, None] = Analysis("runs", no_record, render)
