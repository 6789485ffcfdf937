"""Every report figure, rendered and inspected as matplotlib objects (not pixels): losses carry
their unit, counts read 1.6M and FLOPs 3.2e15, the study plots loss against FLOPs beside
tokens, the IsoFLOP panels draw each budget's fitted parabola and mark N*, optima at the
sparsity search's limit are flagged, and every colourbar says what its colour means.

The house fixtures (tests/fixtures/house) give the figures real run folders; synthetic inputs
with a known answer check the IsoFLOP curves and the limit flag."""

from __future__ import annotations

import json
import math
import re
import shutil
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from moelab.cli import main
from moelab.report import new_figure
from moelab.report.axes import (
    distinct_labels, format_axis, format_count_tick, format_flops_tick, label_ticks,
    labelled_colourbar,
)
from moelab.scaling.isoflop import IsoflopPoints, isoflop_analysis
from moelab.study.analyses import budgets as budget_analysis
from moelab.study.analyses import comparisons, routing, val_loss
from moelab.study.results import BudgetResults
from moelab.stats.t_tests import PairedTest, WelchTest
from moelab.study.gaps import Gap
from moelab.sweep.analyses import isoflop as sweep_isoflop, optima as sweep_optima

HOUSE = Path(__file__).parent / "fixtures" / "house"
REPORT_FILES = ("report.md", "results.json", "results.csv", "analysis.json", "forms.json",
                "isoflop.json", "throughput.json", "figures")
COUNT_TICK = re.compile(r"^(0|[1-9]\d{0,2}(\.\d{1,2})?[KMBT]?)$")  # 800, 1.2K, 1.64M
FLOPS_TICK = re.compile(r"^(0|[1-9](\.\d{1,2})?e\d+)$")  # 2e8, 3.2e15


# ------------------------------------------------------------------------------------------
# The shared tick formats
# ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("value, label", [
    (0, "0"), (512, "512"), (20_576, "21K"), (1_638_400, "1.6M"), (999_999, "1M"),
    (2_500_000, "2.5M"), (2e9, "2B"), (3.3e12, "3.3T"),
])
def test_counts_read_with_two_significant_digits(value, label):
    assert format_count_tick(value) == label


@pytest.mark.parametrize("value, label", [
    (0, "0"), (1e9, "1e9"), (3e9, "3e9"), (3.2e15, "3.2e15"), (1.5e9, "1.5e9"), (9.99e9, "1e10"),
])
def test_flops_read_as_powers_of_ten(value, label):
    assert format_flops_tick(value) == label


def test_labels_take_more_digits_only_where_two_would_merge_ticks():
    assert distinct_labels([1_638_400, 3_276_800], format_count_tick) == ["1.6M", "3.3M"]
    assert distinct_labels([1_638_400, 1_640_000], format_count_tick) == ["1.638M", "1.64M"]
    assert distinct_labels([1e9, 3e9], format_flops_tick) == ["1e9", "3e9"]


def test_a_colourbar_without_a_label_is_refused():
    fig, ax = new_figure()
    image = ax.imshow(np.eye(2))
    with pytest.raises(ValueError, match="label"):
        labelled_colourbar(fig, image, ax, " ")
    assert labelled_colourbar(fig, image, ax, "share").ax.get_ylabel() == "share"


# ------------------------------------------------------------------------------------------
# Rendering: every figure a report draws, captured as it is saved
# ------------------------------------------------------------------------------------------


def _capture(monkeypatch, *modules) -> dict:
    """{file name: figure} for every figure ``modules`` save (still written to disk)."""
    drawn: dict = {}
    for module in modules:
        save = module.save_figure

        def keep(fig, path, save=save):
            drawn[Path(path).name] = fig
            return save(fig, path)

        monkeypatch.setattr(module, "save_figure", keep)
    return drawn


STUDY_FIGURE_MODULES = (val_loss, comparisons, budget_analysis, routing)
"""The study report's analyses that draw figures."""


def _report(name: str, tmp_path: Path) -> Path:
    folder = tmp_path / name
    shutil.copytree(HOUSE / name, folder, ignore=shutil.ignore_patterns(*REPORT_FILES))
    assert main(["report", str(folder)]) == 0
    return folder


def _visible_tick_labels(ax, axis: str = "x") -> list[str]:
    ax.figure.canvas.draw()
    low, high = sorted(getattr(ax, f"get_{axis}lim")())
    ticks = getattr(ax, f"get_{axis}ticks")()
    labels = getattr(ax, f"get_{axis}ticklabels")()
    return [label.get_text() for label, tick in zip(labels, ticks) if low <= tick <= high]


def _eval_tokens(run_dir: Path) -> list[float]:
    lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    return [e["tokens"] for e in map(json.loads, lines) if e["kind"] == "eval"]


@pytest.fixture(scope="module")
def study_figures_drawn(tmp_path_factory):
    monkeypatch = pytest.MonkeyPatch()
    try:
        drawn = _capture(monkeypatch, *STUDY_FIGURE_MODULES)
        folder = _report("study", tmp_path_factory.mktemp("house"))
    finally:
        monkeypatch.undo()
    return folder, drawn


def test_the_study_plots_validation_loss_against_tokens_and_flops(study_figures_drawn):
    folder, drawn = study_figures_drawn
    by_tokens, by_flops, gaps = drawn["val_loss.png"].axes  # the gaps on a scale of their own
    assert "(nats/token" in gaps.get_ylabel() and len(gaps.get_lines()) == 3  # 2 gaps and 0
    assert by_tokens.get_xlabel() == "training tokens"
    assert "FLOPs" in by_flops.get_xlabel()
    for ax in (by_tokens, by_flops):
        assert "(nats/token)" in ax.get_ylabel()
    # The FLOPs of each arm: its eval tokens x the 6 N_active per token its runs recorded.
    for line in by_flops.get_lines():
        arm = line.get_label().split(" ")[0]
        run = folder / "runs" / arm / "seed0"
        per_token = json.loads((run / "summary.json").read_text())["flops_per_token_6n"]
        assert line.get_xdata() == pytest.approx(np.array(_eval_tokens(run)) * per_token)
    ends = {line.get_label().split(" ")[0]: line.get_xdata()[-1] for line in by_flops.get_lines()}
    assert sorted(ends) == ["dense_active", "dense_total", "moe"]
    assert ends["dense_total"] > 1.2 * ends["moe"]  # equal tokens, not equal compute
    token_ticks, flops_ticks = _visible_tick_labels(by_tokens), _visible_tick_labels(by_flops)
    assert len(token_ticks) >= 2 and all(COUNT_TICK.match(t) for t in token_ticks), token_ticks
    assert len(flops_ticks) >= 2 and all(FLOPS_TICK.match(t) for t in flops_ticks), flops_ticks


def test_every_study_loss_axis_has_its_unit(study_figures_drawn):
    _, drawn = study_figures_drawn
    for name in ("gaps.png", "paired_differences.png"):
        assert "nats/token" in drawn[name].axes[0].get_ylabel(), name


def test_every_study_colourbar_is_labelled(study_figures_drawn):
    _, drawn = study_figures_drawn
    for name, label in (("expert_load.png", "token-slots"), ("layer_load.png", "busiest")):
        panels = [ax for ax in drawn[name].axes if ax.images]
        assert panels, name
        for ax in panels:
            assert label in ax.images[0].colorbar.ax.get_ylabel(), name
            if name == "layer_load.png":  # tokens along x
                assert all(COUNT_TICK.match(t) for t in _visible_tick_labels(ax))


def test_the_gap_against_budget_ticks_read_1_6m(tmp_path, monkeypatch):
    drawn = _capture(monkeypatch, budget_analysis)
    paired = PairedTest(0.02, 0.01, 0.03, 0.01, 2, 0.01, [])
    welch = WelchTest(0.02, 0.01, 0.03, 0.01, 2.0, 2, 2)
    gap = Gap("active", "moe", "dense_active", "paired", 0.02, 0.01, 0.03, 0.01, 0.01, "raw",
              2, 2, "MoE better", "MoE better", 0.01, [], paired, welch)
    budgets = [BudgetResults(tokens, None, {}, {"active": gap})
               for tokens in (1_638_400, 3_276_800, 6_553_600)]
    budget_analysis.gap_vs_tokens_figure(budgets, tmp_path / "gaps_vs_tokens.png")
    ax = drawn["gaps_vs_tokens.png"].axes[0]
    assert _visible_tick_labels(ax) == ["1.6M", "3.3M", "6.6M"]
    assert "nats/token" in ax.get_ylabel()


# ------------------------------------------------------------------------------------------
# IsoFLOP panels: the fitted parabolas and N*
# ------------------------------------------------------------------------------------------


def _by_gid(ax, gid: str) -> list:
    return [line for line in ax.get_lines() if line.get_gid() == gid]


def _surface_by_hand(c: list[float], log_n: np.ndarray, sparsity: float) -> np.ndarray:
    """isoflop.json's surface: c0 + c1 x + c2 y + c3 x^2 + c4 x y + c5 y^2, y = -log(1 - S)."""
    y = -math.log(1 - sparsity)
    return c[0] + c[1] * log_n + c[2] * y + c[3] * log_n**2 + c[4] * log_n * y + c[5] * y**2


@pytest.mark.slow  # a sweep's report fits its law forms
def test_the_house_isoflop_panels_draw_each_budgets_surface_and_its_optimum(tmp_path,
                                                                            monkeypatch):
    drawn = _capture(monkeypatch, sweep_isoflop)
    folder = _report("sweep-flops", tmp_path)
    budgets = json.loads((folder / "isoflop.json").read_text())["all_points"]["budgets"]
    panels = drawn["isoflop.png"].axes
    assert [ax.get_title() for ax in panels] == ["C = 1e9 FLOPs", "C = 3e9 FLOPs"]
    for ax, budget in zip(panels, budgets):
        assert ax.get_ylabel() == "best validation loss (nats/token)"
        curves = [line for line in ax.get_lines()
                  if line.get_gid() in ("isoflop-fit", "isoflop-fit-no-minimum")]
        assert len(curves) == 3  # one slice per sparsity of the sweep: 0, 0.5, 0.75
        # This surface has no (xy)^2 term: its x^2 coefficient c3 alone says whether every
        # slice opens upward (a minimum) or downward (none; drawn apart and named so).
        opens_up = budget["surface"][3] > 0
        for curve, sparsity in zip(curves, (0.0, 0.5, 0.75)):
            log_n = np.log(curve.get_xdata())
            assert curve.get_ydata() == pytest.approx(
                _surface_by_hand(budget["surface"], log_n, sparsity))
            assert curve.get_gid() == ("isoflop-fit" if opens_up else "isoflop-fit-no-minimum")
        star, = _by_gid(ax, "isoflop-optimum")
        assert (star.get_xdata()[0], star.get_ydata()[0]) == (budget["params"], budget["loss"])
        assert star.get_markerfacecolor() == "none"  # at the edge of the data: only a bound
        legend = [text.get_text() for text in ax.get_legend().get_texts()]
        assert "N* = 21K, S* = 0.75 (edge of the data: a bound)" in legend
        assert (("IsoFLOP fit that opens downward: no minimum, no N* from it" in legend)
                == (not opens_up))
        assert set(_visible_tick_labels(ax)) <= {"10K", "20K", "50K", "100K"}


def test_a_dense_isoflop_panel_draws_the_true_parabola_and_its_vertex(tmp_path, monkeypatch):
    drawn = _capture(monkeypatch, sweep_isoflop)
    true_n_star = {1e15: 3e4, 1e16: 1e5}
    n = np.repeat(np.geomspace(1e4, 3e5, 5)[None], 2, axis=0)
    c = np.array([[1e15] * 5, [1e16] * 5])
    star_n = np.array([[true_n_star[budget]] * 5 for budget in (1e15, 1e16)])
    loss = 3.0 + 0.1 * np.log(n / star_n) ** 2  # a parabola in log N with its vertex at N*
    points = IsoflopPoints(params=n.ravel(), flops=c.ravel(), loss=loss.ravel(),
                           sparsity=np.zeros(10))
    sweep_isoflop.isoflop_figure(tmp_path / "isoflop.png", points, None, 0.0,
                                 isoflop_fits=isoflop_analysis(points))
    for ax, budget in zip(drawn["isoflop.png"].axes, (1e15, 1e16)):
        curve, = _by_gid(ax, "isoflop-fit")
        expected = 3.0 + 0.1 * np.log(curve.get_xdata() / true_n_star[budget]) ** 2
        assert curve.get_ydata() == pytest.approx(expected, abs=1e-9)
        star, = _by_gid(ax, "isoflop-optimum")
        assert star.get_xdata()[0] == pytest.approx(true_n_star[budget], rel=1e-6)
        assert star.get_ydata()[0] == pytest.approx(3.0, abs=1e-9)
        assert star.get_markerfacecolor() != "none"  # inside the sampled sizes


STORED_ISOFLOP = [Path(__file__).parent / "fixtures" / "house" / "sweep-flops" / "isoflop.json",
                  Path(__file__).resolve().parents[1] / "experiments" / "results" / "sweeps"
                  / "cpu-isoflop" / "isoflop.json"]


@pytest.mark.parametrize("path", STORED_ISOFLOP, ids=lambda p: p.parent.name)
def test_a_fit_opens_upward_exactly_when_its_x_squared_coefficient_is_positive(path):
    """The stored surfaces (c0 + c1 x + c2 y + c3 x^2 + c4 x y + c5 y^2): the house sweep's
    open downward, cpu-isoflop's upward, whatever the sparsity."""
    from moelab.codec import from_json

    record = from_json(sweep_isoflop.IsoflopRecord, json.loads(path.read_text()))
    for budget in record.all_points.budgets:
        for sparsity in (0.0, 0.5, 0.875):
            assert sweep_isoflop.opens_upward(budget, sparsity) == (budget.surface[3] > 0)


def test_without_fits_the_isoflop_panels_draw_no_parabola(tmp_path, monkeypatch):
    drawn = _capture(monkeypatch, sweep_isoflop)
    points = IsoflopPoints(params=np.array([1e4, 2e4, 4e4]), flops=np.full(3, 1e15),
                           loss=np.array([3.2, 3.1, 3.3]), sparsity=np.zeros(3))
    sweep_isoflop.isoflop_figure(tmp_path / "isoflop.png", points, None, 0.0)
    ax = drawn["isoflop.png"].axes[0]
    assert _by_gid(ax, "isoflop-fit") == [] and _by_gid(ax, "isoflop-optimum") == []


# ------------------------------------------------------------------------------------------
# Optimal sparsity: the search limit flagged
# ------------------------------------------------------------------------------------------


def _optima_rows(key: str, xs, sparsities) -> list[SimpleNamespace]:
    """Curve points as the figure reads them (``moelab.scaling.optimal.FlopsCurvePoint``)."""
    return [SimpleNamespace(**{key: x}, optimum=SimpleNamespace(sparsity=s), ci={})
            for x, s in zip(xs, sparsities)]


def _limit_flags(ax) -> list:
    return [c for c in ax.collections if c.get_gid() == "search-limit"]


@pytest.mark.parametrize("max_sparsity", [0.98, 0.9])
def test_optima_at_the_search_limit_are_flagged(tmp_path, monkeypatch, max_sparsity):
    drawn = _capture(monkeypatch, sweep_optima)
    vs_n = _optima_rows("params", [1e5, 1e6, 1e7], [0.5, 0.7, max_sparsity])
    vs_c = _optima_rows("flops", [1e15, 1e16, 1e17], [0.3, 0.6, 0.8])  # all inside
    sweep_optima.optima_figure(tmp_path / "optimal_sparsity.png", vs_n, vs_c, None, 1e16,
                               max_sparsity=max_sparsity)
    by_params, by_flops = drawn["optimal_sparsity.png"].axes
    flag, = _limit_flags(by_params)
    assert flag.get_offsets().tolist() == [[1e7, max_sparsity]]
    legend = [text.get_text() for text in by_params.get_legend().get_texts()]
    assert f"at the search limit S = {max_sparsity:g} (a bound)" in legend
    assert _limit_flags(by_flops) == []
    assert not any("search limit" in t.get_text() for t in by_flops.get_legend().get_texts())
    assert all(COUNT_TICK.match(t) for t in _visible_tick_labels(by_params))
    assert all(FLOPS_TICK.match(t) for t in _visible_tick_labels(by_flops))
    assert by_params.get_title() == "fixed N, C = 1e16"


def test_label_ticks_keep_budgets_apart():
    fig, ax = new_figure()
    ax.set_xscale("log")
    ax.set_xlim(1e6, 1e7)
    label_ticks(ax.xaxis, [1_638_400, 1_640_000, 3_276_800], format_count_tick)
    assert _visible_tick_labels(ax) == ["1.638M", "1.64M", "3.277M"]


@pytest.mark.parametrize("limits, labels", [
    ((1.3e4, 9.4e4), ["20K", "50K"]),  # a sweep's sizes: decades alone would give no tick
    ((1e5, 1e8), ["100K", "1M", "10M", "100M"]),  # wide: 1-2-5 labels would run together
])
def test_log_count_axes_tick_at_1_2_5_when_narrow_and_decades_when_wide(limits, labels):
    fig, ax = new_figure(width_in=5.0)
    ax.set_xscale("log")
    ax.set_xlim(*limits)
    format_axis(ax.xaxis, format_count_tick)
    assert _visible_tick_labels(ax) == labels
