"""A fair WSD against cosine: each schedule at its own lr, one shared short warmup, two horizons.

    OMP_NUM_THREADS=1 .venv/bin/python experiments/wsd_cosine.py [--lrs 0.0025,0.005,0.01]
        [--select-seeds 0,1] [--report-seeds 100-105] [--jobs 2] [--out wsd_cosine_out]
        [--data SOURCE] [--set KEY=VALUE ...] [--results FILE]

The demo preset's MoE on TinyStories (the source `tinystories`; MOELAB_DATA names a local
copy), two horizons of 1,000 and 3,000 steps (the long one is under one epoch of the 15.9K-story
local subset at the default batch of 8 x 128 tokens). Three schedules, all with the same 100-step
linear warmup (10 % of the short horizon, 3.3 % of the long one) and the same floor (min_lr_ratio 0.1
of each schedule's peak):

- ``cosine``: cosine from the peak to the floor, one run per horizon;
- ``wsd20`` / ``wsd30``: constant peak, then a 1 - sqrt cooldown over the last 20 % / 30 % of
  the steps (Hägele et al. 2024). One 3,000-step wsd20 run per seed and lr is trained in full;
  every other wsd member branches its cooldown from that run's kept checkpoint (the lr of every
  earlier step is the same), which equals a separate run bit for bit (moelab.train.branch_run).

Phase 1 (selection seeds, short horizon only) trains every schedule at each lr and picks per
schedule the lr with the lowest mean final validation loss. Phase 2 (reporting seeds, disjoint)
trains each schedule at its own lr at both horizons and pairs each wsd variant with cosine seed
by seed (cosine - wsd: positive means wsd is better), with Holm's adjustment over the tests.
Every run is a planned run of the runs layer (``moelab.runs``: ``execute_plan`` with the
local launcher, as ``moelab study`` trains), each phase a plan folder under --out
(``select/`` and ``report/``, each with configs/, runs/ and failures.json): a rerun skips the
finished runs and resumes torn ones, and a branch trains once its trunk has finished.
Results go to experiments/results/wsd_cosine.json (--results); run folders stay in --out.
"""

from __future__ import annotations

import argparse
import platform
import sys
import time
from pathlib import Path

import numpy as np

from moelab.config import Config, load_config
from moelab.fileio import atomic_write_json, portable_command
from moelab.runs import RunSpec, execute_plan, is_complete, write_run_configs
from moelab.runs.data import prepare_shared_data
from moelab.runs.launchers.local import LocalLauncher
from moelab.runs.spec import Branch
from moelab.study.results import json_safe
from moelab.stats.multiple import holm
from moelab.stats.power import min_detectable_gap
from moelab.stats.t_tests import paired_difference
from moelab.train.run_folder import RunFolder

ROOT = Path(__file__).resolve().parents[1]
RESULTS = Path(__file__).parent / "results" / "wsd_cosine.json"
SEQ_LEN = 128  # the demo's context
SHORT, LONG = 1000, 3000  # steps
WARMUP_STEPS = 100
COOLDOWNS = {"wsd20": 0.2, "wsd30": 0.3}
SCHEDULES = ("cosine", *COOLDOWNS)
COMMON = ["train.logging.progress=false", "train.sample_tokens=0", f"train.warmup_steps={WARMUP_STEPS}",
          "train.eval_interval=100", "train.min_lr_ratio=0.1"]


def parse_seeds(text: str) -> list[int]:
    if "-" in text:
        first, last = (int(part) for part in text.split("-"))
        return list(range(first, last + 1))
    return [int(part) for part in text.split(",")]


def decay_start(steps: int, fraction: float) -> int:
    """As moelab.train.schedule computes it: the last int(fraction * steps) steps decay."""
    return steps - int(fraction * steps)


def cosine_args(steps: int, lr: float, seed: int, batch: int) -> list[str]:
    return ["train.schedule=cosine", f"train.max_tokens={steps * batch * SEQ_LEN}",
            f"train.lr={lr}", f"train.seed={seed}"]


def wsd_args(steps: int, fraction: float, lr: float, seed: int, batch: int,
             keep: list[int] = ()) -> list[str]:
    args = ["train.schedule=wsd", "train.decay_shape=sqrt", f"train.decay_fraction={fraction}",
            f"train.max_tokens={steps * batch * SEQ_LEN}", f"train.lr={lr}", f"train.seed={seed}"]
    if keep:
        args.append("train.keep_checkpoints_at=[" + ",".join(str(step) for step in keep) + "]")
    return args


Key = tuple[str, int, float, int]
"""A run by (schedule, steps, lr, seed)."""


class Phase:
    """The planned runs of one phase, in the plan folder ``out / name``: cosine runs, and per
    (lr, seed) one wsd20 trunk of ``trunk_steps`` with the other wsd members branched from it."""

    def __init__(self, out: Path, name: str, base: list[str], sets: list[str], batch: int):
        self.out, self.folder, self.batch = out, out / name, batch
        self.base, self.sets = base, sets
        self.specs: list[RunSpec] = []
        self.names: dict[Key, str] = {}

    def config(self, run_args: list[str]) -> Config:
        """The demo preset with the data and COMMON, the run's own keys, then --set (last, so
        a smaller test config can override COMMON's warmup and eval interval)."""
        return load_config("demo", [*self.base, f"train.batch_size={self.batch}", *run_args,
                                    *self.sets])

    def add(self, key: Key, name: str, run_args: list[str], branch: Branch | None = None) -> None:
        labels = dict(zip(("schedule", "steps", "lr", "seed"), key))
        self.specs.append(RunSpec(name, self.config(run_args), labels, branch=branch))
        self.names[key] = name

    def add_cosine(self, steps: int, lr: float, seed: int) -> None:
        self.add(("cosine", steps, lr, seed), f"cosine/{steps}steps/lr{lr:g}/seed{seed}",
                 cosine_args(steps, lr, seed, self.batch))

    def add_wsd_family(self, trunk_steps: int, members: list[tuple[str, int]], lr: float,
                       seed: int) -> None:
        """A wsd20 trunk of ``trunk_steps`` (itself the member ("wsd20", trunk_steps)) and a
        cooldown branch for every other (schedule, steps) member."""
        root = f"wsd/lr{lr:g}/seed{seed}"
        branches = [(name, steps) for name, steps in members if (name, steps) != ("wsd20", trunk_steps)]
        starts = {(name, steps): decay_start(steps, COOLDOWNS[name]) for name, steps in branches}
        trunk = f"{root}/wsd20-{trunk_steps}steps"
        self.add(("wsd20", trunk_steps, lr, seed), trunk,
                 wsd_args(trunk_steps, COOLDOWNS["wsd20"], lr, seed, self.batch,
                          sorted(set(starts.values()))))
        for (name, steps), start in starts.items():
            self.add((name, steps, lr, seed), f"{root}/{name}-{steps}steps",
                     wsd_args(steps, COOLDOWNS[name], lr, seed, self.batch), Branch(trunk, start))

    def train(self, jobs: int) -> None:
        """Every run not yet complete, through the runs layer (branches after their trunks)."""
        if any(not is_complete(self.folder / spec.run_dir) for spec in self.specs):
            prepare_shared_data(self.specs[0].config, print)
        self.folder.mkdir(parents=True, exist_ok=True)
        write_run_configs(self.folder, self.specs)
        outcomes = execute_plan(self.folder, self.specs, LocalLauncher(jobs=jobs), print)
        failed = [outcome.spec.name for outcome in outcomes if outcome.status == "failed"]
        if failed:
            sys.exit(f"wsd_cosine: runs failed in {self.folder} (see its failures.json): "
                     f"{', '.join(failed)}")

    def run_dir(self, key: Key) -> Path:
        return self.folder / "runs" / self.names[key]

    def final_loss(self, key: Key) -> float:
        return RunFolder(self.run_dir(key)).summary().final_val_loss


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lrs", default="0.0025,0.005,0.01")
    parser.add_argument("--select-seeds", default="0,1")
    parser.add_argument("--report-seeds", default="100-105")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--out", type=Path, default=Path("wsd_cosine_out"))
    parser.add_argument("--data", default="tinystories",
                        help="data.source: a source name (MOELAB_DATA names a local copy) or a path")
    parser.add_argument("--horizons", default="1000,3000",
                        help="the short and the long horizon, steps")
    parser.add_argument("--batch-size", type=int, default=8, help="sequences of 128 tokens per step")
    parser.add_argument("--set", dest="sets", action="append", default=[], metavar="KEY=VALUE",
                        help="another override of every run, after the others (a smaller model)")
    parser.add_argument("--results", type=Path, default=RESULTS, help="the results file")
    args = parser.parse_args(argv)
    global SHORT, LONG
    SHORT, LONG = (int(steps) for steps in args.horizons.split(","))
    lrs = [float(lr) for lr in args.lrs.split(",")]
    select, report = parse_seeds(args.select_seeds), parse_seeds(args.report_seeds)
    if set(select) & set(report):
        sys.exit("wsd_cosine: the selection and reporting seeds must be disjoint")
    data = [f"data.source={args.data}"]
    started = time.time()

    base = [*data, *COMMON]
    selection = Phase(args.out, "select", base, args.sets, args.batch_size)
    for lr in lrs:
        for seed in select:
            selection.add_cosine(SHORT, lr, seed)
            selection.add_wsd_family(SHORT, [("wsd20", SHORT), ("wsd30", SHORT)], lr, seed)
    selection.train(args.jobs)
    select_means = {name: {lr: float(np.mean([selection.final_loss((name, SHORT, lr, seed))
                                              for seed in select])) for lr in lrs}
                    for name in SCHEDULES}
    best_lr = {name: min(lrs, key=lambda lr: select_means[name][lr]) for name in SCHEDULES}
    print("best lr per schedule (selection seeds, short horizon):", best_lr)

    reporting = Phase(args.out, "report", base, args.sets, args.batch_size)
    for seed in report:
        for steps in (SHORT, LONG):
            reporting.add_cosine(steps, best_lr["cosine"], seed)
        wsd_lrs = sorted({best_lr["wsd20"], best_lr["wsd30"]})
        for lr in wsd_lrs:
            members = [(name, steps) for name in COOLDOWNS for steps in (SHORT, LONG)
                       if best_lr[name] == lr]
            reporting.add_wsd_family(LONG, members, lr, seed)
    reporting.train(args.jobs)

    losses = {name: {steps: {seed: reporting.final_loss((name, steps, best_lr[name], seed))
                             for seed in report} for steps in (SHORT, LONG)}
              for name in SCHEDULES}
    rows = []
    for name in COOLDOWNS:
        for steps in (SHORT, LONG):
            test = paired_difference(losses["cosine"][steps], losses[name][steps])
            rows.append({"comparison": f"cosine - {name}", "steps": steps,
                         "tokens": steps * args.batch_size * SEQ_LEN, "gap": test.gap,
                         "ci_low": test.ci_low, "ci_high": test.ci_high,
                         "p_value": test.p_value, "n": test.n_pairs,
                         "min_detectable_gap": min_detectable_gap(test.standard_error,
                                                                  test.n_pairs - 1)})
    for row, adjusted in zip(rows, holm([row["p_value"] for row in rows])):
        row["p_holm"] = adjusted
        row["verdict"] = ("wsd better" if row["gap"] > 0 else "cosine better") \
            if adjusted < 0.05 else "not significant"
        print(f"{row['comparison']:16s} {row['steps']:5d} steps {row['gap']:+.4f} "
              f"[{row['ci_low']:+.4f}, {row['ci_high']:+.4f}] p {row['p_value']:.3g} "
              f"(Holm {adjusted:.3g}, {len(rows)} tests) mdg {row['min_detectable_gap']:.4f} "
              f"{row['verdict']}")

    entry = {
        "command": "experiments/wsd_cosine.py " + portable_command(
            sys.argv[1:] if argv is None else argv, ROOT),
        "run_dirs_under": "the --out folder",
        "preset": "demo", "data": args.data, "common_overrides": COMMON,
        **({"overrides": args.sets} if args.sets else {}),
        "horizons_steps": [SHORT, LONG], "tokens_per_step": args.batch_size * SEQ_LEN,
        "warmup_steps": reporting.specs[0].config.train.warmup_steps, "cooldowns": COOLDOWNS, "lrs": lrs,
        "select_seeds": select, "report_seeds": report,
        "selection_mean_final_val_loss": {n: {f"{lr:g}": v for lr, v in m.items()}
                                          for n, m in select_means.items()},
        "best_lr": best_lr,
        "final_val_loss": {n: {str(s): v for s, v in by.items()} for n, by in losses.items()},
        "run_dirs": {f"{k[0]}/{k[1]}steps/lr{k[2]:g}/seed{k[3]}":
                     phase.run_dir(k).relative_to(args.out).as_posix()
                     for phase in (selection, reporting) for k in phase.names},
        "gaps": rows, "multiple_testing": f"Holm over {len(rows)} tests",
        "wall_time_s": time.time() - started, "jobs": args.jobs,
        "machine": {"processor": platform.processor(), "python": platform.python_version()},
    }
    atomic_write_json(args.results, json_safe(entry))
    print(f"wrote {args.results}")


if __name__ == "__main__":
    from moelab.cli import run_command

    raise SystemExit(run_command(main, "wsd_cosine"))
