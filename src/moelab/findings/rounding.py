"""Rounding noise beside the seed spread: each demo arm trained once more under numerics
perturbed one way at a time (``experiments/rounding_noise.py``, ``rounding_noise.json``), the
same config and seed, set beside the spread of seeds under the machine's own numerics.

Each perturbation is one run of the first seed (n = 1, chosen perturbations, not a sample of
them), so the page gives differences and their rms, and no test or verdict.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from moelab.findings.source import ResultsRoot, seed_losses
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
class RoundingNoise:
    command: str
    cpu: str
    steps: int
    first_seed: int
    perturbations: dict[str, dict[str, str]]
    """perturbation: the environment it sets."""
    arms: list[ArmNoise]


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
    return RoundingNoise(stored["command"], stored["cpu"], int(stored["steps"]), first,
                         perturbations, arms)


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
              "is an order of magnitude.\n")


def _sd_interval_span(seeds: int) -> float:
    """The upper end of a standard deviation's 95 % chi-square interval over its lower end."""
    df = seeds - 1
    return math.sqrt(stats.chi2.ppf(0.975, df) / stats.chi2.ppf(0.025, df))


ANALYSIS: Analysis[ResultsRoot, RoundingNoise] = Analysis("rounding_noise", compute, render)
