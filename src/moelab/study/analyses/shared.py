"""What several of the study's analyses share: the criteria's names, the cells of a test, the
figure link, the per-arm runs of the budget the report leads with, and a curve over seeds.

Not an analysis itself (``ANALYSES`` does not list it): the words and cells here read the same
in every section that shows them.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any, Optional, Protocol

import numpy as np

from moelab.report import format_number, format_p_value
from moelab.report.axes import LOSS_UNIT
from moelab.study.folder import CompleteRun, StudyFolder
from moelab.study.gaps import TEST_NAMES, Gap
from moelab.study.results import ArmResult, StudyResults

CRITERION_TEXT = {
    "active": "matched on active parameters per token",
    "total": "matched on total stored parameters",
    "flops": "matched on training FLOPs per token (the kaplan count)",
    "compute": "matched on total parameters at equal training FLOPs",
}
CRITERION_LABELS = {"active": "matched active", "total": "matched total", "flops": "matched FLOPs"}
"""A criterion's short name, for a figure's axis."""
# Colour by the verdict, not the sign: grey when the test shows no difference.
OUTCOME_COLOURS = {"MoE better": "tab:green", "dense better": "tab:red"}
GAP_LABEL = f"dense − MoE best val loss\n({LOSS_UNIT}; >0: MoE better)"
"""On two lines: on one it runs past a 4-inch-tall figure's edge."""


class Interval(Protocol):
    """A test (or a mean over seeds) with a 95 % interval, as the tables show it."""

    @property
    def ci_low(self) -> Optional[float]: ...

    @property
    def ci_high(self) -> Optional[float]: ...


class Tested(Protocol):
    """A test with its raw p."""

    @property
    def p_value(self) -> Optional[float]: ...


class Adjusted(Protocol):
    """A test of a family, with the adjustment its p took ('Holm, 8 tests')."""

    @property
    def adjustment(self) -> str: ...


def adjustment(tests: Mapping[Any, Adjusted]) -> str:
    """The adjustment of a family of tests as its column names it: 'Holm, 8 tests'."""
    return next(iter(tests.values())).adjustment


def family(tests: Mapping[Any, Adjusted]) -> str:
    """'8 tests (Holm)': the family a verdict's p was adjusted over, in a sentence."""
    method, count = adjustment(tests).split(", ", 1)
    return f"{count} ({method})"


def interval(test: Interval) -> str:
    """The 95 % interval of a test (or of a mean over seeds); '–' when it has none."""
    if test.ci_low is None:
        return "–"
    return f"[{format_number(test.ci_low)}, {format_number(test.ci_high)}]"


def p_value(test: Tested) -> str:
    return format_p_value(test.p_value)


def signed(gap: Optional[float]) -> str:
    return f"{gap:+.4f}" if gap is not None else "–"


def format_tokens_per_param(arm: ArmResult) -> str:
    """Training tokens per total and per active parameter, e.g. ``28.6 / 37.1``."""
    tokens = arm.tokens
    if not tokens or not arm.total_params or not arm.active_params:
        return "–"
    return f"{tokens / arm.total_params:.3g} / {tokens / arm.active_params:.3g}"


def tokens_per_param_caption(arms: dict[str, ArmResult]) -> str:
    """The line under a figure saying how long each arm trained for its size."""
    shown = [f"{arm} {format_tokens_per_param(r)}" for arm, r in arms.items()
             if format_tokens_per_param(r) != "–"]
    return ("Tokens per parameter (total / active): " + "; ".join(shown) + ".\n") if shown else ""


def figure_block(title: str, folder: StudyFolder, path: Optional[Path], level: int = 2) -> str:
    """A figure's heading and link; '' when it was not drawn (``path`` None)."""
    if path is None:
        return ""
    return f"{'#' * level} {title}\n\n![{title}]({path.relative_to(folder.root).as_posix()})\n"


def tests_used(gaps: Iterable[Gap]) -> str:
    """'paired t', 'Welch t' or both: the tests behind the plotted intervals."""
    used = dict.fromkeys(g.test for g in gaps)
    return " / ".join(TEST_NAMES[test] for test in used)


def final_runs_by_arm(results: StudyResults, folder: StudyFolder) -> dict[str, list[CompleteRun]]:
    """The runs of each arm at the budget the report leads with (the largest of a sweep)."""
    return {arm: [r for r in folder.runs if r.arm == arm and r.budget == results.final.tokens]
            for arm in results.arms}


def eval_curve(runs: list[CompleteRun], value: Callable[[dict], Optional[float]],
               ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Tokens, mean and std over seeds of ``value(eval_record)`` at the eval steps all share."""
    by_step: dict[int, list[float]] = defaultdict(list)
    tokens_at: dict[int, float] = {}
    for run in runs:
        for row in run.evals:
            y = value(row)
            if y is not None:
                by_step[row["step"]].append(y)
                tokens_at[row["step"]] = row.get("tokens", row["step"])
    steps = sorted(s for s, ys in by_step.items() if len(ys) == len(runs))
    tokens = np.array([tokens_at[s] for s in steps], dtype=float)
    values = [np.array(by_step[s]) for s in steps]
    mean = np.array([v.mean() for v in values])
    std = np.array([v.std(ddof=1) if v.size > 1 else 0.0 for v in values])
    return tokens, mean, std


def plot_band(ax: Any, tokens: np.ndarray, mean: np.ndarray, std: np.ndarray, label: str) -> None:
    """A mean curve and its band of one std."""
    line, = ax.plot(tokens, mean, label=label)
    ax.fill_between(tokens, mean - std, mean + std, color=line.get_color(), alpha=0.2)
