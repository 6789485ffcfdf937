"""The sweep report's sections about the runs themselves: the table of every run, how far a
point's seeds disagree, what a wsd budget family trained, and the zero-shot accuracies, all
from results.csv's rows (and plan.json, the runs' tasks.json)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from moelab.report import format_count, format_number, markdown_table
from moelab.runs.families import count_family_tokens, planned_branch_steps
from moelab.sweep.folder import read_optional_json
from moelab.sweep.results_csv import ResultRow, ResultsTable, task_column
from moelab.tasks import TASK_NAMES, read_run_tasks


def budget_family_text(out_dir: Path, rows: list[ResultRow]) -> str:
    """Under a wsd budget family (plan.json names each branch's source and step): what the
    smaller budgets are, the tokens trained against one run per budget, and what sharing a run
    means for the points' noise; empty without branches."""
    branch_steps = planned_branch_steps(read_optional_json(out_dir / "plan.json") or {},
                                        key="run_dir")
    if not branch_steps:
        return ""
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


def format_tokens_per_param(tokens: float, total: float, active: float) -> str:
    """Tokens per total and per active parameter, e.g. ``12.5 / 20.1``."""
    return f"{tokens / total:.3g} / {tokens / active:.3g}"


def tokens_per_param_caption(rows: list[ResultRow]) -> str:
    """The sentence under a figure: how long the runs trained for their size."""
    if not rows:
        return ""
    per_total = [r.D / r.N_total for r in rows]
    per_active = [r.D / r.N_active for r in rows]
    return (f"Tokens per parameter of the runs: D/N_total {min(per_total):.3g} to "
            f"{max(per_total):.3g}, D/N_active {min(per_active):.3g} to {max(per_active):.3g}.\n")


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


def zero_shot_section(out_dir: Path, results: ResultsTable) -> str:
    """Each run's zero-shot accuracies (results.csv's zero_shot_* columns, from the runs'
    tasks.json) beside each task's chance level; nothing when no run scored tasks."""
    tasks = [task for task in TASK_NAMES if results.has_column(task_column(task))]
    if not tasks:
        return ""
    chance: dict[str, float] = {}
    for row in results.rows:
        for task, entry in read_run_tasks(out_dir / row.run).items():
            chance.setdefault(task, entry["chance"])
    body = [[r.size, r.budget, str(r.S), r.seed] + [
        format_number(r.zero_shot[t]) if t in r.zero_shot else "" for t in tasks]
        for r in results.rows]
    names = [f"{task} (chance {format_number(chance[task])})" if task in chance else task
             for task in tasks]
    return ("## Zero-shot tasks\n\nAccuracy of each run's final weights on the tasks it scored "
            "(`train.eval_tasks`; each run's `tasks.json`, docs/training.md \"Zero-shot tasks\").\n\n"
            + markdown_table(["size", "budget", "S", "seed", *names], body,
                             "llrr" + "r" * len(tasks)))
