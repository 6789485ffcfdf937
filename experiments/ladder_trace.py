"""Does naive top-1 collapse at once? The busiest expert of every layer over the whole run.

    .venv/bin/python experiments/ladder_trace.py [--preset cpu-ablation] [--seeds 1-4]
        [--rungs naive_top1,top1_lb,top2_lb] [--eval-interval 10] [--jobs 2] [--out ladder_out]

The ladder's report reads collapse at the last evaluation only. Here the chosen rungs of a
ladder preset train on its seeds with an evaluation every ``--eval-interval`` steps (the
evaluation reads fixed validation windows and draws no random numbers, so the training is the
preset's), and each run's routing is read back from its metrics.jsonl: per evaluation the
worst layer's busiest-expert fraction (max_i c_i / sum c; 1/E is balanced), its value at the
first evaluation, its maximum over the run and the step of that maximum, and the evaluations at
which any layer is collapsed (busiest fraction above train.collapse_threshold).

Results go to experiments/results/ladder_trace.json, one entry per preset (a rerun replaces its
own entry), with the command, the settings that make collapse possible (experts, lr, micro
batch) and each run's folder relative to --out.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from moelab.fileio import atomic_write_json, portable_command
from moelab.runs import execute_plan, is_complete
from moelab.runs.data import prepare_shared_data
from moelab.runs.launchers.local import LocalLauncher
from moelab.study.commands import plan
from moelab.study.results import json_safe
from moelab.study.settings import load_study

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "experiments" / "results" / "ladder_trace.json"


def parse_seeds(text: str) -> list[int]:
    """``1,2`` or ``1-4``."""
    if "-" in text:
        first, last = (int(part) for part in text.split("-"))
        return list(range(first, last + 1))
    return [int(part) for part in text.split(",")]


def routing_trace(run_dir: Path, threshold: float) -> dict:
    """Per evaluation the worst layer's busiest fraction, read from the run's metrics.jsonl."""
    events = [json.loads(line) for line in
              (run_dir / "metrics.jsonl").read_text("utf-8").splitlines() if line.strip()]
    evals = [e for e in events if e.get("kind") == "eval" and e.get("routing")]
    steps = [e["step"] for e in evals]
    worst = [max(layer["busiest_fraction"] for layer in e["routing"]) for e in evals]
    peak = max(range(len(worst)), key=worst.__getitem__)
    return {
        "steps": steps, "worst_layer_busiest_fraction": worst,
        "first": worst[0], "first_step": steps[0], "final": worst[-1],
        "max": worst[peak], "max_step": steps[peak],
        "collapsed_at_steps": [step for step, value in zip(steps, worst) if value > threshold],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="cpu-ablation")
    parser.add_argument("--seeds", default="1-4")
    parser.add_argument("--rungs", default="naive_top1,top1_lb,top2_lb")
    parser.add_argument("--eval-interval", type=int, default=10)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--out", type=Path, default=Path("ladder_out"))
    args = parser.parse_args()
    seeds, rungs = parse_seeds(args.seeds), args.rungs.split(",")
    seed_list = "[" + ",".join(str(seed) for seed in seeds) + "]"
    config, settings = load_study(args.preset, [f"study.seeds={seed_list}",
                                                f"train.eval_interval={args.eval_interval}"])
    arms, specs = plan("ablation", config, settings)
    unknown = sorted(set(rungs) - {arm.name for arm in arms})
    if unknown:
        sys.exit(f"ladder_trace: rung {unknown[0]!r} is unknown: allowed "
                 f"{', '.join(arm.name for arm in arms)}")
    specs = [spec for spec in specs if spec.labels["arm"] in rungs]
    where = args.out / args.preset
    if any(not is_complete(where / spec.run_dir) for spec in specs):
        prepare_shared_data(config, print)
    where.mkdir(parents=True, exist_ok=True)
    outcomes = execute_plan(where, specs, LocalLauncher(jobs=args.jobs), print)
    failed = [o.spec.name for o in outcomes if o.status == "failed"]
    if failed:
        sys.exit(f"ladder_trace: runs failed in {where}: {', '.join(failed)}")
    threshold = config.train.collapse_threshold
    runs = {spec.name: {**routing_trace(where / spec.run_dir, threshold),
                        "run_dir": (where / spec.run_dir).relative_to(args.out).as_posix()}
            for spec in specs}
    moe = config.model.moe
    entry = {
        "command": "experiments/ladder_trace.py " + portable_command(sys.argv[1:], ROOT),
        "run_dirs_under": "the --out folder", "preset": args.preset, "seeds": seeds,
        "rungs": rungs, "eval_interval": args.eval_interval,
        "settings": {"num_experts": moe.num_experts, "lr": config.train.lr,
                     "micro_batch_size": config.train.micro_batch_size,
                     "batch_size": config.train.batch_size,
                     "collapse_threshold": threshold, "balanced_fraction": 1 / moe.num_experts},
        "runs": runs,
    }
    entries = json.loads(RESULTS.read_text("utf-8")) if RESULTS.is_file() else []
    entries = [e for e in entries if e["preset"] != args.preset] + [entry]
    atomic_write_json(RESULTS, json_safe(entries))
    for name, run in runs.items():
        print(f"{name:22s} first (step {run['first_step']}) {run['first']:.3f}  max {run['max']:.3f} "
              f"(step {run['max_step']})  final {run['final']:.3f}  collapsed at "
              f"{run['collapsed_at_steps'] or 'no evaluation'}")
    print(f"wrote {RESULTS}")


if __name__ == "__main__":
    from moelab.cli import run_command

    raise SystemExit(run_command(main, "ladder_trace"))
