"""The GPU check's measurements: train-step throughput and MFU of the ``paper`` arms, and the
merge of every phase of ``benchmarks/gpu_check.sh`` into one JSON.

    python benchmarks/gpu_check.py env --out PARTS        # the machine, torch, C compiler, peak
    python benchmarks/gpu_check.py train --out PARTS      # the arms, compiled and eager, bf16
    python benchmarks/gpu_check.py resume --out PARTS     # how far a resumed CUDA run drifts
    python benchmarks/gpu_check.py merge --out DIR        # DIR/gpu_check_parts -> DIR/gpu_check.json
    python benchmarks/gpu_check.py train --device cpu --tiny --compile-backend eager  # dry run
    python benchmarks/gpu_check.py                        # the same dry run, writing nothing
                                                          # (what `make bench` runs)

Each phase exits 1 when something in it failed (recorded in its JSON), 0 otherwise.

``train`` times the ``paper`` preset's arms as ``moelab study paper`` builds them: ``moe`` (the
preset), ``dense_active`` and ``dense_total`` (``moelab.accounting.match_dense``), at the
preset's batch (64 x 512 tokens a step) in bf16 autocast, eager and under torch.compile. One
step is the training loop's: forward + backward, gradient clipping, fused AdamW, zero_grad.
Tokens are random (throughput does not depend on them; the router sees real activations).
Each configuration is warmed up (the first step compiles, for the compiled mode: its time is
logged as ``first_step_s``) and then timed over ``--steps`` steps between two device
synchronisations; peak memory is reset before each. Compiled runs first: the goals are about
it, and a phase cut short by its limit loses eager rows rather than compiled ones.

MFU = tokens/s x FLOPs per token / peak, under two conventions, both recorded by name:
``full_6LTd`` is ``flops_per_token(cfg).kaplan`` (6 x active non-embedding parameters +
attention 6 n_layers n_ctx d_model + the unembedding 6 d_model V; moelab's accounting, called
``full`` before), ``palm_12LTd`` is ``flops_per_token(cfg).palm``, the same with the attention
term of PaLM and nanoGPT, 12 n_layers n_ctx d_model. (The keys keep their recorded names.)
The MoE's routed experts count k of E (its active FLOPs), so MoE and dense_active have about the
same count and their MFU ratio is their tokens/s ratio. The peak is the spec sheet's dense bf16
figure of the GPU found (``peak_bf16``): an H200 SXM 989 TFLOP/s, an H200 NVL 835, told apart
by the name or, failing that, the board power limit (NVL 600 W, SXM 700 W); ``--peak-tflops``
overrides it. Which peak and why is recorded.

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
import shutil
import subprocess
import sys
import time
from pathlib import Path

import torch

H200_BF16_DENSE_TFLOPS = 989.0
PEAK_BF16_DENSE_TFLOPS = {"H200 NVL": 835.0, "H200": 989.0, "H100 NVL": 835.0,
                          "H100 PCIe": 756.0, "H100": 989.0, "B200": 2250.0, "A100": 312.0}
"""Dense bf16 tensor-core peaks of the spec sheets, by device name (the longest match wins)."""
NVL_MAX_POWER_W = 600
"""An H200 or H100 whose board power limit is at most this is the NVL (PCIe) card."""
GOALS = {"dense_active_mfu_compiled": 0.30, "moe_over_dense_active_compiled": 0.85}
"""MFU goals are in the ``full_6LTd`` convention (the lower of the two)."""
MODULES = ("numpy", "yaml", "tqdm", "safetensors", "tokenizers", "pytest", "transformers",
           "triton")
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
    parser.add_argument("phase", nargs="?", choices=("env", "train", "resume", "merge"),
                        help="none: a CPU dry run of train that writes nothing")
    parser.add_argument("--out", type=Path, default=None, help="default: $OUT or benchmarks/results")
    parser.add_argument("--device", default="cuda", help="cuda (default) or cpu (a dry run)")
    parser.add_argument("--tiny", action="store_true", help="toy sizes, 2 sequences, 2 steps")
    parser.add_argument("--arms", default="dense_active,moe,dense_total")
    parser.add_argument("--modes", default="compiled,eager")
    parser.add_argument("--steps", type=int, default=10, help="timed steps per configuration")
    parser.add_argument("--warmup", type=int, default=3, help="untimed steps (compile included)")
    parser.add_argument("--batch-size", type=int, default=None, help="default: the preset's (64)")
    parser.add_argument("--compile-backend", default="inductor")
    parser.add_argument("--peak-tflops", type=float, default=None,
                        help="default: the spec sheet's dense bf16 peak of the GPU found")
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
    name = torch.cuda.get_device_name(0) if cuda else None
    power_w = _power_limit_w() if cuda else None
    return {
        "python": platform.python_version(), "torch": torch.__version__,
        "cuda": torch.version.cuda, "device": name,
        "capability": list(torch.cuda.get_device_capability(0)) if cuda else None,
        "power_limit_w": power_w, "peak_bf16": peak_bf16(name, power_w),
        "has_grouped_mm": hasattr(torch, "_grouped_mm"),
        "c_compiler": c_compiler(),
        "missing_modules": [m for m in MODULES if importlib.util.find_spec(m) is None],
    }


def c_compiler() -> dict:
    """The C compiler triton (inductor's GPU code) builds its launchers with: $CC, else cc,
    gcc or clang on the PATH, and its version line; None where there is none."""
    for candidate in filter(None, (os.environ.get("CC"), "cc", "gcc", "clang")):
        path = shutil.which(candidate)
        if path:
            try:
                version = subprocess.run([path, "--version"], capture_output=True, text=True,
                                         timeout=10).stdout.splitlines()[:1]
            except (OSError, subprocess.SubprocessError):
                version = []
            return {"path": path, "version": version[0] if version else None}
    return {"path": None, "version": None}


def _power_limit_w() -> float | None:
    """The board's maximum power limit from nvidia-smi (None where it cannot say)."""
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=power.max_limit",
                              "--format=csv,noheader,nounits", "--id=0"],
                             capture_output=True, text=True, timeout=20).stdout
        return float(out.strip().splitlines()[0])
    except (OSError, subprocess.SubprocessError, ValueError, IndexError):
        return None


def peak_bf16(device_name: str | None, power_limit_w: float | None) -> dict:
    """``{"tflops", "model", "source"}``: the dense bf16 peak of the GPU named, and how it was
    told (an H200 or H100 not named NVL is taken as NVL when its power limit is at most 600 W).
    Without a GPU, or one not in the table, the H200 SXM figure, saying so."""
    name = (device_name or "").upper()
    model = max((m for m in PEAK_BF16_DENSE_TFLOPS if m.upper() in name), key=len, default=None)
    source = "device name"
    if model in ("H200", "H100") and power_limit_w is not None and power_limit_w <= NVL_MAX_POWER_W:
        model, source = f"{model} NVL", f"power limit {power_limit_w:g} W <= {NVL_MAX_POWER_W} W"
    elif model in ("H200", "H100"):
        source = ("device name (SXM: power limit unknown)" if power_limit_w is None
                  else f"device name, power limit {power_limit_w:g} W (SXM)")
    if model is None:
        return {"tflops": H200_BF16_DENSE_TFLOPS, "model": "H200 SXM (assumed)",
                "source": f"no known GPU ({device_name or 'none'})"}
    return {"tflops": PEAK_BF16_DENSE_TFLOPS[model], "model": model, "source": source}


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
    from moelab.model import Transformer

    torch.manual_seed(0)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)  # this arm's peak, not the process's
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
    step()  # compiles, for the compiled mode
    _synchronize(device)
    first_step_s = time.perf_counter() - started
    for _ in range(args.warmup - 1):
        step()
    _synchronize(device)
    warmup_s = time.perf_counter() - started
    started = time.perf_counter()
    for _ in range(args.steps):
        step()
    _synchronize(device)
    seconds = time.perf_counter() - started
    tokens_per_s = args.steps * batch * seq_len / seconds
    flops = flops_per_token_conventions(config.model)
    return {
        "tokens_per_s": tokens_per_s, "step_ms": 1000 * seconds / args.steps,
        "first_step_s": first_step_s, "warmup_s": warmup_s, "flops_per_token": flops,
        "mfu": {name: tokens_per_s * f / (args.peak_tflops * 1e12) for name, f in flops.items()},
        "experts": _experts_name(model, device), "optimizer": optimizer_name,
        "batch": batch, "seq_len": seq_len,
        "max_memory_gib": (torch.cuda.max_memory_allocated(device) / 2**30
                           if device.type == "cuda" else None),
    }


def flops_per_token_conventions(model_cfg) -> dict[str, int]:
    """Training FLOPs per token, attention counted as 6 (moelab's ``kaplan``) or 12 (``palm``:
    PaLM, nanoGPT, Abnar et al.'s eq. 9) x n_layers x n_ctx x d_model."""
    from moelab.accounting import flops_per_token

    flops = flops_per_token(model_cfg)
    return {"full_6LTd": flops.kaplan, "palm_12LTd": flops.palm}


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
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else None
    peak = peak_bf16(name, _power_limit_w() if device.type == "cuda" else None)
    if args.peak_tflops is None:
        args.peak_tflops = peak["tflops"]
    else:
        peak = {"tflops": args.peak_tflops, "model": peak["model"], "source": "--peak-tflops"}
    results = {"peak_tflops": args.peak_tflops, "peak": peak, "device": str(device),
               "device_name": name, "tiny": args.tiny, "steps": args.steps,
               "warmup": args.warmup, "arms": {}}
    path = args.out / "gpu_check_train.json" if args.out else None
    for mode in args.modes.split(","):
        for arm in args.arms.split(","):
            try:
                row = measure(arms[arm], mode, args, device)
            except Exception as exc:  # noqa: BLE001 -- record it, measure the rest
                row = {"error": f"{type(exc).__name__}: {exc}"[:500]}
            results["arms"].setdefault(arm, {})[mode] = row
            print(f"{arm:13s} {mode:8s} " + (
                f"{row['tokens_per_s']:12.0f} tok/s  MFU {100 * row['mfu']['full_6LTd']:5.1f} % "
                f"(full_6LTd) {100 * row['mfu']['palm_12LTd']:5.1f} % (palm_12LTd)  "
                f"first step {row['first_step_s']:.1f} s  ({row['experts'] or 'dense'})"
                if "error" not in row else row["error"]), flush=True)
            results["summary"] = summarize(results["arms"])
            if path:
                _write(path, results)
            if device.type == "cuda":
                torch.cuda.empty_cache()
    return results


RESUME_STEPS, RESUME_CHECKPOINT = 20, 10
RESUME_MODEL = ["model.vocab_size=512", "model.d_model=256", "model.n_layers=4",
                "model.n_heads=4", "model.n_kv_heads=4", "model.d_ff=688", "model.max_seq_len=256",
                "model.moe={num_experts: 8, top_k: 2, d_expert: 344}"]
RESUME_TINY_MODEL = ["model.vocab_size=512", "model.d_model=32", "model.n_layers=2",
                     "model.n_heads=2", "model.n_kv_heads=2", "model.d_ff=64",
                     "model.max_seq_len=32", "model.moe={num_experts: 4, top_k: 2, d_expert: 32}"]


class _Interrupted(Exception):
    """Raised as a step begins, after a checkpoint: the run stops there, as if killed."""


def resume_config(args):
    """A small MoE on the bundled sample, bf16 on the device, a checkpoint at step 10 of 20."""
    from moelab.config import load_config

    model = RESUME_TINY_MODEL if args.tiny else RESUME_MODEL
    seq_len = 32 if args.tiny else 256
    batch = 8 if args.tiny else 16
    return load_config(None, model + [
        "data.source=sample", "data.max_train_stories=300", f"train.batch_size={batch}",
        f"train.max_tokens={RESUME_STEPS * batch * seq_len}", "train.lr=0.003",
        f"train.checkpoint_interval={RESUME_CHECKPOINT}", f"train.eval_interval={RESUME_STEPS}",
        "train.eval_windows=8", "train.log_interval=1", "train.logging.progress=false",
        "train.sample_tokens=0", "train.dtype=bfloat16", f"train.device={args.device}"])


def run_resume(args) -> dict:
    """Train the same run three times: straight, straight again, and stopped after its step-10
    checkpoint then resumed; how far the losses of the second and third drift from the first.
    On a CPU all three are equal bit for bit; on CUDA the run-to-run drift (atomics in the
    kernels) is the floor a resume's drift is judged against."""
    import tempfile

    import moelab.train.loop as loop
    from moelab.train import train
    from moelab.train.run_folder import RunFolder

    config = resume_config(args)
    real_step, steps_begun = loop.optimizer_step, []

    def step_or_stop(*step_args, **step_kwargs):
        steps_begun.append(True)
        if len(steps_begun) == RESUME_CHECKPOINT + 1:
            raise _Interrupted
        return real_step(*step_args, **step_kwargs)

    with tempfile.TemporaryDirectory() as root:
        runs = {name: Path(root) / name for name in ("straight", "again", "resumed")}
        train(config, runs["straight"])
        train(config, runs["again"])
        loop.optimizer_step = step_or_stop
        try:
            train(config, runs["resumed"])
        except _Interrupted:
            pass
        finally:
            loop.optimizer_step = real_step
        train(config, runs["resumed"], resume=True)
        summaries = {name: RunFolder(path).read_summary() for name, path in runs.items()}
        losses = {name: [e["loss"] for e in RunFolder(path).read_metrics() if e["kind"] == "train"]
                  for name, path in runs.items()}
    result = {"device": args.device, "steps": RESUME_STEPS, "resumed_after_step": RESUME_CHECKPOINT,
              "losses": losses}
    for name in ("again", "resumed"):
        if len(losses[name]) != RESUME_STEPS:
            raise RuntimeError(f"{name}: {len(losses[name])} train steps logged, not {RESUME_STEPS}")
        diffs = [abs(a - b) for a, b in zip(losses[name], losses["straight"])]
        result[f"{name}_max_abs_loss_diff"] = max(diffs)
        result[f"{name}_max_abs_loss_diff_after_resume"] = max(diffs[RESUME_CHECKPOINT:])
        result[f"{name}_bit_exact"] = losses[name] == losses["straight"]
        result[f"{name}_final_val_loss_diff"] = abs(summaries[name]["final_val_loss"]
                                                    - summaries["straight"]["final_val_loss"])
    print(json.dumps({k: v for k, v in result.items() if k != "losses"}), flush=True)
    if args.out:
        _write(args.out / "gpu_check_resume.json", result)
    return result


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
            summary[f"dense_active_mfu_{mode}"] = mfu["full_6LTd"]
            summary[f"dense_active_mfu_palm_12LTd_{mode}"] = mfu["palm_12LTd"]
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
    merged["failed_phases"] = sorted(
        name.removeprefix("phase_") for name, phase in merged.items()
        if name.startswith("phase_") and (not isinstance(phase, dict) or phase.get("rc") != 0))
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
    """0 when the phase measured everything it set out to, else 1 (the JSON says what failed)."""
    args = parse_args(argv)
    if args.phase == "env":
        info = environment()
        print(json.dumps(info))
        _write(args.out / "gpu_check_env.json", info)
        return 0
    if args.phase == "train":
        results = run_train(args)
        print(json.dumps(results["summary"]))
        return int(any("error" in row for modes in results["arms"].values()
                       for row in modes.values()))
    if args.phase == "resume":
        run_resume(args)
        return 0
    merged = merge(args.out)
    print(f"wrote {args.out / 'gpu_check.json'} ({', '.join(merged)}); failed phases: "
          f"{', '.join(merged['failed_phases']) or 'none'}")
    return int(bool(merged["failed_phases"]))


if __name__ == "__main__":
    sys.exit(main())
