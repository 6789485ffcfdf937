"""The error rates of ``study --until-resolved``'s sequential procedure, by simulation.

    .venv/bin/python experiments/sequential_rates.py [--studies 4000]

Per case, seeded studies of paired differences drawn from a normal law, looked at with 3, 5, 7,
9, 11 and 12 seeds (the default design: first round 3, 2 more a round, at most 12), alpha 0.05,
threshold 0.01: how often the procedure (moelab.stats.sequential) stops resolved or smaller
than the threshold, beside a fixed-sample 95 % t interval read at every look (naive). Also the
rejection rate of the normal-theory critical values turned into t quantiles at their nominal
levels, which moelab does not use. docs/explanation/statistics.md, "Seeds until resolved",
quotes these numbers; the tests (tests/test_sequential.py) hold the same cases to their bounds.
"""

from __future__ import annotations

import argparse

import numpy as np
from scipy import stats

from moelab.stats.sequential import RESOLVED, SMALLER, SequentialDesign, boundaries, run_looks

LOOKS = [3, 5, 7, 9, 11, 12]
CASES = {  # name: (true mean gap, sd of a paired difference, threshold, seed)
    "no difference": (0.0, 0.01, 1e-9, 1),
    "gap of 3 sd": (0.03, 0.01, 0.01, 2),
    "no difference, little noise": (0.0, 0.004, 0.01, 3),
    "gap at the threshold": (0.01, 0.004, 0.01, 4),
}


def naive_rejects(d: np.ndarray) -> bool:
    return any(abs(d[:n].mean()) > stats.t.ppf(0.975, n - 1) * d[:n].std(ddof=1) / np.sqrt(n)
               for n in LOOKS)


def converted_rate(studies: int, seed: int = 0) -> float:
    """Normal-theory bounds turned into t quantiles at the same nominal level."""
    z = boundaries([n / LOOKS[-1] for n in LOOKS], 0.05)
    return rejection_rate([stats.t.isf(stats.norm.sf(c), n - 1) for c, n in zip(z, LOOKS)],
                          studies, seed)


def rejection_rate(critical: list[float], studies: int, seed: int) -> float:
    """How often an interval mean +- c_k sd / sqrt(n_k) excludes 0 at some look, no true gap."""
    x = np.random.default_rng(seed).normal(size=(studies, LOOKS[-1]))
    rejected = np.zeros(studies, dtype=bool)
    for c, n in zip(critical, LOOKS):
        rejected |= np.abs(x[:, :n].mean(1)) > c * x[:, :n].std(1, ddof=1) / np.sqrt(n)
    return float(rejected.mean())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--studies", type=int, default=4000)
    args = parser.parse_args()
    for name, (mean, sd, threshold, seed) in CASES.items():
        design = SequentialDesign(LOOKS, 0.05, threshold)
        rng = np.random.default_rng(seed)
        reasons, naive = [], []
        for _ in range(args.studies):
            d = rng.normal(mean, sd, size=LOOKS[-1])
            reasons.append(run_looks([d[:n] for n in LOOKS], design).reason)
            naive.append(naive_rejects(d))
        reasons = np.array(reasons)
        print(f"{name:28s} resolved {np.mean(reasons == RESOLVED):.4f}  smaller "
              f"{np.mean(reasons == SMALLER):.4f}  naive rejects {np.mean(naive):.4f}")
    design = SequentialDesign(LOOKS, 0.05, 0.01)
    print(f"no difference, 200,000 studies: the procedure rejects "
          f"{rejection_rate(design.critical, 200_000, 1):.4f}, converted normal bounds "
          f"{converted_rate(200_000):.4f}")


if __name__ == "__main__":
    main()
