"""The training loop: ``train(config, run_dir, resume=False) -> RunSummary``.

One optimizer step = one global batch of ``train.batch_size`` sequences of ``max_seq_len``
tokens, split over ranks (DDP) and, within a rank, into micro batches (gradient accumulation).
The budget is in tokens: ``steps = max_tokens // (batch_size * max_seq_len)`` (rounded down, so
a run never trains on more than its budget), and ``tokens = steps * batch_size * max_seq_len``
is the exact number of target tokens trained on.

Per step the host waits for the device only on log, eval and checkpoint steps: losses and the
non-finite check stay on the device in between. The step's plan and its micro batches live in
``moelab.train.step``.
"""

from __future__ import annotations

import math
import platform
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, Optional, cast
from collections.abc import Callable

import numpy as np
import torch
from torch.nn.parallel import DistributedDataParallel
from tqdm import tqdm

from moelab.accounting import count_params, flops_per_token
from moelab.codec import from_json, to_json
from moelab.config import Config
from moelab.data import Tokenizer, TrainBatches, prepare_data, validation_windows
from moelab.data.prepare import check_data
from moelab.errors import MoelabError, Preempted
from moelab.model import Transformer
from moelab.numerics import enter_numerics, this_machine
from moelab.train.checkpoint import (
    latest_checkpoint, load_checkpoint, load_initial_weights, save_checkpoint,
)
from moelab.train.cuda import host_to_device
from moelab.train.distributed import Distributed, setup_distributed
from moelab.train.events import EvalEvent, TrainEvent
from moelab.train.evaluation import (
    EvalResult, check_tasks_fit, evaluate, is_collapsed, score_run_tasks, scored_bytes,
)
from moelab.train.generate import sample_text
from moelab.train.loggers import ExternalLoggers
from moelab.train.memory import check_training_fits, peak_memory_bytes
from moelab.train.optim import build_optimizer
from moelab.train.peak import PeakFlops, mfu, peak_flops
from moelab.train.preemption import preemptible, preemption_requested
from moelab.train.run_folder import RunFolder
from moelab.train.schedule import Schedule
from moelab.train.state import Clock, NonFiniteGuard, Throughput, TrainState
from moelab.train.step import StepLoads, StepPlan, forward_backward, step_balance, step_slot_counts
from moelab.train.run_summary import RunSummary
from moelab.version import __version__



# --------------------------------------------------------------------------------------------
# The entry point
# --------------------------------------------------------------------------------------------


def train(config: Config, run_dir: str | Path, *, resume: bool = False) -> Optional[RunSummary]:
    """Train one run into ``run_dir`` and return its summary (also in summary.json); None on
    the ranks other than 0 of a DDP run, which write nothing.

    With ``resume`` a finished run returns its summary untouched, an interrupted one continues
    from its latest checkpoint (bit for bit on a CPU; on CUDA within the run-to-run spread of
    its atomic adds: docs/training.md), and a folder without a checkpoint starts afresh.
    Launched by torchrun, every process calls this and only rank 0 writes.
    """
    config.validate()
    run = RunFolder(run_dir)
    if resume and run.is_complete():
        run.check_same_config(config)
        return run.summary()
    enter_numerics(config.train.numerics)  # before this process's first torch computation
    dist = setup_distributed(config.train.device)
    try:
        with preemptible():  # SIGTERM / SIGUSR1: checkpoint at the next step boundary, stop
            return _train(config, run, resume, dist)
    finally:
        dist.close()


def _train(config: Config, run: RunFolder, resume: bool,
           dist: Distributed) -> Optional[RunSummary]:
    """Set up, loop, write up; TensorBoard and W&B are closed however the run ends."""
    plan = StepPlan.from_config(config, dist.world_size)
    # Before anything is allocated or written: a config that cannot fit is refused here.
    check_training_fits(config, plan.micro_batch_size, dist.device,
                        processes_on_device=dist.world_size if dist.device.type == "cpu" else 1)
    if config.train.compile and dist.device.type == "cpu":
        check_cpp_compiler()
    if dist.is_main:
        check_data(config.data, config.tokenizer_vocab_size)  # a bad source writes no folder
        run.start(config, resume)
    loggers = (ExternalLoggers(config, run, continuing=resume and run.has_progress())
               if dist.is_main else None)  # fails fast if a package is missing
    try:
        log = partial(_log_event, run, loggers) if dist.is_main else _log_nothing
        session = _set_up(config, run, resume, dist, plan)
        _train_steps(config, run, dist, plan, session, log)
        if dist.is_main and preemption_requested():  # the last step's checkpoint is saved
            raise _preempted(run, session.state.step, plan.total_steps)
        if not dist.is_main:
            return None
        summary = _write_up(config, run, dist, plan, session)
        if loggers:
            loggers.summarize(to_json(summary))
        return summary
    finally:
        if loggers:
            loggers.close()


def check_cpp_compiler() -> None:
    """Inductor compiles a CPU model to C++: without a compiler step 1 would fail with a
    traceback deep in torch, so the run is refused before its folder is written."""
    # Imported here: inductor takes seconds to import, and only a compiled CPU run needs it.
    from torch._inductor import config as inductor_config, cpp_builder, exc

    try:
        cpp_builder.get_cpp_compiler()
    except exc.InvalidCxxCompiler:
        cxx = inductor_config.cpp.cxx  # a name, or names to try (None: a conda download)
        searched = [name for name in (cxx if isinstance(cxx, (list, tuple)) else [cxx]) if name]
        raise MoelabError(f"train.compile=true is invalid here: compiling for a CPU needs a C++ "
                          f"compiler and none of {', '.join(map(str, searched))} runs; install "
                          f"one (or name it in $CXX) or set train.compile=false") from None


def compile_afresh(module: torch.nn.Module) -> torch.nn.Module:
    """``torch.compile`` with dynamo's caches cleared first: a process that trains several runs
    (a --jobs 1 study) or times several shapes would otherwise count their shapes against
    dynamo's recompile limit and, past it, run the rest eager without a word.

    The fused head and the eager MoE experts are ``torch.autograd.Function``s, which
    AOTAutograd's on-disk cache admits only behind a flag (their traced forward and backward
    are part of the graph it hashes, so a changed Function misses the cache rather than reusing
    stale code). With it a warm-cache compile skips re-tracing the joint graph, which saves a
    few seconds at the start of every compiled run (BENCHMARKS.md, "Compile start-up")."""
    torch._dynamo.reset()
    torch._functorch.config.autograd_cache_allow_custom_autograd_functions = True
    return cast(torch.nn.Module, torch.compile(module))  # a module in, its compiled module out


# --------------------------------------------------------------------------------------------
# Set-up, the loop, the write-up
# --------------------------------------------------------------------------------------------


@dataclass
class Session:
    """What one session of a run (its start, or a resumption) trains, evaluates and saves."""

    model: Transformer
    """The plain module: evaluation, checkpoints and samples use it."""
    train_model: torch.nn.Module
    """The same model, DDP-wrapped and/or compiled: the training steps use it."""
    ddp_model: DistributedDataParallel | None
    optimizer: torch.optim.Optimizer
    batches: TrainBatches
    device: torch.device
    autocast: Callable[[], Any]
    run_eval: Callable[[], EvalResult]
    tokenizer: Tokenizer
    state: TrainState
    clock: Clock
    dist: Distributed


def _set_up(config: Config, run: RunFolder, resume: bool, dist: Distributed,
            plan: StepPlan) -> Session:
    """Data, model, optimizer and the state to start from (the latest checkpoint on resume)."""
    tc, seq_len = config.train, config.model.max_seq_len
    data = _prepare_data_once(config, dist)
    check_tasks_fit(tc.eval_tasks, seq_len, data.tokenizer)  # refused now, not after training
    torch.manual_seed(tc.seed)
    model = Transformer(config.model).to(dist.device)
    optimizer = build_optimizer(model, tc)
    batches = TrainBatches(data.train.tokens, seq_len, tc.batch_size, tc.effective_data_seed,
                           dist.rank, dist.world_size)
    windows_NT = validation_windows(data.valid.tokens, seq_len, tc.eval_windows)
    state = (_resume_state(run, model, optimizer, batches, data.tokenizer, plan.total_steps)
             if resume else TrainState())
    if state.step == 0 and tc.init_from is not None and tc.init_sha256 is not None:
        # a finetune starts from its source (its config names both or neither: validate)
        load_initial_weights(Path(tc.init_from), tc.init_sha256, model)
    if dist.is_main:
        run.save_tokenizer(data.tokenizer.path)
        run.truncate_metrics(state.step)  # drop what a killed run logged after its checkpoint

    ddp_model = DistributedDataParallel(model) if dist.is_ddp else None
    train_model: torch.nn.Module = ddp_model or model
    if tc.compile:
        train_model = compile_afresh(train_model)
    autocast = partial(torch.autocast, dist.device.type, dtype=torch.bfloat16,
                       enabled=tc.dtype == "bfloat16")
    run_eval = partial(evaluate, model, windows_NT, scored_bytes(windows_NT, data.tokenizer),
                       plan.micro_batch_size, dist.device, autocast)
    return Session(model, train_model, ddp_model, optimizer, batches, dist.device, autocast,
                   run_eval, data.tokenizer, state,
                   Clock(state.train_time_s, state.wall_time_s, state.train_cpu_time_s), dist)


def _train_steps(config: Config, run: RunFolder, dist: Distributed, plan: StepPlan,
                 session: Session, log: Callable[[dict], None]) -> None:
    """From the session's step to the last: train, and log, evaluate, checkpoint when due."""
    tc, state, clock = config.train, session.state, session.clock
    nonfinite = NonFiniteGuard(dist.device)
    throughput = Throughput(state.step, clock, plan.tokens_per_step)
    flops = flops_per_token(config.model)
    with clock.paused():  # a CPU's peak is measured (once per process), not trained
        peak = run_peak_flops(config, dist)
    splits_step = plan.accumulation_steps > 1 or dist.is_ddp
    # disable=None: tqdm draws only when stderr is a terminal; in a log file its leftovers,
    # which end in no newline, would be glued to the next line (an error's, say).
    shown = tc.logging.progress and dist.is_main
    bar = tqdm(total=plan.total_steps, initial=state.step, unit="step", dynamic_ncols=True,
               disable=None if shown else True)
    schedule = Schedule.from_config(tc, plan.total_steps)
    for step in range(state.step + 1, plan.total_steps + 1):
        lr = schedule.lr_at(step - 1)
        losses_4, grad_norm, loads = optimizer_step(session, plan, lr, tc.grad_clip)
        nonfinite.note(step, losses_4[0], grad_norm)
        state.step, state.tokens = step, step * plan.tokens_per_step
        bar.update(1)
        is_log, is_eval, is_checkpoint = _due(step, plan.total_steps, tc)
        if is_log or is_eval or is_checkpoint:  # the same steps on every rank
            nonfinite.check(run)  # before anything is logged or saved from damaged weights

        if is_log:
            losses = dist.average(losses_4).tolist()  # syncs: the only per-log host wait
            tokens_per_s, tokens_per_cpu_s = throughput.since_last(step, clock)
            log(_train_event(state, losses, lr, grad_norm, (tokens_per_s, tokens_per_cpu_s),
                             flops, peak, step_balance(loads, dist, splits_step)))
            bar.set_postfix(loss=f"{losses[0]:.3f}", tok_s=f"{tokens_per_s:,.0f}")
        if is_eval and dist.is_main:
            with clock.paused():
                result = session.run_eval()
            state.record_eval(result, step)
            log(_eval_event(result, state, tc.collapse_threshold))
        if is_checkpoint and dist.is_main:
            _save_checkpoint(config, run, session)
        if _stop_requested(dist, is_log):
            bar.close()
            if dist.is_main and not is_checkpoint:
                _save_checkpoint(config, run, session)
            raise _preempted(run, step, plan.total_steps)
    bar.close()


def _save_checkpoint(config: Config, run: RunFolder, session: Session) -> None:
    state, clock = session.state, session.clock
    with clock.paused():
        state.train_time_s, state.wall_time_s = clock.train_s, clock.wall_s
        state.train_cpu_time_s = clock.train_cpu_s
        state.data = session.batches.state_dict()
        save_checkpoint(run.checkpoints_dir, session.model, session.optimizer, to_json(state),
                        config)


def _stop_requested(dist: Distributed, is_log: bool) -> bool:
    """Whether to stop for a preemption after this step. The ranks of a DDP run must stop at
    the same step, so they agree on it where they synchronise anyway, at log steps (a
    preempted DDP run stops within ``train.log_interval`` steps)."""
    requested = preemption_requested() is not None
    if not dist.is_ddp:
        return requested
    if not is_log:
        return False
    return bool(dist.sum(torch.tensor([float(requested)], device=dist.device)).item())


def _preempted(run: RunFolder, step: int, total_steps: int) -> Preempted:
    return Preempted(f"{run.path} stopped by {preemption_requested() or 'a signal'} after step "
                     f"{step} of {total_steps}, its checkpoint saved: rerun with --resume to "
                     f"continue it")


def optimizer_step(session: Session, plan: StepPlan, lr: float, grad_clip: float
                   ) -> tuple[torch.Tensor, torch.Tensor, StepLoads | None]:
    """One step on the next global batch; returns (the four losses, the gradient norm, what
    was routed: None for a dense model) on the device (clipping at 0 = off still measures the
    norm)."""
    for group in session.optimizer.param_groups:
        group["lr"] = lr
    x_BT, y_BT = (host_to_device(t, session.device) for t in session.batches.next())
    moe = session.model.cfg.moe
    lb_slot_counts_LE = None  # micro_batch: each micro batch balances on its own counts
    if (moe is not None and moe.lb_scope == "global_batch"
            and (plan.accumulation_steps > 1 or session.dist.is_ddp)):
        lb_slot_counts_LE = step_slot_counts(session.model, x_BT, plan, session.autocast,
                                             session.dist.sum)
    losses_4, loads = forward_backward(session.train_model, session.ddp_model, x_BT, y_BT, plan,
                                       session.autocast, lb_slot_counts_LE)
    grad_norm = torch.nn.utils.clip_grad_norm_(session.model.parameters(), grad_clip or math.inf)
    session.optimizer.step()
    session.optimizer.zero_grad(set_to_none=True)
    if moe is not None and moe.uses_expert_bias and loads is not None:
        # the same loads, so the same bias, on every rank
        session.model.update_expert_bias(session.dist.sum(loads.slot_counts_LE))
    return losses_4, grad_norm, loads


def run_peak_flops(config: Config, dist: Distributed) -> PeakFlops:
    """The peak this run's MFU divides by (``moelab.train.peak``)."""
    dtype = torch.bfloat16 if config.train.dtype == "bfloat16" else torch.float32
    return peak_flops(dist.device, dtype, config.train.peak_flops)


def _write_up(config: Config, run: RunFolder, dist: Distributed, plan: StepPlan,
              session: Session) -> RunSummary:
    """Rank 0 after the last step: samples.txt, then summary.json (which marks it complete)."""
    tc = config.train
    if tc.sample_tokens:
        with session.clock.paused():
            run.write_samples(sample_text(session.model, session.tokenizer, tc.sample_tokens,
                                          seed=tc.seed))
    if tc.eval_tasks:  # before the summary: a run killed before it is complete scores them again
        with session.clock.paused():
            score_run_tasks(run.path, session.model, session.tokenizer, tc.eval_tasks,
                            session.state.step)
    summary = _summary(config, session.state, plan, session.clock, dist)
    run.write_summary(summary)
    return summary


# --------------------------------------------------------------------------------------------
# Helpers of the loop
# --------------------------------------------------------------------------------------------


def _prepare_data_once(config: Config, dist: Distributed):
    """Rank 0 builds the tokenizer and token cache; the others wait, then read the cache."""
    if dist.is_main:
        data = prepare_data(config.data, config.tokenizer_vocab_size,
                            progress=config.train.logging.progress)
    dist.barrier()
    if not dist.is_main:
        data = prepare_data(config.data, config.tokenizer_vocab_size, progress=False)
    if data.tokenizer.vocab_size > config.model.vocab_size:
        raise MoelabError(
            f"model.vocab_size={config.model.vocab_size} is invalid: the tokenizer has "
            f"{data.tokenizer.vocab_size} tokens"
        )
    return data


def _resume_state(run: RunFolder, model, optimizer, batches: TrainBatches,
                  tokenizer: Tokenizer, total_steps: int) -> TrainState:
    """Load the latest checkpoint if there is one (a run killed before it starts afresh)."""
    folder = latest_checkpoint(run.checkpoints_dir)
    if folder is None:
        return TrainState()
    run.check_same_tokenizer(tokenizer, remedy="resuming would continue on other token ids; "
                                               "restore that cache or start a new run")
    state = from_json(TrainState, load_checkpoint(folder, model, optimizer))
    if state.step > total_steps:
        raise MoelabError(f"checkpoint {folder} is at step {state.step}, beyond the "
                          f"{total_steps} steps of run {run.path}: delete it to start over")
    batches.load_state_dict(state.data)
    return state


def _due(step: int, total_steps: int, tc) -> tuple[bool, bool, bool]:
    """(log, eval, checkpoint) at ``step``: on their intervals, and all three after the last;
    a checkpoint also at every kept step."""
    is_last = step == total_steps
    is_log = step % tc.log_interval == 0 or is_last
    is_eval = step % tc.eval_interval == 0 or is_last
    is_checkpoint = (bool(tc.checkpoint_interval and step % tc.checkpoint_interval == 0)
                     or step in tc.keep_checkpoints_at or is_last)
    return is_log, is_eval, is_checkpoint


def _train_event(state: TrainState, losses: list[float], lr: float, grad_norm: torch.Tensor,
                 rates: tuple[float, float], flops, peak: PeakFlops,
                 balance: list[dict[str, float]]) -> dict[str, Any]:
    """A log step's numbers; ``mfu`` counts 6 x active params per token in the peak's clock
    (``peak.convention``, named in summary.json)."""
    tokens_per_s, tokens_per_cpu_s = rates
    loss, ce_loss, lb_loss, z_loss = losses
    return to_json(TrainEvent(
        step=state.step, tokens=state.tokens, loss=loss, ce_loss=ce_loss, lb_loss=lb_loss,
        z_loss=z_loss, lr=lr, grad_norm=float(grad_norm), tokens_per_s=tokens_per_s,
        tokens_per_cpu_s=tokens_per_cpu_s, flops_per_s=tokens_per_s * flops.kaplan,
        mfu=mfu(tokens_per_s, tokens_per_cpu_s, flops.six_n, peak), balance=balance))


def _eval_event(result: EvalResult, state: TrainState,
                collapse_threshold: float) -> dict[str, Any]:
    return to_json(EvalEvent(
        step=state.step, tokens=state.tokens, val_loss=result.val_loss,
        val_bpb=result.bits_per_byte, best_val_loss=state.best_val_loss, routing=result.routing,
        collapse=is_collapsed(result.routing, collapse_threshold)))


def _log_event(run: RunFolder, loggers: ExternalLoggers | None, event: dict[str, Any]) -> None:
    run.append_metrics(event)
    if loggers:
        loggers.log(event)


def _log_nothing(event: dict[str, Any]) -> None:
    """Ranks other than 0 log nothing."""


def _summary(config: Config, state: TrainState, plan: StepPlan, clock: Clock,
             dist: Distributed) -> RunSummary:
    """summary.json's content, after the last step's evaluation."""
    counts, flops = count_params(config.model), flops_per_token(config.model)
    final = state.last_eval
    if final is None:
        raise RuntimeError("a run's summary is written after its last evaluation")
    train_s = clock.train_s  # the clock runs: read it once, so the numbers below agree
    cpu_s = clock.train_cpu_s
    tokens_per_s = state.tokens / max(train_s, 1e-9)
    tokens_per_cpu_s = state.tokens / max(cpu_s, 1e-9) if clock.counts_all_cpu else None
    peak = run_peak_flops(config, dist)
    return RunSummary(
        status="complete",
        best_val_loss=state.best_val_loss,
        best_val_step=state.best_val_step,
        best_val_bpb=state.best_val_bpb,
        final_val_loss=final.val_loss,
        final_val_bpb=final.bits_per_byte,
        total_params=counts.total,
        active_params=counts.active,
        non_embedding_params=counts.non_embedding,
        flops_per_token_6n=flops.six_n,
        flops_per_token_kaplan=flops.kaplan,
        tokens=state.tokens,
        steps=state.step,
        tokens_per_step=plan.tokens_per_step,
        wall_time_s=clock.wall_s,
        train_time_s=train_s,
        train_cpu_time_s=cpu_s if clock.counts_all_cpu else None,
        tokens_per_s=tokens_per_s,
        tokens_per_cpu_s=tokens_per_cpu_s,
        flops_per_s=tokens_per_s * flops.kaplan,
        mfu=mfu(tokens_per_s, tokens_per_cpu_s, flops.six_n, peak),
        mfu_convention=peak.convention,
        peak_flops_per_s=peak.flops_per_s,
        peak_flops_source=peak.source,
        step_time_s=train_s / max(state.step, 1),
        peak_memory_bytes=peak_memory_bytes(dist.device),
        seed=config.train.seed,
        data_seed=config.train.effective_data_seed,
        world_size=dist.world_size,
        torch_threads=torch.get_num_threads(),
        device=str(dist.device),
        versions={"moelab": __version__, "torch": torch.__version__,
                  "numpy": np.__version__, "python": platform.python_version()},
        machine=this_machine(config.train.numerics),
        routing=final.routing,
        collapse=is_collapsed(final.routing, config.train.collapse_threshold),
    )
