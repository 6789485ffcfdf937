"""A finished run folder written without training, for the study-layer tests that stand a fake
trainer in for ``moelab.train.train`` (imported by them, not collected)."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from moelab.config import to_dict


def write_fake_run(run_dir: Path, config, loss: float) -> None:
    """config.yaml, one eval event and a complete summary.json with ``loss`` as every loss."""
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "config.yaml").write_text(yaml.safe_dump(to_dict(config)))
    (run_dir / "metrics.jsonl").write_text(
        json.dumps({"kind": "eval", "step": 1, "tokens": 100, "val_loss": loss}) + "\n")
    (run_dir / "summary.json").write_text(json.dumps({
        "status": "complete", "best_val_loss": loss, "best_val_bpb": loss / 2,
        "best_val_step": 1, "final_val_loss": loss, "final_val_bpb": loss / 2,
        "active_params": 1000, "total_params": 2000, "non_embedding_params": 500,
        "flops_per_token_6n": 6000, "tokens": config.train.max_tokens, "steps": 1,
        "wall_time_s": 1.0, "tokens_per_s": 100.0, "seed": config.train.seed, "collapse": False,
    }))
