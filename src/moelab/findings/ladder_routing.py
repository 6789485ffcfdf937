"""The ladder's routing seed by seed: the worst layer's busiest-expert fraction at the first
evaluation, at its largest and at the end (``ladder_trace.json``), and what Switch balancing does
to it at the end of cpu-ablation's runs, tested paired by seed.

The balancing test was added after the loss steps of cpu-ablation's ladder (``ladder_loss``), so
it joins their family as post hoc, and the steps are read again at the enlarged family
(``ablation_family``, which ``ladder_loss`` uses too). It is made twice, both in the family,
because two sets of runs of the same seeds hold the end-of-run routing: the stored study
(``studies/cpu-ablation-seeds1-4-routing.json``, each run's final routing per layer) and the
traced runs of the table (``ladder_trace.json``); their end values differ seed by seed.
"""

from __future__ import annotations

from dataclasses import dataclass

from moelab.findings.source import ResultsRoot, arm_losses
from moelab.report import markdown_table
from moelab.report.analysis import Analysis, Findings
from moelab.stats.t_tests import PairedTest, paired_difference
from moelab.stats.verdicts import Difference, Family, Verdict, difference_verdict
from moelab.study.rungs import rung_steps

TRACES = "ladder_trace.json"
STUDY_ROUTING = "studies/cpu-ablation-seeds1-4-routing.json"
STUDY_LOSSES = "studies/cpu-ablation-seeds1-4.json"
"""The study whose loss steps (``ladder_loss``) form the family the balancing test joins."""
BALANCED_PRESET = "cpu-ablation"
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

    runs: str
    """Which runs of the seeds were read: the file."""
    ends: dict[str, dict[int, float]]
    """rung: {seed: worst-layer busiest fraction at the end}."""
    n: int
    difference: float
    ci: tuple[float, float]
    p: float
    p_holm: float
    family: str
    verdict: Verdict


@dataclass(frozen=True)
class LadderRouting:
    rungs: list[RungSeeds]
    balancing: list[BalancingAtEnd]


def _rung(entry: dict, rung: str) -> RungSeeds:
    seeds = []
    for seed in entry["seeds"]:
        run = entry["runs"][f"{rung}/seed{seed}"]
        seeds.append(SeedTrace(int(seed), float(run["first"]), int(run["first_step"]),
                               float(run["max"]), int(run["max_step"]), float(run["final"])))
    return RungSeeds(entry["preset"], rung, seeds)


def _stored_ends(results: ResultsRoot) -> dict[str, dict[int, float]]:
    runs = results.json(STUDY_ROUTING)["runs"]
    return {rung: {int(name.split("/seed")[1]): max(run["busiest_fraction"])
                   for name, run in runs.items() if name.startswith(f"{rung}/")}
            for rung in BALANCED_STEP}


def _traced_ends(results: ResultsRoot) -> dict[str, dict[int, float]]:
    entry = next(e for e in results.json(TRACES) if e["preset"] == BALANCED_PRESET)
    return {rung: {int(s): float(entry["runs"][f"{rung}/seed{s}"]["final"]) for s in entry["seeds"]}
            for rung in BALANCED_STEP}


def _end_tests(results: ResultsRoot) -> dict[str, tuple[dict[str, dict[int, float]], PairedTest]]:
    """{runs read: (end values per rung and seed, the paired test)} for both sets of runs."""
    tests = {}
    for runs, ends in ((f"the stored study (`{STUDY_ROUTING}`)", _stored_ends(results)),
                       (f"the traced runs of the table above (`{TRACES}`)",
                        _traced_ends(results))):
        tests[runs] = (ends, paired_difference(ends[BALANCED_STEP[0]], ends[BALANCED_STEP[1]]))
    return tests


def ablation_family(results: ResultsRoot) -> Family:
    """cpu-ablation's loss steps (``earlier → later``) and the two post hoc balancing tests
    (keyed by the runs they read), one Holm family."""
    arms = results.json(STUDY_LOSSES)["arms"]
    steps = rung_steps({rung: arm_losses(arms, rung) for rung in arms})
    tests = _end_tests(results)
    return Family(f"cpu-ablation's ladder ({len(steps)} loss steps and the {len(tests)} "
                  "balancing tests, post hoc)",
                  {**{f"{s.earlier} → {s.later}": s.p_value for s in steps},
                   **{runs: test.p_value for runs, (_, test) in tests.items()}})


def _balancing(results: ResultsRoot) -> list[BalancingAtEnd]:
    family = ablation_family(results)
    adjusted = family.adjusted()
    tests = []
    for runs, (ends, test) in _end_tests(results).items():
        ci = (test.ci_low, test.ci_high)
        tests.append(BalancingAtEnd(
            runs, ends, test.n_pairs, test.gap, ci, test.p_value, adjusted[runs], family.label,
            difference_verdict(Difference(test.gap, ci, adjusted[runs], family.label),
                               ahead="lower with balancing", behind="higher with balancing")))
    return tests


def compute(results: ResultsRoot, findings: Findings) -> LadderRouting:
    rungs = [_rung(entry, rung) for entry in results.json(TRACES) for rung in entry["rungs"]]
    return LadderRouting(rungs, _balancing(results))


def _per_seed(values: list[float], digits: int = 3) -> str:
    return " / ".join(f"{v:.{digits}f}" for v in values)


def render(record: LadderRouting | None, results: ResultsRoot, findings: Findings) -> str:
    if record is None:
        return ""
    rows = [[f"`{r.preset}`", r.rung, _per_seed([s.first for s in r.seeds]),
             _per_seed([s.largest for s in r.seeds]),
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
            + "\nAt the end of cpu-ablation's runs, naive top-1's worst-layer busiest fraction "
              "minus top-1 + Switch balancing's, paired by seed. Two runs of the same seeds "
              "hold it, and they end apart:\n\n" + _ends_table(b)
            + "\nThe test on each (added after the ladder's loss steps, so it joins their "
              "family):\n\n" + "".join(
                f"- {t.runs}: {t.difference:+.2f} [{t.ci[0]:+.2f}, {t.ci[1]:+.2f}], p {t.p:.2g}, "
                f"{t.family}: p {t.p_holm:.2g}, **{t.verdict.word}**.\n" for t in b)
            + ("\nThe word depends on which run of the same seeds is read.\n"
               if len({t.verdict.word for t in b}) > 1 else ""))


def _ends_table(tests: list[BalancingAtEnd]) -> str:
    seeds = sorted(tests[0].ends[BALANCED_STEP[0]])
    rows = [[rung, t.runs.split(" (")[0], *(f"{t.ends[rung][s]:.3f}" for s in seeds)]
            for rung in BALANCED_STEP for t in tests]
    return markdown_table(["rung", "runs", *(f"seed {s}" for s in seeds)], rows,
                          "ll" + "r" * len(seeds))


ANALYSIS: Analysis[ResultsRoot, LadderRouting] = Analysis("ladder_routing", compute, render)
