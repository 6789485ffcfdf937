"""Train-step throughput of the demo arms, moelab vs Hugging Face, side by side in one run.

    .venv/bin/python benchmarks/train_step.py [--reps 5] [--modes eager,bf16,compile]
    .venv/bin/python benchmarks/train_step.py --arms cpu-grid --impls moelab --modes eager,compile
    .venv/bin/python benchmarks/train_step.py --smoke --out /tmp/train_step.json  # seconds

Arms come from the ``demo`` preset: ``moe`` (the preset), ``dense_active`` and ``dense_total``
(``moelab.accounting.match_dense``); with ``--arms cpu-grid`` they are the cpu sweep's 16
shapes. Each arm is timed as a moelab ``Transformer`` and as the equivalent
``LlamaForCausalLM`` / ``MixtralForCausalLM`` (router logits on, so its load-balancing loss is
part of the objective) with the same shapes, batch, precision and optimizer. One step
is what the training loop does: forward + backward (``moelab.train.step.forward_backward``),
gradient clipping, fused AdamW, ``zero_grad(set_to_none=True)``.

Machines shared with other jobs are noisy, so every configuration is built and warmed up first,
then timed one step at a time in round-robin order, in wall time and in this process's CPU
time (``time.process_time``: the time its threads ran, which other jobs on the machine barely
move). Ratios use the *fastest* step in CPU time of each configuration (the one least disturbed
by other processes); wall times and medians are recorded too. Utilisation is read against the
peak the training loop uses (``moelab.train.peak``: matmul FLOPs per CPU-second, best over
sizes, cached per machine), in two counts: ``mfu_6n`` (6 N_active per token, the MFU moelab
logs) and ``fraction_of_matmul_peak`` (``flops_per_token(cfg).kaplan``, attention included).
Raw results go to benchmarks/results/train_step.json (``--out``), one entry per --label
(default: the --modes text), so repeated runs and separate invocations (compile warms up for a
while) are kept side by side. Exits 1 when a configuration failed (the file says which).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from functools import partial

import torch

from moelab.accounting import flops_per_token, match_dense
from moelab.config import load_config
from moelab.fileio import atomic_write_json
from moelab.model import Transformer
from moelab.sweep.timing import grid_shapes
from moelab.train.export import hf_config
from moelab.train.optim import build_optimizer
from moelab.train.peak import MFU_CONVENTION_CPU, measured_cpu_peak
from moelab.train.step import StepPlan, forward_backward

from common import add_output_arguments, machine, parse_checked


# The demo's shapes as BENCHMARKS.md measured them (tied head, 16 x 128 per step), pinned so the
# figures stay comparable now that the demo preset trains untied at batch 8 (docs/recipe.md).
BENCHMARKED_DEMO = ["model.tie_embeddings=true", "train.batch_size=16"]
SMOKE_SHAPES = ["model.vocab_size=320", "model.d_model=32", "model.n_layers=1",
                "model.n_heads=2", "model.n_kv_heads=2", "model.d_ff=64", "model.max_seq_len=16",
                "model.moe.d_expert=32", "train.batch_size=2"]
"""``--smoke``: the demo arms' structure at toy sizes."""


def demo_arms(extra: tuple[str, ...] = ()):
    config = load_config("demo", [*BENCHMARKED_DEMO, *extra])
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

    def forward(self, x_BT, y_BT, collect_routing=False, lb_slot_counts_LE=None):
        # lb_slot_counts_LE: forward_backward passes None for one micro batch (its own loads)
        out = self.model(input_ids=x_BT, labels=x_BT)  # HF shifts labels inside
        out.ce_loss = out.lb_loss = out.z_loss = out.loss.detach()
        out.slot_counts_LE = None  # no routed loads to report: forward_backward sums none
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


def _timed(fn) -> tuple[float, float]:
    """(wall seconds, CPU seconds of this process) of one call."""
    wall, cpu = time.perf_counter(), time.process_time()
    fn()
    return time.perf_counter() - wall, time.process_time() - cpu


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
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
    add_output_arguments(parser, "train_step")
    args = parse_checked(parser, argv)
    if args.smoke:  # the demo arms at toy sizes, both implementations, one step each
        args.reps, args.warmup, args.modes, args.arms = 1, 0, "eager", "demo"
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    config, arms = demo_arms(tuple(SMOKE_SHAPES)) if args.smoke else ARMS[args.arms]()
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
        except Exception as exc:  # noqa: BLE001 -- a mode this torch/transformers cannot run
            _record_error(errors, key, exc)
            steps.pop(key, None)
    times: dict = {key: [] for key in steps}
    for _ in range(args.reps):  # round-robin: noise hits every configuration alike
        for key, step in list(steps.items()):
            try:
                times[key].append(_timed(step))
            except Exception as exc:  # noqa: BLE001 -- recorded, and the exit status says so
                _record_error(errors, key, exc)
                steps.pop(key), times.pop(key)

    peaks = {name: measured_cpu_peak(dtype, torch.get_num_threads())
             for name, dtype in (("float32", torch.float32), ("bfloat16", torch.bfloat16))}
    rows = [_row(key, samples, arms, tokens_per_step, peaks) for key, samples in times.items()]
    results = {
        "command": "python benchmarks/train_step.py " + " ".join(
            f"--{k.replace('_', '-')} {v}" for k, v in vars(args).items()
            if v not in (None, False) and k != "out"),
        **machine(), "threads": torch.get_num_threads(), "transformers": _transformers_version(),
        "batch_size": batch_size, "seq_len": config.model.max_seq_len,
        "tokens_per_step": tokens_per_step,
        "matmul_peak": {name: {"flops_per_cpu_s": peak.flops_per_cpu_s, "source": peak.source}
                        for name, peak in peaks.items()},
        "mfu_convention": MFU_CONVENTION_CPU,
        "rows": rows, "errors": errors,
    }
    previous = json.loads(args.out.read_text()) if args.out.is_file() else {}
    previous = previous if "rows" not in previous else {}  # an older single-entry layout
    atomic_write_json(args.out, {**previous, args.label or args.modes: results})
    print_table(rows)
    for name, message in errors.items():
        print(f"not measured: {name}: {message}")
    return int(bool(errors))


def _transformers_version() -> str | None:
    try:
        import transformers
    except ImportError:
        return None
    return transformers.__version__


def _record_error(errors: dict, key: tuple, exc: Exception) -> None:
    errors["/".join(key)] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}"
    print(f"FAILED {key}: {errors['/'.join(key)]}", flush=True)


def _row(key: tuple, samples: list[tuple[float, float]], arms: dict, tokens_per_step: int,
         peaks: dict) -> dict:
    """One configuration's times, its tokens/s in wall and CPU time, and its utilisation."""
    impl, arm, mode = key
    wall, cpu = [w for w, _ in samples], [c for _, c in samples]
    best_cpu_s = min(cpu)
    tokens_per_cpu_s = tokens_per_step / best_cpu_s
    peak = peaks["bfloat16" if mode == "bf16" else "float32"].flops_per_cpu_s
    flops = flops_per_token(arms[arm])
    return {"impl": impl, "arm": arm, "mode": mode, "step_s": wall, "step_cpu_s": cpu,
            "best_step_s": min(wall), "median_step_s": statistics.median(wall),
            "best_step_cpu_s": best_cpu_s, "median_step_cpu_s": statistics.median(cpu),
            "tokens_per_s": tokens_per_step / min(wall),
            "median_tokens_per_s": tokens_per_step / statistics.median(wall),
            "tokens_per_cpu_s": tokens_per_cpu_s,
            "flops_per_cpu_s": tokens_per_cpu_s * flops.kaplan,
            "mfu_6n": tokens_per_cpu_s * flops.six_n / peak,
            "fraction_of_matmul_peak": tokens_per_cpu_s * flops.kaplan / peak}


def print_table(rows: list[dict]) -> None:
    """Tokens per CPU-second (fastest step), moelab against HF, and moelab's MFU (6 N_active)."""
    by_key = {(r["impl"], r["arm"], r["mode"]): r for r in rows}
    print("\n| mode | arm | moelab tok/CPU-s | HF tok/CPU-s | moelab / HF | moelab / HF eager "
          "| moelab tok/s wall | moelab MFU (6 N_active, CPU time) |")
    print("|---|---|---|---|---|---|---|---|")
    for (impl, arm, mode), row in by_key.items():
        if impl != "moelab":
            continue
        hf, hf_eager = by_key.get(("hf", arm, mode)), by_key.get(("hf", arm, "eager"))
        ratio = f"{row['tokens_per_cpu_s'] / hf['tokens_per_cpu_s']:.2f}" if hf else "-"
        ratio_eager = (f"{row['tokens_per_cpu_s'] / hf_eager['tokens_per_cpu_s']:.2f}"
                       if hf_eager else "-")
        hf_text = f"{hf['tokens_per_cpu_s']:,.0f}" if hf else "-"
        print(f"| {mode} | {arm} | {row['tokens_per_cpu_s']:,.0f} | {hf_text} | {ratio} | "
              f"{ratio_eager} | {row['tokens_per_s']:,.0f} | {100 * row['mfu_6n']:.1f} % |")
    if {"eager", "compile"} <= {r["mode"] for r in rows}:
        print("\ncompiled / eager speed (fastest steps in CPU time; medians):")
        for (impl, arm, mode), row in by_key.items():
            eager = by_key.get((impl, arm, "eager"))
            if mode == "compile" and eager:
                print(f"  {impl:6s} {arm:12s} "
                      f"{eager['best_step_cpu_s'] / row['best_step_cpu_s']:.2f} "
                      f"({eager['median_step_cpu_s'] / row['median_step_cpu_s']:.2f})")
    print("\nMoE / dense_active step time (CPU time; medians):")
    for impl in ("moelab", "hf"):
        for mode in sorted({r["mode"] for r in rows}):
            moe, dense = by_key.get((impl, "moe", mode)), by_key.get((impl, "dense_active", mode))
            if moe and dense:
                print(f"  {impl:6s} {mode:7s} {moe['best_step_cpu_s'] / dense['best_step_cpu_s']:.3f} "
                      f"(medians: {moe['median_step_cpu_s'] / dense['median_step_cpu_s']:.3f})")


if __name__ == "__main__":
    sys.exit(main())
