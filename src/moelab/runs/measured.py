"""The complete runs under some folders as measured points: what ``moelab score`` and the
pre-registered findings page set against a prediction (``moelab.scaling.prediction_score``)."""

from __future__ import annotations

import math
from pathlib import Path

from moelab.fileio import read_json
from moelab.scaling.prediction_score import MeasuredRun
from moelab.train.run_summary import parse_summary

MEASURED_KEYS = ("best_val_loss", "total_params", "active_params", "tokens",
                 "flops_per_token_6n")
"""The summary keys a measured run needs (a complete run without one is a one-line error)."""


def measured_runs(folders: list[Path]) -> list[MeasuredRun]:
    """Every complete run (its summary.json says so) under ``folders``, in path order; runs cut
    short or still training are left out, so a partly trained sweep scores what is done."""
    measured = []
    for folder in folders:
        for path in sorted(Path(folder).rglob("summary.json")):
            summary = parse_summary(read_json(path), path)
            if summary.status != "complete":
                continue
            summary.require(MEASURED_KEYS, path)
            tokens = float(summary.tokens or 0)
            measured.append(MeasuredRun(
                run=str(path.parent), total_params=float(summary.total_params or 0),
                active_params=float(summary.active_params or 0), tokens=tokens,
                flops=tokens * float(summary.flops_per_token_6n or 0),
                loss=float(summary.best_val_loss or math.nan)))
    return measured
