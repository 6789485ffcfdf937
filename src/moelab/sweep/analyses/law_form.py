"""Which form of the law the points identify: Abnar et al.'s eq. 6, its reduced forms and
Chinchilla's law, each fitted with bootstrap intervals and refitted without the held-out points,
and the richest form that passes both checks (``moelab.scaling.forms``). Written as
``forms.json`` (sweeps of two sparsities or more: with one, the S terms are not measured)."""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Optional

from moelab.report import markdown_table
from moelab.report.analysis import Analysis, Findings
from moelab.scaling.fit_record import OMIT_NONE
from moelab.scaling.forms import (
    MIN_STEADY_REPLICATES, FormCheck, FormCriteria, FormOutcome, FormSelection, select_form,
)
from moelab.scaling.laws import get_law
from moelab.sweep.analyses.common import several_sparsities
from moelab.sweep.folder import SweepFolder


@dataclass(kw_only=True)
class FormSummary(FormOutcome):
    """A form's checks in forms.json: its fit's parameters and intervals instead of the fits."""

    params: Optional[dict[str, float]] = field(default=None, metadata=OMIT_NONE)
    """Its fitted parameters."""
    ci: Optional[dict[str, list[float]]] = field(default=None, metadata=OMIT_NONE)
    """Their bootstrap 95 % intervals."""

    @classmethod
    def of(cls, check: FormCheck) -> FormSummary:
        outcome = {f.name: getattr(check, f.name) for f in fields(FormOutcome)}
        if check.fit is None:
            return cls(**outcome)
        return cls(**outcome, params=check.fit.params, ci=check.fit.ci)


@dataclass
class FormsRecord:
    """forms.json: every form's checks (``moelab.scaling.forms``) without the bootstrap
    replicates; ``chosen`` is None when no form passes."""

    chosen: Optional[str]
    """The form the sweep's points identify; null when none passes."""
    criteria: FormCriteria
    """The thresholds the selection applied."""
    forms: list[FormSummary]
    """Each form's checks."""
    selection: Optional[FormSelection] = field(default=None, compare=False,
                                               metadata={"json": False})
    """The checks with their fits, for the analyses after this one (never written: None in a
    record read back)."""


def compute(folder: SweepFolder, findings: Findings) -> FormsRecord | None:
    if folder.results is None or not several_sparsities(folder):
        return None
    settings = folder.settings
    assert settings is not None
    selection = select_form(folder.law_columns(), folder.grid.holdout,
                            bootstrap_replicates=settings.bootstrap_replicates,
                            max_starts=settings.max_starts, log=folder.log)
    return FormsRecord(selection.chosen, selection.criteria,
                       [FormSummary.of(check) for check in selection.forms], selection)


def render(record: FormsRecord | None, folder: SweepFolder, findings: Findings) -> str:
    if record is None or folder.results is None:
        return ""
    criteria = record.criteria
    rows = []
    for check in record.forms:
        law = get_law(check.law)
        if check.skipped is not None:
            rows.append([f"`{law.name}`", str(law.num_params), "–", "–", "skipped: too few points", ""])
            continue
        identified = "yes" if check.identified else "no: " + "; ".join(check.problems or [])
        rows.append([f"`{law.name}`", str(law.num_params), f"{check.objective:.3e}",
                     f"{check.holdout_mae:.4f}", identified,
                     "**chosen**" if check.law == record.chosen else ""])
    formulas = "\n".join(f"- `{check.law}`: {get_law(check.law).formula}"
                         for check in record.forms)
    if record.chosen:
        verdict = (f"The richest form that passes both checks is `{record.chosen}`; the fit, "
                   "the held-out check and the optima below use it (`fit.json`).")
    else:
        verdict = ("**No form of the law passes both checks**, so these points identify no law: "
                   "the report shows no fitted law and no optimal sparsity read off one "
                   "(every form's parameters and intervals are in `forms.json`). Sweep more "
                   "sizes, budgets or seeds.")
    return ("## Law form\n\n"
            "Abnar et al.'s eq. 6, its reduced forms, and Chinchilla's law, in which S enters "
            "only through compute (N = total parameters):\n\n"
            f"{formulas}\n\n"
            "Each is fitted to every point with bootstrap intervals "
            f"({criteria.bootstrap_replicates} resamples) and refitted without the held-out "
            f"points ({criteria.holdout}). A form is identified when "
            + (f"every term adds at least {criteria.min_term_size:g} nats to some point's "
               "loss, " if criteria.min_term_size is not None else "")  # older forms.json lack it
            + f"each exponent moves its term by at least {criteria.min_exponent_effect:g} "
            "nats over the points' range, "
            "every 95 % interval is finite (no coefficient reaching 0 or infinity) and no "
            "exponent's interval contains 0 or is wider than "
            f"{criteria.max_exponent_ci_width:g}"
            + _resamples_caveat(criteria.bootstrap_replicates)
            + "; it is predictive when its held-out "
            f"mean absolute error is at most {criteria.max_holdout_mae:g} nats (`forms.json`)."
            f"\n\n" + markdown_table(["form", "parameters", "objective", "held-out MAE",
                                      "identified", ""], rows, "lrrrll")
            + f"\n{verdict}\n")


def _resamples_caveat(replicates: int) -> str:
    if not replicates:
        return " (intervals not checked: no resamples)"
    if replicates < MIN_STEADY_REPLICATES:
        return (f" (with fewer than {MIN_STEADY_REPLICATES} resamples these intervals, and so "
                "the choice of form, can turn on float rounding)")
    return ""


def chosen_check(findings: Findings) -> FormCheck | None:
    """The chosen form's check with its fits, from this analysis's record as computed (None
    when no form passed, or with one sparsity)."""
    record = findings.record(ANALYSIS)
    if record is None or record.selection is None:
        return None
    return record.selection.chosen_check()


ANALYSIS: Analysis[SweepFolder, FormsRecord] = Analysis(
    "law_form", compute, render, file="forms.json", record_type=FormsRecord)
