"""E and k at one sparsity: does S alone fix the loss? cpu-topk trains S = 0.75 as 4-choose-1,
8-choose-2 and 16-choose-4 (total and active parameters equal up to the router) beside dense,
at two sizes, 3.7M tokens, seeds 0-2.

Each pair of E within a size is a paired t over the seeds (the same seed's runs share the data
order). The Holm family is the 12 comparisons the sweep's report makes (the 6 pairs and each
split against dense, here each paired by seed; the report shows them as intervals without an
adjustment); the words come from ``moelab.stats.verdicts``. The pairs alone
(a family chosen after the sweep had run) are shown as how much the choice decides.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass

from moelab.findings.source import ResultsRoot
from moelab.report import format_count, markdown_table
from moelab.report.analysis import Analysis, Findings
from moelab.stats.intervals import mean_interval, summarize, t_p_value
from moelab.stats.multiple import holm
from moelab.stats.verdicts import Difference, Verdict, difference_verdict
from moelab.sweep.folder import read_results

SWEEP = "sweeps/cpu-topk"
PAIRS = ((4, 8), (4, 16), (8, 16))


@dataclass(frozen=True)
class SizeMeans:
    size: str
    params: float
    dense: float
    by_experts: dict[int, float]
    """{E: mean best val loss} of the sparse cells."""


@dataclass(frozen=True)
class ExpertPair:
    """Loss with ``more`` experts minus with ``fewer``, paired by seed."""

    size: str
    fewer: int
    more: int
    estimate: float
    ci: tuple[float, float]
    p: float
    p_holm: float
    verdict: Verdict


@dataclass(frozen=True)
class TopK:
    sparsity: float
    seeds: list[str]
    sizes: list[SizeMeans]
    pairs: list[ExpertPair]
    family: str
    separated_pairs_only: int
    """Pairs separated when the family is the 6 pairs alone (chosen after the sweep had run):
    how much the family's choice decides."""
    pairs_only_family: str


def _paired(more: dict[str, float], fewer: dict[str, float]) -> tuple[float, tuple[float, float], float]:
    seeds = sorted(more.keys() & fewer.keys())
    values = [more[s] - fewer[s] for s in seeds]
    summary, interval = summarize(values), mean_interval(values)
    p = t_p_value(summary.mean, summary.std / math.sqrt(summary.n), summary.n - 1)
    ci = (interval.low, interval.high) if interval else (math.nan, math.nan)
    return summary.mean, ci, math.nan if p is None else p


def compute(results: ResultsRoot, findings: Findings) -> TopK:
    table = read_results(results.root / SWEEP)
    if table is None:
        raise ValueError(f"{SWEEP} has no results")
    losses: dict[str, dict[int, dict[str, float]]] = defaultdict(lambda: defaultdict(dict))
    params: dict[str, float] = {}
    sparsity = max(row.S for row in table.rows)
    for row in table.rows:
        experts = 0 if row.S == 0 else int(row.E)
        losses[row.size][experts][row.seed] = row.best_val_loss
        if row.S == 0:
            params[row.size] = row.N_total
    sizes = sorted(losses, key=lambda s: params[s])
    means = [SizeMeans(s, params[s], summarize(list(losses[s][0].values())).mean,
                       {e: summarize(list(v.values())).mean
                        for e, v in sorted(losses[s].items()) if e})
             for s in sizes]
    raw = [(s, fewer, more, *_paired(losses[s][more], losses[s][fewer]))
           for s in sizes for fewer, more in PAIRS]
    versus_dense = [_paired(losses[s][e], losses[s][0])[2] for s in sizes
                    for e in sorted(losses[s]) if e]
    family = (f"Holm over {len(raw) + len(versus_dense)} tests: these {len(raw)} pairs and "
              "each split against dense, paired by seed")
    adjusted = holm([r[5] for r in raw] + versus_dense)[:len(raw)]
    pairs = [ExpertPair(s, fewer, more, est, ci, p, p_holm, difference_verdict(
        Difference(est, ci, p_holm, family), ahead="more experts higher",
        behind="more experts lower"))
        for (s, fewer, more, est, ci, p), p_holm in zip(raw, adjusted)]
    pairs_only = holm([r[5] for r in raw])
    separated = sum(difference_verdict(Difference(p.estimate, p.ci, q, "")).word != "not separated"
                    for p, q in zip(pairs, pairs_only))
    pairs_only_family = f"Holm over the {len(raw)} pairs alone"
    seeds = sorted({row.seed for row in table.rows})
    return TopK(sparsity, seeds, means, pairs, family, separated, pairs_only_family)


def _k(experts: int, sparsity: float) -> int:
    return round(experts * (1 - sparsity))


def render(record: TopK | None, results: ResultsRoot, findings: Findings) -> str:
    if record is None:
        return ""
    splits = sorted(record.sizes[0].by_experts)
    names = [f"{e}-choose-{_k(e, record.sparsity)}" for e in splits]
    means = [[f"{m.size} ({format_count(m.params)} total)", f"{m.dense:.4f}",
              *(f"{m.by_experts[e]:.4f}" for e in splits)] for m in record.sizes]
    pairs = [[p.size, f"E = {p.more} minus E = {p.fewer}", f"{p.estimate:+.3f}",
              f"[{p.ci[0]:+.3f}, {p.ci[1]:+.3f}]", f"{p.p:.2g}", f"{p.p_holm:.2g}",
              f"**{p.verdict.word}**"] for p in record.pairs]
    return (f"## E and k at S = {record.sparsity:g} (cpu-topk)\n\n"
            f"Mean best validation loss over seeds {', '.join(record.seeds)} "
            f"(`{SWEEP}/results.csv`):\n\n"
            + markdown_table(["size", "dense", *names], means, "l" + "r" * (1 + len(names)))
            + f"\nEach pair of E at one size, paired by seed ({record.family}); negative: more "
              "experts, lower loss:\n\n"
            + markdown_table(["size", "pair", "loss difference", "95 % CI", "p", "p (Holm)",
                              "verdict"], pairs, "llrrrrl")
            + "\nThe family is the comparisons the sweep's report makes (it shows them as "
              "intervals without an adjustment); with "
              f"{record.pairs_only_family} (a family chosen after the sweep had run), "
              f"{record.separated_pairs_only} of {len(record.pairs)} pairs would be separated, "
              "so the count depends on that choice.\n"
            + "\nConfounded: 4-choose-1 weights its expert by the router probability (Switch), "
              "8-choose-2 and 16-choose-4 renormalise their k weights (Mixtral); the control "
              "with every k weighted by its raw probability (`--set "
              "model.moe.norm_topk_prob=false`) is not run. Splitting the same d_ff into more, "
              "narrower experts also changes granularity.\n")


ANALYSIS: Analysis[ResultsRoot, TopK] = Analysis("topk", compute, render)


def summary(record: TopK) -> str:
    lower = [p for p in record.pairs if p.verdict.word == "more experts lower"]
    named = ", ".join(f"{p.more}-choose-{_k(p.more, record.sparsity)} over "
                      f"{p.fewer}-choose-{_k(p.fewer, record.sparsity)} at {p.size}"
                      for p in lower)
    return (f"E and k at S = {record.sparsity:g} (cpu-topk, 3 seeds, equal total and active "
            f"size): {len(lower)} of {len(record.pairs)} pairs **more experts lower** after Holm"
            + (f" ({named})" if named else "")
            + f" ({record.family}; {record.separated_pairs_only} with the pairs alone, a "
              "family chosen after the run); confounded with the weighting rule.")
