"""The GPU check's measurements: train-step throughput and MFU of the ``paper`` arms, and the
merge of every phase of ``benchmarks/gpu_check.sh`` into one JSON.

    python benchmarks/gpu_check.py env --out PARTS        # the machine, torch, missing modules
    python benchmarks/gpu_check.py train --out PARTS      # the arms, eager and compiled, bf16
    python benchmarks/gpu_check.py merge --out DIR        # DIR/gpu_check_parts -> DIR/gpu_check.json
    python benchmarks/gpu_check.py train --device cpu --tiny --compile-backend eager  # dry run
    python benchmarks/gpu_check.py                        # the same dry run, writing nothing
                                                          # (what `make bench` runs)

``train`` times the ``paper`` preset's arms as ``moelab study paper`` builds them: ``moe`` (the
preset), ``dense_active`` and ``dense_total`` (``moelab.accounting.match_dense``), at the
preset's batch (64 x 512 tokens a step) in bf16 autocast, eager and under torch.compile. One
step is the training loop's: forward + backward, gradient clipping, fused AdamW, zero_grad.
Tokens are random (throughput does not depend on them; the router sees real activations).
Each configuration is warmed up (compiling, for the compiled mode) and then timed over
``--steps`` steps between two device synchronisations.

MFU = tokens/s x ``flops_per_token(cfg).full`` / peak, the peak being the H200's dense bf16
spec sheet figure, 989 TFLOP/s (``--peak-tflops``). ``full`` counts 6 x active non-embedding
parameters + attention (6 n_layers n_ctx d_model) + the unembedding (6 d_model V) per token:
the MoE's routed experts count k of E (its active FLOPs), so MoE and dense_active have about the
same count and their MFU ratio is their tokens/s ratio.

Goals (BENCHMARKS.md, "GPU"): dense_active >= 30 % MFU compiled; moe >= 0.85 x dense_active
tokens/s (compiled). Results are written after every configuration, so a phase killed by its
timeout still leaves what it measured.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import platform
import sys
import time
from pathlib import Path

import torch

H200_BF16_DENSE_TFLOPS = 989.0
GOALS = {"dense_active_mfu_compiled": 0.30, "moe_over_dense_active_compiled": 0.85}
MODULES = ("numpy", "yaml", "tqdm", "safetensors", "tokenizers", "pytest", "transformers")
"""What moelab and its tests import beyond torch (transformers: only the CPU comparisons)."""
TINY = ["model.vocab_size=256", "model.d_model=64", "model.n_layers=2", "model.n_heads=4",
        "model.n_kv_heads=4", "model.d_ff=176", "model.max_seq_len=32",
        "model.moe.d_expert=48"]
"""``--tiny``: the paper arms' structure at toy sizes, for a CPU dry run."""


def default_out() -> Path:
    """$OUT when set (a batch machine's results folder), else benchmarks/results."""
    return Path(os.environ["OUT"]) if os.environ.get("OUT") else Path(__file__).parent / "results"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("phase", nargs="?", choices=("env", "train", "merge"),
                        help="none: a CPU dry run of train that writes nothing")
    parser.add_argument("--out", type=Path, default=None, help="default: $OUT or benchmarks/results")
    parser.add_argument("--device", default="cuda", help="cuda (default) or cpu (a dry run)")
    parser.add_argument("--tiny", action="store_true", help="toy sizes, 2 sequences, 2 steps")
    parser.add_argument("--arms", default="dense_active,moe,dense_total")
    parser.add_argument("--modes", default="eager,compiled")
    parser.add_argument("--steps", type=int, default=10, help="timed steps per configuration")
    parser.add_argument("--warmup", type=int, default=3, help="untimed steps (compile included)")
    parser.add_argument("--batch-size", type=int, default=None, help="default: the preset's (64)")
    parser.add_argument("--compile-backend", default="inductor")
    parser.add_argument("--peak-tflops", type=float, default=H200_BF16_DENSE_TFLOPS)
    args = parser.parse_args(argv)
    args.out = args.out or default_out()
    if args.phase is None:
        args.phase, args.device, args.tiny, args.compile_backend, args.out = (
            "train", "cpu", True, "eager", None)
    unknown = set(args.arms.split(",")) - {"dense_active", "moe", "dense_total"}
    if unknown or set(args.modes.split(",")) - {"eager", "compiled"}:
        parser.error(f"--arms/--modes: unknown {sorted(unknown) or args.modes}")
    if args.tiny:
        args.batch_size, args.steps, args.warmup = args.batch_size or 2, min(args.steps, 2), 1
    return args


def environment() -> dict:
    cuda = torch.cuda.is_available()
    return {
        "python": platform.python_version(), "torch": torch.__version__,
        "cuda": torch.version.cuda, "device": torch.cuda.get_device_name(0) if cuda else None,
        "capability": list(torch.cuda.get_device_capability(0)) if cuda else None,
        "has_grouped_mm": hasattr(torch, "_grouped_mm"),
        "missing_modules": [m for m in MODULES if importlib.util.find_spec(m) is None],
    }


def paper_arms(tiny: bool) -> dict:
    """name -> Config of the three study arms (as ``moelab.study.arms.study_arms`` builds them)."""
    from moelab.accounting import match_dense
    from moelab.config import load_config, override

    config = load_config("paper", TINY if tiny else [])
    arms = {"moe": config}
    for criterion in ("active", "total"):
        d_ff = match_dense(config.model, criterion).config.d_ff
        arms[f"dense_{criterion}"] = override(config, ["model.moe=null", f"model.d_ff={d_ff}"])
    return arms


def adamw(model: torch.nn.Module, train_cfg) -> tuple[torch.optim.Optimizer, str]:
    """moelab's optimizer; where moelab.train cannot be imported (a GPU image without its data
    dependencies) the same fused AdamW built here, and which one it was."""
    try:
        from moelab.train.optim import build_optimizer
    except ImportError as exc:
        params = [p for p in model.parameters() if p.requires_grad]
        groups = [{"params": [p for p in params if p.dim() >= 2], "weight_decay": train_cfg.weight_decay},
                  {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}]
        optimizer = torch.optim.AdamW(groups, lr=train_cfg.lr, fused=True,
                                      betas=(train_cfg.beta1, train_cfg.beta2))
        return optimizer, f"inline fused AdamW ({exc})"
    return build_optimizer(model, train_cfg), "moelab.train.optim.build_optimizer"


def measure(config, mode: str, args, device: torch.device) -> dict:
    """Tokens/s of one arm in one mode (bf16 autocast)."""
    from moelab.accounting import flops_per_token
    from moelab.model import Transformer

    torch.manual_seed(0)
    model = Transformer(config.model).to(device)
    optimizer, optimizer_name = adamw(model, config.train)
    train_model = (torch.compile(model, backend=args.compile_backend) if mode == "compiled"
                   else model)
    batch, seq_len = args.batch_size or config.train.batch_size, config.model.max_seq_len
    gen = torch.Generator().manual_seed(0)
    tokens_BT = torch.randint(0, config.model.vocab_size, (batch, seq_len + 1), generator=gen).to(device)

    def step() -> None:
        with torch.autocast(device.type, dtype=torch.bfloat16):
            out = train_model(tokens_BT[:, :-1], tokens_BT[:, 1:], collect_routing=False)
        out.loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), config.train.grad_clip)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    started = time.perf_counter()
    for _ in range(args.warmup):
        step()
    _synchronize(device)
    warmup_s = time.perf_counter() - started
    started = time.perf_counter()
    for _ in range(args.steps):
        step()
    _synchronize(device)
    seconds = time.perf_counter() - started
    tokens_per_s = args.steps * batch * seq_len / seconds
    flops = flops_per_token(config.model).full
    return {
        "tokens_per_s": tokens_per_s, "step_ms": 1000 * seconds / args.steps,
        "warmup_s": warmup_s, "flops_per_token_full": flops,
        "mfu": tokens_per_s * flops / (args.peak_tflops * 1e12),
        "experts": _experts_name(model, device), "optimizer": optimizer_name,
        "batch": batch, "seq_len": seq_len,
        "max_memory_gib": (torch.cuda.max_memory_allocated(device) / 2**30
                           if device.type == "cuda" else None),
    }


def _experts_name(model, device: torch.device) -> str | None:
    """Which experts implementation the MoE layers run here in bf16 (None: a dense model)."""
    from moelab.moe import EXPERTS_IMPLEMENTATIONS, MoEFeedForward

    for layer in model.layers:
        if isinstance(layer.feed_forward, MoEFeedForward):
            with torch.autocast(device.type, dtype=torch.bfloat16):
                forward = layer.feed_forward.experts_forward_for(torch.zeros(1, 8, device=device))
            return next(name for name, f in EXPERTS_IMPLEMENTATIONS.items() if f is forward)
    return None


def _synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def run_train(args) -> dict:
    """Every (arm, mode), the results file rewritten after each."""
    device = torch.device(args.device)
    if device.type == "cuda":
        from moelab.train.cuda import configure_cuda  # TF32, flash attention: as training does

        configure_cuda(device)
    arms = paper_arms(args.tiny)
    results = {"peak_tflops": args.peak_tflops, "device": str(device), "tiny": args.tiny,
               "steps": args.steps, "warmup": args.warmup, "arms": {}}
    path = args.out / "gpu_check_train.json" if args.out else None
    for mode in args.modes.split(","):
        for name in args.arms.split(","):
            try:
                row = measure(arms[name], mode, args, device)
            except Exception as exc:  # noqa: BLE001 -- record it, measure the rest
                row = {"error": f"{type(exc).__name__}: {exc}"[:500]}
            results["arms"].setdefault(name, {})[mode] = row
            print(f"{name:13s} {mode:8s} " + (f"{row['tokens_per_s']:12.0f} tok/s  "
                  f"MFU {100 * row['mfu']:5.1f} %  ({row['experts'] or 'dense'})"
                  if "error" not in row else row["error"]), flush=True)
            results["summary"] = summarize(results["arms"])
            if path:
                _write(path, results)
            if device.type == "cuda":
                torch.cuda.empty_cache()
    return results


def summarize(arms: dict) -> dict:
    """The ratios and the goals, from whatever has been measured."""
    def tokens(arm, mode):
        return arms.get(arm, {}).get(mode, {}).get("tokens_per_s")

    summary = {}
    for mode in ("eager", "compiled"):
        moe, dense = tokens("moe", mode), tokens("dense_active", mode)
        if moe and dense:
            summary[f"moe_over_dense_active_{mode}"] = moe / dense
        mfu = arms.get("dense_active", {}).get(mode, {}).get("mfu")
        if mfu is not None:
            summary[f"dense_active_mfu_{mode}"] = mfu
    summary["goals"] = {key: {"goal": goal, "measured": summary.get(key),
                              "met": None if key not in summary else summary[key] >= goal}
                        for key, goal in GOALS.items()}
    return summary


def merge(out: Path) -> dict:
    """``out/gpu_check.json``: every phase's JSON in ``out/gpu_check_parts`` under its file
    name, and the last lines of each phase's log."""
    parts = out / "gpu_check_parts"
    merged = {}
    for path in sorted(parts.glob("*.json")):
        try:
            merged[path.stem] = json.loads(path.read_text())
        except (OSError, ValueError) as exc:
            merged[path.stem] = {"error": f"unreadable: {exc}"}
    if (parts / "tests.xml").is_file():
        merged["tests"] = _junit_counts(parts / "tests.xml")
    merged["log_tails"] = {path.stem: path.read_text(errors="replace")[-3000:]
                           for path in sorted(parts.glob("*.log"))}
    _write(out / "gpu_check.json", merged)
    return merged


def _junit_counts(path: Path) -> dict:
    """tests / failures / errors / skipped of pytest's junit XML (all skipped: no GPU seen)."""
    import xml.etree.ElementTree as ElementTree

    try:
        root = ElementTree.parse(path).getroot()
    except ElementTree.ParseError as exc:
        return {"error": f"unreadable: {exc}"}
    suite = root if root.tag == "testsuite" else root.find("testsuite")
    return {key: int(suite.get(key, 0)) for key in ("tests", "failures", "errors", "skipped")}


def _write(path: Path, data: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=1, default=str) + "\n")
    tmp.replace(path)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.phase == "env":
        info = environment()
        print(json.dumps(info))
        _write(args.out / "gpu_check_env.json", info)
    elif args.phase == "train":
        results = run_train(args)
        print(json.dumps(results["summary"]))
    else:
        merged = merge(args.out)
        print(f"wrote {args.out / 'gpu_check.json'} ({', '.join(merged)})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
