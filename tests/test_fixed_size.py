"""S*(N; C) read off the runs: the family-resampled interval against a hand computation, the
censoring at the grid's edge, and the ordinal trend tests on synthetic tables whose answer is
known by construction."""

import json
import math
from pathlib import Path

import numpy as np
import pytest

from moelab.codec import from_json, to_json
from moelab.scaling.fixed_size import Run, fixed_size_optima, pair_sign, seed_draws
from moelab.sweep.analyses.fixed_size import FixedSizeRecord, fixed_size_record, fixed_size_section
from sweep_rows import results_table


def _runs(table: dict, size="s", budget="C1", flops=1.0, params=100.0):
    """{seed: {S: loss}} as runs of one cell."""
    return [Run(size, budget, flops, params, params * (1 - s / 2), s, seed, loss)
            for seed, losses in table.items() for s, loss in losses.items()]


def test_two_seed_interval_is_the_hand_computed_three_draws():
    # seed a: argmin 0.5; seed b: argmin 0.75; pooled means 3.0, 2.94, 2.955: argmin 0.5.
    table = {"0": {0.0: 3.0, 0.5: 2.90, 0.75: 2.95, 0.875: 3.1},
             "1": {0.0: 3.0, 0.5: 2.98, 0.75: 2.96, 0.875: 3.1}}
    result = fixed_size_optima(_runs(table))
    cell = result.cells[0]
    # Draws {0,0} p 1/4 -> 0.5; {0,1} p 1/2 -> 0.5; {1,1} p 1/4 -> 0.75 (by hand):
    # the 2.5 % quantile is 0.5, the 97.5 % quantile 0.75.
    assert (result.draws, result.exact) == (3, True)
    assert cell.s_star == 0.5 and cell.censored is None
    assert cell.interval == [0.5, 0.75]
    assert cell.seed_s_star == {"0": 0.5, "1": 0.75}
    assert cell.mean_loss == pytest.approx([3.0, 2.94, 2.955, 3.1])
    assert cell.share_at_edge is None  # 2 seeds: no shares
    assert cell.text == "0.5 [0.5, 0.75]"


def test_exact_draws_have_multinomial_probabilities():
    draws, weights, exact = seed_draws(["a", "b", "c"], replicates=10)
    assert exact and len(draws) == math.comb(5, 3) == 10
    assert weights.sum() == pytest.approx(1.0)
    by_draw = {tuple(sorted(d.items())): w for d, w in zip(draws, weights)}
    assert by_draw[(("a", 3),)] == pytest.approx(1 / 27)
    assert by_draw[(("a", 1), ("b", 1), ("c", 1))] == pytest.approx(6 / 27)
    assert by_draw[(("a", 2), ("b", 1))] == pytest.approx(3 / 27)
    sampled, weights, exact = seed_draws([str(i) for i in range(9)], replicates=50, rng_seed=3)
    assert not exact and len(sampled) == 50 and all(sum(d.values()) == 9 for d in sampled)


def test_three_seed_interval_enumerates_ten_draws():
    # seeds 0 and 1 argmin 0.5, seed 2 argmin 0.75 (by a margin that outweighs one other seed)
    table = {"0": {0.5: 2.90, 0.75: 2.92}, "1": {0.5: 2.90, 0.75: 2.92},
             "2": {0.5: 3.00, 0.75: 2.90}}
    cell = fixed_size_optima(_runs(table)).cells[0]
    # By hand, with counts m = c0 + c1 and c2 = 3 - m in a draw: mean(0.5) - mean(0.75)
    # = (-0.02 m + 0.10 c2) / 3 > 0 iff c2 > m / 5, i.e. c2 >= 1; P(c2 = 0) = (2/3)^3 = 8/27.
    assert cell.share_at_edge == pytest.approx(1 - 8 / 27)
    assert cell.censored == "above"  # pooled: (0.10 - 0.04)/3 > 0, argmin 0.75, the top
    assert cell.interval is None and cell.text == "S* ≥ 0.75, unbounded"


def test_edge_at_the_bottom_is_censored_only_above_dense():
    below = fixed_size_optima(_runs({"0": {0.5: 2.0, 0.75: 2.1, 0.875: 2.2}})).cells[0]
    dense = fixed_size_optima(_runs({"0": {0.0: 2.0, 0.75: 2.1, 0.875: 2.2}})).cells[0]
    assert below.censored == "below" and below.text == "S* ≤ 0.5, unbounded"
    assert dense.censored is None and dense.s_star == 0.0


@pytest.mark.parametrize("low, high, low_edge, high_edge, sign", [
    (0.5, 0.75, None, None, 1), (0.75, 0.5, None, None, -1), (0.75, 0.75, None, None, 0),
    (0.875, 0.875, "above", "above", 0),   # both censored at the top: order unknown
    (0.5, 0.875, None, "above", 1),        # >= 0.875 is above 0.5 whatever its value
    (0.875, 0.5, "above", None, -1),
])
def test_pair_sign_orders_censored_values_only_when_known(low, high, low_edge, high_edge, sign):
    assert pair_sign(low, high, low_edge, high_edge) == sign


SPARSITIES = (0.0, 0.5, 0.75, 0.875, 0.9375)


def _synthetic(true_star: dict, seeds: int, noise: float, budget_shift: dict | None = None,
               rng_seed: int = 0) -> list[Run]:
    """A parabola in u = -log2(1 - S) per (size, budget) with its minimum at true_star's S,
    curvature 0.02 nats per u^2, plus seeded Gaussian seed noise."""
    rng = np.random.default_rng(rng_seed)
    runs = []
    budgets = budget_shift or {"C1": 0.0}
    for b_index, (budget, shift) in enumerate(budgets.items()):
        for n_index, (size, star) in enumerate(true_star.items()):
            u_star = -math.log2(1 - star) + shift
            for seed in range(seeds):
                for s in SPARSITIES:
                    u = -math.log2(1 - s)
                    loss = 3.0 - 0.1 * n_index - 0.2 * b_index + 0.02 * (u - u_star) ** 2
                    runs.append(Run(size, budget, 1e12 * 3 ** b_index, 1e5 * 2 ** n_index,
                                    1e5 * 2 ** n_index, s, str(seed),
                                    loss + noise * rng.standard_normal()))
    return runs


def test_a_rising_s_star_is_found_and_a_falling_one_reported_against_the_claim():
    rising = fixed_size_optima(_synthetic({"a": 0.5, "b": 0.75, "c": 0.875}, 3, 0.001))
    assert [c.s_star for c in rising.cells] == [0.5, 0.75, 0.875]
    assert rising.rises_with_size.verdict == "rises"
    assert rising.rises_with_size.agrees_with_claim is True
    assert rising.rises_with_size.statistic == 3 and rising.rises_with_size.pairs == 3
    falling = fixed_size_optima(_synthetic({"a": 0.875, "b": 0.75, "c": 0.5}, 3, 0.001))
    assert falling.rises_with_size.verdict == "falls"
    assert falling.rises_with_size.agrees_with_claim is False


def test_noise_larger_than_the_curvature_leaves_the_trend_undetermined():
    noisy = fixed_size_optima(_synthetic({"a": 0.5, "b": 0.75, "c": 0.875}, 3, 0.2, rng_seed=1))
    assert noisy.rises_with_size.verdict == "undetermined"
    assert noisy.rises_with_size.agrees_with_claim is None


def test_every_s_star_at_the_edge_is_undetermined_not_a_trend():
    # The true S* lies above the grid for every size: all censored at the top.
    edge = fixed_size_optima(_synthetic({"a": 0.99, "b": 0.995, "c": 0.999}, 3, 0.0005))
    assert all(c.censored == "above" for c in edge.cells)
    trend = edge.rises_with_size
    assert trend.statistic == 0 and trend.undetermined_pairs == 3
    assert trend.verdict == "undetermined"


def test_s_star_falling_with_budget_at_fixed_size():
    # u* shifts down by one grid step per budget: S* 0.875 -> 0.75 -> 0.5 for every size.
    runs = _synthetic({"a": 0.875, "b": 0.875}, 3, 0.001,
                      budget_shift={"C1": 0.0, "C2": -1.0, "C3": -2.0})
    result = fixed_size_optima(runs)
    assert {(c.size, c.budget): c.s_star for c in result.cells}[("a", "C3")] == 0.5
    assert result.falls_with_budget.verdict == "falls"
    assert result.falls_with_budget.agrees_with_claim is True
    assert result.falls_with_budget.per_group == {"a": -3, "b": -3}


def _rows(runs: list[Run], mode: str) -> list[dict]:
    grows = 4 if mode == "fixed_expert" else 0  # N grows with S only when experts keep d_ff
    return [{"size": r.size, "budget": r.budget, "C": str(r.flops), "C_budget": str(r.flops),
             "N_total": str(r.params * (1 + grows * r.sparsity)),
             "N_active": str(r.active), "S": str(r.sparsity), "seed": r.seed, "k": "1",
             "best_val_loss": str(r.loss), "final_val_loss": str(r.loss + 0.05 * r.sparsity),
             "run": f"{r.budget}/{r.size}/S{r.sparsity}/seed{r.seed}"}
            for r in runs]


@pytest.mark.parametrize("mode, fixed, title", [
    ("fixed_total", "N", "## S* at fixed total parameters"),
    ("fixed_expert", "N_active", "## S* at fixed active parameters (N grows with S)"),
])
def test_the_sweep_record_and_section_name_what_is_held_fixed(tmp_path, mode, fixed, title):
    runs = _synthetic({"a": 0.5, "b": 0.75, "c": 0.875}, 3, 0.001)
    record = fixed_size_record(results_table(_rows(runs, mode)).rows, mode)
    assert record.holds_fixed == fixed and record.mode == mode
    assert record.rises_with_size.claim == f"S* rises with {fixed} at fixed C"
    text = fixed_size_section(record, tmp_path / "figures" / "fixed_size.png")
    assert text.startswith(title)
    assert (tmp_path / "figures" / "fixed_size.png").stat().st_size > 0


def test_one_seed_gives_its_argmins_without_intervals_or_verdicts():
    result = fixed_size_optima(_synthetic({"a": 0.5, "b": 0.75, "c": 0.875}, 1, 0.0))
    assert [c.s_star for c in result.cells] == [0.5, 0.75, 0.875]
    assert all(c.interval is None for c in result.cells)
    assert result.cells[0].text == "0.5"
    assert result.rises_with_size.statistic == 3 and result.rises_with_size.interval is None
    assert result.rises_with_size.verdict == "undetermined"


def test_token_budgets_are_labelled_fixed_d_not_fixed_compute(tmp_path):
    runs = _synthetic({"a": 0.5, "b": 0.75}, 2, 0.001)
    rows = [dict(row, C_budget="") for row in _rows(runs, "fixed_total")]
    record = fixed_size_record(results_table(rows).rows, "fixed_total")
    assert record.budget_kind == "D"
    assert record.rises_with_size.claim == "S* rises with N at fixed D"
    assert "not fixed compute" in record.question


STORED = sorted((Path(__file__).resolve().parents[1] / "experiments" / "results" / "sweeps")
                .glob("*/fixed_size.json"))


@pytest.mark.parametrize("path", STORED, ids=[p.parent.name for p in STORED])
def test_a_stored_fixed_size_json_reads_back_as_written_key_for_key(path):
    """Files an earlier moelab wrote (its hand-written dict, each cell's text added) read into
    the typed record and write back with the same keys, order and values."""
    stored = path.read_text()
    record = from_json(FixedSizeRecord, json.loads(stored))
    assert record.cells and isinstance(record.cells[0].seed_s_star, dict)
    assert json.dumps(to_json(record), indent=2) == json.dumps(json.loads(stored), indent=2)


def test_the_record_and_its_figure_read_the_best_loss_the_other_tables_read(tmp_path):
    """Final losses rising with S (0.05 per unit of S) would put every S* at the densest
    sparsity; the best losses place it where _synthetic puts it, and the axis says so."""
    import matplotlib.pyplot as plt

    runs = _synthetic({"a": 0.5, "b": 0.75, "c": 0.875}, 2, 0.0)
    record = fixed_size_record(results_table(_rows(runs, "fixed_total")).rows, "fixed_total")
    assert record.loss_column == "best_val_loss"
    assert [cell.s_star for cell in record.cells] == [0.5, 0.75, 0.875]
    labels = []
    original = plt.Axes.set_ylabel
    plt.Axes.set_ylabel = lambda self, text, *a, **k: labels.append(text) or original(self, text, *a, **k)
    try:
        fixed_size_section(record, tmp_path / "figures" / "fixed_size.png")
    finally:
        plt.Axes.set_ylabel = original
    assert labels == ["best validation loss (nats/token)"]
