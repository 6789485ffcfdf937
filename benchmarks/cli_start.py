"""What starting ``moelab`` costs: ``--version``, ``--help``, a command's ``--help`` and an
argument error, each in a fresh interpreter, against the interpreter alone and against importing
what the command line imported before it loaded its engine lazily (torch, scipy, matplotlib).

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/cli_start.py [--repeats 5]
    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/cli_start.py --before OLD/src --before-label REV
    .venv/bin/python benchmarks/cli_start.py --smoke --out /tmp/cli_start.json  # one of each

``--before SRC``: also time ``--version`` and ``--help`` of the moelab in SRC (a checkout of an
older commit, named by ``--before-label``), side by side in the same run.

Every command runs ``--repeats`` times, interleaved; each is timed in wall time and in the CPU
time of the child (``RUSAGE_CHILDREN``), which a machine shared with other jobs barely moves:
read the CPU seconds. ``tests/test_cli_start.py`` checks what these commands import (nothing
heavy); this measures what that saves. Results go to benchmarks/results/cli_start.json
(``--out``), one entry per ``--label``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

from moelab.fileio import atomic_write_json

from common import add_output_arguments, cpu_seconds, machine, parse_checked

MOELAB = [sys.executable, "-m", "moelab"]
COMMANDS = {
    "python -c pass (the interpreter)": [sys.executable, "-c", "pass"],
    "moelab --version": [*MOELAB, "--version"],
    "moelab --help": [*MOELAB, "--help"],
    "moelab train --help": [*MOELAB, "train", "--help"],
    "moelab train demo --no-such-flag (exit 2)": [*MOELAB, "train", "demo", "--no-such-flag"],
    "import torch, scipy.stats, matplotlib (what --help imported before)": [
        sys.executable, "-c", "import torch, scipy.stats, matplotlib.pyplot"],
}
SMOKE_COMMANDS = ("python -c pass (the interpreter)", "moelab --version")


def timed(command: list[str], env: dict | None = None) -> tuple[float, float]:
    """(wall seconds, CPU seconds) of one run of ``command`` in a child process."""
    wall, cpu = time.perf_counter(), cpu_seconds()
    subprocess.run(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False,
                   env=env)
    return time.perf_counter() - wall, cpu_seconds() - cpu


def commands(before: str | None, label: str) -> dict[str, tuple[list[str], dict | None]]:
    """Each timed command and its environment (None: this process's)."""
    timed_commands: dict[str, tuple[list[str], dict | None]] = {
        name: (command, None) for name, command in COMMANDS.items()}
    if before:
        env = {**os.environ, "PYTHONPATH": before}
        for flag in ("--version", "--help"):
            timed_commands[f"moelab {flag}, {label}"] = ([*MOELAB, flag], env)
    return timed_commands


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--label", default="cli start")
    parser.add_argument("--before", metavar="SRC", default=None,
                        help="the src/ folder of an older checkout, timed beside this one")
    parser.add_argument("--before-label", default="before",
                        help="what --before is (e.g. its commit), recorded with its rows")
    add_output_arguments(parser, "cli_start")
    args = parse_checked(parser, argv)
    to_time = commands(args.before, args.before_label)
    names = SMOKE_COMMANDS if args.smoke else tuple(to_time)
    repeats = 1 if args.smoke else args.repeats
    wall: dict[str, list[float]] = {name: [] for name in names}
    cpu: dict[str, list[float]] = {name: [] for name in names}
    for _ in range(repeats):  # interleaved: the machine's load hits every command alike
        for name in names:
            seconds, cpu_s = timed(*to_time[name])
            wall[name].append(seconds)
            cpu[name].append(cpu_s)
    rows = [{"command": name, "median_cpu_s": statistics.median(cpu[name]),
             "min_cpu_s": min(cpu[name]), "median_wall_s": statistics.median(wall[name]),
             "cpu_s": cpu[name], "wall_s": wall[name]} for name in names]
    results = json.loads(args.out.read_text()) if args.out.is_file() else {}
    results[args.label] = {"repeats": repeats, **machine(), "rows": rows}
    atomic_write_json(args.out, results)
    print(f"| command | CPU s (median of {repeats}) | wall s (median) |\n|---|---:|---:|")
    for row in rows:
        print(f"| {row['command']} | {row['median_cpu_s']:.2f} | {row['median_wall_s']:.2f} |")


if __name__ == "__main__":
    main()
