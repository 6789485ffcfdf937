"""Several token budgets from one warmup-stable-decay run: the budget family.

Under ``train.schedule: wsd`` the lr of a run is the warmup, then the peak, until its final
decay. If every budget shares one warmup (``train.warmup_steps``, absolute), the lr of every
step before a budget's decay start is the same whatever the budget. So the largest budget's run
is trained in full, keeping a checkpoint at each smaller budget's decay start
(``train.keep_checkpoints_at``), and each smaller budget is a branch from that checkpoint that
trains only its cooldown (``moelab.train.branch_run``): the same losses, bit for bit, as its own
separate run, for the tokens of the largest budget plus the cooldowns.

    family = wsd_budget_family(config, [204_800, 409_600, 819_200])
    train(family.full.config, "runs/819.2K")
    for member in family.branches:
        branch_run("runs/819.2K", member.decay_start_step, member.config, f"runs/{member.budget}")
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, replace
from typing import Any

from moelab.config import Config
from moelab.errors import MoelabError, short_repr
from moelab.train.schedule import Schedule


@dataclass(frozen=True)
class BudgetRun:
    """One budget of a family: its run's config and where its decay starts."""

    budget: int
    """The token budget asked for (train.max_tokens; the run trains steps * tokens_per_step)."""
    config: Config
    """Its run: max_tokens = budget, schedule wsd, the family's shared warmup_steps."""
    steps: int
    decay_start_step: int
    """Steps trained before its decay begins: a branch starts from the checkpoint there."""
    branches_from: int | None
    """The budget whose run it branches from (the largest); None for the largest itself."""
    tokens_per_step: int

    @property
    def tokens(self) -> int:
        """Tokens its run trains on, as a separate run would (steps * tokens_per_step)."""
        return self.steps * self.tokens_per_step

    @property
    def own_tokens(self) -> int:
        """Tokens the family trains for it: all of them for the full run, the cooldown for a
        branch (the steps after its decay start)."""
        if self.branches_from is None:
            return self.tokens
        return (self.steps - self.decay_start_step) * self.tokens_per_step


@dataclass(frozen=True)
class WsdFamily:
    runs: tuple[BudgetRun, ...]
    """Ascending budgets; the last is the full run, every other one branches from it."""
    warmup_steps: int

    @property
    def full(self) -> BudgetRun:
        return self.runs[-1]

    @property
    def branches(self) -> tuple[BudgetRun, ...]:
        return self.runs[:-1]


def wsd_budget_family(config: Config, budgets: list[int]) -> WsdFamily:
    """The family of ``budgets`` (tokens) for ``config`` (schedule wsd).

    The shared warmup is ``train.warmup_steps`` when set, else ``warmup_fraction`` of the
    smallest budget's steps (so the smallest budget keeps its own recipe). Refuses, in one line
    each: a config that is not wsd, a budget below one step, two budgets of the same number of
    steps, and a decay start inside the warmup.
    """
    tc = config.train
    if tc.schedule != "wsd":
        raise MoelabError(f"train.schedule={short_repr(tc.schedule)} is invalid for a budget family: "
                          f"allowed wsd (a cosine schedule differs by budget at every step)")
    if not budgets:
        raise MoelabError("budgets [] is invalid: expected at least one token budget")
    tokens_per_step = tc.batch_size * config.model.max_seq_len
    steps_of = {budget: _steps(budget, tokens_per_step) for budget in sorted(budgets)}
    _refuse_same_steps(sorted(budgets), steps_of, tokens_per_step)
    smallest, largest = min(budgets), max(budgets)
    warmup = Schedule.from_config(tc, steps_of[smallest]).warmup_steps
    decay_starts = {b: Schedule.from_config(tc, steps).decay_start_step
                    for b, steps in steps_of.items()}
    for budget, start in decay_starts.items():
        if start < warmup:
            raise MoelabError(
                f"budget {budget} is invalid: its decay starts at step {start}, inside the "
                f"family's {warmup}-step warmup; raise the budget or lower train.warmup_steps")
        if start < 1 and budget != largest:
            raise MoelabError(f"budget {budget} is invalid: its decay starts at step 0, so no "
                              f"checkpoint lies before it to branch from; raise the budget")
    runs = []
    for budget, steps in steps_of.items():
        kept = sorted({decay_starts[b] for b in steps_of if b != largest}) if budget == largest else []
        run_train = replace(tc, max_tokens=budget, schedule="wsd", warmup_steps=warmup,
                            keep_checkpoints_at=kept)
        run_config = replace(config, train=run_train).validate()
        runs.append(BudgetRun(budget, run_config, steps, decay_starts[budget],
                              None if budget == largest else largest, tokens_per_step))
    return WsdFamily(tuple(runs), warmup)


def _steps(budget: Any, tokens_per_step: int) -> int:
    if not isinstance(budget, int) or isinstance(budget, bool) or budget <= 0:
        raise MoelabError(f"budget {short_repr(budget)} is invalid: expected a whole number of tokens > 0")
    if budget < tokens_per_step:
        raise MoelabError(f"budget {budget} is invalid: less than one step of batch_size * "
                          f"max_seq_len = {tokens_per_step} tokens")
    return budget // tokens_per_step


def _refuse_same_steps(budgets: list[int], steps_of: dict[int, int], tokens_per_step: int) -> None:
    """Two budgets of one step count would be the same run (or a budget given twice)."""
    for smaller, larger in itertools.pairwise(budgets):
        if steps_of[smaller] == steps_of[larger]:
            raise MoelabError(
                f"budgets {smaller} and {larger} are invalid together: both are "
                f"{steps_of[smaller]} steps of {tokens_per_step} tokens; give distinct budgets")
