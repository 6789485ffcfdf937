"""Paper A's question across budgets: the dense − MoE gaps of cpu-budgets at each token budget,
and their trend.

``moelab study cpu-budgets`` trained the demo's arms and recipe at 409.6K-3.28M tokens (each
budget its own full schedule) on seeds 0-2; its results.json is
experiments/results/studies/cpu-budgets.json. The gaps are the study's own test
(``moelab.study.gaps.compare``, paired by seed), Holm over the study's 8 tests (4 budgets x 2
criteria), as its report adjusts them. The trend is read per seed, because the budgets of one
seed share its initialisation and data order: each seed's gaps are fitted against log2(tokens)
(a slope per doubling of the budget), and the slope's interval is over the 3 seeds, Holm over
the 2 criteria's slopes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from moelab.findings.source import ResultsRoot, SeedLosses
from moelab.report import markdown_table
from moelab.report.analysis import Analysis, Findings
from moelab.stats.intervals import mean_interval, summarize, t_p_value
from moelab.stats.multiple import holm
from moelab.stats.verdicts import Difference, Verdict, difference_verdict, trend_verdict
from moelab.study.gaps import compare

FILE = "studies/cpu-budgets.json"
ARMS = ("moe", "dense_active", "dense_total")
CRITERIA = {"matched active": "dense_active", "matched total": "dense_total"}


@dataclass(frozen=True)
class BudgetGap:
    criterion: str
    gap: float
    ci: tuple[float, float]
    p: float
    p_holm: float
    min_detectable_gap: float
    verdict: Verdict


@dataclass(frozen=True)
class Budget:
    tokens: int
    label: str
    means: dict[str, tuple[float, float]]
    """{arm: (mean, seed sd)} of the best validation loss."""
    gaps: list[BudgetGap]


@dataclass(frozen=True)
class Trend:
    criterion: str
    slope: float
    """Mean over seeds of each seed's OLS slope of the gap on log2(tokens): nats per doubling."""
    ci: tuple[float, float]
    p_holm: float
    seeds: int
    verdict: Verdict


@dataclass(frozen=True)
class BudgetStudy:
    seeds: list[int]
    budgets: list[Budget]
    family: str
    trends: list[Trend]


def _losses(budget: dict) -> dict[str, SeedLosses]:
    return {arm: {int(run["seed"]): float(run["best_val_loss"])
                  for run in budget["arms"][arm]["runs"]} for arm in ARMS}


def compute(results: ResultsRoot, findings: Findings) -> BudgetStudy:
    stored = results.json(FILE)["budgets"]
    per_budget = [(b, _losses(b)) for b in sorted(stored, key=lambda b: b["tokens"])]
    tests = [(b["tokens"], name, compare(name, "moe", dense, losses["moe"], losses[dense]))
             for b, losses in per_budget for name, dense in CRITERIA.items()]
    adjusted = holm([gap.p_value for _, _, gap in tests])
    family = f"Holm over the study's {len(tests)} tests"
    budgets = []
    for b, losses in per_budget:
        rows = [BudgetGap(name, g.gap, (g.ci_low, g.ci_high), g.p_value, p_holm,
                          g.min_detectable_gap,
                          difference_verdict(Difference(g.gap, (g.ci_low, g.ci_high), p_holm,
                                                        family),
                                             ahead="MoE ahead", behind="dense ahead"))
                for (tokens, name, g), p_holm in zip(tests, adjusted) if tokens == b["tokens"]]
        means = {arm: (summarize(list(losses[arm].values())).mean,
                       summarize(list(losses[arm].values())).std) for arm in ARMS}
        budgets.append(Budget(int(b["tokens"]), _tokens_label(int(b["tokens"])), means, rows))
    seeds = sorted(per_budget[0][1]["moe"])
    return BudgetStudy(seeds, budgets, family, _trends(per_budget, seeds))


def _trends(per_budget: list[tuple[dict, dict[str, SeedLosses]]], seeds: list[int]) -> list[Trend]:
    """Each criterion's gap against log2(tokens), one slope per seed, tested over the seeds."""
    doublings = np.log2([b["tokens"] for b, _ in per_budget])
    slopes = {}
    for name, dense in CRITERIA.items():
        gaps_SB = np.array([[losses[dense][s] - losses["moe"][s] for _, losses in per_budget]
                            for s in seeds])
        slopes[name] = [float(np.polyfit(doublings, gaps, 1)[0]) for gaps in gaps_SB]
    p_raw = {name: t_p_value(summarize(v).mean, summarize(v).std / math.sqrt(len(v)), len(v) - 1)
             for name, v in slopes.items()}
    adjusted = dict(zip(p_raw, holm(list(p_raw.values()))))
    family = f"Holm over the {len(slopes)} trends"
    trends = []
    for name, values in slopes.items():
        interval = mean_interval(values)
        ci = (interval.low, interval.high) if interval else (math.nan, math.nan)
        mean = summarize(values).mean
        trends.append(Trend(name, mean, ci, adjusted[name], len(values),
                            trend_verdict(mean, interval, p_adjusted=adjusted[name],
                                          family=family, seeds=len(values))))
    return trends


def _tokens_label(tokens: int) -> str:
    """'409.6K', '1.64M': three significant digits, as the preset lists its budgets."""
    return f"{tokens / 1e6:.3g}M" if tokens >= 1_000_000 else f"{tokens / 1e3:.4g}K"


def _gap_cell(row: BudgetGap) -> str:
    return (f"{row.gap:+.3f} [{row.ci[0]:+.3f}, {row.ci[1]:+.3f}], p {row.p:.2g}, "
            f"Holm {row.p_holm:.2g}, MDE {row.min_detectable_gap:.3f}, **{row.verdict.word}**")


def render(study: BudgetStudy | None, results: ResultsRoot, findings: Findings) -> str:
    if study is None:
        return ""
    rows = [[b.label, *(f"{b.means[arm][0]:.4f} ± {b.means[arm][1]:.4f}" for arm in ARMS),
             *(_gap_cell(g) for g in b.gaps)] for b in study.budgets]
    trends = [[t.criterion, f"{t.slope:+.4f}", f"[{t.ci[0]:+.4f}, {t.ci[1]:+.4f}]",
               f"{t.p_holm:.2g}", str(t.seeds), f"**{t.verdict.word}**"] for t in study.trends]
    return ("## The gaps at each budget\n\n"
            f"Seeds {study.seeds[0]}-{study.seeds[-1]} (`{FILE}`). Best validation loss, mean ± "
            "seed sd (nats/token); gaps are dense − MoE (positive: the MoE is lower), paired by "
            f"seed, with the raw p, p adjusted by {study.family} (4 budgets x 2 criteria), the "
            "minimum detectable gap (MDE, power 0.8) and the verdict by rule "
            "(docs/verdicts.md):\n\n"
            + markdown_table(["tokens", *ARMS, "matched active", "matched total"], rows,
                             "lrrrll")
            + "\n## The trend over budgets\n\n"
              "Each seed's gaps fitted against log2(tokens): the slope is the change of the gap "
              "per doubling of the budget (positive: the gap grows with tokens), its interval "
              "over the seeds (the budgets of one seed are not independent), Holm over the 2 "
              "slopes. A line through 4 budgets says nothing of a rise that levels off or "
              "turns; the table above shows the shape.\n\n"
            + markdown_table(["criterion", "slope per doubling", "95 % CI", "p (Holm)", "seeds",
                              "verdict"], trends, "lrrrrl"))


ANALYSIS: Analysis[ResultsRoot, BudgetStudy] = Analysis("budget_trend", compute, render)


def summary(study: BudgetStudy) -> str:
    """The README's line: the matched-active gaps across budgets and their trend's word."""
    active = [next(g for g in b.gaps if g.criterion == "matched active") for b in study.budgets]
    trend = next(t for t in study.trends if t.criterion == "matched active")
    gaps = ", ".join(f"{g.gap:+.3f}" for g in active)
    ahead = [b.label for b, g in zip(study.budgets, active) if g.verdict.word == "MoE ahead"]
    return (f"Across budgets (cpu-budgets, {study.budgets[0].label}-{study.budgets[-1].label} "
            f"tokens, {len(study.seeds)} seeds), the matched-active gap is {gaps}: MoE ahead "
            f"after Holm over 8 at {', '.join(ahead) or 'no budget'}; its slope per doubling "
            f"{trend.slope:+.4f} [{trend.ci[0]:+.4f}, {trend.ci[1]:+.4f}], "
            f"**{trend.verdict.word}**.")
