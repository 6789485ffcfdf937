"""The fused, chunked output head + cross-entropy against the plain one, side by side in one run.

Two measurements, each interleaved (every repeat runs every configuration once) so machine
noise hits them alike:

1. **The head alone**: forward + backward of ``cross_entropy(h @ W.T, targets)`` written plainly
   (``F.linear`` then ``F.cross_entropy`` of the fp32 logits) and as
   ``moelab.linear_cross_entropy``, eager, at the shapes of the ``demo`` and ``cpu-replication``
   batches and of one ``paper`` micro-batch of 8 sequences.
2. **A demo train step** (as ``benchmarks/train_step.py`` times it: forward + backward, clipping,
   fused AdamW) of the dense_active and moe arms, eager and compiled, with the model's head
   swapped between the plain and the fused version.

    .venv/bin/python benchmarks/head_loss.py            # -> benchmarks/results/head_loss.json
    .venv/bin/python benchmarks/head_loss.py --quick    # fewer repeats, no compile, writes nothing
    .venv/bin/python benchmarks/head_loss.py --smoke --out /tmp/head_loss.json  # toy sizes, seconds
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import torch
import torch.nn.functional as F

import moelab.model
from moelab.fileio import atomic_write_json
from moelab.linear_cross_entropy import linear_cross_entropy

from common import add_output_arguments, machine, parse_checked
from train_step import SMOKE_SHAPES, build_step, demo_arms

HEAD_SHAPES = {  # rows N = batch x context, d_model D, vocabulary V
    "demo (16 x 128, D 64, V 1024)": (2048, 64, 1024),
    "cpu-replication (32 x 256, D 128, V 1024)": (8192, 128, 1024),
    "paper micro-batch (8 x 512, D 512, V 4096)": (4096, 512, 4096),
}
SMOKE_HEAD_SHAPES = {"toy (2 x 16, D 32, V 320)": (32, 32, 320)}


def plain_cross_entropy(h_ND, weight_VD, targets_N):
    return F.cross_entropy(F.linear(h_ND, weight_VD).float(), targets_N)


HEADS = {"plain": plain_cross_entropy, "fused": linear_cross_entropy}


def timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def interleaved(configs: dict, repeats: int, warmup: int) -> dict:
    """Seconds of each zero-argument function, ``repeats`` times, in round robin."""
    for fn in configs.values():
        for _ in range(warmup):
            fn()
    times = {name: [] for name in configs}
    for _ in range(repeats):
        for name, fn in configs.items():
            times[name].append(timed(fn))
    return times


def head_alone(repeats: int, shapes: dict = HEAD_SHAPES, warmup: int = 3) -> list[dict]:
    rows = []
    for label, (rows_n, d_model, vocab) in shapes.items():
        generator = torch.Generator().manual_seed(0)
        h_ND = torch.randn(rows_n, d_model, generator=generator).requires_grad_()
        weight_VD = (0.02 * torch.randn(vocab, d_model, generator=generator)).requires_grad_()
        targets_N = torch.randint(0, vocab, (rows_n,), generator=generator)

        def step(head, h_ND=h_ND, weight_VD=weight_VD, targets_N=targets_N):
            h_ND.grad = weight_VD.grad = None
            head(h_ND, weight_VD, targets_N).backward()

        times = interleaved({name: (lambda head=head: step(head)) for name, head in HEADS.items()},
                            repeats, warmup)
        row = summarise(label, times)
        rows.append(row)
        print_row(row)
    return rows


def train_steps(repeats: int, modes: list[str], overrides: tuple[str, ...] = (),
                warmup: int = 3) -> list[dict]:
    config, arms = demo_arms(overrides)
    configs = {}
    for mode in modes:
        for arm in ("dense_active", "moe"):
            for head_name, head in HEADS.items():
                moelab.model.linear_cross_entropy = head  # the model reads it at call time
                step = build_step("moelab", arms[arm], mode, config.train, config.train.batch_size)

                def run(step=step, head=head):
                    moelab.model.linear_cross_entropy = head
                    step()

                configs[(mode, arm, head_name)] = run
    times = interleaved(configs, repeats, warmup)
    moelab.model.linear_cross_entropy = linear_cross_entropy
    rows = []
    for mode in modes:
        for arm in ("dense_active", "moe"):
            row = summarise(f"{mode} {arm}", {h: times[(mode, arm, h)] for h in HEADS})
            rows.append(row)
            print_row(row)
    return rows


def summarise(label: str, times: dict[str, list[float]]) -> dict:
    best = {name: min(t) for name, t in times.items()}
    median = {name: statistics.median(t) for name, t in times.items()}
    return {"config": label, "best_ms": {k: 1000 * v for k, v in best.items()},
            "median_ms": {k: 1000 * v for k, v in median.items()},
            "speedup_best": best["plain"] / best["fused"],
            "speedup_median": median["plain"] / median["fused"],
            "samples_ms": {k: [1000 * s for s in t] for k, t in times.items()}}


def print_row(row: dict) -> None:
    print(f"{row['config']:45s} plain {row['median_ms']['plain']:8.2f} ms  fused "
          f"{row['median_ms']['fused']:8.2f} ms  fused faster by {row['speedup_median']:.2f}x "
          f"(fastest steps {row['speedup_best']:.2f}x)", flush=True)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")
    parser.add_argument("--quick", action="store_true", help="3 repeats, eager only, no results file")
    add_output_arguments(parser, "head_loss")
    args = parse_checked(parser, argv)
    torch.set_num_threads(args.threads)
    repeats = 1 if args.smoke else 3 if args.quick else args.repeats
    warmup = 1 if args.smoke else 3
    load_before = os.getloadavg()[0]
    head_rows = head_alone(repeats, SMOKE_HEAD_SHAPES if args.smoke else HEAD_SHAPES, warmup)
    step_rows = train_steps(repeats, ["eager"] if args.quick or args.smoke else ["eager", "compile"],
                            tuple(SMOKE_SHAPES) if args.smoke else (), warmup)
    if args.quick:
        return
    atomic_write_json(args.out, {
        "command": f"python benchmarks/head_loss.py --repeats {args.repeats} --threads {args.threads}",
        **machine(), "threads": torch.get_num_threads(),
        "finished": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "load_average_1min": {"before": load_before, "after": os.getloadavg()[0]},
        "head_alone": head_rows, "train_step": step_rows,
    })
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
