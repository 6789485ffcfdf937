"""Reading a sweep folder's files, each problem a one-line error naming the file.

The analysis (``sweep_analysis``) and the report (``sweep_report``) read a sweep through these
alone: ``grid.json`` as a plain dict (what ``moelab sweep-sparsity`` wrote), ``results.csv`` and
the analysis's JSON files. Neither imports the sweep runner.
"""

from __future__ import annotations

import json
from pathlib import Path

from moelab.errors import ConfigError, MoelabError
from moelab.sweep.grid import with_seeds_key
from moelab.scaling.table import read_csv_rows

SWEEP_FIT_COLUMNS = {"N": "N_total", "loss": "best_val_loss"}
"""How results.csv's columns map to the law's: N is the total parameter count."""

GRID_FIELDS = {"name": str, "base": str, "sizes": list, "sparsities": list, "top_k": int,
               "mode": str, "flops_budgets": list, "token_budgets": list, "seeds": list,
               "holdout": str}
"""The grid.json keys the analysis and the report read, with their types."""


def read_json(path: Path) -> dict:
    """A JSON object from ``path``, or a one-line error naming it."""
    try:
        record = json.loads(path.read_bytes().decode("utf-8"))
    except OSError as exc:
        raise MoelabError(f"cannot read {path}: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        raise MoelabError(f"{path} is not UTF-8 text (byte {exc.start})") from None
    except (ValueError, RecursionError):
        raise MoelabError(f"{path} is not JSON: rerun moelab sweep-sparsity to rewrite it") from None
    if not isinstance(record, dict):
        raise MoelabError(f"{path} is invalid: expected a JSON object")
    return record


def read_optional_json(path: Path) -> dict | None:
    return read_json(path) if path.exists() else None


def read_grid_record(out_dir: Path) -> dict:
    """grid.json as a dict, its fields checked (a hand-edited or torn file is named)."""
    path = Path(out_dir) / "grid.json"
    try:
        record = with_seeds_key(read_json(path))  # older files name one seed
    except ConfigError as exc:
        raise MoelabError(f"{path}: {exc}") from None
    for key, kind in GRID_FIELDS.items():
        value = record.get(key)
        if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
            raise MoelabError(f"{path}: {key}={value!r} is invalid: expected a {kind.__name__} "
                              "(the grid moelab sweep-sparsity wrote)")
    if not all(isinstance(s, dict) and isinstance(s.get("name"), str) for s in record["sizes"]):
        raise MoelabError(f"{path}: sizes is invalid: expected a list of mappings with a name")
    for key in ("sparsities", "flops_budgets", "token_budgets", "seeds"):
        if not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in record[key]):
            raise MoelabError(f"{path}: {key}={record[key]!r} is invalid: expected numbers")
    return record


def read_results(out_dir: Path) -> tuple[list[str], list[dict[str, str]]] | None:
    """(header, rows) of results.csv; None when there are no results yet (no file, or a header
    alone: every run failed or none finished). A malformed file is an error naming it."""
    path = Path(out_dir) / "results.csv"
    if not path.exists():
        return None
    try:
        return read_csv_rows(path)
    except MoelabError as exc:
        if "has no data rows" in str(exc):
            return None
        raise


def row_seed(row: dict[str, str]) -> str:
    """A results.csv row's seed: its seed column, or its run folder's name in older files."""
    return row.get("seed") or row["run"].rsplit("/seed", 1)[-1]


def describe_grid(grid: dict) -> str:
    budgets = (", ".join(f"{b:.3g} FLOPs" for b in grid["flops_budgets"])
               or ", ".join(f"{int(b):,} tokens" for b in grid["token_budgets"]))
    sparsities = ", ".join(f"{s:g}" for s in grid["sparsities"])
    seeds = ("seed " if len(grid["seeds"]) == 1 else "seeds ") + ", ".join(map(str, grid["seeds"]))
    return (f"{len(grid['sizes'])} sizes ({', '.join(s['name'] for s in grid['sizes'])}) x "
            f"{len(grid['sparsities'])} sparsities ({sparsities}, top-{grid['top_k']}, "
            f"{grid['mode']}) x {len(grid['flops_budgets'] or grid['token_budgets'])} budgets "
            f"({budgets}), {seeds}, base config {grid['base']!r}")
