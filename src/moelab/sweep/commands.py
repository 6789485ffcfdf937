"""The sweep commands as functions: ``run_sweep`` (plan, train what is missing, tabulate,
analyse, report) and ``rewrite_sweep_outputs`` (the same outputs again from a sweep folder).

Running goes through ``moelab.runs`` with any launcher: finished runs (their summary.json says
complete) are skipped, torn ones resume from their checkpoint. ``results.csv`` is rebuilt from
the run folders alone (``moelab.sweep.results``); the analysis files from results.csv and
grid.json (``moelab.sweep.analysis``); ``report.md`` from those files (``moelab.sweep.report``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable, Optional

from moelab.errors import MoelabError
from moelab.fileio import remove_stale_temporaries, writer_lock
from moelab.runs import execute_plan, is_complete
from moelab.runs.data import prepare_shared_data
from moelab.runs.launchers.local import LocalLauncher
from moelab.runs.training import TrainFn
from moelab.runs.records import check_run_files
from moelab.scaling.fitting import check_num_starts
from moelab.sweep.grid import SweepGrid, load_grid
from moelab.sweep.plan import SweepPoint, plan_sweep, plan_sweep_folder, recorded_fit_settings
from moelab.sweep.report import write_sweep_report
from moelab.sweep.results import collect_results, write_results_csv


def run_sweep(grid: SweepGrid, out_dir: Path, *, bootstrap_replicates: int = 200,
              max_starts: int | None = None, train_fn: Optional[TrainFn] = None,
              log: Callable[[str], None] = print, jobs: int = 1, launcher=None) -> Path:
    """Plan, train what is missing (with ``launcher``; default: this machine, ``jobs`` at a
    time), write results.csv, fit, and write report.md; returns its path. ``max_starts``
    limits the law fit's start grid (``--starts``)."""
    # The fit runs after all the training: check its settings first.
    if bootstrap_replicates < 0:
        raise MoelabError(f"--bootstrap {bootstrap_replicates} is invalid: must be >= 0")
    check_num_starts(max_starts)
    out_dir = Path(out_dir)
    points, specs = plan_sweep_folder(grid, out_dir, {"bootstrap_replicates": bootstrap_replicates,
                                                      "max_starts": max_starts})
    if launcher is None:
        launcher = LocalLauncher(jobs=jobs, train_fn=train_fn)
    if any(not is_complete(out_dir / spec.run_dir) for spec in specs):
        prepare_shared_data(points[0].config, log)
    execute_plan(out_dir, specs, launcher, log)
    return write_sweep_outputs(out_dir, grid, points, bootstrap_replicates=bootstrap_replicates,
                               max_starts=max_starts, log=log)


def write_sweep_outputs(out_dir: Path, grid: SweepGrid, points: list[SweepPoint], *,
                        bootstrap_replicates: int = 200, max_starts: int | None = None,
                        log: Callable[[str], None] = print) -> Path:
    """results.csv from the run folders, then the fit and report.md; returns the report's path."""
    rows = collect_results(out_dir, points)
    write_results_csv(out_dir / "results.csv", rows)
    if len(rows) < len(points):
        log(f"{len(points) - len(rows)} of {len(points)} runs are not complete: see failures.json")
    return write_sweep_report(out_dir, bootstrap_replicates=bootstrap_replicates,
                              max_starts=max_starts, log=log)


def rewrite_sweep_outputs(out_dir: Path) -> Path:
    """``moelab report DIR`` of a sweep folder: results.csv, the fit and report.md again, from
    the run folders, grid.json and the fit settings plan.json recorded; returns the report's
    path."""
    grid = load_grid(out_dir / "grid.json")
    check_run_files(out_dir / "runs")
    with writer_lock(out_dir):
        remove_stale_temporaries(out_dir, out_dir / "figures")  # what a killed report left
        return write_sweep_outputs(out_dir, grid, plan_sweep(grid),
                                   **recorded_fit_settings(out_dir))
