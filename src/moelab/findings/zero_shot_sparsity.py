"""Downstream against sparsity on the IsoFLOP sweep: at equal pretraining loss, does sparsity
move moelab's zero-shot accuracy?

Paper B asks this with in-context few-shot tasks of the LLM-Foundry suite (§4, App. D.3);
cpu-isoflop scores moelab's own three zero-shot tasks after every run
(``moelab.sweep.analyses.zero_shot``, stored in its zero_shot.json): accuracy = a + b·loss +
c·S by least squares over the runs. The word for c comes from ``moelab.stats.verdicts``'s
trend rule (a slope with its 95 % interval).
"""

from __future__ import annotations

from dataclasses import dataclass

from moelab.findings.source import ResultsRoot
from moelab.report import markdown_table
from moelab.report.analysis import Analysis, Findings
from moelab.stats.verdicts import Verdict, trend_verdict

SWEEP = "sweeps/cpu-isoflop"


@dataclass(frozen=True)
class TaskSlope:
    task: str
    items: int
    runs: int
    per_nat: float
    per_nat_ci: tuple[float, float]
    per_unit_s: float
    per_unit_s_ci: tuple[float, float]
    wilson_half_width: float
    verdict: Verdict


@dataclass(frozen=True)
class ZeroShot:
    tasks: list[TaskSlope]


def compute(results: ResultsRoot, findings: Findings) -> ZeroShot:
    stored = results.json(f"{SWEEP}/zero_shot.json")
    tasks = []
    for task, record in stored.items():
        fit = record["equal_loss"]
        c, b = fit["sparsity"], fit["loss"]
        ci = (float(c["ci"][0]), float(c["ci"][1]))
        tasks.append(TaskSlope(task, int(record["items"]), int(record["runs"]),
                               float(b["value"]), (float(b["ci"][0]), float(b["ci"][1])),
                               float(c["value"]), ci, float(record["median_wilson_half_width"]),
                               trend_verdict(float(c["value"]), ci)))
    return ZeroShot(tasks)


def render(record: ZeroShot | None, results: ResultsRoot, findings: Findings) -> str:
    if record is None:
        return ""
    rows = [[t.task, str(t.items), f"{t.per_nat:+.3f} [{t.per_nat_ci[0]:+.3f}, "
             f"{t.per_nat_ci[1]:+.3f}]", f"{t.per_unit_s:+.3f} [{t.per_unit_s_ci[0]:+.3f}, "
             f"{t.per_unit_s_ci[1]:+.3f}]", f"**{t.verdict.word}**", f"±{t.wilson_half_width:.3f}"]
            for t in record.tasks]
    runs = record.tasks[0].runs if record.tasks else 0
    return ("## Zero-shot accuracy against S at equal loss (cpu-isoflop)\n\n"
            f"Accuracy = a + b·loss + c·S over the {runs} runs (`{SWEEP}/zero_shot.json`), "
            "95 % intervals:\n\n"
            + markdown_table(["task", "items", "b per nat of loss", "c per unit S",
                              "c: verdict", "median Wilson half-width of one run"], rows,
                             "lrrrlr")
            + "\nThe least squares pools the runs as independent, though a wsd family's "
              "budgets share their trunk and a seed's sizes share its data order, so these "
              "intervals are not exact in either direction: the word is read as undetermined "
              "only because every interval spans 0 with room to spare, not from their width. "
              "These are moelab's own tasks, not paper B's few-shot suite.\n")


ANALYSIS: Analysis[ResultsRoot, ZeroShot] = Analysis("zero_shot", compute, render)
