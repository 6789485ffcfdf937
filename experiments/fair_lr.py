"""Is the demo's dense-vs-MoE ordering an artefact of a recipe tuned on the MoE?

    .venv/bin/python experiments/fair_lr.py [--preset demo] [--lrs 0.005,0.01,0.02,0.04]
        [--select-seeds 0,1,2] [--report-seeds 1000-1007] [--jobs 2] [--out fair_lr_out]

The preset's learning rate was chosen on the MoE's loss and is shared by every arm. Here each
arm gets its own: phase 1 trains every arm (the MoE and its dense baselines matched on active
and on total parameters) at each lr of the grid on the selection seeds and picks, per arm, the
lr with the lowest mean best validation loss (moelab's own selection, as ``moelab study
--tune-lr`` runs it: moelab.runs.lr_grid). Phase 2 trains every arm on fresh reporting
seeds, disjoint from the selection seeds, at its own best lr and at the preset's shared lr, and
pairs each dense arm with the MoE seed by seed (dense - MoE: positive means the MoE is better).
The verdicts use Holm's adjustment over the tests it makes.

Every run is an ordinary run folder under --out (select/lr<X>/..., report/lr<X>/...), trained
the way ``moelab study`` trains them; the numbers go to experiments/results/fair_lr.json, with
the command, the seeds and each run's folder.
"""

from __future__ import annotations

import argparse
import platform
import sys
import time
from pathlib import Path

import numpy as np

from moelab.fileio import atomic_write_json, portable_command
from moelab.runs import execute_plan, is_complete
from moelab.runs.data import prepare_shared_data
from moelab.runs.launchers.local import LocalLauncher
from moelab.runs.lr_grid import (
    SELECTION_FOLDER, lr_folder, parse_lr_grid, read_choices, run_selection,
)
from moelab.study.commands import plan, plan_arms
from moelab.study.results import json_safe
from moelab.study.settings import load_study
from moelab.stats.multiple import holm
from moelab.stats.power import min_detectable_gap
from moelab.study.gaps import paired_test
from moelab.study.tuning import LrTuning, selection_specs, tuning_record
from moelab.train.run_folder import RunFolder

ROOT = Path(__file__).resolve().parents[1]
RESULTS = Path(__file__).parent / "results" / "fair_lr.json"
MOE = "moe"


def parse_seeds(text: str) -> list[int]:
    """``0,1,2`` or ``1000-1007``."""
    if "-" in text:
        first, last = (int(part) for part in text.split("-"))
        return list(range(first, last + 1))
    return [int(part) for part in text.split(",")]


def train_arms(preset: str, lr: float, seeds: list[int], arms_wanted: set[str] | None,
               out: Path, folder: str, jobs: int) -> dict[str, dict[int, dict]]:
    """Train the preset's study arms at ``lr`` on ``seeds`` (only ``arms_wanted`` when given) in
    ``out / folder``; return {arm: {seed: {best_val_loss, run_dir (under out)}}}."""
    folder = out / folder
    seed_list = "[" + ",".join(str(seed) for seed in seeds) + "]"  # a list, even of one seed
    config, settings = load_study(preset, [f"train.lr={lr}", f"study.seeds={seed_list}"])
    _, specs = plan("study", config, settings)
    specs = [spec for spec in specs if arms_wanted is None or spec.labels["arm"] in arms_wanted]
    if any(not is_complete(folder / spec.run_dir) for spec in specs):
        prepare_shared_data(config, print)
    folder.mkdir(parents=True, exist_ok=True)
    outcomes = execute_plan(folder, specs, LocalLauncher(jobs=jobs), print)
    failed = [o.spec.name for o in outcomes if o.status == "failed"]
    if failed:
        sys.exit(f"fair_lr: runs failed in {folder}: {', '.join(failed)}")
    losses: dict[str, dict[int, dict]] = {}
    for spec in specs:
        summary = RunFolder(folder / spec.run_dir).summary()
        losses.setdefault(spec.labels["arm"], {})[spec.labels["seed"]] = {
            "best_val_loss": summary.best_val_loss,
            "run_dir": (folder / spec.run_dir).relative_to(out).as_posix(),
        }
    return losses


def select_lrs(preset: str, lrs: list[float], seeds: list[int], out: Path, jobs: int):
    """Phase 1 through moelab's own lr selection (``moelab study --tune-lr``'s): every arm at
    each lr on the selection seeds in ``out/select/lr<X>``; returns the per-arm choices and
    {lr: {arm: {seed: {best_val_loss, run_dir (under out)}}}}."""
    config, settings = load_study(preset, [])
    tuning = LrTuning(lrs, seeds)
    specs_by_lr = selection_specs(lambda base: plan_arms("study", base, settings), seeds, tuning,
                                  config, settings.budgets)
    if any(not is_complete(out / SELECTION_FOLDER / lr_folder(lr) / spec.run_dir)
           for lr, specs in specs_by_lr.items() for spec in specs):
        prepare_shared_data(config, print)
    run_selection(out, specs_by_lr, LocalLauncher(jobs=jobs), print)
    record = tuning_record(tuning, seeds, specs_by_lr)
    missing = [run["run_dir"] for run in record["runs"] if not is_complete(out / run["run_dir"])]
    if missing:
        sys.exit(f"fair_lr: selection runs failed: {', '.join(missing)}")
    choices = read_choices(out, record)
    runs: dict[str, dict[str, dict[int, dict]]] = {}
    for run in record["runs"]:
        runs.setdefault(f"{run['lr']:g}", {}).setdefault(run["unit"], {})[run["seed"]] = {
            "best_val_loss": choices[run["unit"]].losses[run["lr"]][run["seed"]],
            "run_dir": run["run_dir"]}
    return choices, runs


def mean_loss(by_seed: dict[int, dict]) -> float:
    return float(np.mean([run["best_val_loss"] for run in by_seed.values()]))


def gaps(report: dict[str, dict[int, dict]], label: str) -> list[dict]:
    """Each dense arm against the MoE, paired by seed."""
    moe = {seed: run["best_val_loss"] for seed, run in report[MOE].items()}
    rows = []
    for arm in sorted(a for a in report if a != MOE):
        dense = {seed: run["best_val_loss"] for seed, run in report[arm].items()}
        test = paired_test(moe, dense)
        rows.append({
            "comparison": f"{arm} - {MOE}", "lrs": label, "gap": test.gap,
            "ci_low": test.ci_low, "ci_high": test.ci_high, "p_value": test.p_value,
            "n": test.n_pairs,
            "min_detectable_gap": min_detectable_gap(test.standard_error, test.n_pairs - 1),
        })
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="demo")
    parser.add_argument("--lrs", default="0.005,0.01,0.02,0.04")
    parser.add_argument("--select-seeds", default="0,1,2")
    parser.add_argument("--report-seeds", default="1000-1007")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--out", type=Path, default=Path("fair_lr_out"))
    args = parser.parse_args()
    lrs = parse_lr_grid(args.lrs, "--lrs")
    select_seeds, report_seeds = parse_seeds(args.select_seeds), parse_seeds(args.report_seeds)
    if set(select_seeds) & set(report_seeds):
        sys.exit("fair_lr: the selection and reporting seeds must be disjoint")
    shared_config, _ = load_study(args.preset, [])
    shared_lr = shared_config.train.lr
    started = time.time()

    choices, selection_runs = select_lrs(args.preset, lrs, select_seeds, args.out, args.jobs)
    arms = sorted(choices)
    means = {arm: {lr: choices[arm].means[lr] for lr in lrs} for arm in arms}
    best_lr = {arm: choices[arm].lr for arm in arms}
    print("best lr per arm (selection seeds):", best_lr)

    # Reporting seeds: each arm at its own best lr and at the shared lr (each (arm, lr) once).
    needed: dict[float, set[str]] = {}
    for arm in arms:
        needed.setdefault(best_lr[arm], set()).add(arm)
        needed.setdefault(shared_lr, set()).add(arm)
    trained = {lr: train_arms(args.preset, lr, report_seeds, wanted, args.out,
                              f"report/lr{lr:g}", args.jobs)
               for lr, wanted in sorted(needed.items())}
    own = {arm: trained[best_lr[arm]][arm] for arm in arms}
    shared = {arm: trained[shared_lr][arm] for arm in arms}
    rows = gaps(own, "own best lr")
    if any(lr != shared_lr for lr in best_lr.values()):  # else the shared-lr pairs are the same runs
        rows += gaps(shared, f"shared lr {shared_lr:g}")
    for row, adjusted in zip(rows, holm([row["p_value"] for row in rows])):
        row["p_holm"] = adjusted
        row["verdict"] = ("MoE better" if row["gap"] > 0 else "dense better") \
            if adjusted < 0.05 else "not significant"
    for row in rows:
        print(f"{row['comparison']:26s} {row['lrs']:16s} {row['gap']:+.4f} "
              f"[{row['ci_low']:+.4f}, {row['ci_high']:+.4f}] p {row['p_value']:.3g} "
              f"(Holm {row['p_holm']:.3g}, {len(rows)} tests) mdg {row['min_detectable_gap']:.4f}"
              f"  {row['verdict']}")

    entry = {
        "command": "experiments/fair_lr.py " + portable_command(sys.argv[1:], ROOT),
        "run_dirs_under": "the --out folder",
        "preset": args.preset, "lrs": lrs, "shared_lr": shared_lr,
        "select_seeds": select_seeds, "report_seeds": report_seeds,
        "selection_mean_best_val_loss": {arm: {f"{lr:g}": v for lr, v in m.items()}
                                         for arm, m in means.items()},
        "selection_runs": selection_runs,
        "best_lr": best_lr,
        "report_runs": {"own": own, "shared": shared},
        "gaps": rows, "multiple_testing": f"Holm over {len(rows)} tests",
        "wall_time_s": time.time() - started, "jobs": args.jobs,
        "machine": {"processor": platform.processor(), "python": platform.python_version()},
    }
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_json(RESULTS, json_safe(entry))
    print(f"wrote {RESULTS}")


if __name__ == "__main__":
    from moelab.cli import run_command

    raise SystemExit(run_command(main, "fair_lr"))
