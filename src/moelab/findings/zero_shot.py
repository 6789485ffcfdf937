"""Zero-shot tasks in a study: does the MoE's lower loss on the demo show in moelab's three
tasks?

``moelab study demo --criteria active --set 'train.eval_tasks=[last_word, ending, agreement]'``
scored every run's final weights on the three tasks (seeds 0-5, the demo's moe and dense_active
arms; experiments/results/studies/demo-tasks-active.json). Accuracies are recomputed from each
run's correct/items counts; the MoE − dense accuracy difference is paired by seed with the test
the study's gaps use (``moelab.stats.t_tests``), Holm over the 3 tasks. Whether a run is above
chance is read from its Wilson interval over the task's items.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from moelab.findings.source import ResultsRoot
from moelab.report import markdown_table
from moelab.report.analysis import Analysis, Findings
from moelab.stats.intervals import summarize, wilson_interval
from moelab.stats.multiple import holm
from moelab.stats.t_tests import paired_difference
from moelab.stats.verdicts import Difference, Verdict, difference_verdict

FILE = "studies/demo-tasks-active.json"
MOE, DENSE = "moe", "dense_active"


@dataclass(frozen=True)
class TaskRow:
    task: str
    chance: float
    items: int
    accuracy: dict[str, tuple[float, float]]
    """{arm: (mean, seed sd)} of the accuracy."""
    runs_containing_chance: int
    runs: int
    difference: float
    ci: tuple[float, float]
    p: float
    p_holm: float
    verdict: Verdict


def _accuracies(task: dict, arm: str) -> dict[int, float]:
    return {int(run["seed"]): run["correct"] / run["items"] for run in task["arms"][arm]["runs"]}


def compute(results: ResultsRoot, findings: Findings) -> list[TaskRow]:
    tasks = results.json(FILE)["zero_shot"]
    tests = {name: paired_difference(_accuracies(task, MOE), _accuracies(task, DENSE))
             for name, task in tasks.items()}
    adjusted = dict(zip(tests, holm([t.p_value for t in tests.values()])))
    family = f"Holm over the {len(tests)} tasks"
    rows = []
    for name, task in tasks.items():
        test, runs = tests[name], [r for arm in (MOE, DENSE) for r in task["arms"][arm]["runs"]]
        chance = float(runs[0]["chance"])
        containing = sum(wilson_interval(r["correct"], r["items"]).low <= chance
                         for r in runs)
        ci = (test.ci_low, test.ci_high)
        rows.append(TaskRow(
            name, chance, int(runs[0]["items"]),
            {arm: (summarize(list(_accuracies(task, arm).values())).mean,
                   summarize(list(_accuracies(task, arm).values())).std) for arm in (MOE, DENSE)},
            containing, len(runs), test.gap, ci, test.p_value, adjusted[name],
            difference_verdict(Difference(test.gap, None if math.isnan(ci[0]) else ci,
                                          adjusted[name], family),
                               ahead="MoE ahead", behind="dense ahead")))
    return rows


def render(rows: list[TaskRow] | None, results: ResultsRoot, findings: Findings) -> str:
    if not rows:
        return ""
    table = [[f"`{r.task}`", f"{r.chance:.2g}", str(r.items),
              *(f"{r.accuracy[arm][0]:.4f} ± {r.accuracy[arm][1]:.4f}" for arm in (MOE, DENSE)),
              f"{r.difference:+.4f} [{r.ci[0]:+.4f}, {r.ci[1]:+.4f}]", f"{r.p:.2g}",
              f"{r.p_holm:.2g}", f"**{r.verdict.word}**",
              f"{r.runs_containing_chance} of {r.runs}"] for r in rows]
    return ("## Accuracy of the MoE against dense_active\n\n"
            f"Seeds 0-5 (`{FILE}`), final weights. Accuracy mean ± seed sd; MoE − dense "
            "accuracy paired by seed (positive: the MoE is more accurate), p adjusted by Holm "
            "over the 3 tasks, the verdict by rule (docs/verdicts.md). The interval is the "
            "spread of seeds on the same items, not how well the items pin an accuracy down; "
            "the last column counts the runs whose Wilson interval over the items reaches "
            "chance.\n\n"
            + markdown_table(["task", "chance", "items", MOE, DENSE, "MoE − dense (95 % CI)",
                              "p", "p (Holm)", "verdict", "runs not shown above chance"], table,
                             "lrrrrrrrlr"))


ANALYSIS: Analysis[ResultsRoot, list[TaskRow]] = Analysis("zero_shot_tasks", compute, render)

