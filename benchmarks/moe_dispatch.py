"""Forward+backward time of the MoE FFN layer versus a dense SwiGLU FFN of the same active size
and versus Hugging Face's Mixtral sparse block (its one-hot loop over experts).

For each E the three layers are timed interleaved (dense, moelab, HF, dense, ...) so machine
noise hits them alike; the median of the repeats is reported, with ratios to dense. The MoE
layers are timed as training uses them: router, top-k, dispatch, combine, and (for moelab) the
load-balancing and z losses and routing statistics, backward through all of it.

    .venv/bin/python benchmarks/moe_dispatch.py            # writes benchmarks/results/moe_dispatch.json
    .venv/bin/python benchmarks/moe_dispatch.py --quick    # fewer repeats, smoke test
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time
from pathlib import Path

import torch
import transformers
from transformers.models.mixtral.configuration_mixtral import MixtralConfig
from transformers.models.mixtral.modeling_mixtral import MixtralSparseMoeBlock

from moelab.config import ModelConfig, MoEConfig
from moelab.fileio import atomic_write_json
from moelab.model import FeedForward
from moelab.moe import MoEFeedForward

RESULTS = Path(__file__).resolve().parent / "results" / "moe_dispatch.json"


def build_layers(num_experts: int, args) -> dict[str, torch.nn.Module]:
    moe_cfg = ModelConfig(d_model=args.d_model, moe=MoEConfig(
        num_experts=num_experts, top_k=args.top_k, d_expert=args.d_expert))
    moelab_moe = MoEFeedForward(moe_cfg)
    for param in moelab_moe.parameters():
        torch.nn.init.normal_(param, std=0.02)
    hf_cfg = MixtralConfig(hidden_size=args.d_model, intermediate_size=args.d_expert,
                           num_local_experts=num_experts, num_experts_per_tok=args.top_k,
                           experts_implementation="eager")
    hf_moe = MixtralSparseMoeBlock(hf_cfg)
    with torch.no_grad():  # same weights, so both route the same way
        hf_moe.gate.weight.copy_(moelab_moe.router.weight)
        hf_moe.experts.gate_up_proj.copy_(torch.cat([moelab_moe.w1, moelab_moe.w3], dim=1))
        hf_moe.experts.down_proj.copy_(moelab_moe.w2)
    packed = MoEFeedForward(moe_cfg)
    packed.load_state_dict(moelab_moe.state_dict())
    packed.max_padding = 0.0  # always the segment loop
    dense = FeedForward(args.d_model, args.top_k * args.d_expert)
    return {"dense": dense, "moelab": moelab_moe, "packed": packed, "hf": hf_moe}


def step(layer: torch.nn.Module, x_BTD: torch.Tensor, grad_BTD: torch.Tensor) -> None:
    out = layer(x_BTD)
    if isinstance(layer, MoEFeedForward):
        y_BTD, aux = out
        loss = (y_BTD * grad_BTD).sum() + 0.01 * aux.lb_loss + 0.001 * aux.z_loss
    else:
        loss = (out * grad_BTD).sum()
    loss.backward()


def time_step(layer, x_BTD, grad_BTD) -> float:
    layer.zero_grad(set_to_none=True)
    x_BTD.grad = None
    start = time.perf_counter()
    step(layer, x_BTD, grad_BTD)
    return time.perf_counter() - start


def bench_one(num_experts: int, args) -> dict:
    torch.manual_seed(0)
    layers = build_layers(num_experts, args)
    x_BTD = torch.randn(args.batch, args.seq_len, args.d_model, requires_grad=True)
    grad_BTD = torch.randn(args.batch, args.seq_len, args.d_model)
    times = {name: [] for name in layers}
    for _ in range(args.warmup):
        for layer in layers.values():
            time_step(layer, x_BTD, grad_BTD)
    for _ in range(args.repeats):
        for name, layer in layers.items():
            times[name].append(time_step(layer, x_BTD, grad_BTD))
    medians = {name: statistics.median(t) for name, t in times.items()}
    row = {
        "num_experts": num_experts,
        "median_ms": {name: 1000 * m for name, m in medians.items()},
        "moelab_over_dense": medians["moelab"] / medians["dense"],
        "hf_over_dense": medians["hf"] / medians["dense"],
        "packed_over_dense": medians["packed"] / medians["dense"],
        "hf_over_moelab": medians["hf"] / medians["moelab"],
        "times_ms": {name: [1000 * s for s in t] for name, t in times.items()},
    }
    print(f"E={num_experts:3d}  dense {row['median_ms']['dense']:7.1f} ms  "
          f"moelab {row['median_ms']['moelab']:7.1f} ms  hf {row['median_ms']['hf']:7.1f} ms  "
          f"packed {row['median_ms']['packed']:7.1f} ms  moelab/dense {row['moelab_over_dense']:.3f}  "
          f"packed/dense {row['packed_over_dense']:.3f}  hf/dense {row['hf_over_dense']:.3f}",
          flush=True)
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--experts", type=int, nargs="+", default=[4, 8, 16, 32, 64])
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--seq-len", type=int, default=256)
    parser.add_argument("--d-model", type=int, default=256)
    parser.add_argument("--d-expert", type=int, default=344)
    parser.add_argument("--top-k", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's)")
    parser.add_argument("--quick", action="store_true", help="3 repeats, 1 warmup, no results file")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    if args.quick:
        args.repeats, args.warmup = 3, 1
    if args.threads:
        torch.set_num_threads(args.threads)
    rows = [bench_one(e, args) for e in args.experts]
    if args.quick:
        return
    atomic_write_json(args.out, {
        "shapes": {"tokens": args.batch * args.seq_len, "batch": args.batch,
                   "seq_len": args.seq_len, "d_model": args.d_model, "d_expert": args.d_expert,
                   "top_k": args.top_k, "dense_d_ff": args.top_k * args.d_expert},
        "repeats": args.repeats, "warmup": args.warmup,
        "torch": torch.__version__, "transformers": transformers.__version__,
        "threads": torch.get_num_threads(), "machine": platform.machine(),
        "rows": rows,
    })
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
