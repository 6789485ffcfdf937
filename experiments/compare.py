"""Training-setting comparisons on the demo's MoE arm, paired over seeds.

    OMP_NUM_THREADS=1 .venv/bin/python experiments/compare.py GRID [--seeds 6] [--jobs 2]
                                                              [--out compare_out]

Every setting of a grid trains the `demo` preset's MoE (4 experts, top-2, 409,600 tokens) on the
same seeds. Per setting it records each seed's best validation loss and the final eval's
routing (per layer: effective experts, busiest-expert fraction, dead experts), and the paired
gap of each setting to the grid's baseline (moelab.study.stats.paired_test; positive = the
setting is better). Results go to experiments/results/GRID.json (atomically written); run
folders stay in --out.

Grids:
- ``balancing``: the Switch loss per micro batch (the default) vs per optimizer step vs
  aux-loss-free bias, in micro batches of 2 sequences (4 per optimizer step of 8), so that the
  balancing scope matters: with one micro batch and one process ``global_batch`` is
  ``micro_batch`` exactly.
- ``schedule``: the cosine schedule (the default) vs warmup-stable-decay with a 1 - sqrt or a
  linear decay over the last 20 % of the steps (Hägele et al. 2024).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

from moelab.fileio import atomic_write_json
from moelab.study.stats import paired_test

RESULTS = Path(__file__).parent / "results"
GRIDS = {
    "balancing": {
        "common": ["train.micro_batch_size=2"],
        "settings": {
            "micro_batch": ["model.moe.lb_scope=micro_batch"],
            "global_batch": ["model.moe.lb_scope=global_batch"],
            "bias": ["model.moe.balance=bias"],
        },
    },
    "schedule": {
        "common": [],
        "settings": {
            "cosine": ["train.schedule=cosine"],
            "wsd_sqrt": ["train.schedule=wsd", "train.decay_shape=sqrt", "train.decay_fraction=0.2"],
            "wsd_linear": ["train.schedule=wsd", "train.decay_shape=linear",
                           "train.decay_fraction=0.2"],
        },
    },
}
"""Per grid: overrides of every setting, then the settings; the first setting is the baseline."""
QUIET = ["train.progress=false", "train.sample_tokens=0"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("grid", choices=sorted(GRIDS))
    parser.add_argument("--seeds", type=int, default=6)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--out", default="compare_out")
    args = parser.parse_args()
    grid = GRIDS[args.grid]
    out = Path(args.out) / args.grid
    seeds = list(range(args.seeds))
    jobs = [(name, seed) for name in grid["settings"] for seed in seeds]
    with ThreadPoolExecutor(args.jobs) as pool:
        list(pool.map(lambda job: train(out, grid, *job), jobs))
    baseline_name = next(iter(grid["settings"]))
    entry = {"grid": args.grid, "preset": "demo", "common": grid["common"], "seeds": seeds,
             "baseline": baseline_name, "settings": {}}
    for name, overrides in grid["settings"].items():
        runs = [read_run(out / name / f"seed{seed}") for seed in seeds]
        entry["settings"][name] = {"overrides": overrides, "runs": runs}
    baseline = {s: r["best_val_loss"] for s, r in zip(seeds, entry["settings"][baseline_name]["runs"])}
    for name, setting in entry["settings"].items():
        losses = {s: r["best_val_loss"] for s, r in zip(seeds, setting["runs"])}
        test = paired_test(losses, baseline)  # baseline minus setting: > 0 means better
        setting["paired_vs_baseline"] = {"gap": test.gap, "ci_low": test.ci_low,
                                         "ci_high": test.ci_high, "p_value": test.p_value,
                                         "n_pairs": test.n_pairs}
    atomic_write_json(RESULTS / f"{args.grid}.json", entry)
    print(markdown_table(entry))


def train(out: Path, grid: dict, name: str, seed: int) -> None:
    run = out / name / f"seed{seed}"
    command = [sys.executable, "-m", "moelab", "train", "demo", "--out", str(run), "--resume"]
    for override in QUIET + grid["common"] + grid["settings"][name] + [f"train.seed={seed}"]:
        command += ["--set", override]
    subprocess.run(command, check=True, capture_output=True,
                   env={**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")})


def read_run(run: Path) -> dict:
    summary = json.loads((run / "summary.json").read_text())
    routing = summary["routing"]
    return {"best_val_loss": summary["best_val_loss"],
            "effective_experts": [layer["effective_experts"] for layer in routing],
            "busiest_fraction": [layer["busiest_fraction"] for layer in routing],
            "dead_experts": [layer["dead_experts"] for layer in routing],
            "train_time_s": summary["train_time_s"]}


def markdown_table(entry: dict) -> str:
    lines = [f"| setting | best val loss | paired gap vs {entry['baseline']} | effective experts (mean "
             "over layers) | busiest fraction (max over layers) | dead experts |",
             "|---|---:|---:|---:|---:|---:|"]
    for name, setting in entry["settings"].items():
        runs = setting["runs"]
        loss = np.array([r["best_val_loss"] for r in runs])
        effective = np.array([np.mean(r["effective_experts"]) for r in runs])
        busiest = np.array([np.max(r["busiest_fraction"]) for r in runs])
        dead = sum(sum(r["dead_experts"]) for r in runs)
        paired = setting["paired_vs_baseline"]
        gap = ("–" if name == entry["baseline"] else
               f"{paired['gap']:+.4f} [{paired['ci_low']:+.4f}, {paired['ci_high']:+.4f}], "
               f"p {paired['p_value']:.2g}")
        lines.append(f"| `{name}` | {loss.mean():.4f} ± {loss.std(ddof=1):.4f} | {gap} | "
                     f"{effective.mean():.3f} | {busiest.mean():.3f} | {dead} |")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
