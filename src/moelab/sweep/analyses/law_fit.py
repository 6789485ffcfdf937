"""The law the report uses: the chosen form's fit (sweeps of two sparsities or more), or the
full sparsity law fitted as it is (one sparsity: the forms cannot be told apart), with its
bootstrap intervals and the family's shared fraction. Written as ``fit.json``, which ``moelab
optimal`` reads as any FIT.json."""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Optional

import numpy as np

from moelab.errors import MoelabError
from moelab.report import markdown_table
from moelab.report.analysis import Analysis, Findings
from moelab.scaling.fit_record import LawFit, fit_columns
from moelab.scaling.laws import SPARSITY, get_law
from moelab.sweep.analyses.law_form import FormsRecord, chosen_check
from moelab.sweep.analyses.common import joined, several_sparsities
from moelab.sweep.folder import SWEEP_FIT_COLUMNS, SweepFolder


@dataclass(kw_only=True)
class SweepFit(LawFit):
    """fit.json: the chosen form's fit (``moelab fit --json``'s record) and the keys the sweep
    adds, so that ``moelab optimal DIR/fit.json`` reads it as any FIT.json."""

    shared_fraction: Optional[float] = None
    """The runs' share of parameters outside the experts, for the optima."""
    source: Optional[str] = None
    """The results file fitted."""
    columns: Optional[dict[str, str]] = None
    """How results.csv's columns map to the law's."""

    @classmethod
    def of(cls, fit: LawFit, **sweep_keys) -> SweepFit:
        return cls(**{f.name: getattr(fit, f.name) for f in fields(fit)}, **sweep_keys)


def fit_or_none(folder: SweepFolder, replicates: int, holdout: str | None) -> LawFit | None:
    """The full sparsity law fitted to every run (``holdout``: without those points); None when
    the points are too few."""
    settings = folder.settings
    assert settings is not None
    try:
        return fit_columns(SPARSITY.name, folder.law_columns(), bootstrap_replicates=replicates,
                           holdout=holdout, max_starts=settings.max_starts)
    except MoelabError as exc:  # too few points, or a holdout that leaves nothing to fit
        folder.log(f"sparsity-law fit skipped: {exc}")
        return None


def compute(folder: SweepFolder, findings: Findings) -> SweepFit | None:
    settings = folder.settings
    if folder.results is None or settings is None:
        return None
    if several_sparsities(folder):
        chosen = chosen_check(findings)
        fit = chosen.fit if chosen else None
    else:
        fit = fit_or_none(folder, settings.bootstrap_replicates, None)
    if fit is None:
        return None
    return SweepFit.of(fit, shared_fraction=settings.shared_fraction, source="results.csv",
                       columns=SWEEP_FIT_COLUMNS)


def law_status(forms: FormsRecord | None, fit: SweepFit | None) -> str:
    """analysis.json's status.law: chosen or no_form_identified (several sparsities, the forms
    checked), one_sparsity or too_few_points (one sparsity, the full law fitted or not)."""
    if forms is not None:
        return "chosen" if forms.chosen else "no_form_identified"
    return "one_sparsity" if fit is not None else "too_few_points"


def render(record: SweepFit | None, folder: SweepFolder, findings: Findings) -> str:
    settings = folder.settings
    if folder.results is None or settings is None:
        return ""
    too_few = ""
    if settings.status.law == "too_few_points":
        too_few = (f"## Law fit\n\nNot enough points ({len(folder.rows)}) for the "
                   f"{SPARSITY.num_params}-parameter sparsity law: at least "
                   f"{SPARSITY.num_params + 1} complete runs are needed.\n")
    fitted = "" if record is None else _fit_section(record, settings.shared_fraction,
                                                    settings.bootstrap_replicates)
    return joined(too_few, fitted)


def _fit_section(fit: LawFit, shared: float | None, replicates: int) -> str:
    rows = []
    for name, value in fit.params.items():
        ci = fit.ci.get(name)
        rows.append([name, f"{value:.5g}", f"[{ci[0]:.4g}, {ci[1]:.4g}]" if ci else "–"])
    intervals = (f"95 % intervals from {replicates} bootstrap resamples (`fit.json`)."
                 if replicates else "No bootstrap resamples (`--bootstrap 0`), so no intervals.")
    if shared is None:
        family = ("Shared (non-expert) fraction of the parameters: not estimable, every run is "
                  "dense (`fit.json` stores null; `moelab optimal` then assumes 0).\n")
    else:
        family = (f"Shared (non-expert) fraction of the parameters, fitted to the runs' own "
                  f"N_active / N: {shared:.3f} (N_active = N (phi + (1 - phi)(1 - S))).\n")
    law = get_law(fit.law)
    return (f"## Law fit (`{law.name}`, N = total parameters)\n\n"
            f"{law.formula}, "
            f"fitted to all {fit.n_points} points by summed Huber loss (delta = 1e-3) of log "
            f"residuals from {fit.num_starts} grid starts; objective {fit.objective:.4e}. "
            f"{intervals}\n\n"
            + markdown_table(["parameter", "value", "95 % CI"], rows, "lrr")
            + "\n" + family)


def has_sparsity_term(fit: LawFit) -> bool:
    """Whether the fitted form has a term in S (else S* is the edge of any search)."""
    return "log_U" in get_law(fit.law).features


def distinct_sparsities(folder: SweepFolder) -> int:
    return len(np.unique(folder.law_columns()["S"]))


ANALYSIS: Analysis[SweepFolder, SweepFit] = Analysis(
    "law_fit", compute, render, file="fit.json", record_type=SweepFit)
