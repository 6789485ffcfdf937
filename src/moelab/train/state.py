"""What the training loop carries from step to step besides tensors: ``TrainState`` (saved in
every checkpoint's trainer_state.json), the run's clocks and its non-finite guard."""

from __future__ import annotations

import time
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import Any, Optional

import torch

from moelab.errors import MoelabError
from moelab.train.checkpoint import latest_checkpoint
from moelab.train.evaluation import EvalResult
from moelab.train.run_folder import RunFolder


@dataclass
class TrainState:
    """Where a run is: its step and tokens, its best and last evaluation, its clocks and the
    batch sampler's position. A checkpoint saves it as trainer_state.json (``codec.to_json``:
    these fields, in this order); a resumed run continues from ``codec.from_json`` of it."""

    step: int = 0
    tokens: int = 0
    best_val_loss: Optional[float] = None
    best_val_step: Optional[int] = None
    best_val_bpb: Optional[float] = None
    last_eval: Optional[EvalResult] = None
    """The last evaluation, its ``step`` set."""
    train_time_s: float = 0.0
    wall_time_s: float = 0.0
    train_cpu_time_s: float = 0.0
    """CPU time of the training (``Clock.train_cpu_s``); 0 in a checkpoint written before it."""
    data: dict[str, Any] = field(default_factory=dict)
    """``TrainBatches.state_dict()`` at the last checkpoint."""

    def record_eval(self, result: EvalResult, step: int) -> None:
        """Keep ``result`` as the last evaluation, and as the best if its loss is lower."""
        self.last_eval = replace(result, step=step)
        if self.best_val_loss is None or result.val_loss < self.best_val_loss:
            self.best_val_loss, self.best_val_step = result.val_loss, step
            self.best_val_bpb = result.bits_per_byte


class Throughput:
    """Tokens per second of training time, and per CPU-second of it, since the previous
    reading (the previous log)."""

    def __init__(self, step: int, clock: Clock, tokens_per_step: int):
        self._step, self._tokens_per_step = step, tokens_per_step
        self._train_s, self._cpu_s = clock.train_s, clock.train_cpu_s

    def since_last(self, step: int, clock: Clock) -> tuple[float, float]:
        """(tokens per second, tokens per CPU-second) since the last reading."""
        train_s, cpu_s = clock.train_s, clock.train_cpu_s
        tokens = (step - self._step) * self._tokens_per_step
        rates = (tokens / max(train_s - self._train_s, 1e-9),
                 tokens / max(cpu_s - self._cpu_s, 1e-9))
        self._step, self._train_s, self._cpu_s = step, train_s, cpu_s
        return rates


class Clock:
    """Wall time, training time (wall time minus eval/checkpoint pauses) and the training's
    CPU time (this process's, all threads, minus the same pauses), across resumes. On a machine
    shared with other jobs CPU time is the steadier measure: wall time counts theirs too."""

    def __init__(self, prior_train_s: float = 0.0, prior_wall_s: float = 0.0,
                 prior_cpu_s: float = 0.0):
        self._start, self._start_cpu = time.perf_counter(), time.process_time()
        self._paused_s = self._paused_cpu_s = 0.0
        self._prior_train_s, self._prior_wall_s = prior_train_s, prior_wall_s
        self._prior_cpu_s = prior_cpu_s
        # A checkpoint written before CPU time was kept has train time but no CPU time.
        self.counts_all_cpu = not (prior_train_s > 0 and prior_cpu_s == 0)

    @property
    def wall_s(self) -> float:
        return self._prior_wall_s + time.perf_counter() - self._start

    @property
    def train_s(self) -> float:
        return self._prior_train_s + time.perf_counter() - self._start - self._paused_s

    @property
    def train_cpu_s(self) -> float:
        return self._prior_cpu_s + time.process_time() - self._start_cpu - self._paused_cpu_s

    @contextmanager
    def paused(self):
        start, start_cpu = time.perf_counter(), time.process_time()
        try:
            yield
        finally:
            self._paused_s += time.perf_counter() - start
            self._paused_cpu_s += time.process_time() - start_cpu


class NonFiniteGuard:
    """Remembers, on the device, the first step whose loss or gradient norm was not finite.

    ``note`` costs no host sync; ``check`` (on log/checkpoint steps) raises a MoelabError naming
    that step, before a checkpoint could be written from the damaged weights.
    """

    def __init__(self, device: torch.device):
        self._first_bad_step = torch.full((), -1, dtype=torch.long, device=device)

    def note(self, step: int, loss: torch.Tensor, grad_norm: torch.Tensor) -> None:
        bad = ~(torch.isfinite(loss) & torch.isfinite(grad_norm))
        unset = self._first_bad_step < 0
        self._first_bad_step = torch.where(bad & unset, step, self._first_bad_step)

    def check(self, run: RunFolder) -> None:
        bad_step = int(self._first_bad_step)
        if bad_step >= 0:
            last_good = latest_checkpoint(run.checkpoints_dir)
            kept = f"the last good checkpoint is {last_good}" if last_good else "no checkpoint was written"
            raise MoelabError(
                f"non-finite loss or gradient at step {bad_step} of {run.path}: stopped; {kept} "
                f"(lower train.lr or raise train.warmup_fraction)"
            )
