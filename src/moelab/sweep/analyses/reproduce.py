"""The commands that redo the sweep, its fits and its optima (from grid.json, analysis.json's
settings and the fitted form)."""

from __future__ import annotations

from moelab.report.analysis import Analysis, Findings
from moelab.scaling.laws import SPARSITY
from moelab.sweep.analyses.common import no_record
from moelab.sweep.analyses.law_fit import ANALYSIS as LAW_FIT
from moelab.sweep.folder import SweepFolder


def render(record: None, folder: SweepFolder, findings: Findings) -> str:
    settings, grid, fit = folder.settings, folder.grid, findings.record(LAW_FIT)
    if folder.results is None or settings is None:
        return ""
    columns = ",".join(f"{k}={v}" for k, v in settings.columns.items())
    max_starts, replicates = settings.max_starts, settings.bootstrap_replicates
    starts = "" if max_starts is None else f" --starts {max_starts}"
    law = fit.law if fit else SPARSITY.name
    text = ("## Reproduce\n\n"
            f"    moelab sweep-sparsity {grid.name} --out DIR{starts}   # skips finished runs\n"
            f"    moelab fit DIR/results.csv --law {law} --columns {columns} "
            f"--bootstrap {replicates}{starts}\n"
            f"    moelab fit DIR/results.csv --law {law} --columns {columns} "
            f"--holdout '{grid.holdout}'{starts}\n")
    if fit:
        text += ("    moelab optimal DIR/fit.json --flops C        # or --params N --flops C\n"
                 "    moelab optimal DIR/fit.json --seconds T      # reads DIR/throughput.json\n")
    return text


ANALYSIS: Analysis[SweepFolder, None] = Analysis("reproduce", no_record, render)
