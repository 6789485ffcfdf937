"""The learning-rate schedule of a run: linear warmup, then a cosine or a warmup-stable-decay.

One ``Schedule`` holds everything the lr of a step depends on, resolved from the config once
the run's steps are known (``Schedule.from_config``): the loop, a cooldown branch and a wsd
budget family all ask it, so they agree float for float. The config has already checked the
schedule's names (their ``Literal`` types) and fractions (``TrainConfig.validate``); torch-free.

    schedule = Schedule.from_config(config.train, total_steps)
    schedule.lr_at(0), schedule.warmup_steps, schedule.decay_start_step
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from moelab.config import DecayShape, ScheduleName, TrainConfig
from moelab.errors import MoelabError


@dataclass(frozen=True)
class Schedule:
    """Warmup rises linearly to ``lr_peak`` over ``warmup_steps`` steps (the first step already
    gets lr_peak / warmup_steps, never 0). With ``kind="cosine"`` a cosine then falls from
    ``lr_peak`` to ``min_lr_ratio * lr_peak`` at the last step. With ``"wsd"`` (warmup-stable-
    decay) the lr stays at ``lr_peak`` until the last ``decay_steps`` steps, which fall from
    ``lr_peak`` (their first) to the same floor (the last step): linearly, or as 1 - sqrt(t)
    with ``decay_shape="sqrt"`` (Hägele et al. 2024)."""

    total_steps: int
    warmup_steps: int
    lr_peak: float
    min_lr_ratio: float
    kind: ScheduleName = "cosine"
    """'cosine' or 'wsd' (train.schedule)."""
    decay_steps: int = 0
    """Steps of the wsd final decay (0 for cosine, whose decay is every step after warmup)."""
    decay_shape: DecayShape = "sqrt"
    """wsd only: 'linear' or 'sqrt'."""

    @classmethod
    def from_config(cls, train_config: TrainConfig, total_steps: int) -> Schedule:
        """The schedule of a run of ``total_steps`` steps: train.warmup_steps when set (a budget
        family's shared warmup), else warmup_fraction of the steps; under wsd the last
        decay_fraction of the steps decay."""
        tc = train_config
        warmup_steps = (tc.warmup_steps if tc.warmup_steps is not None
                        else int(tc.warmup_fraction * total_steps))
        decay_steps = int(tc.decay_fraction * total_steps) if tc.schedule == "wsd" else 0
        return cls(total_steps, warmup_steps, tc.lr, tc.min_lr_ratio, tc.schedule, decay_steps,
                   tc.decay_shape)

    @property
    def decay_start_step(self) -> int:
        """Steps trained before the wsd decay begins: the lr of every earlier step is the same
        for every budget that shares the warmup (the last step always sits on the floor)."""
        return self.total_steps - max(self.decay_steps, 1)

    def check_warmup_steps_fit(self) -> None:
        """An absolute warmup (train.warmup_steps) must end inside the run, and under wsd before
        the decay starts; a warmup_fraction below 1 always does (the config checks it)."""
        if self.warmup_steps > self.total_steps:
            raise MoelabError(f"train.warmup_steps={self.warmup_steps} is invalid: allowed up "
                              f"to the run's {self.total_steps} steps")
        if self.kind == "wsd" and self.decay_start_step < self.warmup_steps:
            raise MoelabError(f"train.warmup_steps={self.warmup_steps} is invalid with wsd: the "
                              f"decay starts at step {self.decay_start_step} of "
                              f"{self.total_steps}, inside the warmup; allowed up to "
                              f"{self.decay_start_step}")

    @property
    def lr_floor(self) -> float:
        return self.min_lr_ratio * self.lr_peak

    def lr_at(self, step: float) -> float:
        """Learning rate of optimizer step ``step`` (0-based)."""
        if step < self.warmup_steps:
            return self.lr_peak * (step + 1) / self.warmup_steps
        if self.kind == "wsd":
            return self._wsd_after_warmup(step)
        return self._cosine_after_warmup(step)

    def _cosine_after_warmup(self, step: float) -> float:
        decay_steps = self.total_steps - 1 - self.warmup_steps
        if decay_steps <= 0:  # warmup took every step but the last, which sits on the floor
            return self.lr_floor
        progress = min((step - self.warmup_steps) / decay_steps, 1.0)
        return self.lr_floor + 0.5 * (1.0 + math.cos(math.pi * progress)) * (
            self.lr_peak - self.lr_floor)

    def _wsd_after_warmup(self, step: float) -> float:
        decay_start = self.decay_start_step
        if step < decay_start:
            return self.lr_peak
        decay_intervals = self.total_steps - 1 - decay_start
        if decay_intervals <= 0:  # a one-step decay: just the floor
            return self.lr_floor
        progress = min((step - decay_start) / decay_intervals, 1.0)
        remaining = 1.0 - (math.sqrt(progress) if self.decay_shape == "sqrt" else progress)
        return self.lr_floor + remaining * (self.lr_peak - self.lr_floor)
