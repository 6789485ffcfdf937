"""Does the sign of the matched-total gap follow the recipe? The demo study as a 2 x 2 factorial.

    .venv/bin/python experiments/recipe_factorial.py --plot    # the figure, from the results file
    .venv/bin/python experiments/recipe_factorial.py [--phase select|report|all] [--cells A,B]
        [--lrs 0.0025,0.005,0.01,0.02] [--select-seeds 3000,3001] [--report-seeds 3100-3105]
        [--jobs 2] [--out factorial_out]

Paper A trains with the output head tied to the embedding and a 2 % warmup; the demo preset
unties the head and warms up for half the run, both chosen on the MoE's loss. The cells cross
the two: head tied or untied x warmup 0.02 (paper A's) or 0.5 (the demo's); everything else is
the demo preset (shape, data, batch 8, 409,600 tokens, cosine schedule). A fifth cell,
``tied_warmup0.1``, is the smallest change to paper A's recipe that keeps the head tied: a
warmup of 10 % instead of 2 % (outside the 2 x 2 contrasts; ``--cells`` trains it alone, and a
later run of some cells keeps the others' results).

Phase ``select`` trains every arm of every cell (the MoE and its dense baselines matched on
active and on total parameters) at each lr of the grid on the selection seeds, and picks per
cell and arm the lr with the lowest mean best validation loss. Phase ``report`` trains every
arm on fresh reporting seeds, disjoint from the selection seeds, at its own lr, and adds the
equal-compute arm (``moe_compute``: the MoE at dense_total's training FLOPs, so more tokens,
at the MoE's lr). Each dense arm is paired seed by seed with its MoE (dense - MoE: positive
means the MoE is better); the interaction asks whether the matched-total gap depends on the
recipe, by per-seed contrasts across cells (a seed fixes the data order in every cell).
Holm's adjustment runs over every test the phase reports.

Every run is an ordinary run folder under --out (<cell>/select/lr<X>/..., <cell>/report/
lr<X>/...), trained the way ``moelab study`` trains them, logging every step so that loss
spikes can be read back. The numbers go to experiments/results/recipe_factorial.json, with the
command, the seeds and each run's folder (relative to --out).
"""

from __future__ import annotations

import argparse
import itertools
import json
import platform
import sys
import time
from pathlib import Path

import numpy as np
from scipy import stats

from moelab.fileio import atomic_write_json, portable_command
from moelab.runs import execute_plan, is_complete
from moelab.runs.data import prepare_shared_data
from moelab.runs.launchers.local import LocalLauncher
from moelab.study.commands import plan
from moelab.study.results import json_safe
from moelab.study.settings import load_study
from moelab.stats.multiple import holm
from moelab.stats.power import min_detectable_gap
from moelab.study.gaps import paired_test
from moelab.train.run_folder import RunFolder

from recipe import read_run, unigram_entropy

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "experiments" / "results" / "recipe_factorial.json"
PRESET = "demo"
COMMON = ["train.log_interval=1"]
CELLS = {
    "tied_warmup0.02": ["model.tie_embeddings=true", "train.warmup_fraction=0.02"],
    "tied_warmup0.5": ["model.tie_embeddings=true", "train.warmup_fraction=0.5"],
    "untied_warmup0.02": ["model.tie_embeddings=false", "train.warmup_fraction=0.02"],
    "untied_warmup0.5": ["model.tie_embeddings=false", "train.warmup_fraction=0.5"],
    "tied_warmup0.1": ["model.tie_embeddings=true", "train.warmup_fraction=0.1"],
}
FACTORIAL = ("tied_warmup0.02", "tied_warmup0.5", "untied_warmup0.02", "untied_warmup0.5")
"""The 2 x 2 cells the contrasts read."""
SELECTED_ARMS = ("moe", "dense_active", "dense_total")
COMPARISONS = {"active": ("moe", "dense_active"), "total": ("moe", "dense_total"),
               "compute": ("moe_compute", "dense_total")}


def parse_seeds(text: str) -> list[int]:
    """``3000,3001`` or ``3100-3105``."""
    if "-" in text:
        first, last = (int(part) for part in text.split("-"))
        return list(range(first, last + 1))
    return [int(part) for part in text.split(",")]


def train_cell(cell: str, lr: float, seeds: list[int], arms_wanted: set[str], criteria: list[str],
               out: Path, folder: str, jobs: int, unigram: float) -> dict[str, dict[int, dict]]:
    """Train the cell's study arms at ``lr`` on ``seeds`` (only ``arms_wanted``) in
    ``out / cell / folder``; return {arm: {seed: run measurements, with run_dir under out}}."""
    where = out / cell / folder
    seed_list = "[" + ",".join(str(seed) for seed in seeds) + "]"
    overrides = [*COMMON, *CELLS[cell], f"train.lr={lr}", f"study.seeds={seed_list}",
                 f"study.criteria=[{','.join(criteria)}]"]
    config, settings = load_study(PRESET, overrides)
    _, specs = plan("study", config, settings)
    specs = [spec for spec in specs if spec.labels["arm"] in arms_wanted]
    if any(not is_complete(where / spec.run_dir) for spec in specs):
        prepare_shared_data(config, print)
    where.mkdir(parents=True, exist_ok=True)
    outcomes = execute_plan(where, specs, LocalLauncher(jobs=jobs), print)
    failed = [o.spec.name for o in outcomes if o.status == "failed"]
    if failed:
        sys.exit(f"recipe_factorial: runs failed in {where}: {', '.join(failed)}")
    runs: dict[str, dict[int, dict]] = {}
    for spec in specs:
        run_dir = where / spec.run_dir
        measured = read_run(run_dir, unigram, spec.config)
        summary = RunFolder(run_dir).summary()
        measured.update(run_dir=run_dir.relative_to(out).as_posix(), tokens=summary.tokens,
                        steps=summary.steps, total_params=summary.total_params,
                        flops_per_token_6n=summary.flops_per_token_6n)
        runs.setdefault(spec.labels["arm"], {})[spec.labels["seed"]] = measured
    return runs


def mean_loss(by_seed: dict[int, dict]) -> float:
    return float(np.mean([run["best_val_loss"] for run in by_seed.values()]))


def select(cells: list[str], lrs: list[float], seeds: list[int], out: Path, jobs: int,
           unigram: float) -> dict:
    """Every cell x lr x selection seed; per cell and arm the lr of the lowest mean loss."""
    table: dict[str, dict] = {}
    for cell in cells:
        runs = {f"{lr:g}": train_cell(cell, lr, seeds, set(SELECTED_ARMS), ["active", "total"],
                                      out, f"select/lr{lr:g}", jobs, unigram) for lr in lrs}
        means = {arm: {lr: mean_loss(by_lr[arm]) for lr, by_lr in runs.items()}
                 for arm in SELECTED_ARMS}
        best = {arm: float(min(m, key=m.get)) for arm, m in means.items()}
        table[cell] = {
            "mean_best_val_loss": means, "best_lr": best,
            "at_grid_edge": {arm: lr in (min(lrs), max(lrs)) for arm, lr in best.items()},
            "runs": runs,
        }
        print(f"{cell}: best lr {best}", flush=True)
    return table


def report(selection: dict, cell_names: list[str], seeds: list[int], out: Path, jobs: int,
           unigram: float) -> dict:
    """Every arm of the cells on the reporting seeds at its own lr; moe_compute at the MoE's."""
    cells = {}
    for cell in cell_names:
        best = {arm: float(lr) for arm, lr in selection[cell]["best_lr"].items()}
        wanted: dict[float, set[str]] = {}
        for arm in SELECTED_ARMS:
            wanted.setdefault(best[arm], set()).add(arm)
        wanted.setdefault(best["moe"], set()).add("moe_compute")
        runs: dict[str, dict[int, dict]] = {}
        for lr, arms in sorted(wanted.items()):
            runs.update(train_cell(cell, lr, seeds, arms, ["active", "total", "compute"], out,
                                   f"report/lr{lr:g}", jobs, unigram))
        cells[cell] = {"lr": {**best, "moe_compute": best["moe"]}, "runs": runs,
                       "arms": {arm: arm_summary(by_seed) for arm, by_seed in runs.items()}}
    return cells


def arm_summary(by_seed: dict[int, dict]) -> dict:
    """Seed mean and std of the best loss, and the instability read from every step."""
    losses = [run["best_val_loss"] for run in by_seed.values()]
    jumps = [run["max_loss_jump"] for run in by_seed.values() if run["max_loss_jump"] is not None]
    first = next(iter(by_seed.values()))
    return {
        "mean": float(np.mean(losses)), "std": float(np.std(losses, ddof=1)),
        "n": len(losses), "tokens": first["tokens"], "steps": first["steps"],
        "total_params": first["total_params"], "active_params": first["active_params"],
        "training_flops_6n": first["flops_per_token_6n"] * first["tokens"],
        "max_loss_jump": max(jumps) if jumps else None,
        "max_grad_norm": max(run["max_grad_norm"] for run in by_seed.values()),
        "plateau_exit_step": [run["plateau_exit_step"] for run in by_seed.values()],
    }


def losses(cell: dict, arm: str) -> dict[int, float]:
    """{seed: best val loss}; seeds are strings once the results file has been read back."""
    return {int(seed): run["best_val_loss"] for seed, run in cell["runs"][arm].items()}


def gap_test(cell: dict, criterion: str) -> dict:
    moe_arm, dense_arm = COMPARISONS[criterion]
    test = paired_test(losses(cell, moe_arm), losses(cell, dense_arm))
    return {"criterion": criterion, "moe_arm": moe_arm, "dense_arm": dense_arm,
            "gap": test.gap, "ci_low": test.ci_low, "ci_high": test.ci_high,
            "p_value": test.p_value, "n": test.n_pairs, "std_diff": test.std_diff,
            "min_detectable_gap": min_detectable_gap(test.standard_error, test.n_pairs - 1)}


def per_seed_gap(cell: dict, criterion: str) -> dict[int, float]:
    moe_arm, dense_arm = COMPARISONS[criterion]
    moe, dense = losses(cell, moe_arm), losses(cell, dense_arm)
    return {seed: dense[seed] - moe[seed] for seed in moe if seed in dense}


def contrast_test(cells: dict, criterion: str, weights: dict[str, float], name: str) -> dict:
    """A weighted sum of the cells' per-seed gaps, tested with a one-sample t over seeds: each
    seed's data order is the same in every cell, so the cells' runs of a seed form one unit."""
    gaps = {cell: per_seed_gap(cells[cell], criterion) for cell in weights}
    seeds = sorted(set.intersection(*(set(g) for g in gaps.values())))
    values = np.array([sum(w * gaps[cell][seed] for cell, w in weights.items()) for seed in seeds])
    mean, se = float(values.mean()), float(values.std(ddof=1) / np.sqrt(len(values)))
    t_crit = stats.t.ppf(0.975, len(values) - 1)
    return {"contrast": name, "criterion": criterion, "weights": weights, "estimate": mean,
            "ci_low": mean - t_crit * se, "ci_high": mean + t_crit * se,
            "p_value": float(2 * stats.t.sf(abs(mean / se), len(values) - 1)), "n": len(values)}


def contrasts(cells: dict, criterion: str) -> list[dict]:
    """Main effects of tying and of the short warmup on the gap, and their interaction."""
    tie = {"tied_warmup0.02": 0.5, "tied_warmup0.5": 0.5,
           "untied_warmup0.02": -0.5, "untied_warmup0.5": -0.5}
    warm = {"tied_warmup0.02": 0.5, "untied_warmup0.02": 0.5,
            "tied_warmup0.5": -0.5, "untied_warmup0.5": -0.5}
    both = {cell: 2 * tie[cell] * 2 * warm[cell] for cell in FACTORIAL}
    return [contrast_test(cells, criterion, tie, "tied - untied"),
            contrast_test(cells, criterion, warm, "warmup 0.02 - 0.5"),
            contrast_test(cells, criterion, both, "interaction (tie x warmup)")]


def analyse(cells: dict) -> tuple[list[dict], list[dict]]:
    """Every cell's gaps and the matched-total contrasts. Holm runs over the family fixed before
    the runs, the 2 x 2 cells' gaps and the contrasts; a cell added later (tied_warmup0.1) is
    its own family, so that adding it moves none of the pre-set tests."""
    def gap_rows(names) -> list[dict]:
        return [{"cell": cell, **gap_test(cells[cell], criterion)}
                for cell, criterion in itertools.product(names, COMPARISONS) if cell in cells]

    preset = gap_rows(FACTORIAL) + contrasts(cells, "total")
    added = gap_rows([cell for cell in CELLS if cell not in FACTORIAL])
    for family, name in ((preset, "the 2 x 2 (pre-set)"), (added, "the added cell")):
        for row, adjusted in zip(family, holm([row["p_value"] for row in family])):
            row.update(p_holm=adjusted, holm_family=name)
    gaps = [row for row in preset if "cell" in row] + added
    return gaps, [row for row in preset if "contrast" in row]


FIGURE = Path(__file__).parents[1] / "docs" / "figures" / "recipe_factorial.png"


def plot(entry: dict) -> None:
    """Per cell, each criterion's paired gap with its 95 % interval (dense - MoE)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cells = [cell for cell in CELLS if cell in entry["report"]]
    fig, ax = plt.subplots(figsize=(7.5, 3.6))
    for offset, criterion in zip((-0.2, 0.0, 0.2), COMPARISONS):
        rows = {row["cell"]: row for row in entry["gaps"] if row["criterion"] == criterion}
        xs = [i + offset for i, cell in enumerate(cells)]
        gaps = [rows[cell]["gap"] for cell in cells]
        errors = [[rows[c]["gap"] - rows[c]["ci_low"] for c in cells],
                  [rows[c]["ci_high"] - rows[c]["gap"] for c in cells]]
        label = {"active": "matched active", "total": "matched total",
                 "compute": "matched total, equal FLOPs"}[criterion]
        ax.errorbar(xs, gaps, yerr=errors, fmt="o", capsize=3, label=label)
    ax.axhline(0.0, color="grey", linewidth=0.8)
    ax.set_xticks(range(len(cells)), [cell.replace("_", "\n") for cell in cells])
    ax.set_ylabel("dense − MoE best val loss (nats)\n> 0: MoE better")
    ax.set_title(f"The demo study by recipe, seeds {entry['report_seeds'][0]}-"
                 f"{entry['report_seeds'][-1]} (95 % paired intervals)", fontsize=10)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(FIGURE, dpi=120)
    print(f"wrote {FIGURE}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--plot", action="store_true", help="only draw the figure")
    parser.add_argument("--phase", choices=("select", "report", "all"), default="all")
    parser.add_argument("--cells", default=",".join(CELLS))
    parser.add_argument("--lrs", default="0.0025,0.005,0.01,0.02")
    parser.add_argument("--select-seeds", default="3000,3001")
    parser.add_argument("--report-seeds", default="3100-3105")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--out", type=Path, default=Path("factorial_out"))
    args = parser.parse_args()
    if args.plot:
        plot(json.loads(RESULTS.read_text("utf-8")))
        return
    cells = args.cells.split(",")
    unknown = [cell for cell in cells if cell not in CELLS]
    if unknown:
        sys.exit(f"recipe_factorial: cell {unknown[0]!r} is unknown: allowed {', '.join(CELLS)}")
    lrs = [float(lr) for lr in args.lrs.split(",")]
    select_seeds, report_seeds = parse_seeds(args.select_seeds), parse_seeds(args.report_seeds)
    if set(select_seeds) & set(report_seeds):
        sys.exit("recipe_factorial: the selection and reporting seeds must be disjoint")
    config, _ = load_study(PRESET, COMMON)
    unigram = unigram_entropy(config)
    started = time.time()
    command = "experiments/recipe_factorial.py " + portable_command(sys.argv[1:], ROOT)
    # A later run of some cells keeps the other cells' selection and results.
    entry = json.loads(RESULTS.read_text("utf-8")) if RESULTS.is_file() else {}
    entry.update({
        "run_dirs_under": "the --out folder", "preset": PRESET, "common": COMMON,
        "cells": CELLS, "factorial": list(FACTORIAL), "lrs": lrs, "select_seeds": select_seeds,
        "report_seeds": report_seeds, "unigram_entropy": unigram, "jobs": args.jobs,
        "machine": {"processor": platform.processor(), "python": platform.python_version()},
    })
    entry.setdefault("commands", []).append(command)
    if args.phase in ("select", "all"):
        selection = entry.setdefault("selection", {})
        selection.update(select(cells, lrs, select_seeds, args.out, args.jobs, unigram))
        entry.setdefault("wall_time_s", {})[f"select {','.join(cells)}"] = time.time() - started
        atomic_write_json(RESULTS, json_safe(entry))
    if args.phase in ("report", "all"):
        reported = entry.setdefault("report", {})
        reported.update(report(entry["selection"], cells, report_seeds, args.out, args.jobs,
                               unigram))
        gaps, tests = analyse(reported)
        entry.update(gaps=gaps, contrasts_total=tests,
                     multiple_testing="Holm over the 2 x 2's 12 gaps and 3 contrasts; the added "
                                      "cell's 3 gaps a family of their own")
        entry.setdefault("wall_time_s", {})[f"report {','.join(cells)}"] = time.time() - started
        atomic_write_json(RESULTS, json_safe(entry))
        for row in gaps + tests:
            name = row.get("cell", row.get("contrast"))
            value = row.get("gap", row.get("estimate"))
            print(f"{name:28s} {row['criterion']:8s} {value:+.4f} [{row['ci_low']:+.4f}, "
                  f"{row['ci_high']:+.4f}] p {row['p_value']:.3g} (Holm {row['p_holm']:.3g})")
    print(f"wrote {RESULTS}")


if __name__ == "__main__":
    from moelab.cli import run_command

    raise SystemExit(run_command(main, "recipe_factorial"))
