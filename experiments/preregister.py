"""The pre-registered prediction (docs/findings/preregistered-design.md; scored in
docs/findings/preregistered.md).

Fits every form to cpu-isoflop without s3 (its shared lr 0.01 was too high for s3:
docs/findings/isoflop-sweep-hand-read.md, "Per-cell learning rates on the IsoFLOP sweep") and
predicts the cells of the cpu-prereg grid
(s1 and s2 at S = 0, 0.75, 0.875, C = 1.3e13 FLOPs: 4x cpu-isoflop's largest budget, 3 new seeds
each). The primary form is chosen by a rule fixed here, before any target trains: the lowest
mean |error| when cpu-isoflop's own largest budget (3.24e12) is left out and predicted from the
two below it (the rollout of ``moelab.scaling.rollout``, on the same runs). That rollout also
gives each form's extrapolation term (``moelab.scaling.prediction``), so every interval is
widened by the error the form showed a budget out. Every form's prediction is kept, so each
can be scored, with and without that term.

Writes experiments/results/preregistered/prediction.json (the primary form's) and
prediction-<form>.json (every form's), and form_choice.json (the rollout that chose).

    OMP_NUM_THREADS=1 python experiments/preregister.py
    python experiments/preregister.py --markdown     # the docs' table, from the files
"""

from __future__ import annotations

import sys
from pathlib import Path

from moelab.cli import run_command
from moelab.codec import to_json
from moelab.fileio import atomic_write_json
from moelab.scaling.prediction import predict
from moelab.scaling.prediction_data import read_sweep_runs
from moelab.scaling.prediction_score import target_cells
from moelab.scaling.rollout import extrapolation, rollout

ROOT = Path(__file__).resolve().parent
SWEEP = ROOT / "results" / "sweeps" / "cpu-isoflop"
OUT = ROOT / "results" / "preregistered"
EXCLUDE = ["size=s3"]
FLOPS = 1.3e13
CELLS = [f"{size}:{s}" for size in ("s1", "s2") for s in (0.0, 0.75, 0.875)]
SEEDS = 3
FORMS = ("isoflop-parabola", "sparsity", "sparsity-interaction", "sparsity-additive",
         "sparsity-effective-size", "chinchilla")
BOOTSTRAP = 200
ROLLOUT_BOOTSTRAP = 200
TRAIN_COMMAND = ("OMP_NUM_THREADS=1 MOELAB_DATA=<local TinyStories> nice -n 5 moelab "
                 "sweep-sparsity cpu-prereg --jobs 1 --out experiments/results/preregistered/runs-sweep")


def choose_form(runs) -> tuple[str, list[dict], dict]:
    rows, rollouts = [], {}
    for form in FORMS:
        result = rollout(runs, form, sweep="cpu-isoflop without s3", bootstrap=ROLLOUT_BOOTSTRAP)
        rollouts[form] = result
        s = result.score
        rows.append({"form": form, "error": result.error,
                     "mean_abs_error": s.mean_abs_error if s else None,
                     "coverage": s.coverage if s else None,
                     "mean_error": s.mean_error if s else None,
                     "rms_standardised": s.rms_standardised if s else None})
        print(rows[-1], flush=True)
    scored = [r for r in rows if r["mean_abs_error"] is not None]
    best = min(scored, key=lambda r: (r["mean_abs_error"], -(r["coverage"] or 0)))
    return best["form"], rows, rollouts


def markdown() -> str:
    """docs/scaling.md's table of the pre-registered predictions, from the committed files."""
    from moelab.codec import from_json
    from moelab.fileio import read_json
    from moelab.scaling.prediction import Prediction

    records = [from_json(Prediction, read_json(OUT / f"prediction-{form}.json")) for form in FORMS]
    labels = [c.cell.label for c in records[0].cells]
    lines = ["| form | " + " | ".join(labels) + " | S* at C (90 %) |",
             "|---|" + "---:|" * (len(labels) + 1)]
    for record in records:
        cells = [f"{c.loss:.3f} [{c.interval[0]:.3f}, {c.interval[1]:.3f}]" if c.interval
                 else f"{c.loss:.3f}" for c in record.cells]
        optimum = record.optima[0]
        star = f"{optimum.sparsity:.3f}"
        if optimum.sparsity_interval:
            low, high = optimum.sparsity_interval
            star += f" [{low:.3f}, {high:.3f}]"
        if optimum.bound and optimum.bound.startswith("S* >="):
            star = optimum.bound.split(",")[0] + " (the grid's edge: a bound)"
        elif optimum.bound and optimum.bound.startswith("S* beyond"):
            star += ", beyond the largest S fitted"
        elif optimum.bound:
            star = "0 by construction (no S term)"
        lines.append(f"| `{record.form}` | " + " | ".join(cells) + f" | {star} |")
    choices = "; ".join(f"{c.size}: {c.sparsity:g} ("
                        + ", ".join(f"{s:g}: {share:.0%}" for s, share in c.shares.items()) + ")"
                        for c in records[0].sparsity_choices)
    lines += ["", f"Best target sparsity per size (`{records[0].form}`, shares of its draws): "
              f"{choices}."]
    return "\n".join(lines)


def main() -> int:
    if "--markdown" in sys.argv[1:]:
        print(markdown())
        return 0
    runs = read_sweep_runs(SWEEP, EXCLUDE)
    primary, rows, rollouts = choose_form(runs)
    atomic_write_json(OUT / "form_choice.json", {
        "rule": "lowest mean |error| predicting cpu-isoflop's 3.24e12 budget from 3.6e11 and "
                "1.08e12 (s3 excluded); ties: higher coverage",
        "bootstrap": ROLLOUT_BOOTSTRAP, "chosen": primary, "forms": rows})
    cells = target_cells(runs, CELLS, FLOPS)
    for form in FORMS:
        record = predict(runs, form, cells, flops=[FLOPS], seeds=SEEDS, bootstrap=BOOTSTRAP,
                         source="experiments/results/sweeps/cpu-isoflop", excluded=EXCLUDE,
                         extrapolation=extrapolation(rollouts[form]))
        record.command = TRAIN_COMMAND
        atomic_write_json(OUT / f"prediction-{form}.json", to_json(record))
        if form == primary:
            atomic_write_json(OUT / "prediction.json", to_json(record))
        print(f"{form}: written", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(run_command(main, prog="preregister"))
