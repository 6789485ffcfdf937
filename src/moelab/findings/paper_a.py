"""Paper A's question on the demo: dense − MoE best validation loss, matched on active and on
total parameters, pooled over the selection-free seeds of two results files.

The recipe (lr, head tying, warmup) was chosen on seeds 0-2 and the fair-lr check's seeds 0-2;
every seed pooled here trained the demo's exact configuration and chose no setting: the demo
study's seeds 617-622 and the fair-lr check's reporting seeds 1000-1007 (experiments/results/
demo_headline.json), and the four repetitions of ``study --until-resolved`` (seeds 100-111,
200-211, 300-310, 400-411; seeds_until_resolved.json). The gaps are paired by seed with the
study's own test (``moelab.study.gaps.compare``), Holm over the headline's two tests.
"""

from __future__ import annotations

from dataclasses import dataclass

from moelab.findings.source import ResultsRoot, SeedLosses, seed_losses
from moelab.report import format_number, markdown_table
from moelab.report.analysis import Analysis, Findings
from moelab.stats.intervals import summarize
from moelab.stats.multiple import holm
from moelab.stats.verdicts import Difference, Verdict, difference_verdict
from moelab.study.gaps import compare

ARMS = ("moe", "dense_active", "dense_total")
CRITERIA = {"matched active": "dense_active", "matched total": "dense_total"}
FAMILY = "Holm over the headline's 2 tests"
CHECK_SEEDS = range(100, 105)
"""Seeds docs/recipe.md says checked the recipe after it was chosen (they chose nothing, but
the headline is also shown without them)."""


@dataclass(frozen=True)
class SeedSet:
    """One block of seeds pooled into the headline, where it came from and what ran it."""

    name: str
    source: str
    seeds: list[int]
    machine: str


@dataclass(frozen=True)
class GapRow:
    criterion: str
    n: int
    gap: float
    ci: tuple[float, float]
    p: float
    p_holm: float
    min_detectable_gap: float
    verdict: Verdict


@dataclass(frozen=True)
class Headline:
    seed_sets: list[SeedSet]
    losses: dict[str, SeedLosses]
    gaps: list[GapRow]
    per_set: dict[str, dict[str, tuple[float, float, float]]]
    """{seed set: {criterion: (gap, ci low, ci high)}}, descriptive (no test)."""
    without_check: dict[str, tuple[float, float, float]]
    """The pool without the recipe's check seeds (CHECK_SEEDS), descriptive."""


def _seed_sets(results: ResultsRoot) -> tuple[list[SeedSet], dict[str, SeedLosses]]:
    headline = results.json("demo_headline.json")
    losses = {arm: seed_losses(headline["losses"][arm]) for arm in ARMS}
    sets = [SeedSet("demo study and fair-lr reporting seeds", "demo_headline.json",
                    sorted(losses["moe"]), "not recorded in the files")]
    for repetition in results.json("seeds_until_resolved.json")["repetitions"]:
        block = {arm: seed_losses(repetition["losses"][arm]) for arm in ARMS}
        sets.append(SeedSet(f"until-resolved, {repetition['folder']}",
                            "seeds_until_resolved.json", sorted(block["moe"]),
                            "not recorded in the file"))
        for arm in ARMS:
            overlap = losses[arm].keys() & block[arm].keys()
            if overlap:
                raise ValueError(f"seed {min(overlap)} is pooled twice")
            losses[arm].update(block[arm])
    return sets, losses


def compute(results: ResultsRoot, findings: Findings) -> Headline:
    sets, losses = _seed_sets(results)
    gaps = [compare(name, "moe", dense, losses["moe"], losses[dense])
            for name, dense in CRITERIA.items()]
    adjusted = holm([g.p_value for g in gaps])
    rows = [GapRow(g.criterion, g.n_moe, g.gap, (g.ci_low, g.ci_high), g.p_value, p_holm,
                   g.min_detectable_gap,
                   difference_verdict(Difference(g.gap, (g.ci_low, g.ci_high), p_holm, FAMILY),
                                      ahead="MoE ahead", behind="dense ahead"))
            for g, p_holm in zip(gaps, adjusted)]
    per_set = {}
    for seed_set in sets:
        subset = {arm: {s: losses[arm][s] for s in seed_set.seeds} for arm in ARMS}
        per_set[seed_set.name] = {
            name: (g.gap, g.ci_low, g.ci_high) for name, g in
            ((name, compare(name, "moe", dense, subset["moe"], subset[dense]))
             for name, dense in CRITERIA.items())}
    kept = {arm: {s: v for s, v in losses[arm].items() if s not in CHECK_SEEDS} for arm in ARMS}
    without = {name: (g.gap, g.ci_low, g.ci_high) for name, g in
               ((name, compare(name, "moe", dense, kept["moe"], kept[dense]))
                for name, dense in CRITERIA.items())}
    return Headline(sets, losses, rows, per_set, without)


def render(headline: Headline | None, results: ResultsRoot, findings: Findings) -> str:
    if headline is None:
        return ""
    n = len(headline.losses["moe"])
    arms = [[f"`{arm}`", str(len(headline.losses[arm])),
             format_number(summarize(list(headline.losses[arm].values())).mean),
             format_number(summarize(list(headline.losses[arm].values())).std)]
            for arm in ARMS]
    gaps = [[row.criterion, str(row.n), f"{row.gap:+.4f}", f"[{row.ci[0]:+.4f}, {row.ci[1]:+.4f}]",
             f"{row.p_holm:.2g}", f"{row.min_detectable_gap:.4f}",
             f"**{row.verdict.word}**"] for row in headline.gaps]
    sets = [[s.name, _seed_ranges(s.seeds), str(len(s.seeds)), f"`{s.source}`", s.machine,
             *(f"{g:+.4f} [{lo:+.4f}, {hi:+.4f}]" for g, lo, hi in headline.per_set[s.name].values())]
            for s in headline.seed_sets]
    checked = len(headline.losses["moe"]) - len([s for s in headline.losses["moe"]
                                                 if s not in CHECK_SEEDS])
    without = "; ".join(f"{name} {g:+.4f} [{lo:+.4f}, {hi:+.4f}]"
                        for name, (g, lo, hi) in headline.without_check.items())
    return ("## The demo's answer on the selection-free seeds\n\n"
            f"{n} seeds of the demo's configuration (`moelab study demo`: d_model 64, 4 layers, "
            "context 128, 409,600 tokens per run; `moe` is 4 experts of width 128, top-2). "
            "Best validation loss, nats/token:\n\n"
            + markdown_table(["arm", "seeds", "mean", "seed sd"], arms, "lrrr")
            + "\nDense − MoE, paired by seed (positive: the MoE is lower); p adjusted by Holm "
              "over the page's 2 tests; the verdict by rule (docs/verdicts.md):\n\n"
            + markdown_table(["criterion", "n", "gap", "95 % CI", "p (Holm)", "min. detectable gap",
                              "verdict"], gaps, "lrrrrrl")
            + "\nWhere the seeds come from; each block's own gaps are descriptive (its interval, "
              "no test):\n\n"
            + markdown_table(["seed set", "seeds", "n", "file", "CPU", "matched active",
                              "matched total"], sets, "llrllll")
            + f"\nWithout the {checked} seeds that checked the recipe after it was chosen "
              f"({CHECK_SEEDS.start}-{CHECK_SEEDS.stop - 1}, docs/recipe.md): {without}. Seeds "
              "3-7 of the demo's configuration (demo-seeds0-5*.json, demo-seeds0-6.json, "
              "demo-compiled-seeds0-7.json) are not pooled here: their files hold runs of "
              "several CPUs and compiled runs; docs/findings/study-by-hand.md reads them.\n")


def _seed_ranges(seeds: list[int]) -> str:
    """'100-111, 617-622' from a sorted seed list."""
    runs: list[list[int]] = []
    for seed in seeds:
        if runs and seed == runs[-1][-1] + 1:
            runs[-1].append(seed)
        else:
            runs.append([seed])
    return ", ".join(str(r[0]) if len(r) == 1 else f"{r[0]}-{r[-1]}" for r in runs)


ANALYSIS: Analysis[ResultsRoot, Headline] = Analysis("paper_a_headline", compute, render)


def summary(headline: Headline) -> str:
    """The README's line: both gaps on the whole pool, with their words."""
    gaps = "; ".join(f"{row.criterion} {row.gap:+.4f} [{row.ci[0]:+.4f}, {row.ci[1]:+.4f}], "
                     f"**{row.verdict.word}**" for row in headline.gaps)
    return (f"On the demo (about 0.4M parameters, 409,600 tokens per run, the demo's recipe), "
            f"over the {len(headline.losses['moe'])} selection-free seeds of two results files, "
            f"dense − MoE best validation loss: {gaps} (Holm over 2).")
