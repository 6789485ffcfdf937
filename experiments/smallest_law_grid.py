"""The smallest sub-grid of a finished sweep on which a law form passes the report's checks.

    .venv/bin/python experiments/smallest_law_grid.py experiments/results/sweeps/cpu-eager \
        --max-cpu-s 1600 [--bootstrap 32] [--starts 512]
    .venv/bin/python experiments/smallest_law_grid.py experiments/results/sweeps/cpu-eager \
        --sizes s0,s1,s2 --max-cpu-s 3100 --bootstrap 200 --starts 0 \
        --out experiments/results/smallest_law_grid-quick-law.json     # as the report checks

Every sub-grid of the sweep (2 to 4 of its sizes; its sparsities, or S = 0, 0.75, 0.875; its
three budgets, or the smallest and largest; each seed alone, and both) whose runs cost at most
``--max-cpu-s`` CPU-seconds gets the sweep report's form selection
(``moelab.scaling.forms.select_form``: identified and predictive on the grid's held-out points)
on the runs the sweep already trained: no run is trained. A run's cost is its steps at the
speed results.csv records (tokens_per_s, measured in the sweep with two runs side by side); a
wsd budget family pays its largest budget's run and, per smaller budget, that budget's
``train.decay_fraction`` share of its steps (the branch's decay). The sub-grids, their costs and
the form each chose go to experiments/results/smallest_law_grid.json (atomically rewritten
after each sub-grid, the dearest checked first), the cheapest first. A sub-grid chosen here on
these runs is chosen on them: a new sweep of it (other data, another CPU's rounding) is a new
draw, which its own report checks again.
"""

from __future__ import annotations

import argparse
import itertools
import platform
import time
from pathlib import Path

from moelab.config import load_config, spelt_as_today
from moelab.fileio import atomic_write_json
from moelab.scaling.forms import select_form
from moelab.scaling.table import fit_table_from_rows
from moelab.sweep.folder import SWEEP_FIT_COLUMNS, read_grid_record, read_results

RESULTS = Path(__file__).parent / "results" / "smallest_law_grid.json"


def family_cost(rows: list[dict[str, str]], decay_fraction: float) -> float:
    """CPU-seconds of one wsd budget family's runs: the largest budget whole, the decay of each
    smaller one."""
    by_tokens = sorted(rows, key=lambda row: int(row["D"]))
    seconds = [int(row["D"]) / float(row["tokens_per_s"]) for row in by_tokens]
    return seconds[-1] + decay_fraction * sum(seconds[:-1])


def grid_cost(rows: list[dict[str, str]], decay_fraction: float) -> float:
    families: dict[tuple[str, str, str], list[dict[str, str]]] = {}
    for row in rows:
        families.setdefault((row["size"], row["S"], row["seed"]), []).append(row)
    return sum(family_cost(family, decay_fraction) for family in families.values())


def sub_grids(rows: list[dict[str, str]]) -> list[dict[str, list[str]]]:
    sizes = sorted({row["size"] for row in rows})
    sparsities = sorted({row["S"] for row in rows}, key=float)
    budgets = sorted({row["budget"] for row in rows}, key=lambda b: int(b.lstrip("D")))
    seeds = sorted({row["seed"] for row in rows}, key=int)
    sparsity_sets = [sparsities, [s for s in sparsities if float(s) in (0.0, 0.75, 0.875)]]
    budget_sets = [budgets, [budgets[0], budgets[-1]]]
    seed_sets = [[seed] for seed in seeds] + [seeds]
    return [{"sizes": list(chosen), "S": s, "budgets": b, "seeds": seed}
            for count in range(2, len(sizes) + 1)
            for chosen in itertools.combinations(sizes, count)
            for s in sparsity_sets for b in budget_sets for seed in seed_sets]


def select(rows: list[dict[str, str]], grid: dict[str, list[str]]) -> list[dict[str, str]]:
    return [row for row in rows if row["size"] in grid["sizes"] and row["S"] in grid["S"]
            and row["budget"] in grid["budgets"] and row["seed"] in grid["seeds"]]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("folder", type=Path, help="a finished token-budget sweep folder")
    parser.add_argument("--max-cpu-s", type=float, default=1500.0)
    parser.add_argument("--bootstrap", type=int, default=32)
    parser.add_argument("--starts", type=int, default=512,
                        help="fit starts (0: the sweep report's default start grids)")
    parser.add_argument("--sizes", default=None,
                        help="only the sub-grids of exactly these sizes (comma-separated), with "
                             "every sparsity and budget: a check of one grid")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    record = read_grid_record(args.folder)
    overrides = [spelt_as_today(o) for o in record["overrides"] if not o.startswith("data.")]
    decay_fraction = load_config(record["base"], overrides).train.decay_fraction
    results = read_results(args.folder)
    assert results is not None, f"{args.folder} has no results.csv"
    rows = [dict(cells) for cells in results.cells]
    grids = [(grid_cost(select(rows, grid), decay_fraction), grid) for grid in sub_grids(rows)
             if args.sizes is None or (grid["sizes"] == args.sizes.split(",")
                                       and len(grid["S"]) == len({r["S"] for r in rows})
                                       and len(grid["budgets"]) == len({r["budget"] for r in rows}))]
    # The dearest first: the grids nearest the cap are the likeliest to pass, and the record is
    # rewritten after each, so a stopped search keeps what it checked.
    grids = sorted((entry for entry in grids if entry[0] <= args.max_cpu_s),
                   key=lambda entry: -entry[0])
    checked = []
    for cost, grid in grids:
        chosen_rows = select(rows, grid)
        columns = fit_table_from_rows(Path("sub-grid"), list(chosen_rows[0]), chosen_rows, True,
                                      SWEEP_FIT_COLUMNS)
        selection = select_form(columns, record["holdout"], bootstrap_replicates=args.bootstrap,
                                max_starts=args.starts or None, log=lambda _: None)
        checked.append({**grid, "runs": len(chosen_rows), "cpu_s": round(cost, 1),
                        "chosen": selection.chosen,
                        "forms": [{"law": f.law, "holdout_mae": f.holdout_mae,
                                   "identified": f.identified, "problems": f.problems,
                                   "skipped": f.skipped} for f in selection.forms]})
        print(f"{cost:7.0f} CPU-s {len(chosen_rows):3d} runs {grid}: {selection.chosen}",
              flush=True)
        atomic_write_json(args.out, {
            "folder": args.folder.name, "grid": record["name"], "holdout": record["holdout"],
            "decay_fraction": decay_fraction, "max_cpu_s": args.max_cpu_s,
            "bootstrap": args.bootstrap, "starts": args.starts,
            "checked": f"{len(checked)} of the {len(grids)} sub-grids within the cap",
            "sub_grids": sorted(checked, key=lambda entry: entry["cpu_s"]),
            "machine": {"platform": platform.platform(),
                        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}})

if __name__ == "__main__":
    main()
