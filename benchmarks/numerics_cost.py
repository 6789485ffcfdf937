"""The speed cost of portable numerics: demo train steps under native and portable numerics.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/numerics_cost.py [--rounds 4] [--reps 15]

The numerics are fixed when a process first computes, so each setting is timed in its own child
process (this script again, with ``--child``): ``native`` (the machine's own kernels),
``portable`` and ``compatible`` (``moelab.numerics.PINNED_ENVIRONMENT``). One child per
setting per round, the settings in turn each round, so a noisy neighbour slows all of them alike;
each child builds the demo preset's three arms (moelab.accounting.match_dense), warms up, and
times single optimizer steps (forward, backward, clipping, AdamW), then the fastest of 200 runs
of the demo's two largest matmuls (``gemm_mlp``, ``gemm_head``). The cost is the ratio of the
fastest times (the least disturbed), medians recorded too. Results go to
benchmarks/results/numerics_cost.json.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time

from common import add_output_arguments, parse_checked

from moelab.fileio import atomic_write_json
from moelab.numerics import NUMERICS_VARIABLES, PINNED_ENVIRONMENT, cpu_model

SETTINGS = PINNED_ENVIRONMENT
"""native, portable, compatible: each one's variables (moelab.numerics)."""


def child(reps: int, warmup: int) -> dict[str, list[float]]:
    """Step times of the demo's arms in this process (its numerics set by the parent)."""
    from moelab.accounting import match_dense
    from moelab.config import load_config

    config = load_config("demo", [])
    arms = {"moe": config.model, "dense_active": match_dense(config.model, "active").config,
            "dense_total": match_dense(config.model, "total").config}
    times = {}
    for name, cfg in arms.items():
        step = build_step(cfg, config.train)
        for _ in range(warmup):
            step()
        times[name] = [_timed(step) for _ in range(reps)]
    times.update(gemm_times(config.model))
    return times


def gemm_times(cfg, reps: int = 200) -> dict[str, list[float]]:
    """The fastest of ``reps`` runs of the demo's two largest matmuls, tokens x d_model by
    d_model x d_ff (an MLP) and by d_model x vocab (the head): a step's GEMM alone, the part the
    numerics pin most, timed finely enough to stand out of a loaded machine's noise."""
    import torch

    tokens = torch.randn(8 * cfg.max_seq_len, cfg.d_model)
    out = {}
    for name, width in (("gemm_mlp", cfg.d_ff), ("gemm_head", cfg.vocab_size)):
        weight = torch.randn(cfg.d_model, width)
        out[name] = [min(_timed(lambda w=weight: tokens @ w) for _ in range(reps))]
    return out


def build_step(cfg, train_cfg):
    """One optimizer step of a fresh model of shape ``cfg`` on a fixed batch."""
    import torch

    from moelab.model import Transformer
    from moelab.train.optim import build_optimizer
    from moelab.train.step import StepPlan, forward_backward

    torch.manual_seed(0)
    batch = train_cfg.batch_size
    model = Transformer(cfg)
    optimizer = build_optimizer(model, train_cfg)
    plan = StepPlan(total_steps=1, tokens_per_step=batch * cfg.max_seq_len,
                    rank_batch_size=batch, micro_batch_size=batch, warmup_steps=0)
    tokens = torch.randint(0, cfg.vocab_size, (batch, cfg.max_seq_len + 1),
                           generator=torch.Generator().manual_seed(0))

    def step():
        forward_backward(model, None, tokens[:, :-1], tokens[:, 1:], plan, _no_autocast)
        torch.nn.utils.clip_grad_norm_(model.parameters(), train_cfg.grad_clip)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    return step


def _no_autocast():
    import contextlib

    return contextlib.nullcontext()


def _timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def run_setting(name: str, reps: int, warmup: int) -> dict[str, list[float]]:
    env = {key: value for key, value in os.environ.items() if key not in NUMERICS_VARIABLES}
    env.update(SETTINGS[name])
    out = subprocess.run([sys.executable, __file__, "--child", "--reps", str(reps),
                          "--warmup", str(warmup)], env=env, check=True, capture_output=True,
                         text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def summarize(samples: dict[str, dict[str, list[float]]]) -> dict:
    out = {}
    for setting, arms in samples.items():
        out[setting] = {arm: {"min_s": min(times), "median_s": statistics.median(times)}
                        for arm, times in arms.items()}
    for setting in SETTINGS:
        if setting == "native":
            continue
        for arm in out[setting]:
            native = out["native"][arm]
            out[setting][arm]["cost_min"] = out[setting][arm]["min_s"] / native["min_s"] - 1
            out[setting][arm]["cost_median"] = (out[setting][arm]["median_s"]
                                                / native["median_s"] - 1)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--reps", type=int, default=15, help="timed steps per arm per child")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    add_output_arguments(parser, "numerics_cost")
    args = parse_checked(parser)
    if args.child:
        print(json.dumps(child(args.reps, args.warmup)))
        return
    if args.smoke:
        args.rounds, args.reps, args.warmup = 1, 1, 0
    samples: dict[str, dict[str, list[float]]] = {name: {} for name in SETTINGS}
    for round_index in range(args.rounds):
        for name in SETTINGS:
            for arm, times in run_setting(name, args.reps, args.warmup).items():
                samples[name].setdefault(arm, []).extend(times)
        print(f"round {round_index + 1}/{args.rounds} done", file=sys.stderr)
    summary = summarize(samples)
    for setting, arms in summary.items():
        print(setting, {arm: round(row.get("cost_min", 0.0), 3) for arm, row in arms.items()})
    record = {"command": "benchmarks/numerics_cost.py " + " ".join(sys.argv[1:]),
              "machine": cpu_model(), "python": platform.python_version(),
              "threads": os.environ.get("OMP_NUM_THREADS"), "rounds": args.rounds,
              "reps": args.reps, "summary": summary, "samples": samples}
    atomic_write_json(args.out, record)


if __name__ == "__main__":
    main()
