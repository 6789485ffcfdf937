"""The sweep report's sections about the runs themselves: the table of every run, how far a
point's seeds disagree, what a wsd budget family trained, and the zero-shot accuracies, all
from results.csv's rows (and plan.json, the runs' tasks.json)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from moelab.report import format_count, format_number, markdown_table
from moelab.runs.families import count_family_tokens, planned_branch_steps
from moelab.sweep.folder import read_optional_json, row_seed
from moelab.tasks import TASK_NAMES, read_run_tasks


def budget_family_text(out_dir: Path, rows: list[dict[str, str]]) -> str:
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
    if rows and all(row.get("tokens_per_step") for row in rows):  # older files lack the column
        trained, separate = count_family_tokens(
            branch_steps, [(row["run"], int(float(row["D"])), int(float(row["tokens_per_step"])))
                           for row in rows])
        text += (f"The runs in results.csv trained {trained:,} tokens against {separate:,} for one "
                 f"run per budget ({1 - trained / separate:.0%} fewer). ")
    return text + ("The budgets of one family share its run up to each decay, and so its seed "
                   "noise: its points are not independent draws, and the bootstrap, which "
                   "resamples points, treats them as if they were.\n")


def runs_table(rows: list[dict[str, str]]) -> str:
    body = [[r["size"], r["budget"], r["S"], r["E"], row_seed(r), format_count(float(r["N_total"])),
             format_count(float(r["N_active"])), format_count(float(r["D"])),
             format_tokens_per_param(float(r["D"]), float(r["N_total"]), float(r["N_active"])),
             f"{float(r['C']):.3g}", format_number(float(r["best_val_loss"]))] for r in rows]
    return "## Runs\n\n" + seed_spread_text(rows) + markdown_table(
        ["size", "budget", "S", "E", "seed", "N total", "N active", "D",
         "D/N (total / active)", "C", "best val loss"], body, "llrrrrrrrrr")


def format_tokens_per_param(tokens: float, total: float, active: float) -> str:
    """Tokens per total and per active parameter, e.g. ``12.5 / 20.1``."""
    return f"{tokens / total:.3g} / {tokens / active:.3g}"


def tokens_per_param_caption(rows: list[dict[str, str]]) -> str:
    """The sentence under a figure: how long the runs trained for their size."""
    if not rows:
        return ""
    per_total = [float(r["D"]) / float(r["N_total"]) for r in rows]
    per_active = [float(r["D"]) / float(r["N_active"]) for r in rows]
    return (f"Tokens per parameter of the runs: D/N_total {min(per_total):.3g} to "
            f"{max(per_total):.3g}, D/N_active {min(per_active):.3g} to {max(per_active):.3g}.\n")


def seed_spread(rows: list[dict[str, str]]) -> dict | None:
    """Std over seeds of each point's loss (points with several runs): the median, root mean
    square and largest over points; None with one seed per point."""
    losses: dict[tuple, list[float]] = {}
    for row in rows:
        losses.setdefault((row["size"], row["budget"], row["S"], row["E"]), []).append(
            float(row["best_val_loss"]))
    stds = np.array([np.std(values, ddof=1) for values in losses.values() if len(values) > 1])
    if not len(stds):
        return None
    return {"points": len(stds), "median_std": float(np.median(stds)),
            "rms_std": float(np.sqrt(np.mean(stds ** 2))), "max_std": float(stds.max())}


def seed_spread_text(rows: list[dict[str, str]]) -> str:
    """How far a point's seeds disagree, the noise under any fit's error on single runs."""
    spread = seed_spread(rows)
    if spread is None:
        return ""
    return (f"Each of {spread['points']} points has runs of several seeds. Their seed std, over "
            f"those points: median {format_number(spread['median_std'])}, root mean square "
            f"{format_number(spread['rms_std'])}, largest {format_number(spread['max_std'])} "
            "nats. The fit pools every run, and a law's error on single runs cannot fall far "
            "below this spread.\n\n")


def zero_shot_section(out_dir: Path, header: list[str], rows: list[dict[str, str]]) -> str:
    """Each run's zero-shot accuracies (results.csv's zero_shot_* columns, from the runs'
    tasks.json) beside each task's chance level; nothing when no run scored tasks."""
    tasks = [task for task in TASK_NAMES if f"zero_shot_{task}" in header]
    if not tasks:
        return ""
    chance: dict = {}
    for row in rows:
        for task, entry in read_run_tasks(out_dir / row["run"]).items():
            chance.setdefault(task, entry["chance"])
    body = [[r["size"], r["budget"], r["S"], row_seed(r)] + [
        format_number(float(r[f"zero_shot_{t}"])) if r[f"zero_shot_{t}"] else "" for t in tasks]
        for r in rows]
    names = [f"{task} (chance {format_number(chance[task])})" if task in chance else task
             for task in tasks]
    return ("## Zero-shot tasks\n\nAccuracy of each run's final weights on the tasks it scored "
            "(`train.eval_tasks`; each run's `tasks.json`, docs/training.md \"Zero-shot tasks\").\n\n"
            + markdown_table(["size", "budget", "S", "seed", *names], body,
                             "llrr" + "r" * len(tasks)))
