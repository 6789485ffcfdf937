"""Do per-cell learning rates move the cpu-isoflop answers?
(setup: docs/findings/isoflop-sweep-hand-read.md, "Per-cell learning rates on the IsoFLOP
sweep"; the readings of isoflop_lr.json: docs/findings/compute-optimal-sparsity.md)

Compares two sweep folders of the same grid and seeds: one trained at the preset's
shared lr, one with ``--lr-grid`` (each size x sparsity x budget family at its own lr, chosen on a
selection seed no result uses). Both need results.csv, isoflop.json, fixed_size.json and their
run folders' config.yaml; the tuned one its selection runs. The run:

    # the tuned sweep: the two smaller budgets of cpu-isoflop (its largest alone costs two thirds)
    OMP_NUM_THREADS=1 moelab sweep-sparsity cpu-isoflop --lr-grid 0.005,0.01,0.02 \\
        --select-seeds 1 --set 'flops_budgets=[3.6e+11,1.08e+12]' --jobs 2 --out out/iso-lr
    # the same grid at the preset's shared lr 0.01, on the same machine and code: the tuned
    # sweep's runs of the cells that chose 0.01 are these runs (copy them into
    # out/iso-shared/runs/ first and only the others train: 36 of 80 here)
    OMP_NUM_THREADS=1 moelab sweep-sparsity cpu-isoflop --set 'flops_budgets=[3.6e+11,1.08e+12]' \
        --jobs 2 --out out/iso-shared
    python experiments/isoflop_lr.py out/iso-shared out/iso-lr

Writes experiments/results/isoflop_lr.json: each cell's chosen lr; the per-run loss change at
the same seed, cell and budget; L* and N* per budget and sparsity with their intervals; S*(C);
and the fixed-N S* per size and budget, each shared against tuned.
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
from pathlib import Path

import numpy as np
import yaml

OUT = Path(__file__).resolve().parent / "results" / "isoflop_lr.json"


def read_rows(folder: Path) -> dict[str, float]:
    """best validation loss by run name (budget/size/sparsity/seed) from results.csv."""
    with open(folder / "results.csv", newline="") as f:
        return {row["run"].removeprefix("runs/"): float(row["best_val_loss"])
                for row in csv.DictReader(f)}


def chosen_lrs(folder: Path) -> dict[str, float]:
    """Each cell's lr (budget/size/sparsity) as its runs trained it (their config.yaml)."""
    lrs = {}
    for config in sorted((folder / "runs").glob("*/*/*/seed*/config.yaml")):
        budget, size, sparsity = config.parent.relative_to(folder / "runs").parts[:3]
        lrs[f"{budget}/{size}/{sparsity}"] = float(yaml.safe_load(config.read_text())["train"]["lr"])
    return lrs


def selection_losses(folder: Path) -> dict[str, dict[str, float]]:
    """Each family's (size/sparsity) mean best validation loss at every lr of the grid over its
    budgets and selection seeds: what the choice was made on (select/lr<X>/runs/)."""
    losses: dict[str, dict[str, list[float]]] = {}
    for summary in sorted((folder / "select").glob("lr*/runs/*/*/*/seed*/summary.json")):
        lr = summary.relative_to(folder / "select").parts[0].removeprefix("lr")
        size, sparsity = summary.parent.parent.parent.name, summary.parent.parent.name
        value = json.loads(summary.read_text())["best_val_loss"]
        losses.setdefault(f"{size}/{sparsity}", {}).setdefault(lr, []).append(value)
    return {family: {lr: float(np.mean(v)) for lr, v in by_lr.items()}
            for family, by_lr in sorted(losses.items())}


def isoflop_minima(folder: Path) -> list[dict]:
    cells = json.loads((folder / "isoflop.json").read_text())["sparsity_optima"]["cells"]
    return [{"flops": c["flops"], "sparsity": c["sparsity"], "loss": c["loss"],
             "loss_ci": c["loss_ci"], "params": c["params"], "params_ci": c["params_ci"],
             "inside_data": c["inside_data"], "well_supported": c["support"]["well_supported"]}
            for c in cells]


def s_star_by_budget(minima: list[dict]) -> dict[str, float]:
    budgets = sorted({m["flops"] for m in minima})
    return {f"{b:.3g}": min((m for m in minima if m["flops"] == b), key=lambda m: m["loss"])
            ["sparsity"] for b in budgets}


def fixed_size(folder: Path) -> dict:
    record = json.loads((folder / "fixed_size.json").read_text())
    return {"cells": {f"{c['budget']}/{c['size']}": c["text"] for c in record["cells"]},
            "rises_with_size": record["rises_with_size"],
            "falls_with_budget": record["falls_with_budget"]}


def loss_changes(shared: dict[str, float], tuned: dict[str, float]) -> dict:
    names = sorted(set(shared) & set(tuned))
    change = np.array([tuned[n] - shared[n] for n in names])
    return {"runs": len(names), "identical": int(np.sum(change == 0.0)),
            "mean": float(change.mean()), "min": float(change.min()), "max": float(change.max()),
            "per_run": {n: float(d) for n, d in zip(names, change)}}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("shared", type=Path, help="the sweep folder at the shared lr")
    parser.add_argument("tuned", type=Path, help="the sweep folder trained with --lr-grid")
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args(argv)
    shared_min, tuned_min = isoflop_minima(args.shared), isoflop_minima(args.tuned)
    result = {
        "lrs": chosen_lrs(args.tuned),
        "selection": selection_losses(args.tuned),
        "loss_change": loss_changes(read_rows(args.shared), read_rows(args.tuned)),
        "isoflop_minima": {"shared": shared_min, "tuned": tuned_min},
        "s_star": {"shared": s_star_by_budget(shared_min), "tuned": s_star_by_budget(tuned_min)},
        "fixed_size": {"shared": fixed_size(args.shared), "tuned": fixed_size(args.tuned)},
    }
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    lrs = result["lrs"]
    print(f"lrs: {sum(lr != 0.01 for lr in lrs.values())} of {len(lrs)} cells off 0.01: "
          + ", ".join(f"{u} {lr:g}" for u, lr in sorted(lrs.items()) if lr != 0.01))
    change = result["loss_change"]
    print(f"per-run loss change (tuned - shared): mean {change['mean']:+.4f}, range "
          f"[{change['min']:+.4f}, {change['max']:+.4f}], {change['identical']} of "
          f"{change['runs']} runs identical")
    for s, t in zip(shared_min, tuned_min):
        print(f"C={s['flops']:.3g} S={s['sparsity']:g}: L* {s['loss']:.4f} "
              f"[{s['loss_ci'][0]:.4f}, {s['loss_ci'][1]:.4f}] -> {t['loss']:.4f} "
              f"[{t['loss_ci'][0]:.4f}, {t['loss_ci'][1]:.4f}]; N* {s['params']:.3g} -> "
              f"{t['params']:.3g}")
    print(f"S*(C): shared {result['s_star']['shared']}, tuned {result['s_star']['tuned']}")
    for key, text in result["fixed_size"]["shared"]["cells"].items():
        print(f"fixed-N S* {key}: {text} -> {result['fixed_size']['tuned']['cells'].get(key)}")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
