"""The zero-shot section of a study's results, from the runs' tasks.json files alone.

Runs with ``train.eval_tasks`` score the tasks on their final weights and write
``RUN/tasks.json`` (``moelab.train.evaluation.score_run_tasks``). Per task, each arm's accuracy
is summarised over seeds (mean, std and the t interval of the mean: the spread of seeds, not
of items) beside the chance level, and each dense arm is compared with the MoE by the paired
t-test on the per-seed differences moe - dense, the statistic the val-loss gaps use
(``moelab.stats.t_tests``). The comparisons of every task and criterion are one family of tests:
each verdict uses its Holm-adjusted p (``adjust_comparisons``). A study whose runs have no
tasks.json has no section.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Optional

import numpy as np

from moelab.stats.intervals import Summary, mean_interval, summarize
from moelab.stats.multiple import family_label, holm
from moelab.stats.t_tests import paired_difference
from moelab.study.arms import COMPARED_ARMS
from moelab.study.gaps import decide
from moelab.study.folder import CompleteRun
from moelab.tasks import TASK_NAMES


@dataclass
class TaskRunResult:
    """One run's score on one task, copied from its tasks.json entry."""

    seed: int
    """The run's seed."""
    run_dir: str
    """The run folder, relative to the study folder."""
    accuracy: float
    """Every entry of a tasks.json has it, and its chance (``moelab.tasks.read_run_tasks``)."""
    correct: Optional[int]
    """Items answered correctly."""
    items: Optional[int]
    """Items scored."""
    chance: float
    """The task's chance accuracy."""
    step: Optional[int]
    """The training step whose weights were scored."""


# Copied per run from its tasks.json entry.
RUN_TASK_FIELDS = ("accuracy", "correct", "items", "chance", "step")


@dataclass
class TaskArmResult:
    """One arm on one task: accuracy over seeds with its t interval, and the chance level."""

    accuracy: Summary
    """Accuracy over seeds."""
    ci_low: Optional[float]
    """Lower end of the mean's 95 % t interval (the spread of seeds)."""
    ci_high: Optional[float]
    """Upper end of that interval."""
    chance: float
    """The task's chance accuracy."""
    runs: list[TaskRunResult]
    """Each run's score."""

    def accuracy_by_seed(self) -> dict[int, float]:
        return {run.seed: run.accuracy for run in self.runs}


@dataclass
class AccuracyComparison:
    """moe - dense accuracy on one task, paired by seed (positive: the MoE is better)."""

    moe_arm: str
    """The MoE arm."""
    dense_arm: str
    """The dense arm it is compared with."""
    difference: float
    """Mean over paired seeds of MoE - dense accuracy."""
    ci_low: Optional[float]
    """Lower end of its 95 % paired t interval."""
    ci_high: Optional[float]
    """Upper end of that interval."""
    p_value: Optional[float]
    """The raw p of the paired t-test."""
    p_adjusted: Optional[float]
    """``p_value`` adjusted over the family of tests (``adjust_comparisons``); the verdict uses
    it."""
    adjustment: str
    """How ``p_adjusted`` was adjusted, e.g. 'Holm, 3 tests'."""
    n_pairs: int
    """Seeds both arms have."""
    std_diff: Optional[float]
    """Sample standard deviation of the per-seed differences."""
    differences: list[dict]
    """[{"seed", "diff"}] per paired seed."""
    outcome: str
    """'MoE better', 'dense better', 'not significant' or 'not testable', at p_adjusted."""
    verdict: str
    """outcome with its test in words (docs/verdicts.md)."""


@dataclass
class TaskResult:
    """One task: each arm's accuracy and, per criterion, the MoE against its dense arm."""

    arms: dict[str, TaskArmResult]
    """Arm -> its accuracy on the task."""
    comparisons: dict[str, AccuracyComparison]
    """Criterion -> the MoE against that criterion's dense arm."""


def zero_shot_result(arm_names: list[str], records: list[CompleteRun]) -> dict[str, TaskResult]:
    """Per task the runs scored: each arm's accuracy over seeds and, per criterion, the paired
    MoE - dense accuracy difference (from the runs' tasks.json only); {} when none scored any."""
    result = {}
    for task in TASK_NAMES:
        arms = {}
        for arm in arm_names:
            scored = sorted((r for r in records if r.arm == arm and task in r.tasks),
                            key=lambda r: r.seed)
            if scored:
                arms[arm] = task_arm_result(task, scored)
        if not arms:
            continue
        comparisons = {}
        for criterion, (moe_arm, dense_arm) in COMPARED_ARMS.items():
            if moe_arm in arms and dense_arm in arms:
                comparisons[criterion] = accuracy_comparison(
                    moe_arm, dense_arm, arms[moe_arm], arms[dense_arm])
        result[task] = TaskResult(arms, comparisons)
    return result


def task_arm_result(task: str, records: list[CompleteRun]) -> TaskArmResult:
    """One arm on one task: accuracy over seeds with its t interval, and the chance level."""
    runs = [TaskRunResult(r.seed, r.run_dir.as_posix(),
                          *(r.tasks[task].get(key) for key in RUN_TASK_FIELDS))
            for r in records]
    accuracies = [run.accuracy for run in runs]
    ci_low, ci_high = mean_interval(accuracies) or (math.nan, math.nan)
    # Equal over seeds (one tokenizer per study); the mean keeps it exact if not.
    chance = float(np.mean([run.chance for run in runs]))
    return TaskArmResult(summarize(accuracies), ci_low, ci_high, chance, runs)


def accuracy_comparison(moe_arm: str, dense_arm: str, moe: TaskArmResult,
                        dense: TaskArmResult) -> AccuracyComparison:
    """moe - dense accuracy, paired by seed (positive: the MoE is better), as the loss gaps."""
    paired = paired_difference(moe.accuracy_by_seed(), dense.accuracy_by_seed())
    comparison = AccuracyComparison(
        moe_arm, dense_arm, paired.gap, paired.ci_low, paired.ci_high, paired.p_value,
        paired.p_value, "", paired.n_pairs, paired.std_diff, paired.differences, "", "")
    return adjust_comparisons([comparison])[0]


def adjust_comparisons(comparisons: list[AccuracyComparison]) -> list[AccuracyComparison]:
    """The comparisons as one family of tests: each with its Holm-adjusted p and the verdict
    at it."""
    adjusted = holm([c.p_value for c in comparisons])
    label = family_label(sum(not np.isnan(p) for p in adjusted))
    result = []
    for c, p_adjusted in zip(comparisons, adjusted):
        outcome = decide(c.difference, p_adjusted)
        result.append(replace(c, p_adjusted=p_adjusted, adjustment=label, outcome=outcome,
                              verdict=f"{outcome} (paired t, n={c.n_pairs})"))
    return result
