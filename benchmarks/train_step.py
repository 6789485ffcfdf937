"""Train-step throughput of the demo arms, moelab vs Hugging Face, side by side in one run.

    .venv/bin/python benchmarks/train_step.py [--reps 5] [--modes eager,bf16,compile]
    .venv/bin/python benchmarks/train_step.py --arms cpu-grid --impls moelab --modes eager,compile

Arms come from the ``demo`` preset: ``moe`` (the preset), ``dense_active`` and ``dense_total``
(``moelab.accounting.match_dense``); with ``--arms cpu-grid`` they are the cpu sweep's 16
shapes. Each arm is timed as a moelab ``Transformer`` and as the equivalent
``LlamaForCausalLM`` / ``MixtralForCausalLM`` (router logits on, so its load-balancing loss is
part of the objective) with the same shapes, batch, precision and optimizer. One step
is what the training loop does: forward + backward (``moelab.train.step.forward_backward``),
gradient clipping, fused AdamW, ``zero_grad(set_to_none=True)``.

Machines shared with other jobs are noisy, so every configuration is built and warmed up first,
then timed one step at a time in round-robin order. Ratios use the *fastest* step of each
configuration (the one least disturbed by other processes); medians are recorded too. Achieved
FLOP/s use ``flops_per_token(cfg).kaplan`` and are compared with a measured matmul peak.
Raw results go to benchmarks/results/train_step.json, one entry per --label (default: the
--modes text), so repeated runs and separate invocations (compile warms up for a while) are
kept side by side.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import time
from functools import partial
from pathlib import Path

import torch

from moelab.accounting import flops_per_token, match_dense
from moelab.config import load_config
from moelab.fileio import atomic_write_json
from moelab.model import Transformer
from moelab.sweep.timing import grid_shapes
from moelab.train.export import hf_config
from moelab.train.step import StepPlan, forward_backward
from moelab.train.optim import build_optimizer

RESULTS = Path(__file__).parent / "results" / "train_step.json"


# The demo's shapes as BENCHMARKS.md measured them (tied head, 16 x 128 per step), pinned so the
# figures stay comparable now that the demo preset trains untied at batch 8 (docs/recipe.md).
BENCHMARKED_DEMO = ["model.tie_embeddings=true", "train.batch_size=16"]


def demo_arms():
    config = load_config("demo", BENCHMARKED_DEMO)
    return config, {
        "dense_active": match_dense(config.model, "active").config,
        "moe": config.model,
        "dense_total": match_dense(config.model, "total").config,
    }


def cpu_grid_arms():
    """The 16 shapes of the cpu sweep preset (size x sparsity, top-1 Switch-weighted), in the
    batch its runs train with; moelab only (Mixtral has no Switch-weighted top-1 router)."""
    shapes = grid_shapes("cpu", [])
    return shapes[0].config, {f"{shape.name} E{_experts(shape.config.model)}": shape.config.model
                              for shape in shapes}


def _experts(cfg) -> int:
    return cfg.moe.num_experts if cfg.moe else 1


ARMS = {"demo": demo_arms, "cpu-grid": cpu_grid_arms}


def hf_model(cfg):
    import transformers

    hf_cfg = hf_config(cfg, eot_id=0)
    if cfg.moe is None:
        return transformers.LlamaForCausalLM(hf_cfg)
    hf_cfg.output_router_logits = True  # the aux loss is part of the loss, as in moelab
    return transformers.MixtralForCausalLM(hf_cfg)


class HFLoss(torch.nn.Module):
    """Wraps an HF causal LM so it has moelab's ``(tokens, targets) -> .loss`` call."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, x_BT, y_BT, collect_routing=False):
        out = self.model(input_ids=x_BT, labels=x_BT)  # HF shifts labels inside
        out.ce_loss = out.lb_loss = out.z_loss = out.loss.detach()
        return out


def build_step(impl: str, cfg, mode: str, train_cfg, batch_size: int):
    """A zero-argument function doing one full optimizer step of this configuration."""
    torch.manual_seed(0)
    model = Transformer(cfg) if impl == "moelab" else HFLoss(hf_model(cfg))
    optimizer = build_optimizer(model, train_cfg)
    train_model = torch.compile(model) if mode == "compile" else model
    autocast = partial(torch.autocast, "cpu", dtype=torch.bfloat16, enabled=mode == "bf16")
    plan = StepPlan(total_steps=1, tokens_per_step=batch_size * cfg.max_seq_len,
                    rank_batch_size=batch_size, micro_batch_size=batch_size, warmup_steps=0)
    generator = torch.Generator().manual_seed(0)
    tokens = torch.randint(0, cfg.vocab_size, (batch_size, cfg.max_seq_len + 1), generator=generator)
    x_BT, y_BT = tokens[:, :-1], tokens[:, 1:]

    def step():
        forward_backward(train_model, None, x_BT, y_BT, plan, autocast)
        torch.nn.utils.clip_grad_norm_(model.parameters(), train_cfg.grad_clip)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    return step


def matmul_peak_flops(dtype: torch.dtype, n: int = 1024, reps: int = 10) -> float:
    a, b = torch.randn(n, n, dtype=dtype), torch.randn(n, n, dtype=dtype)
    torch.mm(a, b)
    best = min(_timed(lambda: torch.mm(a, b)) for _ in range(reps))
    return 2 * n**3 / best


def _timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=10, help="timed steps per configuration")
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--modes", default="eager,bf16", help="any of eager, bf16, compile")
    parser.add_argument("--impls", default="moelab,hf")
    parser.add_argument("--arms", choices=sorted(ARMS), default="demo",
                        help="the demo's three arms, or the cpu sweep grid's 16 shapes")
    parser.add_argument("--label", default=None,
                        help="key of this run in the results file (default: the --modes text); "
                             "a new label keeps earlier runs beside it")
    parser.add_argument("--batch-size", type=int, default=None, help="default: the demo's")
    parser.add_argument("--threads", type=int, default=1,
                        help="torch threads (default 1: on a CPU shared with other jobs, 2 "
                             "spin-waiting OpenMP threads make step times swing by 5x)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    config, arms = ARMS[args.arms]()
    batch_size = args.batch_size or config.train.batch_size
    tokens_per_step = batch_size * config.model.max_seq_len
    configs = [(impl, arm, mode) for mode in args.modes.split(",")
               for impl in args.impls.split(",") for arm in arms]
    # Every compiled configuration stays live for the round-robin, so none may be the one past
    # dynamo's recompile limit (it would run eager without a word).
    torch._dynamo.config.recompile_limit = max(torch._dynamo.config.recompile_limit, len(configs))
    steps, errors = {}, {}
    for key in configs:
        impl, arm, mode = key
        try:
            steps[key] = build_step(impl, arms[arm], mode, config.train, batch_size)
            warmup_start = time.perf_counter()
            for _ in range(args.warmup + (1 if mode == "compile" else 0)):
                steps[key]()
            print(f"ready {impl:6s} {arm:12s} {mode:7s} (warmup {time.perf_counter() - warmup_start:.1f}s)",
                  flush=True)
        except Exception as exc:  # a mode this torch/transformers cannot run: record, go on
            errors["/".join(key)] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}"
            steps.pop(key, None)
            print(f"FAILED {key}: {errors['/'.join(key)]}", flush=True)
    times = {key: [] for key in steps}
    for _ in range(args.reps):  # round-robin: noise hits every configuration alike
        for key, step in steps.items():
            times[key].append(_timed(step))

    peaks = {"float32": matmul_peak_flops(torch.float32), "bfloat16": matmul_peak_flops(torch.bfloat16)}
    rows = []
    for (impl, arm, mode), samples in times.items():
        best_s, median_s = min(samples), statistics.median(samples)
        tokens_per_s = tokens_per_step / best_s
        flops_per_s = tokens_per_s * flops_per_token(arms[arm]).kaplan
        peak = peaks["bfloat16" if mode == "bf16" else "float32"]
        rows.append({"impl": impl, "arm": arm, "mode": mode, "step_s": samples,
                     "best_step_s": best_s, "median_step_s": median_s,
                     "tokens_per_s": tokens_per_s, "median_tokens_per_s": tokens_per_step / median_s,
                     "flops_per_s": flops_per_s, "fraction_of_matmul_peak": flops_per_s / peak})
    results = {
        "command": "python benchmarks/train_step.py " + " ".join(
            f"--{k.replace('_', '-')} {v}" for k, v in vars(args).items() if v is not None),
        "torch": torch.__version__, "threads": torch.get_num_threads(),
        "machine": f"{platform.machine()} {platform.processor() or ''}".strip(),
        "batch_size": batch_size, "seq_len": config.model.max_seq_len,
        "tokens_per_step": tokens_per_step, "matmul_peak_flops": peaks,
        "rows": rows, "errors": errors,
    }
    results["finished"] = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    results["load_average_1min"] = os.getloadavg()[0]
    previous = json.loads(RESULTS.read_text()) if RESULTS.is_file() else {}
    previous = previous if "rows" not in previous else {}  # an older single-entry layout
    atomic_write_json(RESULTS, {**previous, args.label or args.modes: results})
    print_table(rows)
    for key, message in errors.items():
        print(f"not measured: {key}: {message}")


def print_table(rows: list[dict]) -> None:
    by_key = {(r["impl"], r["arm"], r["mode"]): r for r in rows}
    print("\n| mode | arm | moelab tok/s | HF tok/s | moelab / HF | moelab / HF eager "
          "| moelab % matmul peak |")
    print("|---|---|---|---|---|---|---|")
    for (impl, arm, mode), row in by_key.items():
        if impl != "moelab":
            continue
        hf, hf_eager = by_key.get(("hf", arm, mode)), by_key.get(("hf", arm, "eager"))
        ratio = f"{row['tokens_per_s'] / hf['tokens_per_s']:.2f}" if hf else "-"
        ratio_eager = f"{row['tokens_per_s'] / hf_eager['tokens_per_s']:.2f}" if hf_eager else "-"
        hf_text = f"{hf['tokens_per_s']:,.0f}" if hf else "-"
        print(f"| {mode} | {arm} | {row['tokens_per_s']:,.0f} | {hf_text} | {ratio} | {ratio_eager} | "
              f"{100 * row['fraction_of_matmul_peak']:.1f} % |")
    if {"eager", "compile"} <= {r["mode"] for r in rows}:
        print("\ncompiled / eager speed (fastest steps; medians):")
        for (impl, arm, mode), row in by_key.items():
            eager = by_key.get((impl, arm, "eager"))
            if mode == "compile" and eager:
                print(f"  {impl:6s} {arm:12s} {eager['best_step_s'] / row['best_step_s']:.2f} "
                      f"({eager['median_step_s'] / row['median_step_s']:.2f})")
    print("\nMoE / dense_active step time:")
    for impl in ("moelab", "hf"):
        for mode in sorted({r["mode"] for r in rows}):
            moe, dense = by_key.get((impl, "moe", mode)), by_key.get((impl, "dense_active", mode))
            if moe and dense:
                print(f"  {impl:6s} {mode:7s} {moe['best_step_s'] / dense['best_step_s']:.3f} "
                      f"(medians: {moe['median_step_s'] / dense['median_step_s']:.3f})")


if __name__ == "__main__":
    main()
