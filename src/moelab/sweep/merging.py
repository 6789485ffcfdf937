"""Joining sweep folders of one grid extended by new sparsities (``moelab merge``).

A sweep run at sparsities {0, 0.5, 0.75} and later at {0.875} in another folder is one grid:
the merged folder gets grid.json (the first folder's, with the union of the sparsities),
plan.json (every folder's planned runs, and where they came from) and results.csv (every
folder's rows, copied as they are). Run folders are not copied: ``moelab report`` on the
merged folder fits and reports from the stored table, as for any folder kept without its runs.

Only new points may differ: the folders must agree on every grid key but ``sparsities`` and
``name``, each must add sparsities none before it has, their results.csv must have the same
columns, and no run may appear twice. Anything else is refused in one line before anything is
written.
"""

from __future__ import annotations

import csv
import io
from dataclasses import dataclass
from pathlib import Path

from moelab.errors import ConfigError, MoelabError
from moelab.fileio import atomic_write_json, atomic_write_text, is_inside, writer_lock
from moelab.scaling.table import read_csv_rows
from moelab.sweep.folder import read_json
from moelab.sweep.grid import with_seeds_key

MAY_DIFFER = ("sparsities", "name")
"""The grid keys in which merged folders may differ: a new sparsity, and the grid's name."""

MERGED_FILES = ("grid.json", "plan.json", "results.csv")
"""What a merge writes: a folder holding any of them already is not overwritten."""


@dataclass(frozen=True)
class SweepPart:
    """One sweep folder to merge: its grid.json and plan.json as written, its results.csv."""

    folder: Path
    grid: dict
    plan: dict
    columns: list[str]
    rows: list[dict[str, str]]

    @property
    def sparsities(self) -> list[float]:
        return [float(s) for s in self.grid.get("sparsities", [])]


@dataclass(frozen=True)
class MergedSweep:
    """What ``merge_sweeps`` wrote."""

    out_dir: Path
    sources: list[Path]
    runs: int
    sparsities: list[float]


def read_part(folder: Path) -> SweepPart:
    """grid.json, plan.json and results.csv of a sweep folder, each problem one line."""
    folder = Path(folder)
    if not folder.is_dir():
        raise MoelabError(f"{folder} is not a sweep folder: no such folder")
    try:
        grid = with_seeds_key(read_json(folder / "grid.json"))  # older files name one seed
    except ConfigError as exc:
        raise MoelabError(f"{folder / 'grid.json'}: {exc}") from None
    plan = read_json(folder / "plan.json")
    if not isinstance(plan.get("runs"), list) or not isinstance(grid.get("sparsities"), list):
        raise MoelabError(f"{folder} is not a sweep folder: its plan.json has no list of runs "
                          "or its grid.json no list of sparsities")
    if not (folder / "results.csv").is_file():
        raise MoelabError(f"{folder} has no results.csv: run moelab report {folder} first")
    columns, rows = read_csv_rows(folder / "results.csv")
    if "run" not in columns:
        raise MoelabError(f"{folder / 'results.csv'} has no run column: it is not a sweep's table")
    return SweepPart(folder, grid, plan, columns, rows)


def check_parts(parts: list[SweepPart]) -> None:
    """Refuse folders that are not one grid extended by new sparsities."""
    first = parts[0]
    seen = set(first.sparsities)
    for part in parts[1:]:
        differing = sorted(key for key in set(first.grid) | set(part.grid)
                           if key not in MAY_DIFFER and first.grid.get(key) != part.grid.get(key))
        if differing:
            raise MoelabError(f"{part.folder / 'grid.json'} differs from {first.folder}'s in "
                              f"{', '.join(differing)}: only {' and '.join(MAY_DIFFER)} may differ")
        repeated = sorted(seen & set(part.sparsities))
        if repeated:
            raise MoelabError(f"{part.folder}'s sparsities {', '.join(f'{s:g}' for s in repeated)} "
                              "are in an earlier folder too: a merge adds new sparsities only")
        seen |= set(part.sparsities)
        if part.columns != first.columns:
            raise MoelabError(f"{part.folder / 'results.csv'} has other columns than "
                              f"{first.folder}'s: rebuild both with moelab report")
    runs = [row["run"] for part in parts for row in part.rows]
    repeated_runs = sorted({run for run in runs if runs.count(run) > 1})
    if repeated_runs:
        raise MoelabError(f"run {repeated_runs[0]} is in more than one folder's results.csv")


def check_out_dir(out_dir: Path, sources: list[Path]) -> None:
    """The merged folder: a new one, never an input, nor a folder whose sweep it would replace."""
    if any(out_dir.resolve() == Path(source).resolve() for source in sources):
        raise MoelabError(f"--out {out_dir} is invalid: it is one of the folders merged; "
                          "write to a new folder")
    holder = next((source for source in sources if is_inside(out_dir, source)), None)
    if holder is not None:  # a sweep inside a sweep: the input's own report would read it
        raise MoelabError(f"--out {out_dir} is invalid: it lies inside {holder}, one of the "
                          "folders merged; write to a new folder outside them")
    if out_dir.exists() and not out_dir.is_dir():
        raise MoelabError(f"--out {out_dir} is a file: it must be a new folder")
    held = [name for name in MERGED_FILES if (out_dir / name).exists()]
    if held:
        raise MoelabError(f"--out {out_dir} already holds {held[0]}: write to a new folder")


def merge_sweeps(sources: list[Path], out_dir: Path) -> MergedSweep:
    """Check, then write the merged grid.json, plan.json and results.csv into ``out_dir``."""
    if len(sources) < 2:
        raise MoelabError(f"merge needs 2 or more sweep folders, got {len(sources)}")
    out_dir = Path(out_dir)
    check_out_dir(out_dir, sources)
    parts = [read_part(Path(source)) for source in sources]
    check_parts(parts)
    sparsities = sorted({s for part in parts for s in part.sparsities})
    grid = dict(parts[0].grid, sparsities=sparsities)
    plan = dict(parts[0].plan, runs=[run for part in parts for run in part.plan["runs"]],
                merged_from=[str(part.folder) for part in parts])
    rows = [row for part in parts for row in part.rows]
    with writer_lock(out_dir, kind="sweep-sparsity"):  # a sweep folder: moelab report reads it
        atomic_write_json(out_dir / "grid.json", grid)
        atomic_write_json(out_dir / "plan.json", plan)
        atomic_write_text(out_dir / "results.csv", _csv_text(parts[0].columns, rows))
    return MergedSweep(out_dir, [part.folder for part in parts], len(rows), sparsities)


def _csv_text(columns: list[str], rows: list[dict[str, str]]) -> str:
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=columns, lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    return buffer.getvalue()
