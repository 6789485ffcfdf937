"""Reading fit data from a CSV: column mapping, derived tokens, validation, point selection.

Canonical columns: ``N`` (parameters), ``D`` (training tokens), ``C`` (training FLOPs, may replace
D), ``S`` (sparsity, sparsity law only), ``E`` (experts) and ``G`` (granularity) for the laws that
read them, ``N_active`` (optional; required by the laws in active parameters) and ``loss``. A mapping such as
``{"N": "Model Size", "C": "Training FLOP"}`` names the CSV column behind a canonical one.

When D is absent it is derived from C as D = C / (6 N_active) if an N_active column is mapped
(an MoE spends FLOPs on its active parameters only), else D = C / (6 N).
"""

from __future__ import annotations

import csv
import math
import re
from collections.abc import Iterable
from pathlib import Path

import numpy as np

from moelab.errors import MoelabError, short_repr

CANONICAL_COLUMNS = ("N", "D", "C", "S", "E", "G", "N_active", "loss")
RESULTS_CSV_COLUMNS = {"N": "N_total", "loss": "best_val_loss"}
"""The CSV columns behind canonical names in moelab's own results.csv (a sweep's): N is the total
parameter count, the loss the best validation loss. Used when a CSV lacks the canonical name."""


def with_default_columns(header: list[str], column_map: dict[str, str] | None,
                         defaults: dict[str, str] = RESULTS_CSV_COLUMNS) -> dict[str, str]:
    """``column_map`` plus each default whose canonical name the CSV lacks and the map leaves
    unset, when the CSV has the default's column: moelab's results.csv needs no --columns."""
    mapping = dict(column_map or {})
    for key, column in defaults.items():
        if key not in mapping and key not in header and column in header:
            mapping[key] = column
    return mapping


def parse_column_map(items: list[str] | None) -> dict[str, str]:
    """``['N=Model Size,C=Training FLOP']`` (comma-separated and/or repeated) -> a mapping."""
    mapping: dict[str, str] = {}
    for item in items or []:
        for pair in item.split(","):
            key, sep, value = pair.partition("=")
            key, value = key.strip(), value.strip().strip('"').strip("'")
            if not sep or not key or not value:
                raise MoelabError(
                    f"--columns {short_repr(pair)} is invalid: "
                    "expected NAME=CSV_COLUMN, e.g. N=\"Model Size\""
                )
            if key not in CANONICAL_COLUMNS:
                raise MoelabError(
                    f"--columns name {short_repr(key)} is invalid: allowed {', '.join(CANONICAL_COLUMNS)}"
                )
            mapping[key] = value
    return mapping


def read_fit_table(path: str | Path, needs_sparsity: bool,
                   column_map: dict[str, str] | None = None,
                   needs: tuple[str, ...] = ()) -> dict[str, np.ndarray]:
    """Columns N, D, loss (and S, and the canonical columns ``needs`` names) as float arrays,
    validated; D derived from C when needed."""
    path = Path(path)
    header, rows = read_csv_rows(path)
    return fit_table_from_rows(path, header, rows, needs_sparsity,
                               with_default_columns(header, column_map), needs)


def fit_table_from_rows(path: Path, header: list[str], rows: list[dict[str, str]],
                        needs_sparsity: bool, column_map: dict[str, str] | None = None,
                        needs: tuple[str, ...] = ()) -> dict[str, np.ndarray]:
    """``read_fit_table`` on rows already read (``path`` only names the file in errors)."""
    names = {key: key for key in CANONICAL_COLUMNS}
    names.update(column_map or {})

    def column(key: str) -> np.ndarray:
        return numeric_column(path, rows, names[key])

    required = ["N", "loss"] + (["S"] if needs_sparsity else [])
    required += [key for key in needs if key in ("S", "E", "G", "N_active") and key not in required]
    for key in required:
        require_column(path, header, names[key], key)
    columns = {key: column(key) for key in required}
    if names["N_active"] in header and "N_active" not in columns:
        columns["N_active"] = column("N_active")
    if names["D"] in header:
        columns["D"] = column("D")
    elif names["C"] in header:
        columns["C"] = column("C")
        flops_params = columns.get("N_active", columns["N"])
        columns["D"] = columns["C"] / (6.0 * flops_params)
    else:
        raise MoelabError(
            f"{path}: needs a tokens column {short_repr(names['D'])} "
            f"or a FLOPs column {short_repr(names['C'])} "
            f"(map others with --columns D=... or C=...); found: {', '.join(header)}"
        )
    validate_columns(path, columns)
    return columns


MAX_CSV_ROWS = 10_000
"""The most data rows a fit table may hold: a scaling sweep has hundreds of points, and a fit of
a million (its bootstrap, its start grid) would run for hours without a word."""


def read_csv_rows(path: Path, max_rows: int = MAX_CSV_ROWS
                  ) -> tuple[list[str], list[dict[str, str]]]:
    """The header and rows of a CSV file as a spreadsheet writes it (a UTF-8 byte-order mark
    is no part of the first column's name); a row with more cells than the header, or more
    rows than ``max_rows``, is refused naming its line."""
    try:
        with open(path, newline="", encoding="utf-8-sig") as f:
            header, rows = csv_records(f, str(path), max_rows)
    except OSError as exc:
        raise MoelabError(f"cannot read {path}: {exc.strerror or exc}") from None
    if not header or not rows:
        raise MoelabError(f"{path} has no data rows: expected a header line and one row per point")
    repeated = sorted({name for name in header if header.count(name) > 1})
    if repeated:  # csv.DictReader would keep the last column of a name, silently
        raise MoelabError(f"{path}: the header names {', '.join(map(short_repr, repeated))} "
                          f"more than once: every column needs its own name")
    return header, rows


def csv_records(lines: Iterable[str], where: str,
                max_rows: int = MAX_CSV_ROWS) -> tuple[list[str], list[dict[str, str]]]:
    """The header and rows of CSV ``lines`` (``where`` names them in errors). A row longer
    than the header would lose its extra cells silently (``csv.DictReader`` files them under
    None): refused, as is a table of more than ``max_rows`` rows (read no further)."""
    reader = csv.DictReader(lines)
    rows: list[dict] = []
    try:
        for row in reader:
            line = reader.line_num
            if None in row:
                raise MoelabError(
                    f"{where} line {line} has {len(reader.fieldnames or []) + len(row[None])} "
                    f"cells, more than the header's {len(reader.fieldnames or [])}: every row "
                    "needs one cell per column (a stray comma or an unnamed column?)")
            if len(rows) == max_rows:
                raise MoelabError(f"{where} has more than {max_rows:,} rows: allowed at most "
                                  f"{max_rows:,} (fit a sample of the points)")
            rows.append(row)
    except (csv.Error, UnicodeDecodeError) as exc:
        raise MoelabError(f"{where} is not a readable CSV file: {exc}") from None
    header = [name.lstrip("\ufeff") for name in reader.fieldnames or []]
    if header != list(reader.fieldnames or []):
        rows = [dict(zip(header, row.values())) for row in rows]
    return header, rows


def require_column(path: Path, header: list[str], name: str, key: str) -> None:
    if name not in header:
        raise MoelabError(
            f"{path}: column {short_repr(name)} (for {key}) is missing; found: {', '.join(header)} "
            f"(map names with --columns {key}=...)"
        )


def numeric_column(path: Path, rows: list[dict[str, str]], name: str) -> np.ndarray:
    values = []
    for line, row in enumerate(rows, start=2):  # line 1 is the header
        text = (row.get(name) or "").strip()
        try:
            value = float(text)
        except ValueError:
            raise MoelabError(f"{path} line {line}: {name}={short_repr(text)} is not a number") from None
        if not math.isfinite(value):
            raise MoelabError(f"{path} line {line}: {name}={text} is invalid: must be a finite number")
        values.append(value)
    return np.array(values, dtype=np.float64)


def validate_columns(path: Path, columns: dict[str, np.ndarray]) -> None:
    """N, D, C, N_active and loss > 0, S in [0, 1): a one-line error naming the first bad value."""
    for key in ("N", "D", "C", "N_active", "loss"):
        if key in columns and np.any(columns[key] <= 0):
            bad = int(np.flatnonzero(columns[key] <= 0)[0])
            raise MoelabError(
                f"{path} line {bad + 2}: {key}={columns[key][bad]:g} is invalid: must be > 0"
            )
    if "S" in columns:
        outside = (columns["S"] < 0) | (columns["S"] >= 1)
        if np.any(outside):
            bad = int(np.flatnonzero(outside)[0])
            raise MoelabError(
                f"{path} line {bad + 2}: S={columns['S'][bad]:g} is invalid: allowed [0, 1)"
            )


# --------------------------------------------------------------------------------------------
# Selecting points
# --------------------------------------------------------------------------------------------


def select(columns: dict[str, np.ndarray], mask: np.ndarray) -> dict[str, np.ndarray]:
    return {key: values[mask] for key, values in columns.items()}


def drop_highest_loss(columns: dict[str, np.ndarray], count: int) -> dict[str, np.ndarray]:
    """Drop the ``count`` points with the highest loss (Epoch's convention drops 5)."""
    num_points = len(columns["loss"])
    if count < 0 or count >= num_points:
        raise MoelabError(
            f"--drop-highest {count} is invalid: allowed 0..{num_points - 1} for {num_points} points"
        )
    if count == 0:
        return columns
    keep = np.sort(np.argsort(columns["loss"], kind="stable")[: num_points - count])
    mask = np.zeros(num_points, dtype=bool)
    mask[keep] = True
    return select(columns, mask)


_HOLDOUT = re.compile(r"^\s*(N|D|C|S|N_active|loss)\s*(>=|<=|==|=|>|<)\s*(max|min|[-+0-9.eE]+)\s*$")


def holdout_mask(columns: dict[str, np.ndarray], spec: str) -> np.ndarray:
    """Which points a spec like ``S=max``, ``S>=0.9`` or ``N>1e8`` holds out of the fit."""
    match = _HOLDOUT.match(spec)
    if not match or match.group(1) not in columns:
        raise MoelabError(
            f"--holdout {short_repr(spec)} is invalid: expected COLUMN OP VALUE with COLUMN one of "
            f"{', '.join(k for k in CANONICAL_COLUMNS if k in columns)}, OP one of = >= <= > <, "
            f"VALUE a number, max or min (e.g. S=max)"
        )
    key, op, text = match.groups()
    values = columns[key]
    if text in ("max", "min"):
        threshold = float(values.max() if text == "max" else values.min())
    else:
        try:
            threshold = float(text)
        except ValueError:
            raise MoelabError(f"--holdout {short_repr(spec)} is invalid: "
                              f"{short_repr(text)} is not a number") from None
    if op in ("=", "=="):
        mask = np.isclose(values, threshold, rtol=1e-9, atol=1e-12)
    else:
        mask = {">=": values >= threshold, "<=": values <= threshold,
                ">": values > threshold, "<": values < threshold}[op]
    if not mask.any() or mask.all():
        raise MoelabError(
            f"--holdout {short_repr(spec)} is invalid: it holds out {int(mask.sum())} of {len(mask)} points; "
            f"it must leave some points on each side"
        )
    return mask
