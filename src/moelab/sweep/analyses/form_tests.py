"""The law forms tested against the sweep's own noise: F tests against the pure error of seed
replicates, N counted as total and as non-embedding parameters, held-out largest D as well as
largest S; and the effect of sparsity at fixed N and D read off the runs directly, with top-k
against E at one sparsity.

Written as ``form_tests.json`` (``FormTestsRecord``) next to forms.json: the F tests only for a
sweep with replicated points (several seeds: only such a sweep has a pure error), the
differences from dense only for a token-budget sweep.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Optional

import numpy as np

from moelab.errors import MoelabError
from moelab.report import markdown_table, new_figure, save_figure
from moelab.report.analysis import Analysis, Findings
from moelab.scaling.fit_record import OMIT_NONE, fit_columns
from moelab.scaling.form_tests import (
    FORMS_BY_NAME, FormChoice, FormSS, LackOfFit, PureError, choose_by_f_tests, lack_of_fit,
    pure_error, residual_ss,
)
from moelab.scaling.forms import FORMS, FormSelection
from moelab.scaling.table import holdout_mask
from moelab.stats.intervals import mean_interval, t_interval
from moelab.sweep.analyses.common import palette
from moelab.sweep.analyses.law_form import ANALYSIS as LAW_FORM, FormsRecord
from moelab.sweep.folder import SweepFolder
from moelab.sweep.results_csv import ResultRow

COUNT_NAMES = {"total": "total parameters", "non_embedding": "non-embedding parameters"}


@dataclass
class FormTestCheck:
    """One form against the pure error: its fit's residuals and held-out errors, or why it was
    skipped (too few points for it)."""

    law: str
    """The form's name."""
    num_params: int
    """Its free parameters."""
    skipped: Optional[str] = field(default=None, metadata=OMIT_NONE)
    """Why it was not fitted (too few points); left out when fitted."""
    ss: Optional[float] = field(default=None, metadata=OMIT_NONE)
    """Residual sum of squares of log loss; None when skipped."""
    holdout_mae: Optional[dict[str, Optional[float]]] = field(default=None, metadata=OMIT_NONE)
    """Mean absolute error on each held-out set (``HOLDOUTS``); None where the holdout leaves
    too few points."""
    lack_of_fit: Optional[LackOfFit] = field(default=None, metadata={"omit_with": "ss"})
    """Its residual beyond pure error, as an F test."""

    def fitted(self) -> FormSS | None:
        return None if self.ss is None else FormSS(self.law, self.num_params, self.ss)


@dataclass
class CountChecks:
    """The forms with N counted one way (total or non-embedding), and the F tests' choice."""

    forms: list[FormTestCheck]
    """Each form against the pure error."""
    selection: Optional[FormChoice]
    """None when no form could be fitted."""


@dataclass(kw_only=True)
class SparsityDelta:
    """Loss at S minus dense at one size and token budget, over the seeds."""

    size: str
    """The grid's size label."""
    budget: str
    """The token budget's label."""
    D: float
    """Training tokens."""
    sparsity: float
    """The sparse S."""
    E: Optional[int] = field(default=None, metadata=OMIT_NONE)
    """None in files older than grids of several E."""
    delta: float
    """Mean loss at S minus mean dense loss (negative: sparse is better)."""
    ci: list[float]
    """Its 95 % t interval, with the pooled seed std."""
    seeds: list[int]
    """The runs behind each mean: [at S, dense]."""


@dataclass
class ExpertPair:
    """At one size, budget and S, the runs of two E compared seed by seed (more E minus fewer)."""

    size: str
    """The grid's size label."""
    budget: str
    """The budget's label."""
    sparsity: float
    """The sparsity S both have."""
    E: list[int]
    """The two expert counts compared, fewer first."""
    seeds: int
    """Seeds both have."""
    difference: float
    """Mean loss with more E minus with fewer, paired by seed."""
    ci: list[float]
    """Its 95 % paired t interval."""


@dataclass
class SparsityDeltas:
    """Loss at each sparse S minus dense at fixed size and tokens, with the seeds' pooled noise."""

    seed_std: float
    """The pooled std of a point's seeds."""
    df: int
    """Degrees of freedom of seed_std."""
    deltas: list[SparsityDelta]
    """Each sparse point against dense."""
    expert_pairs: Optional[list[ExpertPair]] = field(default=None, metadata=OMIT_NONE)
    """None in files older than grids of several E."""


@dataclass
class FormTestsRecord:
    """form_tests.json: the forms against the seeds' noise (sweeps with replicated points) and
    the loss at S minus dense at fixed N and D (token-budget sweeps), either or both."""

    pure_error: Optional[PureError] = field(default=None, metadata=OMIT_NONE)
    """The seeds' scatter about each point's mean."""
    holdouts: Optional[list[str]] = field(default=None, metadata=OMIT_NONE)
    """The held-out sets each form is scored on."""
    by_count: Optional[dict[str, CountChecks]] = field(default=None, metadata=OMIT_NONE)
    """By how N is counted: "total" and, where results.csv has it, "non_embedding"."""
    sparsity_deltas: Optional[SparsityDeltas] = field(default=None, metadata=OMIT_NONE)
    """Loss at S minus dense at fixed size and tokens (token-budget sweeps)."""


N_COUNTS = {"total": "N_total", "non_embedding": "N_non_embedding"}
"""How N is counted in a fit, and the results.csv column behind it."""
HOLDOUTS = ("S=max", "D=max")


def form_tests(selection: FormSelection, columns: dict[str, np.ndarray],
               non_embedding: np.ndarray | None, *, max_starts: int | None,
               log: Callable[[str], None]) -> FormTestsRecord | None:
    """Per N count: every form's residual sum of squares, lack-of-fit F, held-out errors at the
    largest S and the largest D, and the form chosen by nested F tests. ``selection`` is
    ``select_form``'s on total N (its fits are reused). None without replicated points."""
    pure = pure_error(columns)
    if not pure.variance:
        return None
    counts = {"total": _checks_total(selection, columns, max_starts, log)}
    if non_embedding is not None:
        counts["non_embedding"] = _checks_refitted({**columns, "N": non_embedding}, max_starts, log)
    by_count = {}
    for count, forms in counts.items():
        for form in forms:
            if form.ss is not None:
                form.lack_of_fit = lack_of_fit(form.ss, form.num_params, pure)
        fitted = {f.law: fit for f in forms if (fit := f.fitted()) is not None}
        by_count[count] = CountChecks(forms, choose_by_f_tests(fitted, pure) if fitted else None)
    return FormTestsRecord(pure_error=pure, holdouts=list(HOLDOUTS), by_count=by_count)


def _checks_total(selection: FormSelection, columns: dict, max_starts,
                  log) -> list[FormTestCheck]:
    """Total N: the forms' fits from the selection, plus a refit without the largest D."""
    forms = []
    for check in selection.forms:
        if check.fit is None:
            forms.append(FormTestCheck(check.law, check.num_params, skipped=check.skipped))
            continue
        law = FORMS_BY_NAME[check.law]
        forms.append(FormTestCheck(law.name, law.num_params,
                                   ss=residual_ss(law, check.fit.theta, columns),
                                   holdout_mae={"S=max": check.holdout_mae,
                                                "D=max": _holdout_mae(law.name, columns, "D=max",
                                                                      max_starts, log)}))
    return forms


def _checks_refitted(columns: dict, max_starts, log) -> list[FormTestCheck]:
    forms = []
    for law in FORMS:
        try:
            fit = fit_columns(law.name, columns, max_starts=max_starts)
        except MoelabError as exc:
            forms.append(FormTestCheck(law.name, law.num_params, skipped=str(exc)))
            continue
        forms.append(FormTestCheck(law.name, law.num_params,
                                   ss=residual_ss(law, fit.theta, columns),
                                   holdout_mae={spec: _holdout_mae(law.name, columns, spec,
                                                                   max_starts, log)
                                                for spec in HOLDOUTS}))
    return forms


def _holdout_mae(law_name: str, columns: dict, spec: str, max_starts, log) -> float | None:
    try:
        holdout_mask(columns, spec)
        fit = fit_columns(law_name, columns, holdout=spec, max_starts=max_starts)
    except MoelabError as exc:  # a holdout that leaves too few points for this form
        log(f"{law_name} without {spec} skipped: {exc}")
        return None
    return fit.holdout.mean_abs_error if fit.holdout else None


def sparsity_deltas(rows: list[ResultRow]) -> SparsityDeltas | None:
    """Loss at S minus the dense model's, per size and token budget, from the runs alone: the
    difference of the seeds' means with a 95 % t interval on the pooled seed variance. None
    unless every (size, budget) trains its sparsities on the same D (a token-budget sweep) and
    some point has two seeds."""
    losses: dict[tuple, list[float]] = {}
    tokens: dict[tuple, set] = {}
    for row in rows:
        losses.setdefault(row.point, []).append(row.best_val_loss)
        tokens.setdefault((row.size, row.budget), set()).add(row.D)
    if any(len(d) > 1 for d in tokens.values()):
        return None
    deviations = [np.asarray(v) - np.mean(v) for v in losses.values() if len(v) > 1]
    df = sum(len(d) - 1 for d in deviations)
    if df == 0:
        return None
    variance = sum(float(np.sum(d ** 2)) for d in deviations) / df
    table = []
    for (size, budget, sparsity, experts), values in sorted(losses.items()):
        dense = losses.get((size, budget, 0.0, 1))
        if sparsity == 0.0 or dense is None:
            continue
        delta = float(np.mean(values) - np.mean(dense))
        standard_error = float(np.sqrt(variance * (1 / len(values) + 1 / len(dense))))
        table.append(SparsityDelta(size=size, budget=budget, D=next(iter(tokens[(size, budget)])),
                                   sparsity=sparsity, E=experts, delta=delta,
                                   ci=list(t_interval(delta, standard_error, df)),
                                   seeds=[len(values), len(dense)]))
    return SparsityDeltas(seed_std=float(np.sqrt(variance)), df=df, deltas=table,
                          expert_pairs=expert_pairs(rows))


def expert_pairs(rows: list[ResultRow]) -> list[ExpertPair]:
    """At one size, budget and sparsity trained with several E (a grid with top_ks): each pair
    of E, the loss difference seed by seed (the same seed, so the pair shares its data order),
    its mean and 95 % t interval over the seeds."""
    by_seed: dict[tuple, dict[int, dict[str, float]]] = {}
    for row in rows:
        if row.S > 0:
            by_seed.setdefault((row.size, row.budget, row.S), {}).setdefault(row.E, {})[
                row.seed] = row.best_val_loss
    pairs = []
    for (size, budget, sparsity), by_experts in sorted(by_seed.items()):
        for low, high in itertools.combinations(sorted(by_experts), 2):
            seeds = sorted(set(by_experts[low]) & set(by_experts[high]))
            differences = np.array([by_experts[high][s] - by_experts[low][s] for s in seeds])
            interval = mean_interval(differences)
            if interval is None:  # fewer than 2 seeds in common
                continue
            pairs.append(ExpertPair(size=size, budget=budget, sparsity=sparsity, E=[low, high],
                                    seeds=len(differences), difference=float(differences.mean()),
                                    ci=list(interval)))
    return pairs


def compute(folder: SweepFolder, findings: Findings) -> FormTestsRecord | None:
    """The F tests (several sparsities: the forms' selection is reused) and the differences
    from dense, either or both; None with neither."""
    if folder.results is None or folder.settings is None:
        return None
    forms = findings.record(LAW_FORM)
    record = None
    if forms is not None and forms.selection is not None:
        rows = folder.rows
        counts = [row.N_non_embedding for row in rows]
        # Each run's non-embedding count, unless some row (an older file) lacks it.
        non_embedding = (None if any(count is None for count in counts)
                         else np.array(counts, dtype=np.float64))
        record = form_tests(forms.selection, folder.law_columns(), non_embedding,
                            max_starts=folder.settings.max_starts, log=folder.log)
    deltas = sparsity_deltas(folder.rows)
    if deltas is not None:
        record = replace(record or FormTestsRecord(), sparsity_deltas=deltas)
    return record


def form_tests_section(record: FormTestsRecord, forms: FormsRecord | None,
                       figure_path: Path) -> str:
    parts = []
    if record.by_count is not None:
        parts.append(_f_tests_text(record, forms))
    if record.sparsity_deltas is not None:
        parts.append(_deltas_text(record.sparsity_deltas, figure_path))
    return "\n".join(part.rstrip("\n") + "\n" for part in parts)


def _mae(value) -> str:
    """A held-out error: 4 decimals, or 3 digits for a prediction that ran off."""
    if value is None:
        return "–"
    return f"{value:.4f}" if value < 1 else f"{value:.3g}"


def _p(value) -> str:
    return "–" if value is None else (f"{value:.2g}" if value >= 1e-4 else "< 1e-4")


def _f_tests_text(record: FormTestsRecord, forms: FormsRecord | None) -> str:
    pure, holdouts = record.pure_error, record.holdouts or []
    assert pure is not None and pure.variance is not None and record.by_count is not None
    text = ("## Law forms against the seeds' noise\n\n"
            f"The {pure.n_points} runs sit at {pure.groups} distinct (N, D, S) points; the "
            "spread of a point's seeds is noise no law can fit (the pure error: sum of squares "
            f"{pure.ss:.3g} of log loss on {pure.df} degrees of freedom, a seed std of "
            f"{pure.variance ** 0.5:.4f} in log loss). Each form is tested against it: "
            "lack of fit F = ((SS - SS_pe) / (g - p)) / s^2, and each larger form against the "
            "smaller one it nests, F = ((SS_small - SS_large) / extra parameters) / s^2 "
            "(`form_tests.json`; the fits minimise a Huber loss, so the tests are "
            "approximate). Held out: the largest S and, separately, the largest D (an "
            "extrapolation in data, where the budgets' spacing fixes the D exponent).\n\n")
    for count, result in record.by_count.items():
        text += (f"N counted as {COUNT_NAMES[count]}:\n\n"
                 + markdown_table(["form", "parameters", "SS (log loss)", "lack of fit F (df), p",
                                   *(f"held-out MAE, {h}" for h in holdouts)],
                                  _form_rows(result, holdouts), "lrrrrr") + "\n")
        misfit = [f for f in result.forms if f.lack_of_fit and f.lack_of_fit.p < 0.05]
        if misfit and len(misfit) == len([f for f in result.forms if f.ss is not None]):
            text += ("Every form misses the points' seed means by more than the seeds' noise "
                     "(lack of fit p < 0.05 for all): no form describes these runs to within "
                     "their noise, and against the pure error a nested F test takes any term "
                     "that absorbs some of the misfit, so read it beside the likelihood-ratio "
                     "test.\n\n")
        text += _selection_text(result.selection, count)
    if forms is not None and forms.chosen:
        text += (f"The identification and held-out checks above (N total) chose "
                 f"`{forms.chosen}`; `fit.json` and the optima use that form.\n")
    return text


def _form_rows(result: CountChecks, holdouts: list[str]) -> list[list[str]]:
    """A table row per form: its SS, lack of fit and held-out errors, or that it was skipped."""
    rows = []
    for form in result.forms:
        if form.ss is None:
            rows.append([f"`{form.law}`", str(form.num_params), "–", "skipped", "–", "–"])
            continue
        lack = form.lack_of_fit
        lack_text = (f"{lack.F:.2f} ({lack.df[0]}, {lack.df[1]}), p {_p(lack.p)}"
                     if lack else "–")
        maes = [_mae((form.holdout_mae or {}).get(h)) for h in holdouts]
        rows.append([f"`{form.law}`", str(form.num_params), f"{form.ss:.4g}", lack_text, *maes])
    return rows


def _selection_text(selection: FormChoice | None, count: str) -> str:
    if selection is None:
        return "No form could be fitted.\n\n"
    tests = [[f"`{t.small}` → `{t.large}`", f"{t.F:.2f} ({t.df[0]}, {t.df[1]})",
              _p(t.p), _p(t.p_likelihood_ratio)] for t in selection.tests]
    text = (markdown_table(["nested test", "F (df)", "p", "likelihood-ratio p"], tests, "lrrr")
            + f"\nBy F tests at {selection.alpha:g} (N {COUNT_NAMES[count]}): "
            f"{_path_text(selection.path)}, so **`{selection.chosen}`** (from the "
            "smallest form, a larger one is taken only while it fits significantly better "
            "than the noise allows).")
    if selection.constant_s_star:
        text += (f" That form cannot answer how S* moves with compute: "
                 f"{selection.constant_s_star}.")
    if selection.path_likelihood_ratio is not None:  # older form_tests.json lack it
        text += (f" By likelihood-ratio tests (variance from the larger form's residuals): "
                 f"{_path_text(selection.path_likelihood_ratio)}, so "
                 f"`{selection.chosen_likelihood_ratio}`.")
    return text + "\n\n"


def _path_text(path: list[str]) -> str:
    if len(path) == 1:
        return f"no larger form fits significantly better than `{path[0]}`"
    return " → ".join(f"`{name}`" for name in path)


def _deltas_text(deltas: SparsityDeltas, figure_path: Path) -> str:
    if not deltas.deltas:  # no dense point of the same size and budget (a granularity grid)
        return ""
    columns = sorted({(d.sparsity, d.E) for d in deltas.deltas})
    several_e = len({s for s, _ in columns}) < len(columns)
    cells: dict[tuple, dict] = {(d.size, d.budget): {} for d in deltas.deltas}
    for d in deltas.deltas:
        cells[(d.size, d.budget)][(d.sparsity, d.E)] = (
            f"{d.delta:+.3f} [{d.ci[0]:+.3f}, {d.ci[1]:+.3f}]")
    rows = [[size, budget, *(by_s.get(c, "–") for c in columns)]
            for (size, budget), by_s in cells.items()]
    names = [f"S = {s:g}" + (f", E = {e}" if several_e else "") for s, e in columns]
    figure = sparsity_delta_figure(figure_path, deltas)
    significant = sum(1 for d in deltas.deltas if d.ci[0] > 0 or d.ci[1] < 0)
    return ("## Sparsity at fixed N and D (no law)\n\n"
            "The mean loss of a point's seeds at S minus the dense model's of the same size and "
            "token budget, with 95 % t intervals on the pooled seed std "
            f"({deltas.seed_std:.4f} nats, {deltas.df} degrees of freedom; "
            "`form_tests.json`, sparsity_deltas). Positive: the sparse model of the same total "
            f"size, trained on the same tokens, is worse. {significant} of "
            f"{len(deltas.deltas)} differences exclude 0.\n\n"
            + markdown_table(["size", "budget", *names], rows, "ll" + "r" * len(names))
            + (f"\n![Loss at S minus dense](figures/{figure.name})\n\n" if figure else "\n")
            + _expert_pairs_text(deltas.expert_pairs or []))


def _expert_pairs_text(pairs: list[ExpertPair]) -> str:
    """Top-k against E at one sparsity, paired by seed."""
    if not pairs:
        return ""
    rows = [[p.size, p.budget, f"{p.sparsity:g}", f"E = {p.E[1]} minus E = {p.E[0]}",
             str(p.seeds), f"{p.difference:+.4f} [{p.ci[0]:+.4f}, {p.ci[1]:+.4f}]"]
            for p in pairs]
    return ("\n### Top-k against E at one sparsity\n\nThe loss of the run with more experts (and "
            "so a larger k) minus the one with fewer, seed by seed (the same seed shares the "
            "data order), with a 95 % t interval over the seeds (`form_tests.json`, "
            "expert_pairs).\n\n"
            + markdown_table(["size", "budget", "S", "pair", "seeds", "loss difference"], rows,
                             "llrlrr"))


def sparsity_delta_figure(path: Path, deltas: SparsityDeltas) -> Path:
    """Loss at S minus dense against S, a line per size, a panel per token budget, with the
    95 % intervals."""
    budgets = sorted({d.budget for d in deltas.deltas}, key=lambda b: float(b.lstrip("DC")))
    fig, axes = new_figure(ncols=len(budgets), width_in=4.0)
    axes = axes if isinstance(axes, list) else [axes]
    sizes = list(dict.fromkeys(d.size for d in deltas.deltas))
    colours = dict(zip(sizes, palette(len(sizes))))
    for ax, budget in zip(axes, budgets):
        for size in sizes:
            rows = sorted((d for d in deltas.deltas if d.budget == budget and d.size == size),
                          key=lambda d: (d.sparsity, d.E or 0))
            x = [d.sparsity for d in rows]
            y = np.array([d.delta for d in rows])
            errors = np.array([[d.delta - d.ci[0], d.ci[1] - d.delta] for d in rows]).T
            ax.errorbar(x, y, yerr=errors.reshape(2, -1), marker="o", capsize=3,
                        color=colours[size], label=size)
        ax.axhline(0.0, color="grey", lw=0.8)
        ax.set_xlabel("sparsity S")
        ax.set_ylabel("loss minus dense (nats)")
        ax.set_title(f"budget {budget}")
        ax.legend(fontsize=8)
    return save_figure(fig, path)


def render(record: FormTestsRecord | None, folder: SweepFolder, findings: Findings) -> str:
    if record is None or folder.results is None:
        return ""
    return form_tests_section(record, findings.record(LAW_FORM),
                              folder.figure("sparsity_deltas.png"))


ANALYSIS: Analysis[SweepFolder, FormTestsRecord] = Analysis(
    "form_tests", compute, render, file="form_tests.json", record_type=FormTestsRecord)
