"""What a compiled run's start costs with a warm cache: AOTAutograd's cache admitting the graph
(what ``moelab.train.loop.compile_afresh`` does) against refusing it (torch's default).

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/compile_start.py [--repeats 3] [--label L]
    .venv/bin/python benchmarks/compile_start.py --smoke --out /tmp/compile_start.json

``--smoke``: one toy arm, one child per setting, 2 steps, dynamo's ``eager`` backend (the
plumbing, not inductor's compile time).

Each sample is a fresh interpreter that trains one ``demo`` arm compiled for ``--steps`` steps
(no evaluation, no text sample) and reports the time of its first optimizer step, where dynamo
traces, AOTAutograd builds the joint graph (or loads it) and inductor loads its code, and the
median of the rest. Refusing is torch's default for a graph holding an autograd.Function (the
fused head, the MoE experts); the script sets the flag back to that in the child. One warm-up
child per arm and setting fills the on-disk caches first, then the children alternate. Raw
times go to benchmarks/results/compile_start.json under ``--label``.
Within each repeat the order alternates.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys

from moelab.config import load_config, to_dict
from moelab.fileio import atomic_write_json
from moelab.study.arms import study_arms

from common import add_output_arguments, machine, parse_checked
from train_step import SMOKE_SHAPES

CHILD = r"""
import json, statistics, sys, time
import torch
import moelab.train.loop as loop
from moelab.config import build_config
from moelab.train.optim import build_optimizer
from moelab.model import Transformer

config = build_config(json.loads(sys.argv[1]))
admit = sys.argv[2] == "admit"
torch.manual_seed(0)
model = Transformer(config.model)
optimizer = build_optimizer(model, config.train)
compiled = loop.compile_afresh(model)
if sys.argv[4] != "inductor":  # a smoke run: dynamo traces, nothing is compiled
    compiled = torch.compile(model, backend=sys.argv[4])
torch._functorch.config.autograd_cache_allow_custom_autograd_functions = admit
B, T = config.train.batch_size, config.model.max_seq_len
tokens = torch.randint(0, config.model.vocab_size, (B, T + 1))
times = []
for _ in range(int(sys.argv[3])):
    start = time.perf_counter()
    out = compiled(tokens[:, :-1], tokens[:, 1:], collect_routing=False)
    out.loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    times.append(time.perf_counter() - start)
from torch._dynamo.utils import counters
print(json.dumps({"first_step_s": times[0], "step_s": statistics.median(times[1:]),
                  "aot_cache": dict(counters["aot_autograd"])}))
"""


def arm_configs(overrides: tuple[str, ...] = ()) -> dict[str, dict]:
    """Each demo arm's config, as the plain dict a child rebuilds it from."""
    return {arm.name: to_dict(arm.config)
            for arm in study_arms(load_config("demo", list(overrides)), ["active", "total"])}


def sample(config: dict, setting: str, steps: int, backend: str = "inductor") -> dict:
    out = subprocess.run([sys.executable, "-c", CHILD, json.dumps(config), setting, str(steps),
                          backend], check=True, capture_output=True, text=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--label", default="")
    add_output_arguments(parser, "compile_start")
    args = parse_checked(parser, argv)
    backend = "eager" if args.smoke else "inductor"
    if args.smoke:
        args.repeats, args.steps = 1, 2
    settings = ("admit", "refuse")
    rows = []
    arms = arm_configs(tuple(SMOKE_SHAPES) if args.smoke else ())
    for name, config in list(arms.items())[:1 if args.smoke else None]:
        for setting in settings if not args.smoke else ():  # warm-up: fill the on-disk caches
            sample(config, setting, 2)
        samples = {setting: [] for setting in settings}
        for repeat in range(args.repeats):  # alternate which goes first
            for setting in settings[::-1] if repeat % 2 else settings:
                samples[setting].append(sample(config, setting, args.steps, backend))
        row = {"arm": name, "samples": samples}
        for setting in settings:
            row[f"{setting}_first_step_s"] = statistics.median(
                s["first_step_s"] for s in samples[setting])
            row[f"{setting}_step_s"] = statistics.median(s["step_s"] for s in samples[setting])
        rows.append(row)
        print(f"{name:13s} first step: admitted {row['admit_first_step_s']:.2f} s, refused "
              f"{row['refuse_first_step_s']:.2f} s; later steps {1000 * row['admit_step_s']:.1f}"
              f" / {1000 * row['refuse_step_s']:.1f} ms; cache "
              f"{samples['admit'][-1]['aot_cache']} / {samples['refuse'][-1]['aot_cache']}")
    results = json.loads(args.out.read_text()) if args.out.exists() else []
    results.append({"label": args.label, "repeats": args.repeats, "steps": args.steps,
                    "backend": backend, **machine(), "rows": rows})
    atomic_write_json(args.out, results)


if __name__ == "__main__":
    main()
