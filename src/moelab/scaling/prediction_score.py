"""Scoring a prediction against the runs it predicted: ``moelab score``.

A run belongs to a predicted cell when its total and active parameter counts equal the cell's
and its budget (FLOPs 6 N_active D, or tokens) is within ``BUDGET_TOLERANCE`` of the cell's.
Per cell: the mean of its runs' best validation loss, inside or outside the prediction interval
(recomputed for the seeds actually trained: ``prediction.cell_interval``), the error and the
standardised error (error / the prediction's total sd for those seeds). Over cells: the share
inside (coverage, with Wilson's 95 % interval: cells of one sweep share their fit, so this is
a description, not an independent-trials test), mean error, mean |error| and the rms
standardised error (about 1 when the intervals are calibrated). Per size: the sparsity its
measured means put lowest, against the prediction's shares.

``render(record)`` is the report section, self-contained; ``write_score_figure`` draws each
size's predicted band and measured means against S.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from moelab.errors import MoelabError, short_repr
from moelab.report.markdown import markdown_table
from moelab.scaling.family import estimate_shared_fraction
from moelab.scaling.prediction import (
    CellPrediction, Prediction, TargetCell, cell_interval, predicted_sd,
)
from moelab.scaling.prediction_data import SweepRuns
from moelab.stats.intervals import wilson_interval

BUDGET_TOLERANCE = 0.05


@dataclass
class MeasuredRun:
    run: str
    total_params: float
    active_params: float
    tokens: float
    flops: float
    """6 N_active D."""
    loss: float


@dataclass
class CellScore:
    label: str
    size: str
    sparsity: float
    budget: float
    predicted: float
    interval: list[float] | None
    seeds: int
    measured: float | None
    inside: bool | None
    error: float | None
    standardised: float | None
    sd: float | None
    """The predicted sd of the mean of the seeds trained (extrapolation term included)."""
    inside_without_extrapolation: bool | None = None
    """Inside the interval left without the rollout's extrapolation term (equal to ``inside``
    when the prediction has none)."""
    runs: list[str] = field(default_factory=list)


@dataclass
class SparsityScore:
    size: str
    predicted: float
    measured: float | None
    predicted_share_of_measured: float | None
    """The share of the prediction's draws that put S* where the measured means do."""


@dataclass
class Score:
    prediction: str
    form: str
    data_hash: str
    level: float
    cells: list[CellScore]
    scored: int
    inside: int
    coverage: float | None
    coverage_interval: list[float] | None
    mean_error: float | None
    mean_abs_error: float | None
    rms_standardised: float | None
    sparsity: list[SparsityScore]
    pending: list[str]


def score(prediction: Prediction, measured: list[MeasuredRun], source: str = "") -> Score:
    cells = [_score_cell(p, _members(p.cell, measured, prediction.budget_kind))
             for p in prediction.cells]
    scored = [c for c in cells if c.measured is not None and c.inside is not None]
    inside = sum(bool(c.inside) for c in scored)
    errors = np.array([c.error for c in scored], dtype=float)
    standardised = np.array([c.standardised for c in scored], dtype=float)
    coverage_interval = None
    if scored:
        low, high = wilson_interval(inside, len(scored))
        coverage_interval = [float(low), float(high)]
    return Score(
        prediction=source, form=prediction.form, data_hash=prediction.data_hash,
        level=prediction.level, cells=cells, scored=len(scored), inside=inside,
        coverage=inside / len(scored) if scored else None, coverage_interval=coverage_interval,
        mean_error=float(errors.mean()) if scored else None,
        mean_abs_error=float(np.abs(errors).mean()) if scored else None,
        rms_standardised=float(np.sqrt(np.mean(standardised ** 2))) if scored else None,
        sparsity=_sparsity_scores(prediction, cells),
        pending=[c.label for c in cells if c.measured is None],
    )


def _members(cell: TargetCell, measured: list[MeasuredRun], budget_kind: str) -> list[MeasuredRun]:
    def budget_of(run: MeasuredRun) -> float:
        return run.flops if budget_kind == "C" else run.tokens
    return [run for run in measured
            if round(run.total_params) == round(cell.params_total)
            and round(run.active_params) == round(cell.params_active)
            and abs(budget_of(run) / cell.budget - 1) <= BUDGET_TOLERANCE]


def _score_cell(p: CellPrediction, runs: list[MeasuredRun]) -> CellScore:
    c = p.cell
    result = CellScore(label=c.label, size=c.size, sparsity=c.sparsity, budget=c.budget,
                       predicted=p.loss, interval=None, seeds=len(runs), measured=None,
                       inside=None, error=None, standardised=None, sd=None,
                       runs=[r.run for r in runs])
    if not runs:
        return result
    result.measured = float(np.mean([r.loss for r in runs]))
    result.error = result.measured - p.loss
    if p.interval is None:
        return result
    result.interval = cell_interval(p, len(runs))
    result.inside = bool(result.interval[0] <= result.measured <= result.interval[1])
    raw = cell_interval(p, len(runs), with_extrapolation=False)
    result.inside_without_extrapolation = bool(raw[0] <= result.measured <= raw[1])
    result.sd = predicted_sd(p, len(runs))
    result.standardised = result.error / result.sd if result.sd > 0 else None
    return result


def _sparsity_scores(prediction: Prediction, cells: list[CellScore]) -> list[SparsityScore]:
    out = []
    for choice in prediction.sparsity_choices:
        own = [c for c in cells if c.size == choice.size and c.sparsity in choice.shares]
        measured = None
        if own and all(c.measured is not None for c in own):
            measured = float(min(own, key=lambda c: c.measured or math.inf).sparsity)
        out.append(SparsityScore(size=choice.size, predicted=choice.sparsity, measured=measured,
                                 predicted_share_of_measured=None if measured is None
                                 else float(choice.shares.get(measured, 0.0))))
    return out


# --------------------------------------------------------------------------------------------
# Targets and text
# --------------------------------------------------------------------------------------------


def target_cells(runs: SweepRuns, specs: list[str], budget: float) -> list[TargetCell]:
    """``--cell SIZE:S`` items as cells at ``budget``: a size's N and N_active are those of its
    runs at that sparsity; a number for SIZE is N itself, N_active then following from the
    sweep's shared fraction."""
    if not specs:
        raise MoelabError("give at least one --cell SIZE:S (e.g. --cell s2:0.875)")
    shared = estimate_shared_fraction(runs.N, runs.N_active, runs.S) or 0.0
    cells = []
    for spec in specs:
        size, sep, sparsity_text = spec.partition(":")
        try:
            sparsity = float(sparsity_text)
        except ValueError:
            sparsity = -1.0
        if not sep or not 0 <= sparsity < 1:
            raise MoelabError(f"--cell {short_repr(spec)} is invalid: allowed SIZE:S with S in [0, 1)")
        total, active = _cell_size(runs, size, sparsity, shared, spec)
        tokens = budget / (6 * active) if runs.budget_kind == "C" else budget
        cells.append(TargetCell(label=f"{size} S={sparsity:g}", size=size, params_total=total,
                                params_active=active, sparsity=sparsity, budget=budget,
                                tokens=tokens))
    return cells


def numeric_cells(specs: list[str], budget: float, shared: float, *, flops: bool
                  ) -> list[TargetCell]:
    """``--cell N:S`` items (a total parameter count) as cells, for a prediction from a fit
    file: N_active from the shared fraction."""
    if not specs:
        raise MoelabError("give at least one --cell N:S (e.g. --cell 3e5:0.875)")
    cells = []
    for spec in specs:
        size, _, sparsity_text = spec.partition(":")
        try:
            total, sparsity = float(size), float(sparsity_text)
        except ValueError:
            total, sparsity = -1.0, -1.0
        if not (total > 0 and 0 <= sparsity < 1):
            raise MoelabError(f"--cell {short_repr(spec)} is invalid: with a fit file allowed "
                              "N:S, N a total parameter count > 0 and S in [0, 1)")
        active = total * (shared + (1 - shared) * (1 - sparsity))
        cells.append(TargetCell(label=f"N={total:.4g} S={sparsity:g}", size=f"{total:.4g}",
                                params_total=total, params_active=active, sparsity=sparsity,
                                budget=budget, tokens=budget / (6 * active) if flops else budget))
    return cells


def _cell_size(runs: SweepRuns, size: str, sparsity: float, shared: float, spec: str
               ) -> tuple[float, float]:
    mask = (runs.size == size) & np.isclose(runs.S, sparsity)
    if mask.any():
        return float(runs.N[mask][0]), float(runs.N_active[mask][0])
    try:
        total = float(size)
    except ValueError:
        known = sorted(set(runs.size.tolist()))
        raise MoelabError(f"--cell {short_repr(spec)} is invalid: no runs of size {short_repr(size)} "
                          f"at S={sparsity:g}; allowed sizes {', '.join(known)} at their "
                          "sparsities, or a total parameter count") from None
    return total, total * (shared + (1 - shared) * (1 - sparsity))


def format_prediction(record: Prediction) -> str:
    origin = (f"fitted on {record.runs} runs ({record.families} seed families) of "
              f"{record.source}, budgets {', '.join(f'{b:.3g}' for b in record.budgets_fitted)}"
              if record.runs else f"read from the fit file {record.source}")
    lines = [f"{record.form}: {record.formula}",
             f"{origin}; data sha256 {record.data_hash[:16]}...",
             f"noise sd {_num(record.noise.sd)} ({record.noise.df} df), misfit sd "
             f"{record.misfit_sd:.4f}; {record.level:.0%} intervals for the mean of "
             f"{record.cells[0].seeds if record.cells else 0} seeds"]
    for c in record.cells:
        interval = f"[{c.interval[0]:.4f}, {c.interval[1]:.4f}]" if c.interval else "none"
        lines.append(f"  {c.cell.label:<16} N={c.cell.params_total:.4g} D={c.cell.tokens:.4g}  "
                     f"loss {c.loss:.4f} {interval}  (sd: parameters {c.parameter_sd:.4f}, "
                     f"misfit {c.misfit_sd:.4f}, noise {c.noise_sd:.4f}, extrapolation "
                     f"{c.extrapolation_sd:.4f})")
    for s in record.sparsity_choices:
        shares = ", ".join(f"{k:g}: {v:.0%}" for k, v in s.shares.items())
        lines.append(f"  best S for {s.size}: {s.sparsity:g}  (shares {shares})")
    for o in record.optima:
        lines.append(f"  compute-optimal at C={o.flops:.3g}: S* {o.sparsity:.3f} "
                     f"{_interval(o.sparsity_interval, '.3f')}, N* {o.params_total:.4g} "
                     f"{_interval(o.params_interval, '.4g')}, loss {o.loss:.4f}"
                     + (f"  ({o.bound})" if o.bound else ""))
    if record.extrapolation:
        e = record.extrapolation
        lines.append(f"  extrapolation sd {e.sd:.4f}: a rollout predicting {e.held_out_budget:.3g} "
                     f"({e.ratio:.3g}x the budgets it saw), {e.cells} cells, rms error "
                     f"{e.rms_error:.4f} against a predicted sd of {e.rms_predicted_sd:.4f}")
    lines += [f"  note: {note}" for note in record.notes]
    return "\n".join(lines)


def render(record: Score) -> str:
    """The score as a markdown section."""
    lines = [f"## Prediction scored: {record.form}", "",
             f"Prediction `{record.prediction}` (fitted data sha256 `{record.data_hash[:16]}`); "
             f"{record.level:.0%} prediction intervals for each cell's mean over the seeds "
             "trained.", ""]
    rows = [[c.label, f"{c.budget:.3g}", f"{c.predicted:.4f}", _interval(c.interval, ".4f"),
             c.seeds, _num(c.measured), _num(c.error, "+.4f"),
             _num(c.standardised, "+.2f"), _verdict(c)] for c in record.cells]
    lines.append(markdown_table(["cell", "budget", "predicted", "interval", "seeds", "measured",
                                 "error", "z", "verdict"], rows))
    lines.append("")
    raw = [c for c in record.cells if c.inside_without_extrapolation is not None]
    if any(c.inside_without_extrapolation != c.inside for c in raw):
        lines.append(f"Without the rollout's extrapolation term, "
                     f"{sum(bool(c.inside_without_extrapolation) for c in raw)} of {len(raw)} "
                     "cells would be inside.")
        lines.append("")
    if record.scored:
        lines.append(f"Coverage: {record.inside} of {record.scored} cells inside "
                     f"({record.coverage:.0%}, Wilson 95 % {_interval(record.coverage_interval, '.0%')}; "
                     "the cells share one fit, so this describes, it does not test); mean error "
                     f"{record.mean_error:+.4f}, mean |error| {record.mean_abs_error:.4f}, rms z "
                     f"{record.rms_standardised:.2f}.")
    else:
        lines.append("No cell has a complete run yet: the score is pending.")
    for s in record.sparsity:
        measured = "pending" if s.measured is None else f"{s.measured:g}"
        share = "" if s.predicted_share_of_measured is None else \
            f" (the prediction gave that S {s.predicted_share_of_measured:.0%} of its draws)"
        lines.append(f"- best S for {s.size}: predicted {s.predicted:g}, measured {measured}{share}")
    if record.pending:
        lines.append(f"- pending (no complete run): {', '.join(record.pending)}")
    return "\n".join(lines) + "\n"


def write_score_figure(record: Score, path: Path) -> Path | None:
    """Per size, the predicted loss and its band against S, with the measured means."""
    from moelab.report.figures import new_figure, save_figure

    sizes = sorted({c.size for c in record.cells})
    fig, axes = new_figure(ncols=len(sizes), width_in=4.0)
    for ax, size in zip(axes if len(sizes) > 1 else [axes], sizes):
        own = sorted((c for c in record.cells if c.size == size), key=lambda c: c.sparsity)
        x = [c.sparsity for c in own]
        ax.plot(x, [c.predicted for c in own], "o-", label="predicted")
        banded = [c for c in own if c.interval]
        ax.fill_between([c.sparsity for c in banded], [c.interval[0] for c in banded if c.interval],
                        [c.interval[1] for c in banded if c.interval], alpha=0.25,
                        label=f"{record.level:.0%} interval")
        done = [c for c in own if c.measured is not None]
        ax.plot([c.sparsity for c in done], [c.measured for c in done], "ks", label="measured")
        ax.set_title(size)
        ax.set_xlabel("sparsity S")
        ax.set_ylabel("best validation loss")
        ax.legend(fontsize=7)
    return save_figure(fig, path)


def _verdict(cell: CellScore) -> str:
    if cell.measured is None:
        return "pending"
    if cell.inside is None:
        return "no interval"
    return "inside" if cell.inside else "outside"


def _num(value: float | None, spec: str = ".4f") -> str:
    return "–" if value is None else format(value, spec)


def _interval(bounds: list[float] | None, spec: str) -> str:
    return "–" if not bounds else f"[{format(bounds[0], spec)}, {format(bounds[1], spec)}]"
