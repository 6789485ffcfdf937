"""The stability ladder over training: how often, and when, one expert takes most of a layer's
routing slots, per rung (naive top-1, + Switch balancing, top-2 + balancing).

experiments/ladder_trace.py evaluated the routing every 10 steps at two shapes (the demo's, and
cpu-ablation's 8 experts with a 3x lr, chosen so that top-1 could collapse) and stored each
run's worst-layer busiest-expert fraction (ladder_trace.json). A run is counted as passing the
collapse flag when that fraction exceeds the flag's threshold at any evaluation.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

from moelab.findings.source import ResultsRoot
from moelab.report import markdown_table
from moelab.report.analysis import Analysis, Findings

FILE = "ladder_trace.json"


@dataclass(frozen=True)
class RungTrace:
    preset: str
    settings: str
    rung: str
    runs: int
    passing: int
    """Runs whose worst-layer busiest fraction exceeded the threshold at some evaluation."""
    first_passing_steps: list[int]
    first_eval_step: int
    max_range: tuple[float, float]
    final_range: tuple[float, float]
    threshold: float
    balanced: float


def compute(results: ResultsRoot, findings: Findings) -> list[RungTrace]:
    traces = []
    for entry in results.json(FILE):
        settings = entry["settings"]
        described = (f"{settings['num_experts']} experts, lr {settings['lr']:g}, seeds "
                     f"{entry['seeds'][0]}-{entry['seeds'][-1]}")
        for rung in entry["rungs"]:
            runs = [run for name, run in entry["runs"].items() if name.startswith(f"{rung}/")]
            passing = [run for run in runs if run["collapsed_at_steps"]]
            traces.append(RungTrace(
                entry["preset"], described, rung, len(runs), len(passing),
                sorted(run["collapsed_at_steps"][0] for run in passing),
                min(run["steps"][0] for run in runs),
                (min(r["max"] for r in runs), max(r["max"] for r in runs)),
                (min(r["final"] for r in runs), max(r["final"] for r in runs)),
                settings["collapse_threshold"], settings["balanced_fraction"]))
    return traces


def _steps(steps: list[int], first_eval: int) -> str:
    """The steps at which runs first passed; a pass at the first evaluation is only known to
    have happened by then."""
    if not steps:
        return "–"
    shown = [f"≤ {s}" if s == first_eval else str(s) for s in (steps[0], steps[-1])]
    note = " (first evaluation)" if steps[0] == first_eval else ""
    if steps[0] == steps[-1]:
        return shown[0] + note
    return f"{shown[0]}-{shown[1]} (median {statistics.median(steps):g}){note}"


def render(traces: list[RungTrace] | None, results: ResultsRoot, findings: Findings) -> str:
    if not traces:
        return ""
    rows = [[f"`{t.preset}` ({t.settings})", f"`{t.rung}`", f"{t.passing} of {t.runs}",
             _steps(t.first_passing_steps, t.first_eval_step),
             f"{t.max_range[0]:.3f}-{t.max_range[1]:.3f}",
             f"{t.final_range[0]:.3f}-{t.final_range[1]:.3f}"] for t in traces]
    threshold = traces[0].threshold
    return ("## Routing collapse over training\n\n"
            f"Worst layer's busiest-expert fraction (the share of its routing slots one expert "
            f"takes; balanced is 1/E), evaluated every 10 steps. 'Passes {threshold:g}': runs "
            f"whose fraction exceeded the collapse flag's threshold {threshold:g} at some "
            f"evaluation (`{FILE}`).\n\n"
            + markdown_table(["shape", "rung", f"passes {threshold:g}", "first step passing",
                              "max over training", "at the end"], rows, "llrrrr")
            + "\nWith top-k routing one expert holds at most 1/k of a layer's slots, so the "
              f"{threshold:g} flag cannot fire for top-2 (at most 0.5): the flag reads top-1 "
              "collapse only.\n")


ANALYSIS: Analysis[ResultsRoot, list[RungTrace]] = Analysis("ladder_trace", compute, render)


def summary(traces: list[RungTrace]) -> str:
    counts = "; ".join(f"`{t.preset}` `{t.rung}` {t.passing} of {t.runs}" for t in traces
                       if not t.rung.startswith("top2"))
    return (f"Routing: runs in which one expert took over {traces[0].threshold:g} of a layer's "
            f"slots at some evaluation: {counts} (cpu-ablation's 8 experts and 3x lr were chosen "
            f"to provoke collapse; the {traces[0].threshold:g} flag cannot fire for top-2).")
