"""``moelab throughput``: time a few training steps of each shape of a grid, without training.

Each shape's model and AdamW optimizer are built as ``moelab train`` builds them and stepped
on random tokens with the training loop's own step (``moelab.train.loop.optimizer_step``:
forward, backward, clipping, optimizer, expert-bias update); a few warm-up steps are dropped,
then steps are timed one by one for about ``seconds_per_shape`` seconds. The median step time is
the shape's (a shared machine's stalls hit some steps, not the median). Random tokens route
about uniformly at initialisation, as a balanced trained router does.

The table (``write_table``) has one row per shape: N_total, N_active, S, E, k, tokens per step,
step time, tokens/s, peak memory and the device, the rows ``moelab.scaling.throughput`` fits.
"""

from __future__ import annotations

import csv
import io
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import torch

from moelab.numerics import cpu_model
from moelab.accounting import count_params, flops_per_token
from moelab.config import Config, load_config
from moelab.errors import MoelabError
from moelab.fileio import atomic_write_json, atomic_write_text
from moelab.model import Transformer
from moelab.sweep.grid import load_grid
from moelab.sweep.plan import point_config, with_max_tokens
from moelab.train.distributed import setup_distributed
from moelab.train.loop import Session, StepPlan, check_cpp_compiler, compile_afresh, optimizer_step
from moelab.train.memory import check_training_fits, peak_memory_bytes
from moelab.train.optim import build_optimizer
from moelab.train.state import Clock, TrainState
from moelab.data.batches import TrainBatches
from moelab.data.tokenizer import Tokenizer
from moelab.train.evaluation import EvalResult

TABLE_COLUMNS = ("shape", "N_total", "N_active", "S", "E", "k", "d_expert", "tokens_per_step",
                 "steps_timed", "step_time_s", "tokens_per_s", "flops_per_token_6n",
                 "peak_memory_bytes", "memory_kind", "device", "device_name", "threads",
                 "clock", "rounds", "round_step_times_s")
MIN_TIMED_STEPS = 3


@dataclass
class Shape:
    name: str
    sparsity: float
    config: Config


def grid_shapes(grid_source: str, overrides: list[str]) -> list[Shape]:
    """Every size x sparsity (x top-k, for a grid with top_ks) of a sweep grid (its budgets do
    not matter here), over the grid's base config, its overrides, then ``overrides``."""
    grid = load_grid(grid_source)
    base = load_config(grid.base, list(grid.overrides) + list(overrides))
    return [Shape(size["name"], float(sparsity),
                  point_config(base, size, float(sparsity), k, grid.mode))
            for size in grid.sizes for sparsity in grid.sparsities
            for k in (grid.planned_top_ks[:1] if sparsity == 0 else grid.planned_top_ks)]


def config_shapes(config_source: str, overrides: list[str], sparsities: list[float] | None,
                  top_k: int) -> list[Shape]:
    """One config's model, dense and at each sparsity with the same total FFN (fixed_total)."""
    config = load_config(config_source, overrides)
    if not sparsities:
        moe = config.model.moe
        sparsity = (moe.num_experts - moe.top_k) / moe.num_experts if moe else 0.0
        return [Shape("config", sparsity, config)]
    size = {"name": "config", "d_ff": config.model.d_ff}
    return [Shape("config", float(s), point_config(config, size, float(s), top_k, "fixed_total"))
            for s in sparsities]


CLOCKS = ("wall", "process")


def time_shapes(shapes: list[Shape], seconds_per_shape: float, warmup_steps: int,
                rounds: int = 1, clock: str = "wall",
                log: Callable[[str], None] = print) -> list[dict]:
    """One table row per shape, the smallest models first (see ``peak_memory_bytes``: a CPU
    process's peak cannot be reset, so in this order it is close to each shape's own).

    With ``rounds`` > 1 every shape is timed once per round, ``seconds_per_shape / rounds`` at a
    time, and keeps its fastest round's median: on a machine shared with other work, a burst of
    load then slows one round of a shape rather than the whole of it.

    ``clock="process"`` times steps in the CPU time this process ran (``time.process_time``)
    instead of wall time: on a CPU shared with other work, the time the scheduler gave to other
    processes is then not counted (caches and memory bandwidth are still shared). A GPU's work
    is not host CPU time, so a CUDA device needs the wall clock.
    """
    shapes = sorted(shapes, key=lambda s: (count_params(s.config.model).total, s.sparsity))
    by_round = [[time_shape(shape, seconds_per_shape / rounds, warmup_steps, clock)
                 for shape in shapes]
                for _ in range(rounds)]
    rows = []
    for timings in zip(*by_round):
        row = dict(min(timings, key=lambda r: r["step_time_s"]))
        row.update(rounds=rounds, round_step_times_s=[r["step_time_s"] for r in timings],
                   peak_memory_bytes=max(r["peak_memory_bytes"] for r in timings))
        log(f"{row['shape']} S={row['S']:g} E={row['E']}: N_total={row['N_total']:,} "
            f"N_active={row['N_active']:,}: {row['step_time_s'] * 1e3:.1f} ms/step, "
            f"{row['tokens_per_s']:,.0f} tokens/s ({row['steps_timed']} steps)")
        rows.append(row)
    return rows


NO_TOKENIZER = Tokenizer.__new__(Tokenizer)
"""The session's tokenizer when only training steps are timed: random tokens need no tokenizer
file, and a step decodes nothing."""


def _not_evaluated() -> EvalResult:
    raise MoelabError("moelab throughput times training steps only: it evaluates nothing")


class RandomBatches(TrainBatches):
    """Uniform random tokens in the batch shape the training loop uses (no token file: the
    data's own windows are not drawn, so the parent's state is not set up)."""

    def __init__(self, batch_size: int, seq_len: int, vocab_size: int):
        self._shape, self._vocab = (batch_size, seq_len), vocab_size
        self._generator = torch.Generator().manual_seed(0)

    def next(self):
        tokens = torch.randint(self._vocab, (self._shape[0], self._shape[1] + 1),
                               generator=self._generator)
        return tokens[:, :-1], tokens[:, 1:]


def time_shape(shape: Shape, seconds_per_shape: float, warmup_steps: int,
               clock: str = "wall") -> dict:
    config, tc = shape.config, shape.config.train
    tokens_per_step = tc.batch_size * config.model.max_seq_len
    # The plan only splits the batch; one step's worth of tokens makes it valid.
    config = with_max_tokens(config, tokens_per_step)
    dist = setup_distributed(tc.device)
    if dist.is_ddp:
        raise MoelabError("moelab throughput times one process: run it without torchrun")
    if clock not in CLOCKS or (clock == "process" and dist.device.type != "cpu"):
        raise MoelabError(f"--clock {clock} is invalid on {dist.device}: allowed "
                          f"{'wall, process' if dist.device.type == 'cpu' else 'wall'}")
    plan = StepPlan.from_config(config, 1)
    check_training_fits(config, plan.micro_batch_size, dist.device)
    if tc.compile and dist.device.type == "cpu":
        check_cpp_compiler()
    torch.manual_seed(tc.seed)
    model = Transformer(config.model).to(dist.device)
    autocast = _autocast(dist.device, tc.dtype)
    # Timed as the grid's runs train: compiled where they are (the warmup steps compile).
    train_model = compile_afresh(model) if tc.compile else model
    # Only steps run: nothing is evaluated, decoded or timed by the session's own clock.
    session = Session(model, train_model, None, build_optimizer(model, tc),
                      RandomBatches(tc.batch_size, config.model.max_seq_len, config.model.vocab_size),
                      dist.device, autocast, _not_evaluated, NO_TOKENIZER, TrainState(), Clock(),
                      dist)
    for _ in range(warmup_steps):
        optimizer_step(session, plan, tc.lr, tc.grad_clip)
    _synchronize(dist.device)
    if dist.device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(dist.device)
    step_times = _timed_steps(lambda: optimizer_step(session, plan, tc.lr, tc.grad_clip),
                              dist.device, seconds_per_shape,
                              time.process_time if clock == "process" else time.perf_counter)
    counts, moe = count_params(config.model), config.model.moe
    step_time = statistics.median(step_times)
    return {
        "shape": shape.name, "N_total": counts.total, "N_active": counts.active,
        "S": shape.sparsity, "E": moe.num_experts if moe else 1, "k": moe.top_k if moe else 1,
        "d_expert": moe.d_expert if moe else "", "tokens_per_step": tokens_per_step,
        "steps_timed": len(step_times), "step_time_s": step_time,
        "tokens_per_s": tokens_per_step / step_time,
        "flops_per_token_6n": flops_per_token(config.model).six_n,
        "peak_memory_bytes": peak_memory_bytes(dist.device),
        "memory_kind": "cuda_max_allocated" if dist.device.type == "cuda" else "process_max_rss",
        "device": str(dist.device), "device_name": device_name(dist.device),
        "threads": torch.get_num_threads(), "clock": clock,
    }


def _timed_steps(step: Callable[[], object], device, seconds: float,
                 clock: Callable[[], float]) -> list[float]:
    """Step times on ``clock``, for about ``seconds`` of wall time (at least 3 steps)."""
    times: list[float] = []
    start = time.perf_counter()
    while len(times) < MIN_TIMED_STEPS or time.perf_counter() - start < seconds:
        before = clock()
        step()
        _synchronize(device)
        times.append(clock() - before)
    return times


def _autocast(device, dtype: str):
    return partial(torch.autocast, device.type, dtype=torch.bfloat16, enabled=dtype == "bfloat16")


def _synchronize(device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def device_name(device) -> str:
    """The GPU's name, or the CPU's model name (Linux) or architecture."""
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return cpu_model()


def write_table(path: str | Path, rows: list[dict], header: dict) -> Path:
    """JSON (header fields and rows) for a .json path, else CSV (the rows carry the device)."""
    path = Path(path)
    if path.suffix == ".json":
        return atomic_write_json(path, {**header, "rows": rows})
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=TABLE_COLUMNS, lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    return atomic_write_text(path, buffer.getvalue())
