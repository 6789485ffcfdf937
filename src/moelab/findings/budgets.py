"""Paper A's question across budgets: the dense − MoE gaps of cpu-budgets at each token budget,
and their trend.

``moelab study cpu-budgets`` trained the demo's arms and recipe at 409.6K-3.28M tokens (each
budget its own full schedule) on seeds 0-2; its results.json is
experiments/results/studies/cpu-budgets.json. The gaps are the study's own test
(``moelab.study.gaps.compare``, paired by seed). The trend is read per seed, because the budgets
of one seed share its initialisation and data order: each seed's gaps are fitted against
log2(tokens) (a slope per doubling of the budget), and the slope's interval is over the 3 seeds.
Every p on the page is adjusted in one Holm family (``budget_family``): the gaps, the slopes and
the tests added after looking (the steps, the two-size table).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from moelab.findings.budget_family import (
    CRITERIA, FILE, budget_groups, gap_key, gap_tests, page_family, seed_slopes, tokens_label,
    trend_key,
)
from moelab.findings.source import ResultsRoot, arm_losses
from moelab.report import markdown_table
from moelab.report.analysis import Analysis, Findings
from moelab.stats.intervals import mean_interval, summarize
from moelab.stats.verdicts import (
    Difference, Family, Verdict, difference_verdict, trend_verdict,
)

ARMS = ("moe", "dense_active", "dense_total")
PAPER_A_TOTAL_GAP = "0.0180 ± 0.0020"
"""Paper A's matched-total gap as its abstract prints it, dense ahead (it does not say what the
± is); quoted beside moelab's words, not compared with moelab's numbers."""


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
    """The page's one Holm family (``budget_family``), read by every word on it."""
    trends: list[Trend]


def compute(results: ResultsRoot, findings: Findings) -> BudgetStudy:
    family = page_family(results)
    adjusted = family.adjusted()
    tests = gap_tests(results)
    budgets = []
    for b in budget_groups(results):
        tokens = int(b["tokens"])
        rows = []
        for name in CRITERIA:
            g, p_holm = tests[gap_key(tokens, name)], adjusted[gap_key(tokens, name)]
            rows.append(BudgetGap(name, g.gap, (g.ci_low, g.ci_high), g.p_value, p_holm,
                                  g.min_detectable_gap, difference_verdict(
                                      Difference(g.gap, (g.ci_low, g.ci_high), p_holm,
                                                 family.label),
                                      ahead="MoE ahead", behind="dense ahead")))
        losses = {arm: list(arm_losses(b["arms"], arm).values()) for arm in ARMS}
        means = {arm: (summarize(v).mean, summarize(v).std) for arm, v in losses.items()}
        budgets.append(Budget(tokens, tokens_label(tokens), means, rows))
    seeds = sorted(arm_losses(budget_groups(results)[0]["arms"], "moe"))
    return BudgetStudy(seeds, budgets, family.label, _trends(results, family))


def _trends(results: ResultsRoot, family: Family) -> list[Trend]:
    """Each criterion's gap against log2(tokens), one slope per seed, tested over the seeds."""
    adjusted = family.adjusted()
    trends = []
    for name, values in seed_slopes(results).items():
        interval = mean_interval(values)
        ci = (interval.low, interval.high) if interval else (math.nan, math.nan)
        mean = summarize(values).mean
        p_holm = adjusted[trend_key(name)]
        trends.append(Trend(name, mean, ci, p_holm, len(values),
                            trend_verdict(mean, interval, p_adjusted=p_holm,
                                          family=family.label, seeds=len(values))))
    return trends


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
            "seed, with the raw p, p adjusted by Holm over the page's family (every test of "
            f"this page, each once: {study.family}), the minimum detectable gap (MDE, power "
            "0.8) and the verdict by rule (docs/verdicts.md):\n\n"
            + markdown_table(["tokens", *ARMS, "matched active", "matched total"], rows,
                             "lrrrll") + _beside_paper_a(study)
            + "\n## The trend over budgets\n\n"
              "Each seed's gaps fitted against log2(tokens): the slope is the change of the gap "
              "per doubling of the budget (positive: the gap grows with tokens), its interval "
              "over the seeds (the budgets of one seed are not independent), Holm over the "
              "page's family. A line through 4 budgets says nothing of a rise that levels off or "
              "turns; the table above shows the shape.\n\n"
            + markdown_table(["criterion", "slope per doubling", "95 % CI", "p (Holm)", "seeds",
                              "verdict"], trends, "lrrrrl"))


def _beside_paper_a(study: BudgetStudy) -> str:
    """Paper A's matched-total word beside moelab's, in one sentence (its numbers are not
    comparable: other scale, other data)."""
    total = [next(g for g in b.gaps if g.criterion == "matched total") for b in study.budgets]
    lower = sum(g.gap > 0 for g in total)
    words = sorted({g.verdict.word for g in total})
    return ("\nMatched on total parameters, paper A's abstract has the dense arm ahead "
            f"({PAPER_A_TOTAL_GAP}, three seeds on its full data; it does not say what the ± is); here "
            f"the MoE is lower at {lower} of the {len(total)} budgets, and the words are "
            + ", ".join(f"**{w}** at {sum(g.verdict.word == w for g in total)}" for w in words)
            + ".\n")


ANALYSIS: Analysis[ResultsRoot, BudgetStudy] = Analysis("budget_trend", compute, render)


def summary(study: BudgetStudy) -> str:
    """The README's line: the matched-active gaps across budgets and their trend's word."""
    active = [next(g for g in b.gaps if g.criterion == "matched active") for b in study.budgets]
    trend = next(t for t in study.trends if t.criterion == "matched active")
    gaps = ", ".join(f"{g.gap:+.3f}" for g in active)
    ahead = [b.label for b, g in zip(study.budgets, active) if g.verdict.word == "MoE ahead"]
    return (f"Across budgets (cpu-budgets, {study.budgets[0].label}-{study.budgets[-1].label} "
            f"tokens, {len(study.seeds)} seeds), the matched-active gap is {gaps}: MoE ahead "
            f"after {study.family.split(' (')[0]} at {', '.join(ahead) or 'no budget'}; its slope "
            f"per doubling {trend.slope:+.4f} [{trend.ci[0]:+.4f}, {trend.ci[1]:+.4f}], "
            f"**{trend.verdict.word}**.")
