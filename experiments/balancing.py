"""Balancing variants on the demo's MoE arm: micro-batch vs global-batch Switch loss vs bias.

    OMP_NUM_THREADS=1 .venv/bin/python experiments/balancing.py [--seeds 6] [--jobs 2]
                                                               [--out balancing_out]

Every setting trains the `demo` preset's MoE (4 experts, top-2, 409,600 tokens) on the same
seeds, in micro batches of 2 sequences (4 per optimizer step of 8), so that the balancing
scope matters: with one micro batch and one process `global_batch` is `micro_batch` exactly.
Per setting it records each seed's best validation loss and the final eval's routing (per
layer: effective experts, busiest-expert fraction, dead experts), and the paired gap of each
variant to `micro_batch` (moelab.study.stats.paired_test; positive = the variant is better).
Results go to experiments/results/balancing.json (atomically written); run folders stay in --out.
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

RESULTS = Path(__file__).parent / "results" / "balancing.json"
COMMON = ["train.micro_batch_size=2", "train.progress=false", "train.sample_tokens=0"]
SETTINGS = {
    "micro_batch": ["model.moe.lb_scope=micro_batch"],
    "global_batch": ["model.moe.lb_scope=global_batch"],
    "bias": ["model.moe.balance=bias"],
}
BASELINE = "micro_batch"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", type=int, default=6)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--out", default="balancing_out")
    args = parser.parse_args()
    seeds = list(range(args.seeds))
    jobs = [(name, seed) for name in SETTINGS for seed in seeds]
    with ThreadPoolExecutor(args.jobs) as pool:
        list(pool.map(lambda job: train(Path(args.out), *job), jobs))
    entry = {"preset": "demo", "common": COMMON, "settings": {}, "seeds": seeds}
    for name, overrides in SETTINGS.items():
        runs = [read_run(Path(args.out) / name / f"seed{seed}") for seed in seeds]
        entry["settings"][name] = {"overrides": overrides, "runs": runs}
    baseline = {s: r["best_val_loss"] for s, r in zip(seeds, entry["settings"][BASELINE]["runs"])}
    for name, setting in entry["settings"].items():
        losses = {s: r["best_val_loss"] for s, r in zip(seeds, setting["runs"])}
        test = paired_test(losses, baseline)  # baseline minus variant: > 0 means better
        setting["paired_vs_micro_batch"] = {"gap": test.gap, "ci_low": test.ci_low,
                                            "ci_high": test.ci_high, "p_value": test.p_value,
                                            "n_pairs": test.n_pairs}
    atomic_write_json(RESULTS, entry)
    print(markdown_table(entry))


def train(out: Path, name: str, seed: int) -> None:
    run = out / name / f"seed{seed}"
    command = [sys.executable, "-m", "moelab", "train", "demo", "--out", str(run), "--resume"]
    for override in COMMON + SETTINGS[name] + [f"train.seed={seed}"]:
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
    lines = ["| setting | best val loss | paired gap vs micro_batch | effective experts (mean "
             "over layers) | busiest fraction (max over layers) | dead experts |",
             "|---|---:|---:|---:|---:|---:|"]
    for name, setting in entry["settings"].items():
        runs = setting["runs"]
        loss = np.array([r["best_val_loss"] for r in runs])
        effective = np.array([np.mean(r["effective_experts"]) for r in runs])
        busiest = np.array([np.max(r["busiest_fraction"]) for r in runs])
        dead = sum(sum(r["dead_experts"]) for r in runs)
        paired = setting["paired_vs_micro_batch"]
        gap = ("–" if name == BASELINE else
               f"{paired['gap']:+.4f} [{paired['ci_low']:+.4f}, {paired['ci_high']:+.4f}], "
               f"p {paired['p_value']:.2g}")
        lines.append(f"| `{name}` | {loss.mean():.4f} ± {loss.std(ddof=1):.4f} | {gap} | "
                     f"{effective.mean():.3f} | {busiest.mean():.3f} | {dead} |")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
