"""Forward+backward time of the MoE FFN layer versus a dense SwiGLU FFN of the same active size
and versus Hugging Face's Mixtral sparse block (its one-hot loop over experts).

Layers, for each E: ``dense`` (SwiGLU, d_ff = k * d_expert: the same active FLOPs), ``moelab``
(MoEFeedForward) and ``hf`` (transformers' MixtralSparseMoeBlock, eager experts, same weights).
They are timed interleaved (each repeat runs every layer once, in a fresh random order) so
machine noise hits them alike; the median of the repeats is reported, with ratios to dense,
both in wall time and in CPU time of the process (time.process_time: on a machine shared with
other jobs it moves less than wall time; with 2 threads it includes OpenMP spin-waiting).
MoE layers are timed as training uses them: router, top-k, dispatch, combine, and (for moelab)
the load-balancing and z losses (not the routing statistics, which training skips), backward
through all of it.

Two more entries time the matrix products alone, forward and backward (nine each, on random
operands): ``dense_gemms`` those of the dense layer, ``expert_gemms`` those of the moelab layer
with its routing's slot counts (``moelab.moe.kernels``' segment products). The MoE layer runs its
products and the same SwiGLU elementwise work as the dense layer, so
``1 + (expert_gemms - dense_gemms) / dense`` is a floor for moelab/dense that no dispatch code
can go below without faster per-expert matmuls.

Two more split the rest of the gap: ``routing`` (the layer's own ``route_tokens``: router
product, softmax, top-k, slot counts, balancing and z losses, forward and backward through the
weights and losses) and ``layout`` (``expert_layout``: the stable sort
of the token-slots by expert and its index maps). What remains of ``moelab - dense`` after the
products' difference, routing and layout is the gathers into expert order, the weighted
combine, the routing-weight gradient and their backward (and any page faults they take).

    .venv/bin/python benchmarks/moe_dispatch.py              # all threads -> results/moe_dispatch.json
    .venv/bin/python benchmarks/moe_dispatch.py --threads 1  # adds a 1-thread run to the same file
    .venv/bin/python benchmarks/moe_dispatch.py --label "run 2"  # kept beside the first run
    .venv/bin/python benchmarks/moe_dispatch.py --quick      # 3 repeats, writes nothing
    .venv/bin/python benchmarks/moe_dispatch.py --smoke --out /tmp/moe_dispatch.json  # toy sizes
    python benchmarks/moe_dispatch.py --device cuda --dtype bfloat16 --out DIR/moe_dispatch_cuda.json

On a GPU (``--device cuda``, from ``benchmarks/gpu_check.sh``) every entry runs on the device,
each timing between two synchronisations; ``moelab`` is the layer's default (``auto``: the
grouped experts on an sm90 or sm100 GPU in bf16) and ``moelab_sorted`` the sorted experts beside it. CPU
time and page faults mean little there. ``hf`` is left out where transformers is not installed.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import platform
import random
import resource
import statistics
import time

import torch

try:  # the GPU check's machine may not have it: then no "hf" entry
    import transformers
    from transformers.models.mixtral.configuration_mixtral import MixtralConfig
    from transformers.models.mixtral.modeling_mixtral import MixtralSparseMoeBlock
except Exception:  # noqa: BLE001 -- absent, or too old or broken to import: no "hf" entry
    transformers = MixtralSparseMoeBlock = None

from moelab.config import ModelConfig, MoEConfig
from moelab.fileio import atomic_write_json
from moelab.model import FeedForward
from moelab.moe import MoEFeedForward
from moelab.moe.kernels import (
    expert_layout,
    segment_matmul,
    segment_matmul_sum,
    segment_outer_products,
)
from moelab.moe.routing import count_slots, route

from common import add_output_arguments, machine, parse_checked

SMOKE = {"experts": [4], "batch": 2, "seq_len": 16, "d_model": 32, "d_expert": 48, "repeats": 1,
         "warmup": 0}
"""``--smoke``: one toy layer of each kind, one repeat (the GPU check's dry run uses the same)."""


def build_layers(num_experts: int, args) -> dict[str, torch.nn.Module]:
    moe_cfg = ModelConfig(d_model=args.d_model, moe=MoEConfig(
        num_experts=num_experts, top_k=args.top_k, d_expert=args.d_expert))
    moelab_moe = MoEFeedForward(moe_cfg)
    for param in moelab_moe.parameters():
        torch.nn.init.normal_(param, std=0.02)
    hf_moe = hf_layer(moelab_moe, num_experts, args) if MixtralSparseMoeBlock else None
    layers = {"dense": FeedForward(args.d_model, args.top_k * args.d_expert), "moelab": moelab_moe}
    if hf_moe is not None:
        layers["hf"] = hf_moe
    if args.device != "cpu":
        layers["moelab_sorted"] = MoEFeedForward(moe_cfg, "sorted")
        layers["moelab_sorted"].load_state_dict(moelab_moe.state_dict())
    return {name: layer.to(args.device) for name, layer in layers.items()}


def hf_layer(moelab_moe: MoEFeedForward, num_experts: int, args) -> torch.nn.Module | None:
    """transformers' Mixtral block with moelab's weights; None (and a line saying why) where the
    installed transformers lays its experts out otherwise (4.x: one module per expert)."""
    try:
        return _hf_layer(moelab_moe, num_experts, args)
    except (AttributeError, TypeError, ValueError, RuntimeError) as exc:
        print(f"no hf entry: transformers {transformers.__version__}: {type(exc).__name__}: {exc}",
              flush=True)
        return None


def _hf_layer(moelab_moe: MoEFeedForward, num_experts: int, args) -> torch.nn.Module:
    hf_cfg = MixtralConfig(hidden_size=args.d_model, intermediate_size=args.d_expert,
                           num_local_experts=num_experts, num_experts_per_tok=args.top_k,
                           experts_implementation="eager")
    hf_moe = MixtralSparseMoeBlock(hf_cfg)
    with torch.no_grad():  # same weights, so both route the same way
        hf_moe.gate.weight.copy_(moelab_moe.router.weight)
        hf_moe.experts.gate_up_proj.copy_(torch.cat([moelab_moe.w1, moelab_moe.w3], dim=1))
        hf_moe.experts.down_proj.copy_(moelab_moe.w2)
    return hf_moe


def gemms_only(rows: int, d_model: int, d_hidden: int, slots_per_expert: torch.Tensor,
               device: str = "cpu", dtype: torch.dtype = torch.float32):
    """The nine matrix products of a SwiGLU layer's forward and backward on ``rows`` rows split
    into experts by ``slots_per_expert`` (one expert: the dense layer): up (w1, w3) and down
    (w2) forward; the down product's input and weight gradients; the input gradient through
    w1 and w3 (two products, one sum) and their two weight gradients. In ``dtype``, the one the
    layers compute in under autocast."""
    num_experts = slots_per_expert.numel()

    def randn(*shape):
        return torch.randn(*shape, device=device).to(dtype)

    x_RD, grad_y_RD = randn(rows, d_model), randn(rows, d_model)
    h_RH, g1_RH, g3_RH = (randn(rows, d_hidden) for _ in range(3))
    w1_EHD = randn(num_experts, d_hidden, d_model)
    w3_EHD = randn(num_experts, d_hidden, d_model)
    w2_EDH = randn(num_experts, d_model, d_hidden)

    def run() -> None:
        segment_matmul(x_RD, w1_EHD.transpose(1, 2), slots_per_expert)
        segment_matmul(x_RD, w3_EHD.transpose(1, 2), slots_per_expert)
        segment_matmul(h_RH, w2_EDH.transpose(1, 2), slots_per_expert)
        segment_matmul(grad_y_RD, w2_EDH, slots_per_expert)
        segment_outer_products(grad_y_RD, h_RH, slots_per_expert)
        segment_matmul_sum([g1_RH, g3_RH], [w1_EHD, w3_EHD], slots_per_expert)
        segment_outer_products(g1_RH, x_RD, slots_per_expert)
        segment_outer_products(g3_RH, x_RD, slots_per_expert)

    return run


def routing_only(layer: MoEFeedForward, x_BTD: torch.Tensor, grad_weights_TK: torch.Tensor):
    """The layer's routing and its losses, forward and backward, as training runs them."""
    x_TD = x_BTD.detach().reshape(-1, x_BTD.shape[-1]).requires_grad_()

    def run() -> None:
        layer.zero_grad(set_to_none=True)
        routed = layer.route_tokens(x_TD)
        loss = (routed.weights_TK * grad_weights_TK).sum() + 0.01 * routed.lb_loss + 0.001 * routed.z_loss
        loss.backward()

    return run


def step(layer: torch.nn.Module, x_BTD: torch.Tensor, grad_BTD: torch.Tensor,
         dtype: torch.dtype = torch.float32) -> None:
    with torch.autocast(x_BTD.device.type, dtype=dtype, enabled=dtype != torch.float32):
        if MixtralSparseMoeBlock is not None and isinstance(layer, MixtralSparseMoeBlock):
            loss = (layer(x_BTD) * grad_BTD).sum()
            aux = None
        else:
            y_BTD, aux = layer(x_BTD, collect_routing=False)  # as training calls it
            loss = (y_BTD * grad_BTD).sum()
        if aux is not None:  # the MoE's aux losses
            loss = loss + 0.01 * aux.lb_loss + 0.001 * aux.z_loss
    loss.backward()


def time_step(entry, x_BTD, grad_BTD, dtype=torch.float32) -> tuple[float, float, int]:
    """(wall seconds, CPU seconds of this process, minor page faults) of one forward+backward (or
    of one call of a ``gemms_only`` function). Page faults are fresh memory the C allocator got
    from the OS and the first write paid for (glibc hands large freed blocks back)."""
    if isinstance(entry, torch.nn.Module):
        entry.zero_grad(set_to_none=True)
        x_BTD.grad = None
        run = functools.partial(step, entry, x_BTD, grad_BTD, dtype)
    else:
        run = entry
    synchronize = torch.cuda.synchronize if x_BTD.device.type == "cuda" else (lambda: None)
    synchronize()
    faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    wall, cpu = time.perf_counter(), time.process_time()
    run()
    synchronize()
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    return wall, cpu, resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults


def bench_one(num_experts: int, args) -> dict:
    torch.manual_seed(0)
    layers = build_layers(num_experts, args)
    x_BTD = torch.randn(args.batch, args.seq_len, args.d_model, requires_grad=True)
    grad_BTD = torch.randn(args.batch, args.seq_len, args.d_model)
    if args.device != "cpu":
        x_BTD = x_BTD.detach().to(args.device).requires_grad_()
        grad_BTD = grad_BTD.to(args.device)
    dtype = getattr(torch, args.dtype)
    tokens = args.batch * args.seq_len
    with torch.no_grad():
        experts_TK = route(layers["moelab"].router(x_BTD.reshape(-1, args.d_model)), args.top_k).experts_TK
    slot_counts_E = count_slots(experts_TK, num_experts)
    entries = {**layers,  # the layers, then their matrix products alone, then the MoE's parts
               "dense_gemms": gemms_only(tokens, args.d_model, args.top_k * args.d_expert,
                                         torch.tensor([tokens]), args.device, dtype),
               "expert_gemms": gemms_only(tokens * args.top_k, args.d_model, args.d_expert,
                                          slot_counts_E.cpu(), args.device, dtype),
               "routing": routing_only(layers["moelab"], x_BTD,
                                       torch.randn(tokens, args.top_k, device=args.device)),
               "layout": functools.partial(expert_layout, experts_TK, num_experts, slot_counts_E)}
    wall = {name: [] for name in entries}
    cpu = {name: [] for name in entries}
    faults = {name: [] for name in entries}
    for _ in range(args.warmup):
        for entry in entries.values():
            time_step(entry, x_BTD, grad_BTD, dtype)
    order = random.Random(num_experts)
    for _ in range(args.repeats):
        # A fresh random order each repeat: a layer that runs right after a different one pays
        # for allocations of new sizes (page faults), so a fixed (or rotated) order would bias
        # the ratios.
        for name in order.sample(list(entries), len(entries)):
            wall_s, cpu_s, page_faults = time_step(entries[name], x_BTD, grad_BTD, dtype)
            wall[name].append(wall_s)
            cpu[name].append(cpu_s)
            faults[name].append(page_faults)
    wall_median = {name: statistics.median(t) for name, t in wall.items()}
    cpu_median = {name: statistics.median(t) for name, t in cpu.items()}
    counts_E = slot_counts_E.double()
    ms = {name: 1000 * m for name, m in wall_median.items()}
    gap = {"total": ms["moelab"] - ms["dense"], "gemms": ms["expert_gemms"] - ms["dense_gemms"],
           "routing": ms["routing"], "layout": ms["layout"]}
    gap["gathers_combine_rest"] = gap["total"] - gap["gemms"] - gap["routing"] - gap["layout"]
    row = {
        "num_experts": num_experts,
        "busiest_over_mean": float(counts_E.max() / counts_E.mean()),  # 1 = perfectly balanced
        "median_ms": {name: 1000 * m for name, m in wall_median.items()},
        "over_dense": {name: m / wall_median["dense"] for name, m in wall_median.items()},
        "median_cpu_ms": {name: 1000 * m for name, m in cpu_median.items()},
        "cpu_over_dense": {name: m / cpu_median["dense"] for name, m in cpu_median.items()},
        "gemms_alone_ratio": wall_median["expert_gemms"] / wall_median["dense_gemms"],
        "gap_ms": gap,  # moelab - dense, split (median wall ms)
        "median_page_faults": {name: statistics.median(f) for name, f in faults.items()},
        "wall_ms": {name: [1000 * s for s in t] for name, t in wall.items()},
        "cpu_ms": {name: [1000 * s for s in t] for name, t in cpu.items()},
    }
    print(f"E={num_experts:3d} busiest/mean {row['busiest_over_mean']:.2f}  wall: "
          + "  ".join(f"{name} {ms:.0f} ms ({row['over_dense'][name]:.2f}x)"
                      for name, ms in row["median_ms"].items())
          + "\n                    cpu:  "
          + "  ".join(f"{name} {ms:.0f} ms ({row['cpu_over_dense'][name]:.2f}x)"
                      for name, ms in row["median_cpu_ms"].items())
          + f"\n                    GEMMs alone: expert/dense {row['gemms_alone_ratio']:.2f}; page faults: "
          + "  ".join(f"{name} {n:.0f}" for name, n in row["median_page_faults"].items())
          + "\n                    moelab - dense: "
          + "  ".join(f"{name} {ms:.2f} ms" for name, ms in gap.items()), flush=True)
    return row


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--experts", type=int, nargs="+", default=[4, 8, 16, 32, 64])
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--seq-len", type=int, default=256)
    parser.add_argument("--d-model", type=int, default=256)
    parser.add_argument("--d-expert", type=int, default=344)
    parser.add_argument("--top-k", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=11)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's)")
    parser.add_argument("--quick", action="store_true", help="3 repeats, 1 warmup, no results file")
    parser.add_argument("--label", default="",
                        help="results keep one run per (threads, label): repeat runs side by side")
    parser.add_argument("--device", default="cpu", help="cpu (default) or cuda")
    parser.add_argument("--dtype", default="float32", choices=("float32", "bfloat16"),
                        help="bfloat16: the layers run under bf16 autocast")
    add_output_arguments(parser, "moe_dispatch")
    args = parse_checked(parser, argv)
    if args.quick:
        args.repeats, args.warmup = 3, 1
    if args.smoke:
        vars(args).update(SMOKE)
    if args.threads:
        torch.set_num_threads(args.threads)
    load_before = os.getloadavg()[0]
    rows = [bench_one(e, args) for e in args.experts]
    if args.quick:
        return
    run = {
        "threads": torch.get_num_threads(), "label": args.label,
        "repeats": args.repeats, "warmup": args.warmup,
        "load_average_1min": {"before": load_before, "after": os.getloadavg()[0]},
        "shapes": {"tokens": args.batch * args.seq_len, "batch": args.batch,
                   "seq_len": args.seq_len, "d_model": args.d_model, "d_expert": args.d_expert,
                   "top_k": args.top_k, "dense_d_ff": args.top_k * args.d_expert},
        "malloc_env": {k: v for k, v in os.environ.items() if k.startswith("MALLOC_")},
        "torch": torch.__version__,
        "transformers": transformers.__version__ if transformers else None,
        "device": args.device, "dtype": args.dtype,
        "gpu": torch.cuda.get_device_name() if args.device != "cpu" else None,
        "machine": platform.machine(), "cpus": os.cpu_count(), "cpu": machine()["cpu"],
        "rows": rows,
    }
    # One entry per (thread count, label): 1- and 2-thread runs and repeats share the file.
    previous = json.loads(args.out.read_text()) if args.out.is_file() else {"runs": []}
    runs = [r for r in previous.get("runs", [])
            if (r.get("threads"), r.get("label", "")) != (run["threads"], run["label"])]
    runs = sorted(runs + [run], key=lambda r: (r["threads"], r.get("label", "")))
    atomic_write_json(args.out, {"runs": runs})
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
