"""Would fewer or more seeds per point identify a sparsity law? The form checks per seed of a sweep.

    OMP_NUM_THREADS=1 moelab sweep-sparsity cpu --jobs 2 --out sweep_cpu     # seeds 0 and 1
    .venv/bin/python experiments/sweep_seeds.py sweep_cpu [--bootstrap 200]

The folders (one sweep of several seeds, or one folder per seed of the same grid) give each
run's seed (results.csv's seed column, or the run folder's name in older files). The form
selection of the sweep report (``moelab.scaling.forms.select_form``: identified and predictive
on the grid's held-out points) runs on each seed alone, on every seed's points together (what
the sweep report fits), and on the per-point mean over seeds (half the seed variance with two
seeds). The per-point spread between seeds is recorded as well: it is the noise a fit to one
seed cannot get under. Results go to experiments/results/sweep_seeds.json (atomically written).
"""

from __future__ import annotations

import argparse
import platform
import time
from pathlib import Path

import numpy as np

from moelab.fileio import atomic_write_json
from moelab.scaling.forms import select_form
from moelab.codec import to_json
from moelab.sweep.folder import SWEEP_FIT_COLUMNS, read_grid_record, read_results
from moelab.sweep.analyses.runs import seed_spread
from moelab.scaling.table import fit_table_from_rows

RESULTS = Path(__file__).parent / "results" / "sweep_seeds.json"
POINT = ("size", "budget", "S")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("folders", nargs="+", type=Path, help="sweep folders of one grid")
    parser.add_argument("--bootstrap", type=int, default=200)
    parser.add_argument("--starts", type=int, default=None)
    args = parser.parse_args()
    grids = [read_grid_record(folder) for folder in args.folders]
    if any({**g, "seeds": []} != {**grids[0], "seeds": []} for g in grids):
        parser.error("the folders are not one grid with different seeds")
    holdout = grids[0]["holdout"]
    by_seed: dict[str, list[dict[str, str]]] = {}
    every_run = []
    for folder in args.folders:
        results = read_results(folder)
        every_run += results.rows
        for row, cells in zip(results.rows, results.cells):
            by_seed.setdefault(row.seed, []).append(cells)
    per_seed = [by_seed[seed] for seed in sorted(by_seed, key=int)]
    tables = {f"seed {seed}": by_seed[seed] for seed in sorted(by_seed, key=int)}
    tables["every seed's points"] = [row for rows in per_seed for row in rows]
    tables["mean over seeds"] = mean_rows(per_seed)
    checks = {}
    for name, rows in tables.items():
        columns = fit_table_from_rows(Path(name), list(rows[0]), rows, True, SWEEP_FIT_COLUMNS)
        selection = select_form(columns, holdout, bootstrap_replicates=args.bootstrap,
                                max_starts=args.starts, log=lambda _: None)
        checks[name] = {"n_points": len(rows), "chosen": selection.chosen,
                        "forms": [{key: getattr(form, key) for key in
                                   ("law", "num_params", "holdout_mae", "identified", "problems")}
                                  for form in selection.forms]}
        print_check(name, checks[name])
    entry = {"folders": [f.name for f in args.folders], "seeds": sorted(map(int, by_seed)),
             "grid": grids[0]["name"], "holdout": holdout, "bootstrap": args.bootstrap,
             "seed_spread": to_json(seed_spread(every_run)), "checks": checks,
             "machine": {"platform": platform.platform(),
                         "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}}
    print(f"per-point spread between seeds: {entry['seed_spread']}")
    atomic_write_json(RESULTS, entry)


def shared_points(per_seed: list[list[dict[str, str]]]) -> list[tuple[dict, list[float]]]:
    """Per point every seed has: its first seed's row and the losses of every seed."""
    maps = [{tuple(row[key] for key in POINT): row for row in rows} for rows in per_seed]
    return [(maps[0][point], [float(m[point]["best_val_loss"]) for m in maps])
            for point in maps[0] if all(point in m for m in maps)]


def mean_rows(per_seed: list[list[dict[str, str]]]) -> list[dict[str, str]]:
    """One row per point every seed has, its loss the mean over seeds (D, N as in the first)."""
    return [{**row, "best_val_loss": str(np.mean(losses))}
            for row, losses in shared_points(per_seed)]


def print_check(name: str, check: dict) -> None:
    print(f"{name} ({check['n_points']} points): chosen {check['chosen']}")
    for form in check["forms"]:
        if form["holdout_mae"] is None:
            continue
        print(f"  {form['law']}: held-out MAE {form['holdout_mae']:.4f}, "
              f"{'identified' if form['identified'] else '; '.join(form['problems'])}")


if __name__ == "__main__":
    from moelab.cli import run_command

    raise SystemExit(run_command(main, "sweep_seeds"))
