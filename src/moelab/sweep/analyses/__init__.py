"""The sweep report's analyses, one module each, listed once in report order (``ANALYSES``).

Each module holds its record type (the JSON file it writes, if any), its ``compute`` from the
``SweepFolder`` and the records of the analyses before it, and its ``render`` (text and the
figure it alone draws), and ends with one ``ANALYSIS`` (``moelab.report.analysis``). The report
is this tuple rendered in order (``moelab.sweep.report``); the analysis computes it in the same
order (``moelab.sweep.analysis``). A new analysis is a new module here and one line below.
"""

from __future__ import annotations

from typing import Any

from moelab.report.analysis import Analysis
from moelab.sweep.analyses import (
    efficiency_leverage, finetune, fixed_size, form_table, form_tests, granularity, holdout, isoflop,
    law_fit, law_form, lr_selection, optima, partial_results, reproduce, runs, setup, throughput,
    zero_shot,
)
from moelab.sweep.folder import SweepFolder

ANALYSES: tuple[Analysis[SweepFolder, Any], ...] = (
    setup.ANALYSIS,            # the title and the grid
    lr_selection.ANALYSIS,     # each cell's lr (--lr-grid)
    partial_results.ANALYSIS,  # runs and finetunes missing from the plan
    runs.ANALYSIS,             # the budget family and every run
    zero_shot.ANALYSIS,        # accuracies, and against S (zero_shot.json)
    finetune.ANALYSIS,         # the fine-tuned loss and gain against S (finetune.json)
    law_form.ANALYSIS,         # the form the points identify (forms.json)
    law_fit.ANALYSIS,          # its fit (fit.json)
    holdout.ANALYSIS,          # its held-out check (fit_holdout.json)
    form_tests.ANALYSIS,       # the forms against the seeds' noise; S minus dense (form_tests.json)
    form_table.ANALYSIS,       # every form, the MoE forms too, in one table (form_table.json)
    isoflop.ANALYSIS,          # IsoFLOP curves and S* from their minima (isoflop.json)
    fixed_size.ANALYSIS,       # S* at fixed N per size and budget (fixed_size.json)
    granularity.ANALYSIS,      # G and shared experts at one sparsity (granularity.json)
    throughput.ANALYSIS,       # tokens/s and the throughput model (throughput.json)
    optima.ANALYSIS,           # S* under N, C and T, the three optima (optima.json)
    efficiency_leverage.ANALYSIS,  # dense over MoE compute at equal loss (efficiency_leverage.json)
    reproduce.ANALYSIS,        # the commands
)
