"""What the training loop carries from step to step besides tensors: ``TrainState`` (saved in
every checkpoint's trainer_state.json), the run's clocks and its non-finite guard."""

from __future__ import annotations

import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Optional

import torch

from moelab.errors import MoelabError
from moelab.train.checkpoint import latest_checkpoint
from moelab.train.evaluation import EvalResult
from moelab.train.run_folder import RunFolder


@dataclass
class TrainState:
    """Where a run is: its step and tokens, its best and last evaluation, its clocks and the
    batch sampler's position. A checkpoint saves it as JSON (``to_dict``); a resumed run
    continues from ``from_dict`` of that record."""

    step: int = 0
    tokens: int = 0
    best_val_loss: Optional[float] = None
    best_val_step: Optional[int] = None
    best_val_bpb: Optional[float] = None
    last_eval: Optional[EvalResult] = None
    last_eval_step: Optional[int] = None
    train_time_s: float = 0.0
    wall_time_s: float = 0.0
    data: dict[str, Any] = field(default_factory=dict)
    """``TrainBatches.state_dict()`` at the last checkpoint."""

    def record_eval(self, result: EvalResult, step: int) -> None:
        """Keep ``result`` as the last evaluation, and as the best if its loss is lower."""
        self.last_eval, self.last_eval_step = result, step
        if self.best_val_loss is None or result.val_loss < self.best_val_loss:
            self.best_val_loss, self.best_val_step = result.val_loss, step
            self.best_val_bpb = result.bits_per_byte

    def to_dict(self) -> dict[str, Any]:
        """trainer_state.json's fields, in the order checkpoints have always written them."""
        last_eval = (None if self.last_eval is None
                     else {"step": self.last_eval_step, **self.last_eval.to_dict()})
        return {"step": self.step, "tokens": self.tokens, "best_val_loss": self.best_val_loss,
                "best_val_step": self.best_val_step, "best_val_bpb": self.best_val_bpb,
                "last_eval": last_eval, "train_time_s": self.train_time_s,
                "wall_time_s": self.wall_time_s, "data": self.data}

    @classmethod
    def from_dict(cls, record: dict[str, Any]) -> TrainState:
        """The state a checked trainer_state.json holds (``checkpoint.read_state``)."""
        last = record.get("last_eval")
        last_eval = (None if last is None else
                     EvalResult(last["val_loss"], last["bits_per_byte"], last["routing"]))
        return cls(step=record["step"], tokens=record["tokens"],
                   best_val_loss=record.get("best_val_loss"),
                   best_val_step=record.get("best_val_step"),
                   best_val_bpb=record.get("best_val_bpb"), last_eval=last_eval,
                   last_eval_step=None if last is None else last["step"],
                   train_time_s=record["train_time_s"], wall_time_s=record["wall_time_s"],
                   data=record["data"])


class Throughput:
    """Tokens per second of training time since the previous reading (the previous log)."""

    def __init__(self, step: int, train_s: float, tokens_per_step: int):
        self._step, self._train_s, self._tokens_per_step = step, train_s, tokens_per_step

    def since_last(self, step: int, train_s: float) -> float:
        steps, seconds = step - self._step, train_s - self._train_s
        self._step, self._train_s = step, train_s
        return steps * self._tokens_per_step / max(seconds, 1e-9)


class Clock:
    """Wall time and training time (wall time minus eval/checkpoint pauses), across resumes."""

    def __init__(self, prior_train_s: float = 0.0, prior_wall_s: float = 0.0):
        self._start = time.perf_counter()
        self._paused_s = 0.0
        self._prior_train_s, self._prior_wall_s = prior_train_s, prior_wall_s

    @property
    def wall_s(self) -> float:
        return self._prior_wall_s + time.perf_counter() - self._start

    @property
    def train_s(self) -> float:
        return self._prior_train_s + time.perf_counter() - self._start - self._paused_s

    @contextmanager
    def paused(self):
        start = time.perf_counter()
        try:
            yield
        finally:
            self._paused_s += time.perf_counter() - start


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
