"""How the cpu-finetune recipe was chosen: fine-tune two seed-0 runs at several lr and steps.

    MOELAB_DATA=... OMP_NUM_THREADS=1 .venv/bin/python experiments/finetune_pilot.py OUT

Trains the cpu-finetune grid shrunk to size s0, S in {0, 0.875}, the budget 1.08e12 and seed
0 (the preset reports seeds 1-3, so the choice is not made on the reported runs), then
fine-tunes each run's final weights on the adaptation set for every lr in LRS and steps in
STEPS with the recipe's other keys (``moelab.sweep.plan.finetune_overrides``). Prints one JSON
line per finetune and writes them to OUT/pilot.json. About 8 minutes on a busy 2-core CPU.
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import replace
from pathlib import Path

from moelab.fileio import atomic_write_json
from moelab.sweep.commands import run_sweep
from moelab.sweep.grid import load_sweep_grid
from moelab.sweep.plan import finetune_overrides
from moelab.train.finetune import finetune
from moelab.train.run_folder import RunFolder

LRS = (0.001, 0.003, 0.01, 0.03)
STEPS = (100, 200)
PILOT = ["sizes=[{name: s0, d_model: 32, n_layers: 2, n_heads: 2, n_kv_heads: 2, d_ff: 128}]",
         "sparsities=[0.0,0.875]", "flops_budgets=[1.08e12]", "seeds=[0]"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    out = parser.parse_args().out
    grid = load_sweep_grid("cpu-finetune", PILOT)
    run_sweep(grid, out / "sweep", bootstrap_replicates=0)
    records = []
    for run in sorted((out / "sweep" / "runs").glob("C*/s0/*/seed0")):
        config = RunFolder(run).read_config()
        for lr in LRS:
            for steps in STEPS:
                recipe = replace(grid.finetune, steps=steps, lr=lr)
                started = time.perf_counter()
                result = finetune(run, recipe.data, out / "finetunes" / run.parent.name /
                                  f"lr{lr}-steps{steps}", finetune_overrides(recipe, config))
                records.append({"run": str(run.relative_to(out / "sweep")), "lr": lr,
                                "steps": steps, "source_val_loss": result.reference.source_val_loss,
                                "finetune_val_loss": result.run.final_val_loss,
                                "seconds": round(time.perf_counter() - started, 1)})
                print(json.dumps(records[-1]), flush=True)
    atomic_write_json(out / "pilot.json", records)


if __name__ == "__main__":
    from moelab.cli import run_command

    raise SystemExit(run_command(main, "finetune_pilot"))
