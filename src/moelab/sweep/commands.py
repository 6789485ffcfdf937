"""The sweep commands as functions: ``run_sweep`` (plan, train what is missing, tabulate,
analyse, report) and ``rewrite_sweep_outputs`` (the same outputs again from a sweep folder).

Running goes through ``moelab.runs`` with any launcher: finished runs (their summary.json says
complete) are skipped, torn ones resume from their checkpoint. ``results.csv`` is rebuilt from
the run folders alone (``moelab.sweep.tabulate``); the analysis files from results.csv and
grid.json (``moelab.sweep.analysis``); ``report.md`` from those files (``moelab.sweep.report``).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Optional

from moelab.errors import MoelabError
from moelab.fileio import remove_stale_temporaries, writer_lock
from moelab.runs import execute_plan, is_complete, submit_plan
from moelab.runs.data import prepare_shared_data
from moelab.runs.launchers.local import LocalLauncher
from moelab.runs.training import TrainFn
from moelab.runs.completion import check_run_files
from moelab.scaling.fitting import check_num_starts
from moelab.sweep.grid import SweepGrid, load_grid
from moelab.runs.lr_grid import (
    SELECTION_FOLDER, check_same_selection, lr_folder, read_choices, require_choices,
    run_selection,
)
from moelab.sweep import tuning as sweep_tuning
from moelab.sweep.plan import (
    SweepPoint, check_same_grid, plan_sweep, plan_sweep_folder, recorded_fit_settings,
)
from moelab.sweep.tuning import SweepLrGrid
from moelab.sweep.folder import read_results
from moelab.sweep.report import load_sweep, render_sweep_report, sweep_inputs, write_sweep_report
from moelab.sweep.tabulate import collect_results, write_results_csv


def run_sweep(grid: SweepGrid, out_dir: Path, *, bootstrap_replicates: int = 200,
              max_starts: int | None = None, train_fn: Optional[TrainFn] = None,
              log: Callable[[str], None] = print, jobs: int = 1, launcher=None,
              tuning: Optional[SweepLrGrid] = None) -> Path:
    """Plan, train what is missing (with ``launcher``; default: this machine, ``jobs`` at a
    time), write results.csv, fit, and write report.md; returns its path. ``max_starts``
    limits the law fit's start grid (``--starts``). ``tuning`` (``--lr-grid``) first chooses
    each cell's lr on the selection seeds (``moelab.sweep.tuning``)."""
    out_dir = Path(out_dir)
    if launcher is None:
        launcher = LocalLauncher(jobs=jobs, train_fn=train_fn)
    adjust, extra = None, None
    if tuning is not None:
        adjust, extra = choose_cell_lrs(grid, out_dir, tuning, launcher, log)
    points, specs = _plan_folder(grid, out_dir, bootstrap_replicates, max_starts, adjust, extra)
    if any(not is_complete(out_dir / spec.run_dir) for spec in specs):
        prepare_shared_data(points[0].config, log)
    execute_plan(out_dir, specs, launcher, log)
    return write_sweep_outputs(out_dir, grid, points, bootstrap_replicates=bootstrap_replicates,
                               max_starts=max_starts, log=log)


def submit_sweep(grid: SweepGrid, out_dir: Path, launcher, *, bootstrap_replicates: int = 200,
                 max_starts: int | None = None, log: Callable[[str], None] = print) -> Optional[str]:
    """Plan, then submit every run that is not complete and return at once (``--detach``):
    the job id, or None when there is nothing to train. ``moelab report`` fits and reports
    once the runs are done, with the fit settings recorded here."""
    out_dir = Path(out_dir)
    points, specs = _plan_folder(grid, out_dir, bootstrap_replicates, max_starts)
    if any(not is_complete(out_dir / spec.run_dir) for spec in specs):
        prepare_shared_data(points[0].config, log)
    return submit_plan(out_dir, specs, launcher, log)


def _plan_folder(grid: SweepGrid, out_dir: Path, bootstrap_replicates: int,
                 max_starts: int | None, adjust_points=None, extra: Optional[dict] = None):
    """The sweep's points and run specs, written to ``out_dir`` with the fit settings."""
    check_fit_settings(bootstrap_replicates, max_starts)
    return plan_sweep_folder(grid, out_dir, {"bootstrap_replicates": bootstrap_replicates,
                                             "max_starts": max_starts}, adjust_points, extra)


def check_fit_settings(bootstrap_replicates: int, max_starts: int | None) -> None:
    # The fit runs after all the training: check its settings first.
    if bootstrap_replicates < 0:
        raise MoelabError(f"--bootstrap {bootstrap_replicates} is invalid: must be >= 0")
    check_num_starts(max_starts)


def choose_cell_lrs(grid: SweepGrid, out_dir: Path, tuning: SweepLrGrid, launcher,
                    log: Callable[[str], None]):
    """Train the selection runs (the grid at every lr on the selection seeds) and return how
    to set each point's lr, with plan.json's record of the selection."""
    specs_by_lr = sweep_tuning.selection_specs(grid, tuning)
    record = sweep_tuning.sweep_selection_record(grid, tuning, specs_by_lr)
    check_same_grid(out_dir, grid)
    old_plan = _read_plan(out_dir)
    check_same_selection(old_plan, record)
    if any(not is_complete(out_dir / SELECTION_FOLDER / lr_folder(lr) / spec.run_dir)
           for lr, specs in specs_by_lr.items() for spec in specs):
        prepare_shared_data(next(iter(specs_by_lr.values()))[0].config, log)
    run_selection(out_dir, specs_by_lr, launcher, log)
    lrs = require_choices(read_choices(out_dir, record), out_dir)
    family = record["per"] == "budget family"
    log(f"lr per cell chosen on seeds {record['seeds']}: "
        + ", ".join(f"{cell} {lr:g}" for cell, lr in sorted(lrs.items())))
    return (lambda points: sweep_tuning.with_cell_lrs(points, lrs, family),
            {sweep_tuning.RECORD_KEY: record})


def _read_plan(out_dir: Path) -> dict:
    import json

    try:
        plan = json.loads((out_dir / "plan.json").read_text("utf-8"))
    except (OSError, ValueError):
        return {}
    return plan if isinstance(plan, dict) else {}


def write_sweep_outputs(out_dir: Path, grid: SweepGrid, points: list[SweepPoint], *,
                        bootstrap_replicates: int = 200, max_starts: int | None = None,
                        log: Callable[[str], None] = print) -> Path:
    """results.csv from the run folders, then the fit and report.md; returns the report's path."""
    rows = collect_results(out_dir, points)
    write_results_csv(out_dir / "results.csv", rows)
    if len(rows) < len(points):
        # failures.json lists the runs that raised; a run never started is not in it.
        where = ": see failures.json" if (out_dir / "failures.json").is_file() else ""
        log(f"{len(points) - len(rows)} of {len(points)} runs are not complete{where}")
    return write_sweep_report(sweep_inputs(out_dir, log), bootstrap_replicates=bootstrap_replicates,
                              max_starts=max_starts, log=log)


def rewrite_sweep_outputs(out_dir: Path, log: Callable[[str], None] = print, *,
                          bootstrap_replicates: int | None = None,
                          max_starts: int | None = None) -> Path:
    """``moelab report DIR`` of a sweep folder: results.csv, the fit and report.md again, from
    the run folders, grid.json and the fit settings plan.json recorded; returns the report's
    path. ``bootstrap_replicates`` and ``max_starts`` (``--bootstrap``, ``--starts``) fit with
    these settings instead; on a folder kept without its run folders they fit again from the
    stored results.csv, which a plain report only renders."""
    refit = {key: value for key, value in (("bootstrap_replicates", bootstrap_replicates),
                                           ("max_starts", max_starts)) if value is not None}
    check_fit_settings(refit.get("bootstrap_replicates", 0), refit.get("max_starts"))
    grid = load_grid(out_dir / "grid.json", record=True)
    check_run_files(out_dir / "runs")
    with writer_lock(out_dir):
        remove_stale_temporaries(out_dir, out_dir / "figures")  # what a killed report left
        stored, absent = stored_runs(out_dir)
        if absent and len(absent) < len(stored):
            raise MoelabError(
                f"{out_dir / 'results.csv'} lists {len(absent)} runs whose folders are missing or "
                f"incomplete ({', '.join(absent[:3])}{', ...' if len(absent) > 3 else ''}): "
                "restore them, or train them again with moelab sweep-sparsity; the folder's "
                "files are left as they are")
        if absent:
            return report_from_stored_table(out_dir, log, refit)
        return write_sweep_outputs(out_dir, grid, plan_sweep(grid),
                                   **{**recorded_fit_settings(out_dir), **refit})


def stored_runs(out_dir: Path) -> tuple[list[str], list[str]]:
    """The runs results.csv lists, and those of them whose run folder is not complete (a
    results folder kept without its runs/, or runs deleted since)."""
    results = read_results(out_dir)
    names = [row.run for row in results.rows] if results else []
    return names, [name for name in names if not is_complete(out_dir / name)]


def report_from_stored_table(out_dir: Path, log: Callable[[str], None] = print,
                             refit: Optional[dict] = None) -> Path:
    """report.md and figures from the stored results.csv and fit files alone, for a folder
    whose run folders are gone: results.csv is kept as it is (it cannot be rebuilt), the fit
    files too when analysis.json is there and no ``refit`` settings are given (else they are
    fitted again from results.csv, with ``refit`` over the recorded settings)."""
    render_only = (out_dir / "analysis.json").is_file() and not refit
    log(f"{out_dir} has none of its run folders: report.md and figures/ are rebuilt from the "
        "stored results.csv" + (" and fit files" if render_only else ""))
    if render_only:
        return render_sweep_report(load_sweep(out_dir, log))
    return write_sweep_report(sweep_inputs(out_dir, log),
                              **{**recorded_fit_settings(out_dir), **(refit or {})}, log=log)
