"""Join sweep folders of one grid that differ only in their sparsities (a sweep extended to a new
S) into one folder of results, then re-analyse it as one sweep:

    python experiments/merge_sweeps.py OUT FIRST SECOND [...]
    moelab report OUT --bootstrap 200

OUT gets grid.json (the first's, with the union of the sparsities), plan.json (every folder's
planned runs) and results.csv (every folder's rows; the same columns in the same order). The
folders must agree on every grid key but `sparsities` and `name`, and no run may appear twice;
anything else is refused in one line. Run folders are not copied: the analysis reads the table.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT / "src") not in sys.path:  # run as a script from a checkout
    sys.path.insert(0, str(ROOT / "src"))

from moelab.fileio import atomic_write_json, atomic_write_text  # noqa: E402

MAY_DIFFER = ("sparsities", "name")


def read_folder(folder: Path) -> tuple[dict, dict, list[str], list[dict]]:
    grid = json.loads((folder / "grid.json").read_text("utf-8"))
    plan = json.loads((folder / "plan.json").read_text("utf-8"))
    with (folder / "results.csv").open(newline="", encoding="utf-8") as handle:
        reader = csv.DictReader(handle)
        return grid, plan, list(reader.fieldnames or []), list(reader)


def merge(out: Path, folders: list[Path]) -> int:
    grids, plans, columns, rows = zip(*(read_folder(folder) for folder in folders))
    first = grids[0]
    for folder, grid in zip(folders[1:], grids[1:]):
        differing = sorted(key for key in set(first) | set(grid)
                           if key not in MAY_DIFFER and first.get(key) != grid.get(key))
        if differing:
            raise SystemExit(f"merge_sweeps: {folder}/grid.json differs from {folders[0]}'s in "
                             f"{', '.join(differing)}; only {', '.join(MAY_DIFFER)} may differ")
    for folder, names in zip(folders[1:], columns[1:]):
        if names != columns[0]:
            raise SystemExit(f"merge_sweeps: {folder}/results.csv has other columns than "
                             f"{folders[0]}'s")
    merged_rows = [row for table in rows for row in table]
    runs = [row["run"] for row in merged_rows]
    if len(set(runs)) != len(runs):
        raise SystemExit("merge_sweeps: a run appears in more than one folder")
    grid = dict(first, sparsities=sorted({s for g in grids for s in g["sparsities"]}))
    plan = dict(plans[0], runs=[run for p in plans for run in p["runs"]],
                merged_from=[str(folder) for folder in folders])
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_json(out / "grid.json", grid)
    atomic_write_json(out / "plan.json", plan)
    text = io.StringIO()
    writer = csv.DictWriter(text, fieldnames=columns[0], lineterminator="\n")
    writer.writeheader()
    writer.writerows(merged_rows)
    atomic_write_text(out / "results.csv", text.getvalue())
    print(f"{out}: {len(merged_rows)} runs from {len(folders)} folders, sparsities "
          f"{grid['sparsities']}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("folders", type=Path, nargs="+")
    args = parser.parse_args(argv)
    if any(args.out.resolve() == folder.resolve() for folder in args.folders):
        raise SystemExit("merge_sweeps: OUT must be a new folder, not one of the inputs")
    return merge(args.out, args.folders)


if __name__ == "__main__":
    from moelab.cli import run_command

    raise SystemExit(run_command(main, "merge_sweeps"))
