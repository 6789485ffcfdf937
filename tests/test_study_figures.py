"""Figure axes that read: token counts as 100K / 1M / 2.5M, few enough ticks not to collide;
the per-seed differences figure draws one point per seed."""

from __future__ import annotations

from pathlib import Path

import pytest

from moelab.report import format_tick_count, format_token_axis, new_figure
from moelab.study.analyses import comparisons, routing
from moelab.study.folder import CompleteRun
from moelab.stats.t_tests import PairedTest, WelchTest
from moelab.study.gaps import Gap


@pytest.mark.parametrize("value, label", [
    (0, "0"), (500, "500"), (100_000, "100K"), (250_000, "250K"), (1_000_000, "1M"),
    (2_500_000, "2.5M"), (1_250_000, "1.25M"), (40_500_000, "40.5M"), (2e9, "2B"),
])
def test_tick_labels(value, label):
    assert format_tick_count(value) == label


def _tick_labels(fig, ax) -> list[str]:
    fig.canvas.draw()
    low, high = ax.get_xlim()
    return [tick.get_text() for tick, x in zip(ax.get_xticklabels(), ax.get_xticks())
            if low <= x <= high]


def test_a_token_axis_has_short_labels_and_few_ticks():
    fig, ax = new_figure(width_in=4.5)
    ax.plot([0, 2_600_000], [1, 2])
    format_token_axis(ax.xaxis, max_ticks=4)
    # matplotlib's own: 0.0, 0.5, ... 2.5 and a "1e6" offset, eight ticks
    assert _tick_labels(fig, ax) == ["0", "1M", "2M"]


def _record(seed: int, tokens_per_eval: int) -> CompleteRun:
    routing = [{"busiest_fraction": 0.4, "routing_entropy": 0.9, "mean_log_z": 1.0}]
    evals = [{"step": step, "tokens": step * tokens_per_eval, "val_loss": 3.0 - 0.1 * step,
              "routing": routing} for step in range(1, 41)]
    return CompleteRun("moe", seed, None, Path(f"runs/moe/seed{seed}"), {}, evals)


def test_the_routing_figure_labels_tokens_in_k_and_m(tmp_path, monkeypatch):
    drawn = []
    monkeypatch.setattr(routing, "save_figure", lambda fig, path: drawn.append(fig) or Path(path))
    records = {"moe": [_record(0, 65_536), _record(1, 65_536)]}  # up to 2.62M tokens
    assert routing.routing_figure(records, tmp_path / "routing.png")
    fig = drawn[0]
    for ax in fig.axes:
        labels = _tick_labels(fig, ax)
        assert 2 <= len(labels) <= 5, labels
        assert all(label == "0" or label[-1] in "KM" for label in labels), labels
        assert "2M" in labels or "2.5M" in labels


def _gap(test: str, outcome: str, differences: list[dict]) -> Gap:
    """A gap of 0.02 [0.01, 0.03] decided by ``test``, with these per-seed differences."""
    paired = PairedTest(0.02, 0.01, 0.03, 0.01, len(differences), 0.01, differences)
    welch = WelchTest(0.02, 0.01, 0.03, 0.01, 4.0, 3, 3)
    return Gap("active", "moe", "dense_active", test, 0.02, 0.01, 0.03, 0.01, 0.01,
               "Holm, 1 test", 3, 3, outcome,
               outcome, 0.01, [], paired, welch)


def test_the_paired_differences_figure_draws_one_point_per_seed(tmp_path, monkeypatch):
    drawn = []
    monkeypatch.setattr(comparisons, "save_figure",
                        lambda fig, path: drawn.append(fig) or Path(path))
    differences = [{"seed": 10, "diff": 0.01}, {"seed": 11, "diff": 0.02},
                   {"seed": 12, "diff": 0.03}]
    gaps = {"active": _gap("paired", "MoE better", differences),
            "total": _gap("welch", "not significant", [])}
    assert comparisons.paired_differences_figure(gaps, tmp_path / "d.png")
    ax = drawn[0].axes[0]
    points = ax.collections[0].get_offsets()
    assert [round(float(y), 6) for y in points[:, 1]] == [0.01, 0.02, 0.03]
    assert [text.get_text() for text in ax.texts] == ["10", "11", "12"]
    # "total" has no pairs, so no column
    assert [tick.get_text() for tick in ax.get_xticklabels()] == ["matched active"]


def test_the_layer_load_figure_of_runs_with_one_eval_draws_without_a_warning(tmp_path,
                                                                             monkeypatch):
    """A tiny budget (study --budgets 2K: one step, one eval) gives one column: it is drawn
    around its eval's tokens, where matplotlib would warn of identical x limits."""
    import warnings

    drawn = []
    monkeypatch.setattr(routing, "save_figure", lambda fig, path: drawn.append(fig) or Path(path))
    loads = [{"busiest_fraction": 0.6}, {"busiest_fraction": 0.3}]
    one_eval = [CompleteRun("moe", seed, None, Path(f"runs/moe/seed{seed}"), {},
                          [{"step": 1, "tokens": 2048, "val_loss": 6.9, "routing": loads}])
                for seed in (0, 1)]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert routing.layer_load_over_training_figure({"moe": one_eval}, tmp_path / "l.png")
        drawn[0].canvas.draw()
    low, high = drawn[0].axes[0].get_xlim()
    assert low < 2048 < high
