"""The zero-shot section of a study's results, from the runs' tasks.json files alone.

Runs with ``train.eval_tasks`` score the tasks on their final weights and write
``RUN/tasks.json`` (``moelab.train.evaluation.score_run_tasks``). Per task, each arm's accuracy
is summarised over seeds (mean, std and the t interval of the mean: the spread of seeds, not
of items) beside the chance level, and each dense arm is compared with the MoE by the paired
t-test on the per-seed differences moe - dense, the statistic the val-loss gaps use
(``moelab.study.stats``). A study whose runs have no tasks.json has no section.
"""

from __future__ import annotations

import numpy as np

from moelab.accounting import CRITERIA
from moelab.study.arms import MOE_ARM, dense_arm_name
from moelab.study.stats import decide, mean_interval, paired_difference, summarize
from moelab.tasks import TASK_NAMES

# Copied per run from its tasks.json entry.
RUN_TASK_FIELDS = ("accuracy", "correct", "items", "chance", "step")


def zero_shot_result(arm_names: list[str], records: list) -> dict:
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
        for criterion in CRITERIA:
            dense_arm = dense_arm_name(criterion)
            if MOE_ARM in arms and dense_arm in arms:
                comparisons[criterion] = accuracy_comparison(
                    MOE_ARM, dense_arm, arms[MOE_ARM], arms[dense_arm])
        result[task] = {"arms": arms, "comparisons": comparisons}
    return result


def task_arm_result(task: str, records: list) -> dict:
    """One arm on one task: accuracy over seeds with its t interval, and the chance level."""
    runs = [{"seed": r.seed, "run_dir": r.run_dir.as_posix(),
             **{key: r.tasks[task].get(key) for key in RUN_TASK_FIELDS}}
            for r in records]
    accuracies = [run["accuracy"] for run in runs]
    ci_low, ci_high = mean_interval(accuracies)
    return {"accuracy": summarize(accuracies).to_dict(), "ci_low": ci_low, "ci_high": ci_high,
            # Equal over seeds (one tokenizer per study); the mean keeps it exact if not.
            "chance": float(np.mean([run["chance"] for run in runs])), "runs": runs}


def accuracy_comparison(moe_arm: str, dense_arm: str, moe: dict, dense: dict) -> dict:
    """moe - dense accuracy, paired by seed (positive: the MoE is better), as the loss gaps."""
    paired = paired_difference(_accuracy_by_seed(moe), _accuracy_by_seed(dense))
    outcome = decide(paired.gap, paired.p_value)
    return {"moe_arm": moe_arm, "dense_arm": dense_arm, "difference": paired.gap,
            "ci_low": paired.ci_low, "ci_high": paired.ci_high, "p_value": paired.p_value,
            "n_pairs": paired.n_pairs, "std_diff": paired.std_diff,
            "differences": paired.differences, "outcome": outcome,
            "verdict": f"{outcome} (paired t, n={paired.n_pairs})"}


def _accuracy_by_seed(arm: dict) -> dict[int, float]:
    return {run["seed"]: run["accuracy"] for run in arm["runs"]}
