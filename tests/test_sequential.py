"""The group-sequential procedure behind ``study --until-resolved`` (moelab.stats.sequential):
its critical values against published ones and a Brownian-motion simulation, and its error
rates under optional stopping by simulation (numpy, seeded), beside naive repeated testing."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from moelab.stats.sequential import (
    RESOLVED, SMALLER, UNDETERMINED, SequentialDesign, boundaries, obrien_fleming_spending,
    round_looks, run_looks, t_boundaries,
)

# Lan-DeMets O'Brien-Fleming-type bounds, five equally spaced looks, two-sided alpha 0.05, as
# published (e.g. Jennison & Turnbull 2000, and the ldbounds / gsDesign sfLDOF tables).
PUBLISHED_OBF_5 = [4.8769, 3.3569, 2.6803, 2.2898, 2.0310]
LOOKS = [3, 5, 7, 9, 11, 12]  # the default design from the demo's... first round 3, +2, max 12
SIMULATIONS = 4000
MC_ERROR = 3 * np.sqrt(0.05 * 0.95 / SIMULATIONS)  # three Monte Carlo standard errors at 0.05


def test_boundaries_equal_the_published_ones():
    assert boundaries([0.2, 0.4, 0.6, 0.8, 1.0], 0.05) == pytest.approx(PUBLISHED_OBF_5, abs=2e-3)


def test_boundaries_spend_alpha_as_planned_on_simulated_brownian_motion():
    fractions = [n / LOOKS[-1] for n in LOOKS]
    critical = np.array(boundaries(fractions, 0.05))
    rng = np.random.default_rng(7)
    steps = np.diff([0.0, *fractions])
    score_SK = np.cumsum(rng.normal(size=(200_000, len(steps))) * np.sqrt(steps), axis=1)
    z_SK = score_SK / np.sqrt(fractions)
    crossed_SK = np.abs(z_SK) >= critical
    first_cross_by_K = np.cumsum(np.bincount(
        np.argmax(crossed_SK, axis=1)[crossed_SK.any(axis=1)], minlength=len(steps))) / 200_000
    spent = [obrien_fleming_spending(t, 0.05) for t in fractions]
    assert first_cross_by_K == pytest.approx(spent, abs=2e-3)
    assert spent[-1] == pytest.approx(0.05)


NAIVE_T = {n: stats.t.ppf(0.975, n - 1) for n in LOOKS}


def test_t_boundaries_approach_the_normal_ones_with_many_seeds():
    # at 120-200 seeds a t quantile is within ~2 % of the normal one; the first two looks spend
    # too little alpha for 200,000 simulated paths to place them well
    critical = t_boundaries([40, 80, 120, 160, 200], 0.05)
    assert critical[2:] == pytest.approx(PUBLISHED_OBF_5[2:], rel=0.03)
    assert all(t > z for t, z in zip(critical[2:], PUBLISHED_OBF_5[2:]))  # t is wider


def _naive_rejects(differences_N: np.ndarray) -> bool:
    """A fixed-sample 95 % t interval at every look, stopping at the first that excludes 0."""
    for n in LOOKS:
        d = differences_N[:n]
        half = NAIVE_T[n] * d.std(ddof=1) / np.sqrt(n)
        if abs(d.mean()) > half:
            return True
    return False


def _simulate(mean: float, sd: float, threshold: float, seed: int):
    """Per simulated study: the sequential reason and whether naive looks rejected 0."""
    design = SequentialDesign(LOOKS, 0.05, threshold)
    rng = np.random.default_rng(seed)
    reasons, naive = [], []
    for _ in range(SIMULATIONS):
        d = rng.normal(mean, sd, size=LOOKS[-1])
        reasons.append(run_looks([d[:n] for n in LOOKS], design).reason)
        naive.append(_naive_rejects(d))
    return np.array(reasons), np.array(naive)


def test_no_true_difference_keeps_the_error_rate_where_naive_looks_exceed_it():
    reasons, naive = _simulate(0.0, 0.01, threshold=1e-9, seed=1)  # no equivalence stops
    sequential_rate = float(np.mean(reasons == RESOLVED))
    naive_rate = float(np.mean(naive))
    assert sequential_rate <= 0.05 + MC_ERROR
    assert naive_rate > 0.05 + MC_ERROR  # six looks at 95 % each reject far more often
    assert naive_rate > 2 * sequential_rate


def test_a_true_difference_resolves():
    reasons, _ = _simulate(0.03, 0.01, threshold=0.01, seed=2)
    assert np.mean(reasons == RESOLVED) > 0.95


def test_no_difference_with_little_noise_is_shown_smaller_than_the_threshold():
    reasons, _ = _simulate(0.0, 0.004, threshold=0.01, seed=3)
    assert np.mean(reasons == SMALLER) > 0.9
    assert np.mean(reasons == RESOLVED) <= 0.05 + MC_ERROR


def test_a_gap_at_the_threshold_is_rarely_called_smaller():
    """Claiming |gap| < threshold when the gap is the threshold is the equivalence error."""
    reasons, _ = _simulate(0.01, 0.004, threshold=0.01, seed=4)
    assert np.mean(reasons == SMALLER) <= 0.05 + MC_ERROR


def test_a_comparison_stops_at_the_maximum_undetermined():
    design = SequentialDesign([2, 4], 0.05, 0.001)
    noisy = [[0.1, -0.1], [0.1, -0.1, 0.05, -0.05]]
    outcome = run_looks(noisy, design)
    assert outcome.reason == UNDETERMINED and outcome.stopped_at == 1
    assert run_looks(noisy[:1], design).reason is None  # still open after the first look


def test_rounds_and_bad_designs():
    assert round_looks(3, 2, 12) == [3, 5, 7, 9, 11, 12]
    assert round_looks(2, 5, 4) == [2, 4]
    with pytest.raises(ValueError):
        SequentialDesign([1, 3])
    with pytest.raises(ValueError):
        boundaries([0.5, 0.5], 0.05)
