"""Calibration of ``moelab predict`` by rollout: for every stored sweep with >= 3 budgets and
every form, the largest budget left out, its cells predicted from the smaller budgets, and each
cell's measured mean over its seeds scored against its 90 % interval (``moelab.scaling.rollout``,
stored by experiments/rollout.py in rollout.json).

The page pools the stored cells per form; "inside" is the measured mean against the stored
interval. The cells of one sweep share one fit, so the shares describe and do not test: no
interval or verdict is drawn on them.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from moelab.codec import from_json
from moelab.findings.source import ResultsRoot
from moelab.report import markdown_table
from moelab.report.analysis import Analysis, Findings
from moelab.scaling.prediction_score import CellScore
from moelab.scaling.rollout import Rollout

FILE = "rollout.json"


@dataclass(frozen=True)
class PooledForm:
    """One form's held-out cells over every sweep it could predict."""

    form: str
    sweeps: int
    cells: int
    inside: int
    mean_error: float
    """Mean of measured - predicted."""
    mean_abs_error: float
    rms_standardised: float
    """Root mean square of (measured - predicted) / predicted sd."""


@dataclass(frozen=True)
class RolloutCalibration:
    command: str
    bootstrap: int
    starts: int
    seed: int
    level: float
    repeats: dict[str, str]
    """{sweep skipped: the sweep whose runs it repeats}."""
    forms: list[PooledForm]
    rollouts: list[Rollout]


def _scored(rollout: Rollout) -> list[CellScore]:
    if rollout.score is None:
        return []
    return [cell for cell in rollout.score.cells
            if cell.inside is not None and cell.error is not None
            and cell.standardised is not None]


def pool(form: str, rollouts: list[Rollout]) -> PooledForm:
    """Every scored cell of ``form`` over the sweeps, as one table row."""
    mine = [r for r in rollouts if r.form == form and _scored(r)]
    cells = [cell for r in mine for cell in _scored(r)]
    errors = np.array([cell.error for cell in cells], dtype=float)
    z = np.array([cell.standardised for cell in cells], dtype=float)
    return PooledForm(form, len(mine), len(cells), sum(bool(cell.inside) for cell in cells),
                      float(errors.mean()), float(np.abs(errors).mean()),
                      float(np.sqrt(np.mean(z ** 2))))


def compute(results: ResultsRoot, findings: Findings) -> RolloutCalibration:
    payload = results.json(FILE)
    rollouts = [from_json(Rollout, record) for record in payload["rollouts"]]
    forms = list(dict.fromkeys(r.form for r in rollouts))
    return RolloutCalibration(
        command=payload["command"], bootstrap=int(payload["bootstrap"]),
        starts=int(payload["starts"]), seed=int(payload["seed"]), level=float(payload["level"]),
        repeats=dict(payload["repeats"]),
        forms=[pool(form, rollouts) for form in forms if any(_scored(r) for r in rollouts
                                                             if r.form == form)],
        rollouts=rollouts)


def _form_rows(record: RolloutCalibration) -> list[list[str]]:
    return [[f"`{f.form}`", str(f.sweeps), str(f.cells),
             f"{f.inside}/{f.cells} ({f.inside / f.cells:.0%})", f"{f.mean_error:+.4f}",
             f"{f.mean_abs_error:.4f}", f"{f.rms_standardised:.2f}"] for f in record.forms]


def _sweep_rows(record: RolloutCalibration) -> list[list[str]]:
    rows = []
    for sweep in sorted({r.sweep for r in record.rollouts}):
        mine = {r.form: r for r in record.rollouts if r.sweep == sweep}
        held = next(iter(mine.values())).held_out_budget
        counts = []
        for form in record.forms:
            rollout = mine.get(form.form)
            score = rollout.score if rollout else None
            counts.append("n/a" if score is None or not score.scored
                          else f"{score.inside}/{score.scored}")
        rows.append([sweep, f"{held:.3g}", *counts])
    return rows


def _percent(level: float) -> str:
    return f"{100 * level:g} %"


def _readings(record: RolloutCalibration) -> str:
    level = _percent(record.level)
    reaching = [f.form for f in record.forms if f.inside / f.cells >= record.level]
    below = [f.form for f in record.forms if f.mean_error < 0]
    return (f"- Forms whose pooled share inside reaches {level}: "
            + (", ".join(f"`{name}`" for name in reaching) if reaching else "none")
            + f" of {len(record.forms)}.\n"
            f"- Forms whose mean error (measured - predicted) is negative, the measured loss "
            f"below the prediction on average: {len(below)} of {len(record.forms)}.\n")


def render(record: RolloutCalibration | None, results: ResultsRoot, findings: Findings) -> str:
    if record is None:
        return ""
    repeats = "; ".join(f"{skipped} holds {kept}'s runs, so it is counted once"
                        for skipped, kept in record.repeats.items())
    forms = [f"`{f.form}`" for f in record.forms]
    return ("## Calibration by rollout\n\n"
            f"Seeds: those each sweep trained; {record.bootstrap} bootstrap refits, seed "
            f"{record.seed}, {record.starts} law starts, {_percent(record.level)} intervals without an "
            f"extrapolation term (that term is what this measures). {repeats}.\n\n"
            f"    OMP_NUM_THREADS=1 {record.command}\n\n"
            "Every scored cell pooled per form (rms z: the root mean square of the error over "
            "the predicted sd):\n\n"
            + markdown_table(["form", "sweeps", "cells", f"inside {_percent(record.level)} interval",
                              "mean error", "mean abs error", "rms z"], _form_rows(record),
                             "lrrrrrr")
            + "\nEach sweep's cells inside, by form (n/a: the form could not predict it; "
              "`isoflop-parabola` needs FLOPs budgets):\n\n"
            + markdown_table(["sweep", "held out", *forms], _sweep_rows(record),
                             "lr" + "r" * len(forms))
            + "\n" + _readings(record)
            + "\nThe cells of one sweep share one fit and their misses come together, and the "
              "sweeps are not independent either (cpu, cpu-cpu2 and cpu-eager are one grid "
              "trained on different machines or code): the shares describe and do not test. "
              "Read the rollout of your own sweep before trusting an interval a budget out, and "
              "add its extrapolation term (`moelab predict --rollout`).\n")


ANALYSIS: Analysis[ResultsRoot, RolloutCalibration] = Analysis("rollout", compute, render)
