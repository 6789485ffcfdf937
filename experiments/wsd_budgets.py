"""Three token budgets from one WSD run against one cosine run per budget, paired over seeds.

    OMP_NUM_THREADS=1 .venv/bin/python experiments/wsd_budgets.py [--seeds 3] [--jobs 2]
                                                                  [--out wsd_budgets_out]

The demo preset's MoE (4 experts, top-2) on the shared TinyStories copy (the largest budget is
0.8M tokens, under one epoch of it), at 204,800 / 409,600 / 819,200 tokens (200 / 400 / 800
steps of 8 x 128), per seed:

- ``cosine``: one run per budget from scratch, the demo's recipe (half of each run's steps in
  warmup, cosine to the floor);
- ``wsd``: the budget family of ``moelab.train.wsd_budget_family``: a 1 - sqrt decay over the
  last 20 % of each budget's steps, one shared warmup of 100 steps (half the smallest budget's
  steps, as its cosine run has); the 800-step run is trained in full and the 200- and 400-step
  budgets branch their cooldowns from its kept checkpoints (``moelab train --branch-from``).

Per budget it records each seed's best validation loss under both plans and the paired gap
(cosine minus wsd; positive: the family is better), and per plan the tokens trained (from the
run folders: a branch counts only the steps after its branch point) and the training time.
Results go to experiments/results/wsd_budgets.json (atomically written); run folders stay in
--out.
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

from moelab.config import load_config, save_config
from moelab.fileio import atomic_write_json
from moelab.study.stats import paired_test
from moelab.train import wsd_budget_family

RESULTS = Path(__file__).parent / "results"
BUDGETS = [204_800, 409_600, 819_200]
DATA = ["data.source=../shared/data/tinystories"]
QUIET = ["train.logging.progress=false", "train.sample_tokens=0"]
WSD = ["train.schedule=wsd", "train.decay_shape=sqrt", "train.decay_fraction=0.2"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--out", default="wsd_budgets_out")
    args = parser.parse_args()
    out, seeds = Path(args.out), list(range(args.seeds))
    families = {seed: write_family(out, seed) for seed in seeds}
    jobs = [("wsd", seed, None) for seed in seeds]
    jobs += [("cosine", seed, budget) for budget in reversed(BUDGETS) for seed in seeds]
    with ThreadPoolExecutor(args.jobs) as pool:  # the longest jobs first
        list(pool.map(lambda job: run_job(out, families, *job), jobs))
    entry = results(out, families, seeds)
    atomic_write_json(RESULTS / "wsd_budgets.json", entry)
    print(markdown_table(entry))


def write_family(out: Path, seed: int) -> dict:
    """The seed's family, each member's config saved as YAML for ``moelab train``."""
    base = load_config("demo", DATA + QUIET + WSD + [f"train.seed={seed}"])
    family = wsd_budget_family(base, BUDGETS)
    members = {}
    for member in family.runs:
        config_file = save_config(member.config, out / "configs" / f"wsd_{member.budget}_seed{seed}.yaml")
        members[member.budget] = {"config": config_file, "decay_start_step": member.decay_start_step,
                                  "run": out / "wsd" / str(member.budget) / f"seed{seed}"}
    return {"family": family, "members": members}


def run_job(out: Path, families: dict, plan: str, seed: int, budget: int | None) -> None:
    if plan == "cosine":
        run = out / "cosine" / str(budget) / f"seed{seed}"
        sets = DATA + QUIET + [f"train.max_tokens={budget}", f"train.seed={seed}"]
        moelab(["train", "demo", "--out", str(run), "--resume", *with_set(sets)])
        return
    family, members = families[seed]["family"], families[seed]["members"]
    full = members[family.full.budget]
    moelab(["train", str(full["config"]), "--out", str(full["run"]), "--resume"])
    for member in family.branches:
        branch = members[member.budget]
        moelab(["train", str(branch["config"]), "--out", str(branch["run"]),
                "--branch-from", str(full["run"]), "--branch-step", str(member.decay_start_step)])


def with_set(overrides: list[str]) -> list[str]:
    return [arg for item in overrides for arg in ("--set", item)]


def moelab(args: list[str]) -> None:
    subprocess.run([sys.executable, "-m", "moelab", *args], check=True, capture_output=True,
                   env={**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")})


def results(out: Path, families: dict, seeds: list[int]) -> dict:
    family = families[seeds[0]]["family"]
    entry = {"preset": "demo", "overrides": DATA, "wsd": WSD, "budgets": BUDGETS, "seeds": seeds,
             "warmup_steps": family.warmup_steps,
             "decay_start_steps": {str(m.budget): m.decay_start_step for m in family.runs},
             "planned_tokens": {"wsd": sum(m.own_tokens for m in family.runs),
                                "cosine": sum(m.tokens for m in family.runs)},
             "by_budget": {}, "measured": {"wsd": {"tokens": 0, "train_time_s": 0.0},
                                           "cosine": {"tokens": 0, "train_time_s": 0.0}}}
    for budget in BUDGETS:
        cosine = {s: read_summary(out / "cosine" / str(budget) / f"seed{s}") for s in seeds}
        wsd = {s: read_summary(families[s]["members"][budget]["run"]) for s in seeds}
        for s in seeds:
            add_cost(entry["measured"]["cosine"], cosine[s], None)
            add_cost(entry["measured"]["wsd"], wsd[s], families[s]["members"][budget]["run"])
        cosine_loss = {s: cosine[s]["best_val_loss"] for s in seeds}
        wsd_loss = {s: wsd[s]["best_val_loss"] for s in seeds}
        test = paired_test(wsd_loss, cosine_loss)  # cosine minus wsd: > 0 means wsd is better
        entry["by_budget"][str(budget)] = {
            "cosine_best_val_loss": cosine_loss, "wsd_best_val_loss": wsd_loss,
            "paired_cosine_minus_wsd": {"gap": test.gap, "ci_low": test.ci_low,
                                        "ci_high": test.ci_high, "p_value": test.p_value,
                                        "n_pairs": test.n_pairs}}
    return entry


def read_summary(run: Path) -> dict:
    return json.loads((run / "summary.json").read_text())


def add_cost(total: dict, summary: dict, run: Path | None) -> None:
    """Tokens and training time a run took itself: a branch's summary counts its source's
    steps up to the branch point too (its copied history), which the branch did not train."""
    tokens, seconds = summary["tokens"], summary["train_time_s"]
    branch_file = run / "branch.json" if run is not None else None
    if branch_file is not None and branch_file.is_file():
        origin = json.loads(branch_file.read_text())
        source_state = json.loads((Path(origin["source"]) / "checkpoints" /
                                   f"step_{origin['step']:08d}" / "trainer_state.json").read_text())
        tokens -= source_state["tokens"]
        seconds -= source_state["train_time_s"]
    total["tokens"] += tokens
    total["train_time_s"] += seconds


def markdown_table(entry: dict) -> str:
    lines = ["| tokens | cosine best val loss | wsd family best val loss | paired gap cosine − wsd |",
             "|---:|---:|---:|---:|"]
    for budget, row in entry["by_budget"].items():
        cosine = np.array(list(row["cosine_best_val_loss"].values()))
        wsd = np.array(list(row["wsd_best_val_loss"].values()))
        paired = row["paired_cosine_minus_wsd"]
        lines.append(f"| {int(budget):,} | {cosine.mean():.4f} ± {cosine.std(ddof=1):.4f} | "
                     f"{wsd.mean():.4f} ± {wsd.std(ddof=1):.4f} | {paired['gap']:+.4f} "
                     f"[{paired['ci_low']:+.4f}, {paired['ci_high']:+.4f}], p {paired['p_value']:.2g} |")
    measured = entry["measured"]
    lines.append("")
    lines.append(f"tokens trained: wsd family {measured['wsd']['tokens']:,} "
                 f"({measured['wsd']['train_time_s']:.0f} s), cosine runs "
                 f"{measured['cosine']['tokens']:,} ({measured['cosine']['train_time_s']:.0f} s), "
                 f"over {len(entry['seeds'])} seeds")
    return "\n".join(lines)


if __name__ == "__main__":
    from moelab.cli import run_command

    raise SystemExit(run_command(main, "wsd_budgets"))
