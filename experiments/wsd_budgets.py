"""Three token budgets from one WSD run against one cosine run per budget, paired over seeds.

    OMP_NUM_THREADS=1 .venv/bin/python experiments/wsd_budgets.py [--seeds 3] [--jobs 2]
        [--out wsd_budgets_out] [--data SOURCE] [--budgets 204800,409600,819200]
        [--set KEY=VALUE ...] [--results FILE]

The demo preset's MoE (4 experts, top-2) on the shared TinyStories copy (the largest budget is
0.8M tokens, under one epoch of it), at 204,800 / 409,600 / 819,200 tokens (200 / 400 / 800
steps of 8 x 128), per seed:

- ``cosine``: one run per budget from scratch, the demo's recipe (half of each run's steps in
  warmup, cosine to the floor);
- ``wsd``: the budget family of ``moelab.train.wsd_budget_family``: a 1 - sqrt decay over the
  last 20 % of each budget's steps, one shared warmup of 100 steps (half the smallest budget's
  steps, as its cosine run has); the 800-step run is trained in full and the 200- and 400-step
  budgets branch their cooldowns from its kept checkpoints (``moelab.runs.families``, as
  ``moelab sweep-sparsity`` plans a wsd sweep's budgets).

Per budget it records each seed's best validation loss under both plans and the paired gap
(cosine minus wsd; positive: the family is better), and per plan the tokens trained (from the
run folders: a branch counts only the steps after its branch point) and the training time.
Every run is a planned run of the runs layer (``moelab.runs``: ``execute_plan`` with the local
launcher): --out is its plan folder (configs/, runs/, failures.json), a rerun skips finished runs
and resumes torn ones, and the branches train once their full run has finished.
Results go to experiments/results/wsd_budgets.json (--results; atomically written); run folders
stay in --out.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

from moelab.config import load_config
from moelab.fileio import atomic_write_json
from moelab.runs import RunSpec, execute_plan, is_complete, write_run_configs
from moelab.runs.data import prepare_shared_data
from moelab.runs.families import as_budget_family
from moelab.runs.launchers.local import LocalLauncher
from moelab.study.gaps import paired_test
from moelab.train import wsd_budget_family

RESULTS = Path(__file__).parent / "results"
BUDGETS = [204_800, 409_600, 819_200]
DATA = "../shared/data/tinystories"
QUIET = ["train.logging.progress=false", "train.sample_tokens=0"]
WSD = ["train.schedule=wsd", "train.decay_shape=sqrt", "train.decay_fraction=0.2"]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--out", default="wsd_budgets_out")
    parser.add_argument("--data", default=DATA, help="data.source (default: the shared copy)")
    parser.add_argument("--budgets", default=",".join(map(str, BUDGETS)),
                        help="token budgets, ascending")
    parser.add_argument("--set", dest="sets", action="append", default=[], metavar="KEY=VALUE",
                        help="another override of every run, after the others (a smaller model)")
    parser.add_argument("--results", type=Path, default=RESULTS / "wsd_budgets.json")
    args = parser.parse_args(argv)
    out, seeds = Path(args.out), list(range(args.seeds))
    budgets = sorted(int(budget) for budget in args.budgets.split(","))
    data = [f"data.source={args.data}"]
    specs = plan(data, args.sets, budgets, seeds)
    train(out, specs, args.jobs)
    entry = results(out, specs, data, args.sets, budgets, seeds)
    atomic_write_json(args.results, entry)
    print(markdown_table(entry))


def run_name(plan_name: str, budget: int, seed: int) -> str:
    return f"{plan_name}/{budget}/seed{seed}"


def plan(data: list[str], sets: list[str], budgets: list[int], seeds: list[int]) -> list[RunSpec]:
    """Per seed a cosine run per budget, and the wsd budget family: the largest budget's run in
    full, the others branched from its checkpoints at their decay starts."""
    specs = []
    for seed in seeds:
        for name, schedule in (("cosine", []), ("wsd", WSD)):
            group = [RunSpec(run_name(name, budget, seed),
                             load_config("demo", [*data, *QUIET, *schedule, f"train.seed={seed}",
                                                  f"train.max_tokens={budget}", *sets]),
                             {"plan": name, "budget": budget, "seed": seed})
                     for budget in budgets]
            specs += as_budget_family(group) if name == "wsd" else group
    return specs


def train(out: Path, specs: list[RunSpec], jobs: int) -> None:
    """Every run not yet complete, through the runs layer (the branches after their full run)."""
    if any(not is_complete(out / spec.run_dir) for spec in specs):
        prepare_shared_data(specs[0].config, print)
    out.mkdir(parents=True, exist_ok=True)
    write_run_configs(out, specs)
    outcomes = execute_plan(out, specs, LocalLauncher(jobs=jobs), print)
    failed = [outcome.spec.name for outcome in outcomes if outcome.status == "failed"]
    if failed:
        sys.exit(f"wsd_budgets: runs failed in {out} (see its failures.json): {', '.join(failed)}")


def results(out: Path, specs: list[RunSpec], data: list[str], sets: list[str],
            budgets: list[int], seeds: list[int]) -> dict:
    wsd_config = next(spec.config for spec in specs if spec.labels["plan"] == "wsd")
    family = wsd_budget_family(wsd_config, budgets)
    entry = {"preset": "demo", "overrides": data + sets, "wsd": WSD, "budgets": budgets,
             "seeds": seeds, "warmup_steps": family.warmup_steps,
             "decay_start_steps": {str(m.budget): m.decay_start_step for m in family.runs},
             "planned_tokens": {"wsd": sum(m.own_tokens for m in family.runs),
                                "cosine": sum(m.tokens for m in family.runs)},
             "by_budget": {}, "measured": {"wsd": {"tokens": 0, "train_time_s": 0.0},
                                           "cosine": {"tokens": 0, "train_time_s": 0.0}}}
    runs = out / "runs"
    for budget in budgets:
        cosine = {s: read_summary(runs / run_name("cosine", budget, s)) for s in seeds}
        wsd = {s: read_summary(runs / run_name("wsd", budget, s)) for s in seeds}
        for s in seeds:
            add_cost(entry["measured"]["cosine"], cosine[s], None)
            add_cost(entry["measured"]["wsd"], wsd[s], runs / run_name("wsd", budget, s))
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
