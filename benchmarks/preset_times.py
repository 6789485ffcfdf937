"""How long each preset took, read from the committed results, and the speed table the dry runs
price a plan with: nothing here trains or times anything.

    .venv/bin/python benchmarks/preset_times.py                 # both files, and a table
    .venv/bin/python benchmarks/preset_times.py --smoke --out /tmp/preset_times.json

1. ``benchmarks/results/preset_times.json`` (``--out``): per preset with a committed record of
   its runs, the record, its runs, and the seconds they took summed. A study's results.json
   keeps each run's ``wall_time_s`` (the whole run, evaluations included); a sweep's results.csv
   keeps each run's ``tokens_per_s`` and ``D``, so a sweep's figure is its runs' training time
   (a cooldown branch counted from its branch step, plan.json's), without evaluations, compile
   starts and the fits. A record counts for a preset only when its runs are the preset's (the
   study's tokens per run and seeds, the sweep grid's name and seeds): checked here.
2. ``src/moelab/presets/measured_speeds.json`` (not in smoke mode): per (S, N_active) shape the
   median tokens/s of every committed run of it on the CPU the unsuffixed records were made on
   (``-cpu2``/``-cpu3`` records are other CPUs and left out), and the median seconds a study
   run spends beyond training (its wall time less tokens / tokens_per_s): what ``--dry-run``
   estimates a wall time with when it has no ``--speeds`` table (``moelab.runs.estimate``).
"""

from __future__ import annotations

import argparse
import csv
import json
import statistics
from collections import defaultdict
from pathlib import Path

from common import add_output_arguments, parse_checked

from moelab.fileio import atomic_write_json

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "experiments" / "results"
SPEEDS_FILE = ROOT / "src" / "moelab" / "presets" / "measured_speeds.json"

STUDY_RECORDS = {
    "demo": ["studies/demo-seeds0-5.json", "studies/demo-seeds617-622.json"],
    "cpu-budgets": ["studies/cpu-budgets.json"],
    "cpu-ablation": ["studies/cpu-ablation-seeds1-4.json"],
    "cpu-replication": ["studies/cpu-replication-compiled.json"],
}
"""Each study preset's committed results.json files (a run of the preset each)."""
SWEEP_RECORDS = {name: f"sweeps/{name}" for name in
                 ("cpu", "cpu-isoflop", "cpu-fixedn", "cpu-expertn", "cpu-topk", "cpu-finetune")}
"""Each sweep preset's committed sweep folder."""
OTHER_CPU = ("-cpu2", "-cpu3")


def _study_runs(record: dict) -> list[dict]:
    groups = record.get("budgets") or [record]
    return [run for group in groups for arm in group["arms"].values() for run in arm["runs"]]


def study_time(preset: str, files: list[str]) -> dict:
    from moelab.study.settings import load_study

    config, settings = load_study(preset, [])
    budgets = set(settings.budget_list) or {config.train.max_tokens}
    runs, seconds = 0, 0.0
    for name in files:
        record = json.loads((RESULTS / name).read_text())
        trained = {run["tokens"] for run in _study_runs(record)}
        if not trained <= budgets:
            raise SystemExit(f"{name} is not a run of {preset}: tokens {trained} vs {budgets}")
        runs += len(_study_runs(record))
        seconds += sum(run["wall_time_s"] for run in _study_runs(record))
    return {"preset": preset, "kind": "study", "records": files, "runs": runs,
            "seconds": round(seconds, 1), "counts": "each run's wall_time_s, summed",
            "estimated_seconds": round(_study_estimate(preset, files) * len(files), 1)}


def _study_estimate(preset: str, files: list[str]) -> float:
    """What ``--dry-run`` estimates for one record's runs (its seeds), one at a time."""
    from moelab.runs.estimate import plan_seconds, stored_speeds
    from moelab.study.commands import plan
    from moelab.study.settings import load_study

    config, settings = load_study(preset, [])
    settings.seeds = json.loads((RESULTS / files[0]).read_text())["seeds"]
    kind = "ablation" if preset == "cpu-ablation" else "study"
    _, specs = plan(kind, settings.apply_to(config), settings)
    stored = stored_speeds()
    return plan_seconds(specs, stored.speeds, stored.seconds_per_run)


def _branch_tokens(folder: Path) -> dict[str, int]:
    """Run folder -> the tokens its trunk trained before it branched (0 for a trunk)."""
    plan = json.loads((folder / "plan.json").read_text())
    return {run["run_dir"]: run["branch"]["step"] for run in plan["runs"] if run.get("branch")}


def sweep_time(preset: str, folder_name: str) -> dict:
    from moelab.sweep.grid import load_grid

    folder = RESULTS / folder_name
    grid, recorded = load_grid(preset), json.loads((folder / "grid.json").read_text())
    if recorded["name"] != grid.name or list(recorded["seeds"]) != list(grid.seeds):
        raise SystemExit(f"{folder_name} is not a run of sweep {preset}")
    branch_steps = _branch_tokens(folder)
    seconds = 0.0
    with (folder / "results.csv").open() as handle:
        rows = list(csv.DictReader(handle))
    for row in rows:
        skipped = branch_steps.get(row["run"], 0) * float(row["tokens_per_step"])
        seconds += (float(row["D"]) - skipped) / float(row["tokens_per_s"])
    return {"preset": preset, "kind": "sweep", "records": [f"{folder_name}/results.csv"],
            "runs": len(rows), "seconds": round(seconds, 1),
            "counts": "each run's trained tokens / tokens_per_s (training only), summed",
            "estimated_seconds": round(_sweep_estimate(preset), 1)}


def _sweep_estimate(preset: str) -> float:
    """What ``--dry-run`` estimates for the grid's training alone (no per-run seconds)."""
    from moelab.runs.estimate import stored_speeds
    from moelab.sweep.cost import time_estimate
    from moelab.sweep.grid import load_sweep_grid
    from moelab.sweep.plan import plan_sweep, run_specs

    grid = load_sweep_grid(preset, [])
    points = plan_sweep(grid)
    estimate = time_estimate(grid, points, run_specs(points), stored_speeds().speeds, 0.0)
    return estimate.seconds - estimate.finetune_seconds


def measured_speeds() -> dict:
    """The median tokens/s per (S, N_active) of every committed run on the first CPU, and the
    median seconds a study run spends beyond training."""
    speeds: dict[tuple[float, int], list[float]] = defaultdict(list)
    beyond: list[float] = []
    for path in sorted((RESULTS / "studies").glob("*.json")):
        record = json.loads(path.read_text())
        if path.stem.endswith(OTHER_CPU) or "arms" not in record:
            continue
        for group in record.get("budgets") or [record]:
            for arm in group["arms"].values():
                moe = arm["model"].get("moe")
                sparsity = 0.0 if not moe else (moe["num_experts"] - moe["top_k"]) / moe["num_experts"]
                for run in arm["runs"]:
                    speeds[(sparsity, arm["active_params"])].append(run["tokens_per_s"])
                    beyond.append(run["wall_time_s"] - run["tokens"] / run["tokens_per_s"])
    for path in sorted((RESULTS / "sweeps").glob("*/results.csv")):
        if path.parent.name.endswith(OTHER_CPU):
            continue
        with path.open() as handle:
            for row in csv.DictReader(handle):
                if row.get("tokens_per_s"):
                    speeds[(float(row["S"]), int(float(row["N_active"])))].append(
                        float(row["tokens_per_s"]))
    shapes = [{"S": sparsity, "N_active": active, "tokens_per_s": round(statistics.median(values)),
               "runs": len(values)} for (sparsity, active), values in sorted(speeds.items())]
    return {"what": "median training tokens/s per (S, N_active) of the committed runs "
                    "(experiments/results/, studies and sweeps, one or two runs at a time, "
                    "eager and compiled) on the 2-core x86-64 CPU of the unsuffixed records; "
                    "written by benchmarks/preset_times.py",
            "seconds_beyond_training": round(statistics.median(beyond), 1),
            "runs": sum(shape["runs"] for shape in shapes), "shapes": shapes}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_output_arguments(parser, "preset_times")
    args = parse_checked(parser, argv)
    rows = [study_time(preset, files) for preset, files in STUDY_RECORDS.items()]
    rows += [sweep_time(preset, folder) for preset, folder in SWEEP_RECORDS.items()]
    atomic_write_json(args.out, {"rows": rows})
    if not args.smoke:
        atomic_write_json(SPEEDS_FILE, measured_speeds())
    for row in rows:
        print(f"{row['kind']:5} {row['preset']:16} {row['runs']:4} runs "
              f"{row['seconds'] / 60:6.1f} min (estimate {row['estimated_seconds'] / 60:6.1f}; "
              f"{row['counts']}; {', '.join(row['records'])})")


if __name__ == "__main__":
    main()
