"""Figure axes that read: token counts as 100K / 1M / 2.5M, few enough ticks not to collide;
the per-seed differences figure draws one point per seed."""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest

from moelab.config import load_config
from moelab.report import format_tick_count, format_token_axis, new_figure
from moelab.study.analyses import comparisons, routing, val_loss
from moelab.study.folder import CompleteRun
from moelab.stats.t_tests import PairedTest, WelchTest
from moelab.study.gaps import Gap
from moelab.train.run_summary import RunSummary


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


def _moe_run(arm: str, seed: int, losses: list[float], num_experts: int = 8) -> CompleteRun:
    config = load_config("demo", [f"model.moe.num_experts={num_experts}"])
    routing_rows = [{"busiest_fraction": 0.3, "routing_entropy": 0.9, "mean_log_z": 1.0}]
    evals = [{"step": step, "tokens": 100 * step, "val_loss": loss, "routing": routing_rows}
             for step, loss in enumerate(losses, start=1)]
    return CompleteRun(arm, seed, None, Path(f"runs/{arm}/seed{seed}"), RunSummary(), evals,
                       config)


def _saved(monkeypatch, module) -> list:
    drawn: list = []
    monkeypatch.setattr(module, "save_figure", lambda fig, path: drawn.append(fig) or Path(path))
    return drawn


def test_the_routing_figure_draws_the_balanced_values(tmp_path, monkeypatch):
    drawn = _saved(monkeypatch, routing)
    assert routing.routing_figure({"moe": [_moe_run("moe", 0, [3.0, 2.9])]}, tmp_path / "r.png")
    busiest, entropy, log_z = drawn[0].axes
    dashed = {ax: [line.get_ydata()[0] for line in ax.get_lines()
                   if line.get_linestyle() == "--"] for ax in (busiest, entropy, log_z)}
    assert dashed == {busiest: [1 / 8], entropy: [1.0], log_z: []}


def test_a_run_with_one_eval_draws_its_layer_heatmap_without_warnings(tmp_path, monkeypatch):
    _saved(monkeypatch, routing)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert routing.layer_load_over_training_figure({"moe": [_moe_run("moe", 0, [3.0])]},
                                                       tmp_path / "l.png")


def test_the_gaps_get_a_panel_of_their_own_paired_within_seeds(tmp_path, monkeypatch):
    drawn = _saved(monkeypatch, val_loss)
    runs = {"moe": [_moe_run("moe", 0, [3.00, 2.50]), _moe_run("moe", 1, [3.10, 2.60])],
            "dense_active": [_moe_run("dense_active", 0, [3.02, 2.51]),
                             _moe_run("dense_active", 1, [3.14, 2.63])]}
    assert val_loss.val_loss_figure(runs, tmp_path / "v.png", {"active": ("moe", "dense_active")})
    gap_panel = drawn[0].axes[2]
    curve = gap_panel.get_lines()[0]
    # By hand: seed 0 gaps 0.02, 0.01; seed 1 gaps 0.04, 0.03; the mean of the two seeds.
    assert list(curve.get_xdata()) == [100, 200]
    assert list(curve.get_ydata()) == pytest.approx([0.03, 0.02])
    assert "n=2 pairs" in curve.get_label()
    assert "nats/token" in gap_panel.get_ylabel()


def test_the_gap_figures_say_the_interval_is_unadjusted_and_the_colour_is_not(tmp_path,
                                                                              monkeypatch):
    drawn = _saved(monkeypatch, comparisons)
    differences = [{"seed": 0, "diff": 0.01}, {"seed": 1, "diff": 0.03}]
    gaps = {"active": _gap("paired", "not significant", differences)}
    assert comparisons.gap_bar_figure(gaps, tmp_path / "g.png")
    assert comparisons.paired_differences_figure(gaps, tmp_path / "d.png")
    for fig in drawn:
        title = fig.axes[0].get_title()
        assert "unadjusted 95 % CI" in title and "adjusted over 1 test (Holm)" in title, title


def test_the_tokens_per_parameter_line_is_printed_once_under_the_validation_loss(tmp_path,
                                                                                 capsys):
    import shutil

    from moelab.cli import main

    house = Path(__file__).parent / "fixtures" / "house" / "study"
    folder = tmp_path / "study"
    shutil.copytree(house, folder, ignore=shutil.ignore_patterns("report.md", "results.*",
                                                                 "figures"))
    assert main(["report", str(folder)]) == 0
    report = (folder / "report.md").read_text()
    lines = [line for line in report.splitlines()
             if line.startswith("Tokens per parameter (total / active): ")]
    assert len(lines) == 1
    section = report.split("## Validation loss")[1].split("\n## ")[0]
    assert lines[0] in section
    # By hand: the fixture's study.yaml trains 1,536 tokens per run; the MoE arm has 53,664
    # total and 41,376 active parameters (its results.json).
    assert f"moe {1536 / 53_664:.3g} / {1536 / 41_376:.3g};" in lines[0]
