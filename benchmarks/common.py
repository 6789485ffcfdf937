"""What every benchmark script shares: the smoke mode, the results file, and the machine record.

Every script takes ``--smoke`` (tiny shapes, one repeat: seconds, not minutes) and ``--out``
(its results file, ``benchmarks/results/<script>.json`` by default). A smoke run must name its
own ``--out``: ``tests/test_benchmarks_smoke.py`` runs every script that way in a temporary
folder, so an API change breaks a test, never the committed results. Not a script itself
(``tests/test_benchmarks_smoke.py`` skips it).
"""

from __future__ import annotations

import argparse
import os
import platform
import resource
import time
from pathlib import Path

RESULTS_DIR = Path(__file__).resolve().parent / "results"


def add_output_arguments(parser: argparse.ArgumentParser, script: str) -> None:
    """``--smoke`` and ``--out`` (default ``benchmarks/results/<script>.json``)."""
    parser.add_argument("--smoke", action="store_true",
                        help="tiny shapes, one repeat, seconds: checks the script still runs "
                             "(needs --out: the committed results are never overwritten)")
    parser.add_argument("--out", type=Path, default=RESULTS_DIR / f"{script}.json",
                        help="results file (default: %(default)s)")


def parse_checked(parser: argparse.ArgumentParser, argv: list[str] | None = None
                  ) -> argparse.Namespace:
    """Parse, refusing a smoke run that would write into benchmarks/results/."""
    args = parser.parse_args(argv)
    if args.smoke and args.out.resolve().parent == RESULTS_DIR:
        parser.error(f"--smoke --out {args.out}: a smoke run writes outside benchmarks/results/")
    return args


def machine() -> dict:
    """The CPU, torch and load a measurement ran with (BENCHMARKS.md names them per section)."""
    import torch

    from moelab.numerics import cpu_model

    return {"cpu": cpu_model(), "cpus": os.cpu_count(), "python": platform.python_version(),
            "torch": torch.__version__, "torch_threads": torch.get_num_threads(),
            "load_average": [round(x, 2) for x in os.getloadavg()],
            "time": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}


def cpu_seconds() -> float:
    """CPU time of this process (all its threads) and of its finished child processes: on a
    machine shared with other jobs it moves far less than wall time."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime
