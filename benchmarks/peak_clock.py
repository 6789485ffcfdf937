"""The CPU peak MFU divides by, read in wall time and in CPU time, side by side in one run: how
much each clock moves on a machine shared with other jobs.

    OMP_NUM_THREADS=1 nice .venv/bin/python benchmarks/peak_clock.py [--rounds 5]
    .venv/bin/python benchmarks/peak_clock.py --smoke --out /tmp/peak_clock.json  # toy sizes

Each round measures ``moelab.train.peak.measure_cpu_peak`` (square float32 matmuls, sizes
growing while the rate grows, the best of up to three calls at each) twice, once timed with
``time.perf_counter`` (wall) and once with ``time.process_time`` (CPU time, what moelab uses),
alternating which goes first, and records the 1-minute load average beside it. Also a
one-shot 1024 x 1024 matmul in wall time, the peak moelab used before. Results go to
benchmarks/results/peak_clock.json (``--out``), one entry per ``--label``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time

import torch

from moelab.fileio import atomic_write_json
from moelab.train.peak import MEASURE_SIZES, matmul_flops, measure_cpu_peak

from common import add_output_arguments, machine, parse_checked

CLOCKS = {"wall": time.perf_counter, "cpu": time.process_time}


def one_shot_1024(clock) -> float:
    """The old peak: one 1024 x 1024 matmul after a warm-up, FLOPs per second of ``clock``."""
    a, b = torch.randn(1024, 1024), torch.randn(1024, 1024)
    torch.mm(a, b)
    start = clock()
    torch.mm(a, b)
    return matmul_flops(1024, 1024, 1024) / max(clock() - start, 1e-9)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--label", default="peak clocks")
    add_output_arguments(parser, "peak_clock")
    args = parse_checked(parser, argv)
    torch.set_num_threads(args.threads)
    sizes = (64, 128) if args.smoke else MEASURE_SIZES
    rounds = []
    for index in range(1 if args.smoke else args.rounds):
        order = list(CLOCKS) if index % 2 == 0 else list(CLOCKS)[::-1]
        reading = {"load_average_1min": os.getloadavg()[0]}
        for name in order:
            rates = measure_cpu_peak(torch.float32, sizes, CLOCKS[name])
            reading[f"{name}_peak"] = max(rates.values())
            reading[f"{name}_rate_by_size"] = {str(n): rate for n, rate in rates.items()}
        if not args.smoke:
            reading["wall_one_shot_1024"] = one_shot_1024(time.perf_counter)
        rounds.append(reading)
        print(f"round {index + 1}: load {reading['load_average_1min']:.1f}  "
              f"peak {reading['cpu_peak'] / 1e9:.1f} GFLOP/CPU-s, "
              f"{reading['wall_peak'] / 1e9:.1f} GFLOP/s wall", flush=True)
    summary = {f"{name}_peak_gflop": {"min": min(r[f"{name}_peak"] for r in rounds) / 1e9,
                                      "median": statistics.median(r[f"{name}_peak"] for r in rounds) / 1e9,
                                      "max": max(r[f"{name}_peak"] for r in rounds) / 1e9}
               for name in CLOCKS}
    results = json.loads(args.out.read_text()) if args.out.is_file() else {}
    results[args.label] = {**machine(), "threads": torch.get_num_threads(), "sizes": list(sizes),
                           "summary": summary, "rounds": rounds}
    atomic_write_json(args.out, results)
    print(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
