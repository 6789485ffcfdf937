"""The sweep's analysis: every analysis of the registry (``moelab.sweep.analyses``) computed in
order from the ``SweepFolder`` (grid.json and results.csv), its records written as the JSON
files next to results.csv, and analysis.json: the settings (bootstrap resamples, starts), the
runs' count and shared fraction, and what was and was not computed and why (``status``).

Each file is its analysis's record (forms.json, fit.json, fit_holdout.json, form_tests.json,
form_table.json, zero_shot.json, finetune.json, isoflop.json, fixed_size.json, granularity.json,
throughput.json, optima.json, efficiency_leverage.json; each module's docstring says what it
holds); a file the current results no longer support is removed
rather than left stale.
"""

from __future__ import annotations

from dataclasses import replace

from moelab.report.analysis import Findings, compute_all
from moelab.scaling.family import estimate_shared_fraction
import moelab.sweep.analyses as registry
from moelab.sweep.analyses import law_fit, law_form, optima, throughput
from moelab.sweep.folder import (
    SWEEP_FIT_COLUMNS, AnalysisSettings, AnalysisStatus, SweepFolder, store_findings,
)


def analyse_sweep(folder: SweepFolder, *, bootstrap_replicates: int = 200,
                  max_starts: int | None = None) -> SweepFolder:
    """Compute every analysis of ``folder``, write the files and return the folder holding the
    records as written (``max_starts`` limits the law's start grid; None: its seeded subset)."""
    settings = AnalysisSettings(bootstrap_replicates, max_starts, SWEEP_FIT_COLUMNS)
    if folder.results is None:
        settings.status.results = "no complete runs in results.csv yet"
    else:
        columns = replace(folder, settings=settings).law_columns()
        settings.n_points = len(folder.rows)
        # None when every run is dense: the runs then say nothing about the expert share.
        settings.shared_fraction = estimate_shared_fraction(columns["N"], columns["N_active"],
                                                            columns["S"])
    folder = replace(folder, settings=settings)
    findings = compute_all(registry.ANALYSES, folder)
    if folder.results is not None:
        settings = replace(settings, status=analysis_status(folder, findings))
    return store_findings(folder, registry.ANALYSES, findings, settings)


def analysis_status(folder: SweepFolder, findings: Findings) -> AnalysisStatus:
    """What the analyses computed, and why not where they did not (analysis.json's status)."""
    fit = findings.record(law_fit.ANALYSIS)
    measured = findings.record(throughput.ANALYSIS)
    status = AnalysisStatus(law=law_fit.law_status(findings.record(law_form.ANALYSIS), fit),
                            throughput=throughput.throughput_status(measured))
    assert status.throughput is not None
    status.optima = optima.not_computed(folder, fit) or "computed"
    if status.optima == "computed":
        status.seconds = optima.seconds_status(measured, status.throughput)
    return status
