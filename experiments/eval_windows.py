"""Is the seed spread the validation subset's? Rescore a finished study on every validation window.

    OMP_NUM_THREADS=1 .venv/bin/python experiments/eval_windows.py STUDY_DIR [--out FILE]

A study scores each run on ``train.eval_windows`` evenly spaced windows. The same windows serve
every run, but which tokens they hold could still favour one seed's model over another's. This
reloads every run's final checkpoint, scores it on the windows the run used and on all the
non-overlapping windows the validation split holds, and prints per arm the seed mean and std
and per criterion the std of the paired (dense - MoE) differences under both (docs/recipe.md,
"Why the MoE's seeds disagree most"). The rescored subset must give the run's recorded best val
loss: a run whose best eval is not its final one is refused, as its final checkpoint would not
be the model the study scored.
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

import torch
import yaml

from moelab.config import build_config
from moelab.data.batches import validation_windows
from moelab.data.prepare import prepare_data
from moelab.fileio import atomic_write_json
from moelab.model import Transformer
from moelab.train.checkpoint import latest_checkpoint, load_weights
from moelab.train.evaluation import evaluate, scored_bytes

CPU = torch.device("cpu")


def rescore(run_dir: Path) -> dict[str, float]:
    """The run's final model on its own eval windows and on all the split's windows."""
    config = build_config(yaml.safe_load((run_dir / "config.yaml").read_text()))
    summary = json.loads((run_dir / "summary.json").read_text())
    if summary["best_val_step"] != summary["steps"]:
        raise SystemExit(f"{run_dir}: best eval at step {summary['best_val_step']}, not the "
                         f"final step {summary['steps']}; its final checkpoint is another model")
    data = prepare_data(config.data, config.tokenizer_vocab_size, progress=False)
    tokens, seq_len = data.valid.tokens, config.model.max_seq_len
    model = Transformer(config.model)
    load_weights(latest_checkpoint(run_dir / "checkpoints"), model)
    scores = {}
    for name, count in (("subset", config.train.eval_windows), ("all", len(tokens) // (seq_len + 1))):
        windows_NT = validation_windows(tokens, seq_len, count)
        result = evaluate(model, windows_NT, scored_bytes(windows_NT, data.tokenizer), 64, CPU)
        scores[name], scores[f"{name}_windows"] = result.val_loss, count
    if abs(scores["subset"] - summary["best_val_loss"]) > 1e-6:
        raise SystemExit(f"{run_dir}: rescored {scores['subset']:.6f}, the run recorded "
                         f"{summary['best_val_loss']:.6f}")
    return scores


def spread_rows(runs: dict[str, dict[int, dict[str, float]]]) -> list[str]:
    seeds = sorted(runs["moe"])
    rows = []
    for name in ("subset", "all"):
        windows = runs["moe"][seeds[0]][f"{name}_windows"]
        loss = {arm: [runs[arm][s][name] for s in seeds] for arm in runs}
        arms = ", ".join(f"{arm} {statistics.mean(v):.4f} ± {statistics.stdev(v):.4f}"
                         for arm, v in loss.items())
        diffs = {arm: statistics.stdev(d - m for d, m in zip(loss[arm], loss["moe"]))
                 for arm in loss if arm != "moe"}
        paired = ", ".join(f"{arm} - moe {sd:.4f}" for arm, sd in diffs.items())
        rows.append(f"{windows:4d} windows ({name}): {arms}; paired spread {paired}")
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("study", type=Path)
    parser.add_argument("--out", type=Path, help="write every run's two scores here (JSON)")
    args = parser.parse_args()
    torch.set_num_threads(1)
    arms = json.loads((args.study / "results.json").read_text())["arms"]
    runs = {arm: {run["seed"]: rescore(args.study / "runs" / arm / f"seed{run['seed']}")
                  for run in summary["runs"]}
            for arm, summary in arms.items()}
    print("\n".join(spread_rows(runs)))
    if args.out:
        atomic_write_json(args.out, {"study": args.study.name, "runs": runs})


if __name__ == "__main__":
    main()
