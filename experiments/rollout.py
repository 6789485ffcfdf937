"""How well do moelab's forms predict a budget they have not seen? (the generated
docs/findings/prediction-calibration.md reads rollout.json)

For every stored sweep with >= 3 budgets (experiments/results/sweeps/*/results.csv) and every
form (the five laws and the IsoFLOP parabolas), leave out the largest budget, predict its cells
from the smaller ones with 90 % prediction intervals (``moelab.scaling.prediction``) and score
the prediction against the runs left out. Writes experiments/results/rollout.json: per sweep
and form, the coverage, mean error, mean |error| and rms standardised error; per form, the
same pooled over sweeps.

    OMP_NUM_THREADS=1 python experiments/rollout.py [--bootstrap 100] [--starts 512] [SWEEP...]
    python experiments/rollout.py --markdown     # the docs' tables, from rollout.json
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

from moelab.cli import run_command
from moelab.codec import to_json
from moelab.fileio import atomic_write_json
from moelab.scaling.prediction_data import read_sweep_runs
from moelab.scaling.rollout import rollout

RESULTS = Path(__file__).resolve().parent / "results"
OUT = RESULTS / "rollout.json"
FORMS = ("sparsity", "sparsity-interaction", "sparsity-additive", "sparsity-effective-size",
         "chinchilla", "isoflop-parabola")


def sweeps_with_budgets(names: list[str]) -> tuple[list[Path], dict[str, str]]:
    """The sweeps with >= 3 budgets, each set of runs once: a sweep whose fitted rows equal an
    earlier one's (a re-analysis of the same runs) is skipped, naming the one it repeats."""
    folders = [RESULTS / "sweeps" / n for n in names] if names else \
        sorted(p.parent for p in (RESULTS / "sweeps").glob("*/results.csv"))
    kept, repeats, seen = [], {}, {}
    for folder in folders:
        runs = read_sweep_runs(folder)
        if len(runs.budgets()) < 3:
            continue
        digest = runs.data_hash()
        if digest in seen:
            repeats[folder.name] = seen[digest]
            continue
        seen[digest] = folder.name
        kept.append(folder)
    return kept, repeats


def without_run_lists(record: dict) -> dict:
    """A rollout's record less each cell's list of run paths (the table does not need them)."""
    if record.get("score"):
        for cell in record["score"]["cells"]:
            cell.pop("runs", None)
    return record


def pooled(rows: list[dict]) -> dict[str, dict]:
    by_form: dict[str, dict] = {}
    for form in FORMS:
        scores = [r["score"] for r in rows if r["form"] == form and r["score"]]
        cells = [c for s in scores for c in s["cells"] if c["inside"] is not None]
        if not cells:
            by_form[form] = {"sweeps": 0, "cells": 0}
            continue
        errors = np.array([c["error"] for c in cells])
        z = np.array([c["standardised"] for c in cells])
        by_form[form] = {
            "sweeps": len(scores), "cells": len(cells),
            "coverage": float(np.mean([c["inside"] for c in cells])),
            "mean_error": float(errors.mean()), "mean_abs_error": float(np.abs(errors).mean()),
            "rms_standardised": float(np.sqrt(np.mean(z ** 2))),
            "sweep_coverage": {r["sweep"]: r["score"]["coverage"] for r in rows
                               if r["form"] == form and r["score"]},
        }
    return by_form


def markdown(payload: dict) -> str:
    """The rollout tables, from rollout.json (the findings page renders its own)."""
    lines = ["| form | sweeps | cells | inside 90 % interval | mean error | mean abs error | rms z |",
             "|---|---:|---:|---:|---:|---:|---:|"]
    for form, row in payload["by_form"].items():
        if not row["cells"]:
            lines.append(f"| `{form}` | 0 | 0 | – | – | – | – |")
            continue
        inside = round(row["coverage"] * row["cells"])
        lines.append(f"| `{form}` | {row['sweeps']} | {row['cells']} | {inside}/{row['cells']} "
                     f"({row['coverage']:.0%}) | {row['mean_error']:+.4f} | "
                     f"{row['mean_abs_error']:.4f} | {row['rms_standardised']:.2f} |")
    sweeps = sorted({r["sweep"] for r in payload["rollouts"]})
    lines += ["", "| sweep | held out | " + " | ".join(f"`{f}`" for f in FORMS) + " |",
              "|---|---:|" + "---:|" * len(FORMS)]
    for sweep in sweeps:
        cells = []
        held = ""
        for form in FORMS:
            found = [r for r in payload["rollouts"] if r["sweep"] == sweep and r["form"] == form]
            score = found[0]["score"] if found else None
            held = held or (f"{found[0]['held_out_budget']:.3g}" if found else "")
            cells.append("n/a" if not score or not score["scored"]
                         else f"{score['inside']}/{score['scored']}")
        lines.append(f"| {sweep} | {held} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("sweeps", nargs="*", help="sweep names under experiments/results/sweeps")
    parser.add_argument("--bootstrap", type=int, default=100)
    parser.add_argument("--starts", type=int, default=512)
    parser.add_argument("--forms", default=",".join(FORMS))
    parser.add_argument("--out", default=str(OUT))
    parser.add_argument("--markdown", action="store_true",
                        help="print the docs' tables from --out and stop")
    args = parser.parse_args()
    if args.markdown:
        print(markdown(json.loads(Path(args.out).read_text())))
        return 0
    rows = []
    folders, repeats = sweeps_with_budgets(args.sweeps)
    for folder in folders:
        runs = read_sweep_runs(folder)
        for form in args.forms.split(","):
            result = rollout(runs, form, sweep=folder.name, bootstrap=args.bootstrap,
                             max_starts=args.starts)
            record = without_run_lists(to_json(result))
            rows.append(record)
            s = result.score
            summary = result.error or (f"coverage {s.inside}/{s.scored}, mean error "
                                       f"{s.mean_error:+.4f}, rms z {s.rms_standardised:.2f}"
                                       if s and s.scored else "nothing scored")
            print(f"{folder.name:<22} {form:<24} {summary}", flush=True)
    atomic_write_json(args.out, {
        "command": "python experiments/rollout.py " + " ".join(sys.argv[1:]),
        "level": 0.9, "bootstrap": args.bootstrap, "starts": args.starts, "seed": 0,
        "repeats": repeats,
        "by_form": pooled(rows), "rollouts": rows})
    return 0


if __name__ == "__main__":
    sys.exit(run_command(main, prog="rollout"))
