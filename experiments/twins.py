"""How far a run moves when only its float rounding changes, and what that leaves to the seeds.

    .venv/bin/python experiments/twins.py A.json B.json [C.json D.json ...]
    .venv/bin/python experiments/twins.py --spread S1.json S2.json ... [--target 0.02]

The first form pairs the studies' results.json files two by two (A with B, C with D, ...): the
same preset and seeds trained twice with nothing changed but the rounding, such as eager and
``train.compile=true``, or one study on two CPUs. Per arm it prints each side's seed std and the
rms and largest difference of a run's best val loss to its twin's (docs/recipe.md, "Why the
MoE's seeds disagree most").

``--spread`` pools the std of the per-seed paired differences over every criterion of the
given studies and prints, for n seeds, the minimum detectable gap at that spread and the chance
that a study of n seeds reads a minimum detectable gap of at most ``--target`` on one and on
both criteria: its sample spread is the pooled one times sqrt(chi2(n - 1) / (n - 1)).
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
from pathlib import Path

from scipy import optimize, stats

from moelab.stats.power import min_detectable_gap


def best_losses(path: Path) -> dict[str, dict[int, float]]:
    arms = json.loads(path.read_text())["arms"]
    return {arm: {run["seed"]: run["best_val_loss"] for run in summary["runs"]}
            for arm, summary in arms.items()}


def twin_rows(path_a: Path, path_b: Path) -> list[str]:
    a, b = best_losses(path_a), best_losses(path_b)
    rows = [f"{path_a.name} -> {path_b.name}"]
    for arm in a:
        seeds = sorted(set(a[arm]) & set(b[arm]))
        diffs = [b[arm][s] - a[arm][s] for s in seeds]
        rms = math.sqrt(sum(d * d for d in diffs) / len(diffs))
        rows.append(f"  {arm:13s} seed std {statistics.stdev(a[arm][s] for s in seeds):.4f} / "
                    f"{statistics.stdev(b[arm][s] for s in seeds):.4f}   twin difference rms "
                    f"{rms:.4f} (max {max(abs(d) for d in diffs):.4f}), n={len(seeds)}")
    return rows


def mde(spread: float, n: int) -> float:
    return min_detectable_gap(spread / math.sqrt(n), n - 1)


def chance_within(target: float, pooled: float, n: int) -> float:
    """P(a study of n seeds reads a minimum detectable gap <= target) at a true spread ``pooled``."""
    largest = optimize.brentq(lambda s: mde(s, n) - target, 1e-9, 1.0)  # MDE grows with s
    return float(stats.chi2.cdf((n - 1) * (largest / pooled) ** 2, n - 1))


def spread_rows(paths: list[Path], target: float) -> list[str]:
    spreads = [gap["paired"]["std_diff"] for path in paths
               for gap in json.loads(path.read_text())["gaps"].values()]
    pooled = math.sqrt(sum(s * s for s in spreads) / len(spreads))
    rows = [f"paired spread pooled over {len(spreads)} criteria: {pooled:.4f}"]
    for n in range(3, 11):
        one = chance_within(target, pooled, n)
        rows.append(f"  {n:2d} seeds: MDE {mde(pooled, n):.4f}; P(MDE <= {target}) "
                    f"one criterion {one:.2f}, both {one * one:.2f}")
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("results", nargs="+", type=Path)
    parser.add_argument("--spread", action="store_true")
    parser.add_argument("--target", type=float, default=0.02)
    args = parser.parse_args()
    if args.spread:
        rows = spread_rows(args.results, args.target)
    else:
        if len(args.results) % 2:
            parser.error("twins come in pairs: give an even number of results files")
        pairs = zip(args.results[::2], args.results[1::2])
        rows = [row for a, b in pairs for row in twin_rows(a, b)]
    print("\n".join(rows))


if __name__ == "__main__":
    from moelab.cli import run_command

    raise SystemExit(run_command(main, "twins"))
