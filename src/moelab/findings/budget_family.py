"""The raw tests of the budget-trend page and their one Holm family.

The page makes four kinds of test on cpu-budgets (``studies/cpu-budgets.json``) and the
two-size table (``flip_table.json``): the dense − MoE gap at each budget (8, pre-set: the
study's own), the per-seed slope of each criterion's gap on log2(tokens) (2, pre-set), and,
added after looking, the change of the gap from one budget to the next (6: written after a
hand-read "fall"), the two-size table's rows at the larger size (2; its 4 rows at the smaller
size are the gaps already counted) and its comparison of the two sizes (1). docs/verdicts.md:
post hoc tests join the report's family, and every verdict is read again at the enlarged
family's adjusted p. So every word on the page is read at one Holm p over all of them, and each
test is counted once however many tables print it.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

import numpy as np

from moelab.findings.source import ResultsRoot, SeedLosses, arm_losses
from moelab.stats.intervals import summarize, t_p_value
from moelab.stats.t_tests import PairedTest, WelchTest, paired_difference, welch_test
from moelab.stats.verdicts import Family
from moelab.study.gaps import Gap, compare

FILE = "studies/cpu-budgets.json"
FLIP = "flip_table.json"
CRITERIA = {"matched active": "dense_active", "matched total": "dense_total"}
TWO_SIZES = "smaller size − larger size, at about the same tokens per parameter"


def tokens_label(tokens: int) -> str:
    """'409.6K', '1.64M': three significant digits, as the preset lists its budgets."""
    return f"{tokens / 1e6:.3g}M" if tokens >= 1_000_000 else f"{tokens / 1e3:.4g}K"


def budget_groups(results: ResultsRoot) -> list[dict]:
    """cpu-budgets' budgets, smallest first."""
    return sorted(results.json(FILE)["budgets"], key=lambda b: int(b["tokens"]))


def gap_key(tokens: int, criterion: str) -> str:
    return f"{tokens_label(tokens)}: {criterion}"


def gap_tests(results: ResultsRoot) -> dict[str, Gap]:
    """Each budget's dense − MoE gap per criterion (the study's own paired test)."""
    return {gap_key(int(b["tokens"]), name): compare(name, "moe", dense,
                                                     arm_losses(b["arms"], "moe"),
                                                     arm_losses(b["arms"], dense))
            for b in budget_groups(results) for name, dense in CRITERIA.items()}


def seed_slopes(results: ResultsRoot) -> dict[str, list[float]]:
    """criterion: each seed's OLS slope of its gap on log2(tokens) (nats per doubling)."""
    groups = budget_groups(results)
    doublings = np.log2([int(b["tokens"]) for b in groups])
    seeds = sorted(arm_losses(groups[0]["arms"], "moe"))
    slopes = {}
    for name, dense in CRITERIA.items():
        per_budget = [_seed_gaps(b, dense) for b in groups]
        slopes[name] = [float(np.polyfit(doublings, [gaps[s] for gaps in per_budget], 1)[0])
                        for s in seeds]
    return slopes


def slope_p(values: list[float]) -> float | None:
    summary = summarize(values)
    return t_p_value(summary.mean, summary.std / math.sqrt(len(values)), len(values) - 1)


def trend_key(criterion: str) -> str:
    return f"trend: {criterion}"


def _seed_gaps(group: dict, dense: str) -> SeedLosses:
    moe, other = arm_losses(group["arms"], "moe"), arm_losses(group["arms"], dense)
    return {seed: other[seed] - loss for seed, loss in moe.items()}


def step_tests(results: ResultsRoot) -> dict[tuple[str, str, str], PairedTest]:
    """(criterion, smaller, larger): the per-seed gap at the larger budget minus the smaller."""
    return {(name, tokens_label(int(small["tokens"])), tokens_label(int(large["tokens"]))):
            paired_difference(_seed_gaps(large, dense), _seed_gaps(small, dense))
            for name, dense in CRITERIA.items()
            for small, large in itertools.pairwise(budget_groups(results))}


def step_key(step: tuple[str, str, str]) -> str:
    return f"step: {step[0]}, {step[1]} → {step[2]}"


@dataclass(frozen=True)
class TwoSizes:
    """The two-size table's tests: each row's matched-total gap, and the post hoc comparison."""

    rows: dict[tuple[str, int], Gap]
    """(study, tokens): the row's gap."""
    welch: WelchTest
    """mean(small's per-seed gaps) − mean(large's)."""


def _row_losses(results: ResultsRoot, study: str, tokens: int) -> tuple[SeedLosses, SeedLosses]:
    stored = results.json(f"studies/{study}.json")
    groups = [g for g in stored.get("budgets") or [] if int(g["tokens"]) == tokens]
    arms = groups[0]["arms"] if groups else stored["arms"]
    return arm_losses(arms, "moe"), arm_losses(arms, "dense_total")


def two_size_tests(results: ResultsRoot) -> TwoSizes:
    stored = results.json(FLIP)
    rows, per_seed = {}, {}
    for row in stored["rows"]:
        key = (str(row["study"]), int(row["tokens"]))
        moe, dense = _row_losses(results, *key)
        rows[key] = compare("matched total", "moe", "dense_total", moe, dense)
        per_seed[key] = [dense[s] - moe[s] for s in sorted(moe)]
    same = stored["same_tokens_per_param"]
    small, large = (next(key for key in rows if key[1] == int(same[side]["tokens"]))
                    for side in ("small", "large"))
    return TwoSizes(rows, welch_test(per_seed[large], per_seed[small]))


def row_key(key: tuple[str, int]) -> str:
    """A two-size row's key: cpu-budgets' rows are the gap tests already in the family."""
    study, tokens = key
    if study == FILE.removeprefix("studies/").removesuffix(".json"):
        return gap_key(tokens, "matched total")
    return f"{study} at {tokens:,} tokens: matched total"


def page_family(results: ResultsRoot) -> Family:
    """The page's one family: every test it makes, each once."""
    p_values: dict[str, float | None] = {k: g.p_value for k, g in gap_tests(results).items()}
    p_values |= {trend_key(name): slope_p(v) for name, v in seed_slopes(results).items()}
    p_values |= {step_key(k): t.p_value for k, t in step_tests(results).items()}
    two = two_size_tests(results)
    p_values |= {row_key(k): g.p_value for k, g in two.rows.items()}
    p_values[TWO_SIZES] = two.welch.p_value
    post_hoc = len(p_values) - len(gap_tests(results)) - len(CRITERIA)
    return Family(f"the budget-trend page ({len(gap_tests(results))} gaps and {len(CRITERIA)} "
                  f"trends, and {post_hoc} added after looking: the steps, the larger size's "
                  "rows and the two-size comparison)", p_values)
