"""Rounding noise beside the seed spread: each demo arm trained once more under numerics
perturbed one way at a time (``experiments/rounding_noise.py``, ``rounding_noise.json``), the
same config and seed, set beside the spread of seeds under the machine's own numerics.

Each perturbation is one run of the first seed (n = 1, chosen perturbations, not a sample of
them), so the page gives differences and their rms, and no test or verdict. The perturbed runs
are shortened; beside them, the demo's own re-runs of its 12 seeds on the second and third CPU
(full length) against the first CPU's runs give the same ratio at the demo's length.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from moelab.findings.demo_cpus import ARMS, CPUS, SEED_SETS
from moelab.findings.source import ResultsRoot, arm_losses, seed_losses
from moelab.report import markdown_table
from moelab.report.analysis import Analysis, Findings
from moelab.stats.intervals import summarize
from scipy import stats

FILE = "rounding_noise.json"
REFERENCE = "reference"


@dataclass(frozen=True)
class ArmNoise:
    arm: str
    seeds: int
    seed_std: float
    differences: dict[str, float]
    """perturbation: its run of the first seed minus the reference run of that seed."""

    @property
    def rms(self) -> float:
        values = list(self.differences.values())
        return math.sqrt(sum(d * d for d in values) / len(values))


@dataclass(frozen=True)
class CrossCpu:
    """One arm's re-runs of the demo's 12 seeds (at its full length) on another CPU against the
    first CPU's runs of the same seeds."""

    cpu: str
    arm: str
    rms: float
    largest: float
    seed_std: float
    """The first CPU's seed sd of the arm over the 12 seeds."""


@dataclass(frozen=True)
class RoundingNoise:
    command: str
    cpu: str
    steps: int
    first_seed: int
    perturbations: dict[str, dict[str, str]]
    """perturbation: the environment it sets."""
    arms: list[ArmNoise]
    cross_cpu: list[CrossCpu]
    demo_steps: int


def compute(results: ResultsRoot, findings: Findings) -> RoundingNoise:
    stored = results.json(FILE)
    first = int(stored["seeds"][0])
    arms = []
    for arm, runs in stored["arms"].items():
        reference = seed_losses(runs[REFERENCE])
        differences = {name: seed_losses(by_seed)[first] - reference[first]
                       for name, by_seed in runs.items() if name != REFERENCE}
        arms.append(ArmNoise(arm, len(reference), summarize(list(reference.values())).std,
                             differences))
    perturbations = {name: dict(env) for name, env in stored["perturbations"].items()
                     if name != REFERENCE}
    first_cpu = next(iter(CPUS))
    losses = {cpu: _demo_losses(results, suffix) for cpu, (suffix, _) in CPUS.items()}
    cross = []
    for cpu in list(CPUS)[1:]:
        for arm in ARMS:
            here, there = losses[cpu][arm], losses[first_cpu][arm]
            diffs = [here[s] - there[s] for s in sorted(there)]
            cross.append(CrossCpu(cpu, arm, math.sqrt(sum(d * d for d in diffs) / len(diffs)),
                                  max(abs(d) for d in diffs),
                                  summarize(list(there.values())).std))
    run = results.json(f"studies/{SEED_SETS[0]}.json")["arms"]["moe"]["runs"][0]
    return RoundingNoise(stored["command"], stored["cpu"], int(stored["steps"]), first,
                         perturbations, arms, cross, int(run["steps"]))


def _demo_losses(results: ResultsRoot, suffix: str) -> dict[str, dict[int, float]]:
    """{arm: {seed: best val loss}} of one CPU's two demo studies."""
    losses: dict[str, dict[int, float]] = {arm: {} for arm in ARMS}
    for seed_set in SEED_SETS:
        arms = results.json(f"studies/{seed_set}{suffix}.json")["arms"]
        for arm in ARMS:
            losses[arm].update(arm_losses(arms, arm))
    return losses


def _difference(value: float) -> str:
    return "0 (identical)" if value == 0 else f"{value:+.5f}"


def render(record: RoundingNoise | None, results: ResultsRoot, findings: Findings) -> str:
    if record is None:
        return ""
    names = list(record.perturbations)
    seeds = min(a.seeds for a in record.arms)
    envs = "; ".join(f"`{name}`: " + ", ".join(f"`{k}={v}`" for k, v in env.items())
                     for name, env in record.perturbations.items())
    rows = [[f"`{a.arm}`", f"{a.seed_std:.4f} (n={a.seeds})",
             *(_difference(a.differences[name]) for name in names), f"{a.rms:.5f}",
             f"{a.rms / a.seed_std:.2f}"] for a in record.arms]
    return ("## Rounding noise beside the seed spread\n\n"
            f"`{record.command}` (`{FILE}`; the demo's arms shortened to {record.steps} steps, "
            f"on one {record.cpu} CPU). Each perturbation is set by environment ({envs}). Each "
            f"difference is the best validation loss of seed {record.first_seed} under the "
            "perturbation minus the same seed under the machine's own numerics (one run each: "
            "no interval, no verdict); the seed sd is over the reference runs:\n\n"
            + markdown_table(["arm", "seed sd", *(f"`{n}`" for n in names), "rms",
                              "rms / seed sd"], rows, "l" + "r" * (len(names) + 3))
            + f"\nThe 95 % interval of a seed sd from {seeds} seeds spans a factor of "
              f"{_sd_interval_span(seeds):.1f} (chi-square, normal seed noise), so the last column "
              f"is an order of magnitude. It is measured at {record.steps} steps; at the demo's "
              f"{record.demo_steps}, the page's own re-runs of the same "
              f"{len(_seeds(results))} seeds on other CPUs (the table of the three CPUs) differ from the "
              "first CPU's runs by (rms and largest difference over the seeds, against the "
              "first CPU's seed sd over them):\n\n" + _cross_table(record.cross_cpu))


def _seeds(results: ResultsRoot) -> list[int]:
    return [int(r["seed"]) for seed_set in SEED_SETS
            for r in results.json(f"studies/{seed_set}.json")["arms"]["moe"]["runs"]]


def _cross_table(rows: list[CrossCpu]) -> str:
    cells = [[f"{r.cpu} − first", f"`{r.arm}`", f"{r.rms:.4f}", f"{r.largest:.4f}",
              f"{r.seed_std:.4f}", f"{r.rms / r.seed_std:.2f}"] for r in rows]
    return markdown_table(["CPUs", "arm", "rms", "largest", "seed sd (first CPU)",
                           "rms / seed sd"], cells, "llrrrr")


def _sd_interval_span(seeds: int) -> float:
    """The upper end of a standard deviation's 95 % chi-square interval over its lower end."""
    df = seeds - 1
    return math.sqrt(stats.chi2.ppf(0.975, df) / stats.chi2.ppf(0.025, df))


ANALYSIS: Analysis[ResultsRoot, RoundingNoise] = Analysis("rounding_noise", compute, render)
