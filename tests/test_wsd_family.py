"""The wsd budget family as a plan: schedules that agree before each decay, the decay-start
steps, the plan's cost in tokens (hand counts), and the one-line refusals. No training here;
tests/test_branch.py trains a family and checks its branches against separate runs."""

from __future__ import annotations

import pytest

from moelab.config import dump_config, load_config, override
from moelab.errors import ConfigError, MoelabError
from moelab.runs.families import count_family_tokens
from moelab.train import Schedule, wsd_budget_family
from moelab.train.step import StepPlan
from tiny_overrides import TINY_MOE_RUN

STEP = 256  # tokens per step of the tiny run: batch 8 x context 32
WSD = TINY_MOE_RUN + ["train.schedule=wsd", "train.decay_fraction=0.25"]


def wsd_config(*overrides: str):
    return load_config(None, WSD + list(overrides))


def run_lrs(config) -> list[float]:
    """Every step's lr of a run, from the loop's own plan of it."""
    plan = StepPlan.from_config(config, world_size=1)
    tc = config.train
    schedule = Schedule(plan.total_steps, plan.warmup_steps, tc.lr, tc.min_lr_ratio, "wsd",
                        plan.decay_steps, tc.decay_shape)
    return [schedule.lr_at(s) for s in range(plan.total_steps)]


def test_the_family_by_hand():
    # 10, 16 and 24 steps; decays of int(0.25 * steps) = 2, 4, 6 steps start after 8, 12, 18.
    family = wsd_budget_family(wsd_config("train.warmup_steps=4"), [24 * STEP, 10 * STEP, 16 * STEP])
    assert [r.budget for r in family.runs] == [10 * STEP, 16 * STEP, 24 * STEP]
    assert [r.steps for r in family.runs] == [10, 16, 24]
    assert [r.decay_start_step for r in family.runs] == [8, 12, 18]
    assert [r.branches_from for r in family.runs] == [24 * STEP, 24 * STEP, None]
    assert family.full.config.train.keep_checkpoints_at == [8, 12]
    for run in family.runs:
        assert run.config.train.max_tokens == run.budget
        assert run.config.train.schedule == "wsd" and run.config.train.warmup_steps == 4
    assert [r.config.train.keep_checkpoints_at for r in family.branches] == [[], []]


def test_the_plan_costs_the_largest_budget_plus_the_cooldowns():
    family = wsd_budget_family(wsd_config("train.warmup_steps=4"), [10 * STEP, 16 * STEP, 24 * STEP])
    # Hand count: the full run's 24 steps, then the branches' 10 - 8 = 2 and 16 - 12 = 4.
    branch_steps = {str(run.budget): run.decay_start_step for run in family.branches}
    runs = [(str(run.budget), run.tokens, run.tokens_per_step) for run in family.runs]
    trained, separate = count_family_tokens(branch_steps, runs)
    assert trained == (24 + 2 + 4) * STEP
    assert separate == (10 + 16 + 24) * STEP  # one run per budget


def test_every_budget_has_the_full_runs_lr_before_its_decay_start():
    family = wsd_budget_family(wsd_config("train.warmup_steps=4"), [10 * STEP, 16 * STEP, 24 * STEP])
    full = run_lrs(family.full.config)
    for run in family.branches:
        lrs = run_lrs(run.config)
        start = run.decay_start_step
        assert lrs[:start] == full[:start]  # exactly: the branch trains from there
        assert lrs[start + 1] < full[start + 1]  # and its own decay follows
        assert lrs[0] == pytest.approx(0.01 / 4)  # the shared 4-step warmup, step 0


def test_without_warmup_steps_the_smallest_budget_keeps_its_fraction():
    # warmup_fraction 0.2 of the smallest budget's 10 steps: 2 steps, for every budget.
    family = wsd_budget_family(wsd_config("train.warmup_fraction=0.2"), [10 * STEP, 40 * STEP])
    assert family.warmup_steps == 2
    assert [r.config.train.warmup_steps for r in family.runs] == [2, 2]


def test_warmup_steps_overrides_the_fraction_in_a_run():
    config = wsd_config("train.max_tokens=5120", "train.warmup_fraction=0.5",
                        "train.warmup_steps=3")
    assert StepPlan.from_config(config, 1).warmup_steps == 3
    assert run_lrs(config)[:4] == pytest.approx([0.01 / 3, 0.02 / 3, 0.01, 0.01])


@pytest.mark.parametrize("overrides, budgets, message", [
    (["train.schedule=cosine"], [2560], "train.schedule='cosine' is invalid for a budget family"),
    ([], [], "budgets [] is invalid"),
    ([], [100, 2560], "budget 100 is invalid: less than one step"),
    ([], [2560, 2560], "budgets 2560 and 2560 are invalid together"),
    ([], [2560, 2600], "budgets 2560 and 2600 are invalid together: both are 10 steps"),
    ([], [-5], "budget -5 is invalid"),
    (["train.warmup_steps=9"], [2560, 5120], "budget 2560 is invalid: its decay starts at step 8"),
    (["train.warmup_steps=0"], [256, 2560], "budget 256 is invalid: its decay starts at step 0"),
])
def test_bad_families_are_refused_on_one_line(overrides, budgets, message):
    with pytest.raises(MoelabError) as error:
        wsd_budget_family(wsd_config(*overrides), budgets)
    assert message in str(error.value) and "\n" not in str(error.value)


@pytest.mark.parametrize("override, message", [
    ("train.warmup_steps=-1", "train.warmup_steps=-1 is invalid"),
    ("train.keep_checkpoints_at=[0]", "train.keep_checkpoints_at=[0] is invalid"),
    ("train.keep_checkpoints_at=[3, 3]", "train.keep_checkpoints_at=[3, 3] is invalid"),
    ("train.keep_checkpoints_at=true", "train.keep_checkpoints_at=True is invalid: expected a list"),
    ("train.keep_checkpoints_at=[a]", "train.keep_checkpoints_at[0]='a' is invalid"),
    ("train.init_from=/somewhere", "set both or neither"),
    ("train.init_sha256=abc", "set both or neither"),
])
def test_bad_new_train_keys_are_config_errors(override, message):
    with pytest.raises(ConfigError, match=None) as error:
        load_config(None, [override])
    assert message in str(error.value)


@pytest.mark.parametrize("overrides, message", [
    (["train.max_tokens=2560", "train.warmup_steps=11"],
     "train.warmup_steps=11 is invalid: allowed up to the run's 10 steps"),
    (["train.max_tokens=2560", "train.warmup_steps=9"],
     "train.warmup_steps=9 is invalid with wsd: the decay starts at step 8 of 10"),
    (["train.max_tokens=2560", "train.keep_checkpoints_at=[4, 11]"],
     "step 11 is beyond the run's 10 steps"),
])
def test_steps_that_do_not_fit_the_run_are_refused(overrides, message):
    with pytest.raises(MoelabError) as error:
        StepPlan.from_config(wsd_config(*overrides), 1)
    assert message in str(error.value)


@pytest.mark.parametrize("overrides, budgets", [
    (["train.warmup_steps=4"], [24 * STEP, 10 * STEP, 16 * STEP]),
    (["train.warmup_fraction=0.2", "train.decay_shape=linear"], [10 * STEP, 40 * STEP]),
])
def test_the_members_are_the_config_with_the_family_keys_set(overrides, budgets):
    """Each member's config is the base config with exactly the family's four train keys set,
    as the dotted overrides of the CLI would set them: equal, and dumped to the same YAML."""
    config = wsd_config(*overrides)
    family = wsd_budget_family(config, budgets)
    for run in family.runs:
        kept = run.config.train.keep_checkpoints_at
        expected = override(config, [f"train.max_tokens={run.budget}", "train.schedule=wsd",
                                     f"train.warmup_steps={family.warmup_steps}",
                                     f"train.keep_checkpoints_at={kept}"])
        assert run.config == expected
        assert dump_config(run.config) == dump_config(expected)
