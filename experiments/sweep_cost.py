"""Estimate a sweep grid's CPU time before running it, from tokens/s its shapes measured.

    python experiments/sweep_cost.py cpu-isoflop [--set KEY=VALUE ...] [--speeds results.csv]

Plans the grid as ``moelab sweep-sparsity`` would (budget families included: a cooldown branch
trains only its steps after the branch point) and prices every run's trained tokens at the
tokens/s of its shape: the median over the runs of that shape in ``--speeds`` (default: the
compiled `cpu` sweep's results.csv, two runs side by side on 2 cores), interpolated log-log in
N_active between the shapes of the same sparsity (the nearest sparsity when the table has not
this one), extrapolated along the last segment above them and flat below them (smaller shapes
are overhead-bound: eager, a 68K and a 41K model trained only 1.08x and 1.2x the 98K model's
tokens/s, docs/scaling.md), so an estimate for smaller shapes errs long. Each run adds ``--per-run``
seconds for its start, compile (cached) and evals. Prints one line per size and sparsity and
the total, the grid's finetunes included (eager, each with a fixed overhead); wall time with
``--jobs 2`` is about half the CPU time, plus the fits.
"""

from __future__ import annotations

import argparse
import csv
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from moelab.accounting import count_params  # noqa: E402
from moelab.sweep.grid import load_sweep_grid  # noqa: E402
from moelab.sweep.plan import finetune_specs, plan_sweep, run_specs  # noqa: E402

DEFAULT_SPEEDS = ROOT / "experiments" / "results" / "sweeps" / "cpu" / "results.csv"
PER_RUN_SECONDS = 2.0
"""Start, cached compile and evals per run: the cpu sweep's runs took 5,005 CPU-s (docs/scaling.md,
"Where the 43 minutes go"), its trained tokens at its shapes' median speeds 4,827, so 1.9 s each
(a shape's first, uncached compile costs 13-22 s more)."""
EAGER_SLOWDOWN = 5629 / 5005
"""A grid's finetunes run eager: the cpu sweep's runs took 5,629 CPU-s eager, 5,005 compiled."""
FINETUNE_OVERHEAD_SECONDS = 2.5
"""Per finetune, beyond its steps: building its token cache of the adaptation set and scoring
the source's weights (the pilot's 100-step finetunes took 3.8-7.0 s on a busy CPU, their tokens
at the shapes' eager speeds about 3 s; experiments/results/finetune_pilot.json)."""


def measured_speeds(path: Path) -> dict[float, list[tuple[float, float]]]:
    """Per sparsity, (N_active, median tokens/s) of each shape, by N_active."""
    by_shape = defaultdict(list)
    with open(path, newline="") as f:
        for row in csv.DictReader(f):
            if row.get("tokens_per_s"):
                key = (float(row["S"]), float(row["N_active"]))
                by_shape[key].append(float(row["tokens_per_s"]))
    speeds = defaultdict(list)
    for (sparsity, active), values in sorted(by_shape.items()):
        speeds[sparsity].append((active, float(np.median(values))))
    return dict(speeds)


def tokens_per_s(speeds: dict, sparsity: float, active: float) -> float:
    """Log-log interpolation in N_active among the shapes of the nearest measured sparsity."""
    nearest = min(speeds, key=lambda s: abs(s - sparsity))
    x = np.log([a for a, _ in speeds[nearest]])
    y = np.log([t for _, t in speeds[nearest]])
    at = np.log(active)
    if at < x[0]:  # below the smallest shape, overhead dominates: no faster than it
        return float(np.exp(y[0]))
    if at > x[-1]:
        return float(np.exp(y[-1] + (y[-1] - y[-2]) / (x[-1] - x[-2]) * (at - x[-1])))
    return float(np.exp(np.interp(at, x, y)))


def estimate(grid_name: str, sets: list[str], speeds_path: Path, per_run: float) -> dict:
    grid = load_sweep_grid(grid_name, sets)
    points = plan_sweep(grid)
    speeds = measured_speeds(speeds_path)
    per_shape = defaultdict(float)
    total_tokens = separate_tokens = 0
    for point, spec in zip(points, run_specs(points)):
        train = spec.config.train
        tokens_per_step = train.batch_size * spec.config.model.max_seq_len
        trained = train.max_tokens - (spec.branch.step * tokens_per_step if spec.branch else 0)
        active = count_params(spec.config.model).active
        seconds = trained / tokens_per_s(speeds, point.sparsity, active) + per_run
        per_shape[(point.size, point.sparsity, point.num_experts, active)] += seconds
        total_tokens += trained
        separate_tokens += train.max_tokens
    finetune_seconds = 0.0
    if grid.finetune is not None:  # one eager finetune per run, at its shape's speed
        for point, spec in zip(points, finetune_specs(grid.finetune, run_specs(points))):
            active = count_params(spec.config.model).active
            speed = tokens_per_s(speeds, point.sparsity, active) / EAGER_SLOWDOWN
            finetune_seconds += spec.config.train.max_tokens / speed + FINETUNE_OVERHEAD_SECONDS
    return {"runs": len(points), "tokens_trained": total_tokens, "tokens_separate": separate_tokens,
            "per_shape": per_shape, "finetune_seconds": finetune_seconds,
            "cpu_seconds": sum(per_shape.values()) + finetune_seconds}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("grid")
    parser.add_argument("--set", action="append", default=[], dest="sets")
    parser.add_argument("--speeds", type=Path, default=DEFAULT_SPEEDS)
    parser.add_argument("--per-run", type=float, default=PER_RUN_SECONDS)
    args = parser.parse_args(argv)
    result = estimate(args.grid, args.sets, args.speeds, args.per_run)
    for (size, sparsity, experts, active), seconds in sorted(result["per_shape"].items()):
        print(f"{size:>4} S={sparsity:<6g} E={experts:<3} N_active={active:>9,}: {seconds:7.0f} CPU-s")
    if result["finetune_seconds"]:
        print(f"finetunes, one per run: {result['finetune_seconds']:7.0f} CPU-s")
    print(f"{result['runs']} runs, {result['tokens_trained'] / 1e6:.1f}M tokens trained "
          f"({result['tokens_separate'] / 1e6:.1f}M as separate runs): about "
          f"{result['cpu_seconds']:,.0f} CPU-s, {result['cpu_seconds'] / 120:.0f} min on 2 cores "
          "with --jobs 2 (plus the fits)")
    return 0


if __name__ == "__main__":
    from moelab.cli import run_command

    raise SystemExit(run_command(main, "sweep_cost"))
