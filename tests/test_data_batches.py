"""Training batches, validation windows and loss units.

The token stream here is ``np.arange(n)``: every window of it is a run of consecutive integers
starting at its own offset, so shapes, shifts, coverage and disjointness can be checked by
hand without trusting the sampler's own arithmetic.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from moelab.data import TrainBatches, nats_to_bits_per_byte, validation_windows
from moelab.errors import MoelabError

STREAM = np.arange(50_000, dtype=np.uint32)
SEQ_LEN = 16
BATCH = 8


def global_batch(seed: int, step: int, world_size: int = 1) -> torch.Tensor:
    """The global x of ``step`` assembled from every rank's share, rank order."""
    parts = []
    for rank in range(world_size):
        batches = TrainBatches(STREAM, SEQ_LEN, BATCH, seed, rank=rank, world_size=world_size)
        batches.load_state_dict({"step": step})
        parts.append(batches.next()[0])
    return torch.cat(parts)


def test_windows_are_contiguous_and_targets_shift_by_one():
    x_BT, y_BT = TrainBatches(STREAM, SEQ_LEN, BATCH, seed=0).next()
    assert x_BT.dtype == torch.long and x_BT.shape == (BATCH, SEQ_LEN) == y_BT.shape
    offsets_T = torch.arange(SEQ_LEN)
    assert torch.equal(x_BT, x_BT[:, :1] + offsets_T)  # consecutive stream tokens
    assert torch.equal(y_BT, x_BT + 1)  # targets are the next tokens
    assert int(y_BT.max()) < len(STREAM)


def test_same_seed_same_batches_other_seed_other_batches():
    first, again, other = (TrainBatches(STREAM, SEQ_LEN, BATCH, seed) for seed in (3, 3, 4))
    for _ in range(5):
        x_first, x_again, x_other = first.next()[0], again.next()[0], other.next()[0]
        assert torch.equal(x_first, x_again)
        assert not torch.equal(x_first, x_other)


def test_consecutive_steps_differ_and_cover_the_whole_stream():
    batches = TrainBatches(STREAM, SEQ_LEN, BATCH, seed=1)
    starts = torch.cat([batches.next()[0][:, 0] for _ in range(400)])
    assert len(set(starts.tolist())) > 0.95 * len(starts)  # no repeats to speak of
    # 3,200 uniform draws over 49,984 starts: both ends of the stream are reached.
    assert int(starts.min()) < 0.01 * len(STREAM)
    assert int(starts.max()) > 0.99 * (len(STREAM) - SEQ_LEN - 1)


@pytest.mark.parametrize("world_size", [2, 4, 8])
def test_rank_shards_are_disjoint_and_cover_the_global_batch(world_size):
    for step in range(3):
        single = global_batch(seed=5, step=step, world_size=1)
        sharded = global_batch(seed=5, step=step, world_size=world_size)
        assert torch.equal(single, sharded)  # same global stream whatever the world size
    shares = [
        TrainBatches(STREAM, SEQ_LEN, BATCH, 5, rank=r, world_size=world_size).next()[0]
        for r in range(world_size)
    ]
    assert all(share.shape == (BATCH // world_size, SEQ_LEN) for share in shares)
    rows = [tuple(row.tolist()) for share in shares for row in share]
    assert len(set(rows)) == BATCH  # no window is served to two ranks


def test_resume_continues_the_exact_stream_even_on_another_world_size():
    straight = TrainBatches(STREAM, SEQ_LEN, BATCH, seed=7)
    expected = [straight.next()[0] for _ in range(8)][5:]

    first_run = TrainBatches(STREAM, SEQ_LEN, BATCH, seed=7)
    for _ in range(5):
        first_run.next()
    state = first_run.state_dict()
    assert all(type(v) is int for v in state.values()) and state["step"] == 5

    resumed = [TrainBatches(STREAM, SEQ_LEN, BATCH, 7, rank=r, world_size=2) for r in range(2)]
    for rank_batches in resumed:
        rank_batches.load_state_dict(state)
    for step_x in expected:
        assert torch.equal(torch.cat([b.next()[0] for b in resumed]), step_x)


def test_resume_with_other_settings_is_refused():
    state = TrainBatches(STREAM, SEQ_LEN, BATCH, seed=7).state_dict()
    with pytest.raises(MoelabError, match="seed"):
        TrainBatches(STREAM, SEQ_LEN, BATCH, seed=8).load_state_dict(state)


def test_tokens_seen_counts_every_target_of_every_rank():
    world_size, steps = 4, 6
    ranks = [TrainBatches(STREAM, SEQ_LEN, BATCH, 0, rank=r, world_size=world_size)
             for r in range(world_size)]
    targets = sum(b.next()[1].numel() for _ in range(steps) for b in ranks)
    assert targets == steps * BATCH * SEQ_LEN == 768
    assert ranks[0].tokens_per_step == BATCH * SEQ_LEN
    assert all(b.tokens_seen == targets for b in ranks)


@pytest.mark.parametrize("kwargs, message", [
    ({"batch_size": 6, "world_size": 4}, "divisible"),
    ({"rank": 2, "world_size": 2}, "rank=2"),
    ({"seq_len": 60_000}, "fewer than seq_len"),
    ({"seed": -1}, "seed=-1"),
])
def test_bad_batch_settings_raise(kwargs, message):
    settings = {"seq_len": SEQ_LEN, "batch_size": BATCH, "seed": 0, **kwargs}
    with pytest.raises(MoelabError, match=message):
        TrainBatches(STREAM, **settings)


def test_validation_windows_are_fixed_evenly_spaced_and_disjoint():
    windows_NW = validation_windows(STREAM, SEQ_LEN, 10)
    assert windows_NW.dtype == torch.long and windows_NW.shape == (10, SEQ_LEN + 1)
    # Hand count: stride 50,000 // 10 = 5,000; window i is 5000 i .. 5000 i + 16.
    expected_NW = torch.arange(10)[:, None] * 5000 + torch.arange(SEQ_LEN + 1)
    assert torch.equal(windows_NW, expected_NW)
    # No seed anywhere: every arm and seed of a study gets the same windows.
    assert torch.equal(validation_windows(STREAM, SEQ_LEN, 10), windows_NW)


def test_validation_windows_refuse_to_overlap():
    small = np.arange(100)
    assert validation_windows(small, 9, 10).shape == (10, 10)  # exactly fits
    with pytest.raises(MoelabError, match="at most 9 windows"):
        validation_windows(small, 10, 10)


def test_bits_per_byte_by_hand():
    # A uniform guess over 256 byte values at one byte per token is 8 bits per byte.
    assert nats_to_bits_per_byte(math.log(256), 1.0) == pytest.approx(8.0)
    # 2 ln 2 nats per token is 2 bits per token; at 4 bytes per token that is 0.5 bits per byte.
    assert nats_to_bits_per_byte(2 * math.log(2), 4.0) == pytest.approx(0.5)
