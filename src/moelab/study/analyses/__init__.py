"""The study report's analyses, one module each, listed once in report order.

Each module holds the record it computes (or the part of the study's statistics it shows), its
``compute(folder, findings)``, its ``render(record, folder, findings)`` with the figures it
alone draws, and one ``ANALYSIS`` (``moelab.report.analysis``). ``moelab.study.report`` computes
them in this order and writes report.md as their sections in this order; a record with
``results_entries()`` adds its keys to results.json, in this order. Adding a section to the
study report is one module here and one line below. ``shared`` holds what several sections
say alike; it is not an analysis.
"""

from __future__ import annotations

from moelab.study.analyses import (
    arms, budgets, comparisons, ladder, leverage, lr_tuning, notes, rounds, routing, rung_steps,
    runs, setup, statistics, throughput, val_loss, zero_shot,
)

ANALYSES = (
    statistics.ANALYSIS,  # results.json's core: arms, gaps, budgets (renders nothing)
    setup.ANALYSIS,
    lr_tuning.ANALYSIS,  # --tune-lr
    rounds.ANALYSIS,  # --until-resolved
    ladder.ANALYSIS,  # ablate-routing only
    rung_steps.ANALYSIS,  # ablate-routing only
    arms.ANALYSIS,
    comparisons.ANALYSIS,
    budgets.ANALYSIS,  # --budgets
    leverage.ANALYSIS,  # --budgets: dense over MoE compute at the MoE's loss
    zero_shot.ANALYSIS,  # train.eval_tasks
    val_loss.ANALYSIS,
    routing.ANALYSIS,
    throughput.ANALYSIS,
    runs.ANALYSIS,
    notes.ANALYSIS,
)
