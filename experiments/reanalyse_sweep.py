"""Re-analyse a sweep folder that holds results.csv and grid.json (the run folders need not be
there): the analysis files and report.md again, from the current analysis code.

    python experiments/reanalyse_sweep.py experiments/results/sweeps/cpu [--bootstrap 200]
    python experiments/reanalyse_sweep.py DIR --render-only    # report.md again from DIR's files

Writes into the folder: analysis.json, forms.json, fit.json, fit_holdout.json, form_tests.json,
isoflop.json (FLOPs budgets), throughput.json, optima.json, report.md and figures/. results.csv,
grid.json and plan.json are read, never written.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from moelab.sweep.report import render_sweep_report, write_sweep_report  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", type=Path)
    parser.add_argument("--bootstrap", type=int, default=200)
    parser.add_argument("--starts", type=int, default=None)
    parser.add_argument("--render-only", action="store_true",
                        help="no analysis: render report.md and figures from the folder's files")
    args = parser.parse_args(argv)
    start = time.perf_counter()
    if args.render_only:
        report = render_sweep_report(args.folder)
    else:
        report = write_sweep_report(args.folder, bootstrap_replicates=args.bootstrap,
                                    max_starts=args.starts)
    print(f"{report} ({time.perf_counter() - start:.0f} s)")
    return 0


if __name__ == "__main__":
    from moelab.cli import run_command

    raise SystemExit(run_command(main, "reanalyse_sweep"))
