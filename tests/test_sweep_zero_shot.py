"""Downstream accuracy against sparsity on synthetic tables: an effect of S at equal loss is
recovered inside its interval, a task at chance is said to separate nothing, and the
equal-FLOPs table takes each budget's lowest-loss size."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.stats

from moelab.sweep.analyses.zero_shot import zero_shot_analysis
from sweep_rows import results_table

ITEMS = 300


def synthetic_rows(per_nat: float, per_sparsity: float, seed: int = 0) -> list[dict]:
    """2 budgets x 3 sizes x 4 sparsities x 3 seeds; accuracy drawn as binomial counts of
    300 items around 0.5 - per_nat (loss - 3) + per_sparsity S."""
    rng = np.random.default_rng(seed)
    rows = []
    for budget in (1e12, 3e12):
        for size, size_loss in (("a", 3.3), ("b", 3.0), ("c", 3.2)):
            for sparsity in (0.0, 0.5, 0.75, 0.875):
                for run_seed in range(3):
                    loss = size_loss - 0.1 * np.log10(budget / 1e12) - 0.05 * sparsity \
                        + rng.normal(0, 0.02)
                    p = 0.5 - per_nat * (loss - 3.0) + per_sparsity * sparsity
                    rows.append({"size": size, "C_budget": f"{budget:g}", "S": str(sparsity),
                                 "seed": str(run_seed), "best_val_loss": str(loss),
                                 "zero_shot_last_word": str(rng.binomial(ITEMS, p) / ITEMS)})
    return rows


HEADER = ["size", "C_budget", "S", "seed", "best_val_loss", "zero_shot_last_word"]


def test_an_effect_of_sparsity_at_equal_loss_is_recovered_within_its_interval():
    rows = synthetic_rows(per_nat=0.5, per_sparsity=0.08)
    result = zero_shot_analysis(results_table(rows, HEADER),
                                items={"last_word": ITEMS})["last_word"]
    fit = result.equal_loss
    assert fit.sparsity.ci[0] <= 0.08 <= fit.sparsity.ci[1]
    assert fit.sparsity.ci[0] > 0 and fit.loss.ci[1] < 0
    assert result.separates


def test_a_task_at_chance_is_said_to_separate_nothing():
    rows = synthetic_rows(per_nat=0.0, per_sparsity=0.0, seed=2)
    result = zero_shot_analysis(results_table(rows, HEADER),
                                items={"last_word": ITEMS})["last_word"]
    assert not result.separates
    for coefficient in (result.equal_loss.loss, result.equal_loss.sparsity):
        low, high = coefficient.ci
        assert low <= 0 <= high


def test_equal_flops_takes_each_budgets_lowest_loss_size_and_its_seeds_interval():
    rows = synthetic_rows(per_nat=0.5, per_sparsity=0.08)
    table = zero_shot_analysis(results_table(rows, HEADER),
                               items={"last_word": ITEMS})["last_word"].equal_flops
    assert len(table) == 2 * 4 and {r.size for r in table} == {"b"}  # b has the lowest loss
    first = table[0]
    values = np.array([float(r["zero_shot_last_word"]) for r in rows
                       if r["C_budget"] == "1e+12" and r["S"] == "0.0" and r["size"] == "b"])
    half = scipy.stats.t.ppf(0.975, 2) * values.std(ddof=1) / np.sqrt(3)
    assert first.accuracy == pytest.approx(values.mean())
    assert first.ci == pytest.approx([values.mean() - half, values.mean() + half])
    assert first.minus_dense is None  # the dense row itself
    assert table[1].minus_dense == pytest.approx(table[1].accuracy - first.accuracy)


def test_no_columns_mean_no_analysis():
    assert zero_shot_analysis(results_table(synthetic_rows(0.5, 0.0), HEADER[:-1])) is None


def test_the_stored_zero_shot_json_reads_back_as_written_key_for_key():
    """The file an earlier moelab wrote as a hand-built dict (minus_dense only on sparse rows
    of a budget with a dense one) reads into typed records and writes back unchanged."""
    import json
    from pathlib import Path

    from moelab.codec import from_json, to_json
    from moelab.sweep.analyses.zero_shot import TaskAccuracy

    path = (Path(__file__).resolve().parents[1] / "experiments" / "results" / "sweeps"
            / "cpu-isoflop" / "zero_shot.json")
    stored = json.loads(path.read_text())
    record = from_json(dict[str, TaskAccuracy], stored)
    assert record["last_word"].equal_flops[1].minus_dense is not None
    assert json.dumps(to_json(record), indent=2) == json.dumps(stored, indent=2)
