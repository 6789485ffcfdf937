"""Speed of the Chinchilla law fit: the full 4,500-start grid on Epoch's 240 points, and the
batched L-BFGS against a naive loop of one scipy L-BFGS-B call per start, side by side.

    .venv/bin/python benchmarks/fit_speed.py [--subset 300]
    .venv/bin/python benchmarks/fit_speed.py --smoke --out /tmp/fit_speed.json  # 3 starts each

Writes benchmarks/results/fit_speed.json (``--out``). Read the ratio, not the absolute times:
the machine is shared.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np
import scipy.optimize

from moelab.fileio import atomic_write_json
from moelab.scaling.fitting import HuberObjective, fit_law
from moelab.scaling.laws import CHINCHILLA, log_features
from moelab.scaling.optimize import batched_lbfgs
from moelab.scaling.table import drop_highest_loss, read_fit_table

from common import add_output_arguments, machine, parse_checked

ROOT = Path(__file__).resolve().parents[1]
EPOCH_CSV = ROOT / "tests" / "fixtures" / "chinchilla_epoch_extracted.csv"


def naive_loop(objective: HuberObjective, starts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """What one would write first: scipy L-BFGS-B from each start in turn (default tolerances)."""
    def fun(x):
        f, g = objective(x[None])
        return float(f[0]), g[0]

    results = [scipy.optimize.minimize(fun, x0, jac=True, method="L-BFGS-B") for x0 in starts]
    return np.array([r.x for r in results]), np.array([r.fun for r in results])


def timed(fn):
    start = time.perf_counter()
    value = fn()
    return value, time.perf_counter() - start


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--subset", type=int, default=300, help="starts for the side-by-side")
    add_output_arguments(parser, "fit_speed")
    args = parse_checked(parser, argv)
    full_starts = None  # the law's whole grid
    if args.smoke:
        args.subset, full_starts = 3, 3

    points = drop_highest_loss(
        read_fit_table(EPOCH_CSV, False, {"N": "Model Size", "C": "Training FLOP"}), 5)
    objective = HuberObjective(CHINCHILLA, log_features(CHINCHILLA, points), points["loss"])

    full_fit, full_s = timed(lambda: fit_law(CHINCHILLA, points, max_starts=full_starts))
    subset = CHINCHILLA.start_grid(args.subset)
    batched, batched_s = timed(lambda: batched_lbfgs(lambda x, rows: objective(x), subset))
    (_, naive_f), naive_s = timed(lambda: naive_loop(objective, subset))

    result = {
        "command": f"python benchmarks/fit_speed.py --subset {args.subset}",
        "machine": {**machine(), "numpy": np.__version__, "scipy": scipy.__version__},
        "points": int(len(points["loss"])),
        "full_grid": {"starts": full_fit.num_starts, "wall_s": full_s,
                      "objective": full_fit.objective, "params": full_fit.params},
        "side_by_side": {
            "starts": int(len(subset)),
            "batched_s": batched_s, "naive_scipy_loop_s": naive_s,
            "speedup": naive_s / batched_s,
            "batched_best_objective": float(np.min(batched.fun)),
            "naive_best_objective": float(np.min(naive_f)),
            "naive_full_grid_estimate_s": naive_s / len(subset) * full_fit.num_starts,
        },
    }
    out = atomic_write_json(args.out, result)
    print(json.dumps(result, indent=2))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
