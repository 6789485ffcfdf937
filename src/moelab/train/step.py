"""One optimizer step's shape and its micro batches: ``StepPlan`` (how the token budget becomes
steps, and a global batch micro batches), ``forward_backward`` (the gradient accumulated over a
rank's micro batches), ``step_slot_counts`` (the loads global-batch balancing needs before the
step's first backward) and ``step_balance`` (what a log step reports of the step's routing).

``moelab.train.loop`` runs these once per step (``optimizer_step``); the step benchmark and the
sweep's timing run them on their own.
"""

from __future__ import annotations

import functools
from contextlib import nullcontext
from dataclasses import dataclass
from collections.abc import Callable

import torch

from moelab.codec import to_json
from moelab.config import Config, TrainConfig
from moelab.errors import MoelabError
from moelab.model import Transformer
from moelab.moe.routing import load_balance, max_violation
from moelab.train.distributed import Distributed
from moelab.train.schedule import Schedule


@dataclass(frozen=True)
class StepPlan:
    """How the token budget becomes steps, and a global batch becomes micro batches."""

    total_steps: int
    tokens_per_step: int
    rank_batch_size: int
    micro_batch_size: int
    warmup_steps: int
    decay_steps: int = 0
    """Steps of the wsd final decay (0 with cosine)."""

    @property
    def accumulation_steps(self) -> int:
        return self.rank_batch_size // self.micro_batch_size

    @classmethod
    def from_config(cls, config: Config, world_size: int) -> StepPlan:
        tc, seq_len = config.train, config.model.max_seq_len
        tokens_per_step = tc.batch_size * seq_len
        total_steps = tc.max_tokens // tokens_per_step
        if total_steps == 0:
            raise MoelabError(
                f"train.max_tokens={tc.max_tokens} is invalid: less than one step of "
                f"batch_size * max_seq_len = {tokens_per_step} tokens"
            )
        if tc.batch_size % world_size:
            raise MoelabError(
                f"train.batch_size={tc.batch_size} is invalid: must be divisible by the number "
                f"of processes ({world_size})"
            )
        rank_batch_size = tc.batch_size // world_size
        micro_batch_size = tc.micro_batch_size or rank_batch_size
        if rank_batch_size % micro_batch_size:
            raise MoelabError(
                f"train.micro_batch_size={micro_batch_size} is invalid: must divide the "
                f"per-process batch batch_size / processes = {rank_batch_size}"
            )
        schedule = Schedule.from_config(tc, total_steps)
        plan = cls(total_steps, tokens_per_step, rank_batch_size, micro_batch_size,
                   schedule.warmup_steps, schedule.decay_steps)
        plan.check_steps_fit(tc)
        return plan

    def check_steps_fit(self, tc: TrainConfig) -> None:
        """Warmup, the wsd decay and the kept checkpoints must lie inside the run's steps."""
        if tc.warmup_steps is not None:
            Schedule.from_config(tc, self.total_steps).check_warmup_steps_fit()
        beyond = [s for s in tc.keep_checkpoints_at if s > self.total_steps]
        if beyond:
            raise MoelabError(f"train.keep_checkpoints_at={tc.keep_checkpoints_at} is invalid: "
                              f"step {beyond[0]} is beyond the run's {self.total_steps} steps")


@dataclass
class StepLoads:
    """What one optimizer step routed on this rank, kept on the device until a log step."""

    slot_counts_LE: torch.Tensor
    """(MoE layers, E) token-slots per expert, summed over the rank's micro batches."""
    micro_max_violation_sum_L: torch.Tensor
    """(MoE layers,) each micro batch's MaxVio, summed over the micro batches."""
    micro_batches: int



def step_slot_counts(model: Transformer, x_BT: torch.Tensor, plan: StepPlan, autocast,
                     sum_over_ranks: Callable[[torch.Tensor], torch.Tensor]) -> torch.Tensor:
    """(MoE layers, E) token-slots routed to each expert over the whole optimizer step: every
    micro batch of this rank (a routing pass without gradients, micro batch by micro batch as
    the step will run them), summed over ranks.

    Global-batch balancing needs these loads before the step's first backward: the gradient of
    ``E * sum_i f_i P_i`` with respect to one micro batch's probabilities is ``E * f_i / N``
    with f from the whole step, and a micro batch's graph is gone once it has run backward.
    The pass costs one forward of the step (no head); ``forward_backward`` then gives every
    micro batch these counts (docs/training.md, "Balancing scope").
    """
    with autocast():
        counts_LE = functools.reduce(torch.add, [model.routing_counts(x_bT)
                                                 for x_bT in x_BT.split(plan.micro_batch_size)])
    return sum_over_ranks(counts_LE)


def forward_backward(train_model, ddp_model, x_BT: torch.Tensor, y_BT: torch.Tensor,
                     plan: StepPlan, autocast,
                     lb_slot_counts_LE: torch.Tensor | None = None
                     ) -> tuple[torch.Tensor, StepLoads | None]:
    """Accumulate the gradient of the mean loss over this rank's micro batches.

    Returns the four losses (loss, ce, lb, z) averaged over micro batches, and what they
    routed (``StepLoads``: the token-slots per expert summed over them and each one's MaxVio;
    None for a dense model), on the device.
    DDP averages gradients over ranks on the last micro batch only (``no_sync`` before it).
    ``lb_slot_counts_LE`` (``step_slot_counts``): the loads every micro batch's balancing loss
    uses; None: each micro batch's own.
    """
    losses, slot_counts_LE, micro_max_violation_L = [], None, None
    micro_batches = list(zip(x_BT.split(plan.micro_batch_size), y_BT.split(plan.micro_batch_size)))
    for index, (x_bT, y_bT) in enumerate(micro_batches):
        is_last = index == len(micro_batches) - 1
        with ddp_model.no_sync() if ddp_model and not is_last else nullcontext():
            with autocast():
                out = train_model(x_bT, y_bT, collect_routing=False,  # eval reads routing
                                  lb_slot_counts_LE=lb_slot_counts_LE)
            (out.loss / len(micro_batches)).backward()
        losses.append(torch.stack([out.loss, out.ce_loss, out.lb_loss, out.z_loss]).detach().float())
        if out.slot_counts_LE is not None:
            slot_counts_LE = (out.slot_counts_LE if slot_counts_LE is None
                              else slot_counts_LE + out.slot_counts_LE)
            micro_L = max_violation(out.slot_counts_LE)
            micro_max_violation_L = (micro_L if micro_max_violation_L is None
                                     else micro_max_violation_L + micro_L)
    loads = (None if slot_counts_LE is None or micro_max_violation_L is None else
             StepLoads(slot_counts_LE, micro_max_violation_L, len(micro_batches)))
    return torch.stack(losses).mean(dim=0), loads


def step_balance(loads: StepLoads | None, dist: Distributed,
                 splits_step: bool) -> list[dict[str, float]]:
    """Per MoE layer, the ``LoadBalance`` of the whole optimizer step (all micro batches of all
    ranks: the global batch), and where the step is split (gradient accumulation, several
    processes) ``micro_max_violation``, the mean MaxVio of its micro batches: a micro batch
    sees fewer tokens, so its loads are lumpier than the global batch's. [] for a dense model.
    Every rank calls it at the same steps (its sums are collectives)."""
    if loads is None:
        return []
    counts_LE = dist.sum(loads.slot_counts_LE)
    micro_L = dist.average(loads.micro_max_violation_sum_L / loads.micro_batches).tolist()
    rows = [to_json(load_balance(counts_E)) for counts_E in counts_LE]
    if splits_step:
        for row, micro in zip(rows, micro_L):
            row["micro_max_violation"] = micro
    return rows
