"""Training batches and validation windows over a token stream.

Training: every optimizer step draws a *global* batch of ``batch_size`` random windows of
``seq_len + 1`` tokens (inputs and shifted targets) from the whole stream. The window starts of
step s depend only on (seed, s), never on the world size, so one GPU and eight GPUs see the
same data; rank r takes rows [r * b, (r + 1) * b) with b = batch_size / world_size, so the ranks
are disjoint and together cover the global batch. The whole state is the step counter.

Validation: ``validation_windows`` cuts a fixed set of evenly spaced, non-overlapping windows
from the validation stream. It takes no seed, so every arm and seed of a study is evaluated on
exactly the same tokens.
"""

from __future__ import annotations

import numpy as np
import torch

from moelab.errors import MoelabError, short_repr


class TrainBatches:
    """Seeded random windows; ``next()`` gives this rank's (x_BT, y_BT) of the next step."""

    def __init__(self, tokens: np.ndarray, seq_len: int, batch_size: int, seed: int,
                 rank: int = 0, world_size: int = 1):
        if seq_len <= 0 or batch_size <= 0:
            raise MoelabError(f"seq_len={seq_len} and batch_size={batch_size} must be > 0")
        if seed < 0:
            raise MoelabError(f"seed={seed} is invalid: the data seed must be >= 0")
        if not 0 <= rank < world_size:
            raise MoelabError(f"rank={rank} is invalid: allowed 0..{world_size - 1}")
        if batch_size % world_size:
            raise MoelabError(
                f"batch_size={batch_size} is invalid: must be divisible by the world size "
                f"({world_size})"
            )
        if len(tokens) < seq_len + 1:
            raise MoelabError(
                f"the training split has {len(tokens)} tokens, fewer than seq_len + 1 = "
                f"{seq_len + 1}: use more data or a shorter context"
            )
        self.tokens = tokens
        self.seq_len = seq_len
        self.batch_size = batch_size
        self.seed = seed
        self.rank = rank
        self.world_size = world_size
        self.step = 0
        self._offsets_W = np.arange(seq_len + 1)

    @property
    def rank_batch_size(self) -> int:
        return self.batch_size // self.world_size

    @property
    def tokens_per_step(self) -> int:
        """Target tokens of one global batch (all ranks): batch_size * seq_len."""
        return self.batch_size * self.seq_len

    @property
    def tokens_seen(self) -> int:
        """Target tokens consumed by all ranks so far (exact: steps * tokens_per_step)."""
        return self.step * self.tokens_per_step

    def global_starts(self, step: int) -> np.ndarray:
        """Window starts (batch_size,) of ``step``'s global batch: a function of (seed, step)."""
        rng = np.random.default_rng([self.seed, step])
        return rng.integers(0, len(self.tokens) - self.seq_len, size=self.batch_size)

    def batch_at(self, step: int) -> tuple[torch.Tensor, torch.Tensor]:
        """This rank's (x_BT, y_BT) of ``step`` without moving the stream."""
        b = self.rank_batch_size
        starts_B = self.global_starts(step)[self.rank * b : (self.rank + 1) * b]
        windows_BW = torch.from_numpy(
            np.asarray(self.tokens[starts_B[:, None] + self._offsets_W], dtype=np.int64))
        return windows_BW[:, :-1], windows_BW[:, 1:]

    def next(self) -> tuple[torch.Tensor, torch.Tensor]:
        """This rank's (x_BT, y_BT) of the next step: LongTensors (batch_size / world_size, T)."""
        x_BT, y_BT = self.batch_at(self.step)
        self.step += 1
        return x_BT, y_BT

    __next__ = next

    def __iter__(self):
        return self

    def state_dict(self) -> dict[str, int]:
        """Plain ints; loading them resumes the exact stream (on any world size)."""
        return {"step": self.step, "seed": self.seed, "seq_len": self.seq_len,
                "batch_size": self.batch_size}

    def load_state_dict(self, state: dict[str, int]) -> None:
        if "step" not in state:
            raise MoelabError(f"cannot resume the batch stream: no 'step' in {sorted(state)}")
        for key in ("seed", "seq_len", "batch_size", "step"):
            value = state.get(key, 0)
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise MoelabError(f"cannot resume the batch stream: checkpoint has {key}="
                                  f"{short_repr(value)}, expected a whole number >= 0")
            if key != "step" and key in state and value != getattr(self, key):
                raise MoelabError(
                    f"cannot resume the batch stream: checkpoint has {key}={state[key]}, "
                    f"this run has {key}={getattr(self, key)}"
                )
        self.step = state["step"]


def validation_windows(tokens: np.ndarray, seq_len: int, num_windows: int,
                       setting: str = "train.eval_windows") -> torch.Tensor:
    """(num_windows, seq_len + 1) LongTensor of evenly spaced, non-overlapping windows.

    Window i starts at i * (len(tokens) // num_windows): a function of the stream only.
    ``setting`` names where num_windows came from, in the error for too many.
    """
    if num_windows <= 0 or seq_len <= 0:
        raise MoelabError(f"num_windows={num_windows} and seq_len={seq_len} must be > 0")
    stride = len(tokens) // num_windows
    if stride < seq_len + 1:
        raise MoelabError(
            f"the validation split has {len(tokens)} tokens, too few for {num_windows} windows "
            f"of seq_len + 1 = {seq_len + 1}: allowed at most {len(tokens) // (seq_len + 1)} "
            f"windows ({setting})"
        )
    starts_N = np.arange(num_windows) * stride
    windows_NW = np.asarray(tokens[starts_N[:, None] + np.arange(seq_len + 1)], dtype=np.int64)
    return torch.from_numpy(windows_NW)
