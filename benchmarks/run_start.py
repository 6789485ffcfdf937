"""What starting a run costs the local launcher: a fresh interpreter against a forked child.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/run_start.py [--repeats 8] [--steps 10]
    .venv/bin/python benchmarks/run_start.py --smoke --out /tmp/run_start.json  # 1 repeat, 1 step

A sweep or study with ``--jobs N`` trains each run in a child process. A child that is a fresh
``python -m moelab train`` imports torch, moelab and (through torch's optimizers)
``torch._dynamo`` before its first step; one forked from the launcher's preloaded server
(``moelab.runs.launchers.local``) does not. Both train the same tiny run (the ``cpu`` sweep
grid's smallest model, ``--steps`` steps and its evaluation) into a new
folder each time, alternating, one at a time; ``in process`` (``--jobs 1``) is the floor: the
same run with everything already imported. The first forked child also starts the server, so
it is reported apart. Raw times go to benchmarks/results/run_start.json under ``--label``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from moelab.config import load_config, override
from moelab.fileio import atomic_write_json
from moelab.runs.launchers.local import LocalLauncher
from moelab.runs.spec import RunSpec, write_run_configs
from moelab.sweep.grid import load_grid

from common import add_output_arguments, machine, parse_checked


SMOKE = ["data.source=sample", "data.max_train_stories=200", "model.vocab_size=320",
         "model.max_seq_len=16", "train.batch_size=2", "train.eval_windows=2"]
"""``--smoke``: the bundled sample and toy sizes (the cpu grid trains on TinyStories)."""


def tiny_run_config(steps: int, smoke: bool = False):
    """The cpu grid's smallest dense model (s0) trained for ``steps`` steps."""
    grid = load_grid("cpu")
    shape = [f"model.{key}={value}" for key, value in grid.sizes[0].items() if key != "name"]
    config = load_config(grid.base, [*grid.overrides, *shape, *(SMOKE if smoke else [])])
    tokens = steps * config.train.batch_size * config.model.max_seq_len
    return override(config, [f"train.max_tokens={tokens}", f"train.eval_interval={steps}"])


def fresh_interpreter(folder: Path, spec: RunSpec) -> None:
    command = [sys.executable, "-m", "moelab", "train", str(folder / spec.config_path), "--out",
               str(folder / spec.run_dir)]
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL)


def through_launcher(jobs: int):
    """Train one run with ``LocalLauncher(jobs)``: a forked child for 2, this process for 1."""

    def train(folder: Path, spec: RunSpec) -> None:
        outcomes = []
        LocalLauncher(jobs=jobs).launch(folder, [spec], outcomes.append, lambda _: None)
        assert outcomes[0].status == "complete", outcomes[0].error

    return train


WAYS = {"fresh_interpreter": fresh_interpreter, "forked_child": through_launcher(2),
        "in_process": through_launcher(1)}


def timed_run(way: str, root: Path, config, index: int) -> float:
    folder = root / f"{way}-{index}"
    spec = RunSpec(name="run", config=config)
    write_run_configs(folder, [spec])
    started = time.perf_counter()
    WAYS[way](folder, spec)
    return time.perf_counter() - started


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=8)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--label", default="run start")
    add_output_arguments(parser, "run_start")
    args = parse_checked(parser, argv)
    if args.smoke:
        args.repeats, args.steps = 1, 1
    config = tiny_run_config(args.steps, args.smoke)
    seconds = {way: [] for way in WAYS}
    with tempfile.TemporaryDirectory() as root:
        first_fork = timed_run("forked_child", Path(root), config, -1)  # starts the server
        for index in range(args.repeats):
            for way in WAYS:
                seconds[way].append(timed_run(way, Path(root), config, index))
    medians = {name: statistics.median(times) for name, times in seconds.items()}
    entry = {"steps": args.steps, "repeats": args.repeats, "first_forked_child_s": first_fork,
             "seconds": seconds, "median_s": medians,
             "omp_num_threads": os.environ.get("OMP_NUM_THREADS"), **machine()}
    results = json.loads(args.out.read_text()) if args.out.is_file() else {}
    results[args.label] = entry
    atomic_write_json(args.out, results)
    floor = medians["in_process"]
    print(f"{args.steps}-step run, medians of {args.repeats} (first forked child, which starts "
          f"the server: {first_fork:.2f} s)")
    for name, median in medians.items():
        print(f"  {name:18s} {median:6.2f} s   start cost above in-process {median - floor:+.2f} s")


if __name__ == "__main__":
    main()
