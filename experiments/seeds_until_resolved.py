"""How many seeds does `study --until-resolved` take on the demo, against the fixed 6?
(docs/findings/study-by-hand.md, "Fair comparisons on the demo")

Each repetition is the demo study on its own block of seeds (disjoint, so the repetitions are
independent draws), run until every comparison is resolved, shown smaller than the threshold,
or at 12 seeds:

    for s in 100 200 300 400; do
      OMP_NUM_THREADS=1 moelab study demo --until-resolved --seeds 3 --max-seeds 12 --jobs 2 \\
          --set train.seed=$s --out out/demo-resolved-$s
    done
    python experiments/seeds_until_resolved.py out/demo-resolved-*

Writes experiments/results/seeds_until_resolved.json: per repetition the seeds it trained, each
comparison's stopping round and reason, and beside it what the fixed design would have said:
the paired t interval (fixed-sample, 95 %, Holm over the two comparisons) on the repetition's
first 6 seeds, the demo's default count, and on every seed it trained (a fixed design of that
size, tested once).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
from scipy import stats

OUT = Path(__file__).resolve().parent / "results" / "seeds_until_resolved.json"
FIXED_SEEDS = 6


def seed_losses(results: dict, arm: str) -> dict[int, float]:
    return {run["seed"]: run["best_val_loss"] for run in results["arms"][arm]["runs"]}


def fixed_sample(results: dict, order: list[int], moe: str, dense: str,
                 seeds: int = FIXED_SEEDS) -> dict:
    """The paired t interval and p of dense - moe on the first ``seeds`` seeds of ``order``."""
    first = order[:seeds]
    moe_loss, dense_loss = seed_losses(results, moe), seed_losses(results, dense)
    diff = np.array([dense_loss[s] - moe_loss[s] for s in first])
    low, high = stats.t.interval(0.95, len(diff) - 1, diff.mean(), stats.sem(diff))
    return {"seeds": first, "gap": float(diff.mean()), "ci": [float(low), float(high)],
            "p": float(stats.ttest_1samp(diff, 0.0).pvalue)}


def holm(p_values: list[float]) -> list[float]:
    order = np.argsort(p_values)
    adjusted, running = [0.0] * len(p_values), 0.0
    for rank, index in enumerate(order):
        running = max(running, min(1.0, (len(p_values) - rank) * p_values[index]))
        adjusted[index] = running
    return adjusted


def repetition(folder: Path) -> dict:
    plan = json.loads((folder / "plan.json").read_text())
    results = json.loads((folder / "results.json").read_text())
    sequential = results["sequential"]
    order = plan["sequential"]["seed_order"]
    looks = sequential["looks"]
    comparisons = []
    for comparison in sequential["comparisons"]:
        stop = comparison["stopped_at_round"]
        last = comparison["looks"][stop - 1]
        comparisons.append({
            "criterion": comparison["criterion"], "stopped_at_round": stop,
            "seeds_at_stop": looks[stop - 1], "reason": comparison["reason"],
            "gap": last["gap"], "interval": [last["low"], last["high"]],
            "fixed_6": fixed_sample(results, order, comparison["moe_arm"],
                                    comparison["dense_arm"]),
            # A fixed design of the size the sequential one reached, tested once.
            "fixed_all": fixed_sample(results, order, comparison["moe_arm"],
                                      comparison["dense_arm"],
                                      looks[sequential["rounds_run"] - 1])})
    for design in ("fixed_6", "fixed_all"):
        for comparison, adjusted in zip(comparisons,
                                        holm([c[design]["p"] for c in comparisons])):
            comparison[design]["p_holm"] = adjusted
    return {"folder": folder.name, "first_seed": order[0], "seed_order": order,
            "seeds_trained": looks[sequential["rounds_run"] - 1], "comparisons": comparisons,
            "losses": {arm: {str(seed): loss for seed, loss in seed_losses(results, arm).items()}
                       for arm in results["arms"]}}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folders", type=Path, nargs="+")
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args(argv)
    repetitions = [repetition(folder) for folder in args.folders]
    seeds = [r["seeds_trained"] for r in repetitions]
    summary = {"repetitions": repetitions, "mean_seeds": float(np.mean(seeds)),
               "fixed_seeds": FIXED_SEEDS}
    args.out.write_text(json.dumps(summary, indent=1) + "\n")
    for r in repetitions:
        print(f"seeds from {r['first_seed']}: {r['seeds_trained']} seeds")
        for c in r["comparisons"]:
            fixed = c["fixed_6"]
            print(f"  {c['criterion']}: round {c['stopped_at_round']} ({c['seeds_at_stop']} seeds) "
                  f"{c['reason']}, gap {c['gap']:+.4f} [{c['interval'][0]:+.4f}, "
                  f"{c['interval'][1]:+.4f}]; fixed 6: {fixed['gap']:+.4f} [{fixed['ci'][0]:+.4f}, "
                  f"{fixed['ci'][1]:+.4f}] p {fixed['p']:.2g} (Holm {fixed['p_holm']:.2g})")
    print(f"mean seeds {summary['mean_seeds']:.1f} against the fixed {FIXED_SEEDS}; wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
