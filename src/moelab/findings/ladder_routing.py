"""The ladder's routing seed by seed: the worst layer's busiest-expert fraction at the first
evaluation, at its largest and at the end (``ladder_trace.json``), and what Switch balancing does
to it at the end of cpu-ablation's stored study (``studies/cpu-ablation-seeds1-4-routing.json``:
each run's final routing per layer), tested paired by seed.
"""

from __future__ import annotations

from dataclasses import dataclass

from moelab.findings.source import ResultsRoot
from moelab.report import markdown_table
from moelab.report.analysis import Analysis, Findings
from moelab.stats.t_tests import paired_difference
from moelab.stats.verdicts import Difference, Verdict, difference_verdict

TRACES = "ladder_trace.json"
STUDY_ROUTING = "studies/cpu-ablation-seeds1-4-routing.json"
BALANCED_STEP = ("naive_top1", "top1_lb")
"""The step whose end-of-run routing is tested: naive top-1 to top-1 with Switch balancing."""


@dataclass(frozen=True)
class SeedTrace:
    seed: int
    first: float
    first_step: int
    largest: float
    largest_step: int
    final: float


@dataclass(frozen=True)
class RungSeeds:
    preset: str
    rung: str
    seeds: list[SeedTrace]


@dataclass(frozen=True)
class BalancingAtEnd:
    """Naive top-1's worst-layer busiest fraction minus top-1 + balancing's, at the end."""

    n: int
    difference: float
    ci: tuple[float, float]
    p: float
    verdict: Verdict


@dataclass(frozen=True)
class LadderRouting:
    rungs: list[RungSeeds]
    balancing: BalancingAtEnd


def _rung(entry: dict, rung: str) -> RungSeeds:
    seeds = []
    for seed in entry["seeds"]:
        run = entry["runs"][f"{rung}/seed{seed}"]
        seeds.append(SeedTrace(int(seed), float(run["first"]), int(run["first_step"]),
                               float(run["max"]), int(run["max_step"]), float(run["final"])))
    return RungSeeds(entry["preset"], rung, seeds)


def _balancing(results: ResultsRoot) -> BalancingAtEnd:
    runs = results.json(STUDY_ROUTING)["runs"]

    def worst(rung: str) -> dict[int, float]:
        return {int(name.split("/seed")[1]): max(run["busiest_fraction"])
                for name, run in runs.items() if name.startswith(f"{rung}/")}
    test = paired_difference(worst(BALANCED_STEP[0]), worst(BALANCED_STEP[1]))
    ci = (test.ci_low, test.ci_high)
    return BalancingAtEnd(test.n_pairs, test.gap, ci, test.p_value, difference_verdict(
        Difference(test.gap, ci, test.p_value, "one test"),
        ahead="lower with balancing", behind="higher with balancing"))


def compute(results: ResultsRoot, findings: Findings) -> LadderRouting:
    rungs = [_rung(entry, rung) for entry in results.json(TRACES) for rung in entry["rungs"]]
    return LadderRouting(rungs, _balancing(results))


def _per_seed(values: list[float], digits: int = 2) -> str:
    return " / ".join(f"{v:.{digits}f}" for v in values)


def render(record: LadderRouting | None, results: ResultsRoot, findings: Findings) -> str:
    if record is None:
        return ""
    rows = [[f"`{r.preset}`", r.rung, _per_seed([s.first for s in r.seeds]),
             _per_seed([s.largest for s in r.seeds], 3),
             ", ".join(sorted({str(s.largest_step) for s in r.seeds}, key=int)),
             _per_seed([s.final for s in r.seeds])] for r in record.rungs]
    seeds = record.rungs[0].seeds
    first_steps = sorted({s.first_step for r in record.rungs for s in r.seeds})
    b = record.balancing
    return ("## The ladder's routing seed by seed\n\n"
            f"Worst layer's busiest-expert fraction per seed ({' / '.join(str(s.seed) for s in seeds)}"
            f"), at the first evaluation (step {', '.join(map(str, first_steps))}), at its "
            f"largest (and the steps where it was largest), and at the end (`{TRACES}`):\n\n"
            + markdown_table(["preset", "rung", "first evaluation", "largest", "at step",
                              "at the end"], rows, "llllll")
            + f"\nAt the end of cpu-ablation's stored study (`{STUDY_ROUTING}`), naive top-1's "
              "worst-layer busiest fraction minus top-1 + Switch balancing's, paired over the "
              f"{b.n} seeds: {b.difference:+.2f} [{b.ci[0]:+.2f}, {b.ci[1]:+.2f}], p "
              f"{b.p:.2g}, one test: **{b.verdict.word}**.\n")


ANALYSIS: Analysis[ResultsRoot, LadderRouting] = Analysis("ladder_routing", compute, render)
