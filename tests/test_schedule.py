"""The lr Schedule against a slow reference written out here phase by phase from the formulas
of docs/training.md: every step of many runs, float for float; and the schedule's one-line
config errors. Hand values are in tests/test_train.py."""

from __future__ import annotations

import itertools
import math

import pytest

from moelab.config import TrainConfig, load_config
from moelab.errors import ConfigError
from moelab.train import Schedule


def reference_lrs(tc: TrainConfig, total_steps: int) -> list[float]:
    """Every step's lr, built as the list of the run's phases: warmup, then cosine, or stable
    then the final decay (wsd)."""
    warmup = (tc.warmup_steps if tc.warmup_steps is not None
              else int(tc.warmup_fraction * total_steps))
    peak, floor = tc.lr, tc.min_lr_ratio * tc.lr
    lrs = [peak * (step + 1) / warmup for step in range(min(warmup, total_steps))]
    after_warmup = range(len(lrs), total_steps)
    if tc.schedule == "cosine":
        intervals = total_steps - 1 - warmup  # from the peak after warmup to the floor, last step
        for step in after_warmup:
            if intervals <= 0:
                lrs.append(floor)
                continue
            t = min((step - warmup) / intervals, 1.0)
            lrs.append(floor + 0.5 * (1.0 + math.cos(math.pi * t)) * (peak - floor))
        return lrs
    decay_steps = max(int(tc.decay_fraction * total_steps), 1)  # the last step is the floor
    decay_start = total_steps - decay_steps
    for step in after_warmup:
        if step < decay_start:
            lrs.append(peak)
        elif decay_steps == 1:
            lrs.append(floor)
        else:
            t = min((step - decay_start) / (decay_steps - 1), 1.0)
            left = 1.0 - math.sqrt(t) if tc.decay_shape == "sqrt" else 1.0 - t
            lrs.append(floor + left * (peak - floor))
    return lrs


RUNS = list(itertools.product(
    [1, 2, 5, 37, 400],                         # total steps
    ["cosine", "wsd"],
    [0.0, 0.05, 0.5],                           # warmup_fraction
    [None, 0, 3],                               # warmup_steps
    [0.1, 0.2, 1.0],                            # decay_fraction
    ["sqrt", "linear"],
    [(3e-3, 0.1), (0.01, 0.0), (1.0, 1.0)],     # lr, min_lr_ratio
))


def test_every_step_of_every_run_equals_the_reference():
    checked = 0
    for total_steps, schedule, warmup_fraction, warmup_steps, decay_fraction, decay_shape, \
            (lr, ratio) in RUNS:
        if warmup_steps is not None and warmup_steps > total_steps:
            continue  # the loop refuses a warmup longer than the run (StepPlan)
        tc = TrainConfig(schedule=schedule, warmup_fraction=warmup_fraction,
                         warmup_steps=warmup_steps, decay_fraction=decay_fraction,
                         decay_shape=decay_shape, lr=lr, min_lr_ratio=ratio)
        plan = Schedule.from_config(tc, total_steps)
        lrs = [plan.lr_at(step) for step in range(total_steps)]
        assert lrs == reference_lrs(tc, total_steps), (tc, total_steps)
        checked += 1
    assert checked > 1000


def test_the_schedule_reads_the_config():
    tc = load_config(None, ["train.schedule=wsd", "train.warmup_fraction=0.1",
                            "train.decay_fraction=0.25"]).train
    schedule = Schedule.from_config(tc, 40)
    assert (schedule.warmup_steps, schedule.decay_steps, schedule.decay_start_step) == (4, 10, 30)
    tc = load_config(None, ["train.warmup_steps=7"]).train
    cosine = Schedule.from_config(tc, 40)
    assert (cosine.warmup_steps, cosine.decay_steps, cosine.decay_start_step) == (7, 0, 39)


@pytest.mark.parametrize("override, message", [
    ("train.schedule=linear", "train.schedule='linear' is invalid: allowed cosine, wsd"),
    ("train.decay_shape=cosine", "train.decay_shape='cosine' is invalid: allowed linear, sqrt"),
])
def test_a_bad_schedule_is_refused_once_on_one_line(override, message):
    with pytest.raises(ConfigError) as error:
        load_config(None, [override])
    assert str(error.value) == message
