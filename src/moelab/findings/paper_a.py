"""Paper A's question on the demo: dense − MoE best validation loss, matched on active and on
total parameters, pooled over every seed of the demo's configuration that chose no setting.

The recipe (head tying, warmup, lr, min lr, token budget) was chosen and checked on the seeds
``moelab.findings.selection`` reads from recipe.json's ``demo`` rows and fair_lr.json's selection
seeds (0-4, 100-104, 617-621 among them). The pool takes every stored seed of the demo's exact
configuration (one CPU's run per seed) and drops those: the demo study's seeds 0-5 and 617-622
(the third CPU's files, as experiments/results/demo_headline.json reads 617-622 from it), the
fair-lr check's reporting seeds 1000-1007 (demo_headline.json) and the four repetitions of
``study --until-resolved`` (seeds 100-111, 200-211, 300-310, 400-411;
seeds_until_resolved.json). The gaps are paired by seed with the study's own test
(``moelab.study.gaps.compare``), Holm over the headline's two tests; the pool with the choosing
seeds added back is shown beside it, descriptive.
"""

from __future__ import annotations

from dataclasses import dataclass

from moelab.findings.demo_cpus import CPUS
from moelab.findings.selection import demo_selection_seeds, seed_ranges
from moelab.findings.source import ResultsRoot, SeedLosses, arm_losses, seed_losses
from moelab.report import format_number, markdown_table
from moelab.report.analysis import Analysis, Findings
from moelab.stats.intervals import summarize
from moelab.stats.multiple import holm
from moelab.stats.verdicts import Difference, Verdict, difference_verdict
from moelab.study.gaps import compare

ARMS = ("moe", "dense_active", "dense_total")
CRITERIA = {"matched active": "dense_active", "matched total": "dense_total"}
FAMILY = "Holm over the headline's 2 tests"
FIRST_SEEDS = "studies/demo-seeds0-5-cpu3.json"
"""The demo study's seeds 0-5 on the CPU whose 617-622 demo_headline.json pools."""
SEVENTH_SEED = ("studies/demo-seeds0-6.json", 6)
"""The one demo seed past 0-5 trained eagerly (the first CPU's seven-seed study)."""
THIRD_CPU = "third CPU of demo-study.md (" + CPUS["third"][1] + ")"


@dataclass(frozen=True)
class SeedSet:
    """One block of seeds pooled into the headline, where it came from and what ran it."""

    name: str
    source: str
    seeds: list[int]
    cpu: str
    chose: list[int]
    """The seeds of this set that chose or checked a setting: left out of the pool."""


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
    with_choosing: dict[str, tuple[float, float, float]]
    """{criterion: (gap, ci low, ci high)} with the choosing seeds added back, descriptive."""


def _study_losses(results: ResultsRoot, file: str, seeds: set[int] | None = None
                  ) -> dict[str, SeedLosses]:
    arms = results.json(file)["arms"]
    return {arm: {seed: loss for seed, loss in arm_losses(arms, arm).items()
                  if seeds is None or seed in seeds} for arm in ARMS}


def _stored_sets(results: ResultsRoot) -> list[tuple[str, str, str, dict[str, SeedLosses]]]:
    """(name, source, CPU, {arm: {seed: best val loss}}) of every stored seed block of the
    demo's configuration, one eager run per seed."""
    headline = results.json("demo_headline.json")
    seventh_file, seventh = SEVENTH_SEED
    sets = [("demo study, seeds 0-5", f"`{FIRST_SEEDS}`", THIRD_CPU,
             _study_losses(results, FIRST_SEEDS)),
            ("demo study, seed 6", f"`{seventh_file}`", "first CPU of demo-study.md (not recorded)",
             _study_losses(results, seventh_file, {seventh})),
            ("demo study 617-622 and fair-lr reporting seeds",
             "`demo_headline.json` (" + ", ".join(headline["sources"]) + ")", THIRD_CPU
             + "; fair_lr.json's runs at lr 0.01 equal its seeds 0-5",
             {arm: seed_losses(headline["losses"][arm]) for arm in ARMS})]
    for repetition in results.json("seeds_until_resolved.json")["repetitions"]:
        sets.append((f"until-resolved, {repetition['folder']}", "`seeds_until_resolved.json`",
                     "not recorded in the file",
                     {arm: seed_losses(repetition["losses"][arm]) for arm in ARMS}))
    return sets


def _seed_sets(results: ResultsRoot) -> tuple[list[SeedSet], dict[str, SeedLosses],
                                                dict[str, SeedLosses]]:
    """The seed sets, the selection-free pool and the pool with the choosing seeds."""
    chose = demo_selection_seeds(results)
    sets: list[SeedSet] = []
    free: dict[str, SeedLosses] = {arm: {} for arm in ARMS}
    every: dict[str, SeedLosses] = {arm: {} for arm in ARMS}
    for name, source, cpu, block in _stored_sets(results):
        seeds = sorted(block["moe"])
        sets.append(SeedSet(name, source, seeds, cpu, [s for s in seeds if s in chose]))
        for arm in ARMS:
            overlap = every[arm].keys() & block[arm].keys()
            if overlap:
                raise ValueError(f"seed {min(overlap)} is pooled twice")
            every[arm].update(block[arm])
            free[arm].update({s: v for s, v in block[arm].items() if s not in chose})
    return sets, free, every


def _gaps(losses: dict[str, SeedLosses]) -> dict[str, tuple[float, float, float]]:
    return {name: (g.gap, g.ci_low, g.ci_high) for name, g in
            ((name, compare(name, "moe", dense, losses["moe"], losses[dense]))
             for name, dense in CRITERIA.items())}


def compute(results: ResultsRoot, findings: Findings) -> Headline:
    sets, losses, every = _seed_sets(results)
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
        free = [s for s in seed_set.seeds if s not in seed_set.chose]
        if len(free) >= 2:
            per_set[seed_set.name] = _gaps({arm: {s: losses[arm][s] for s in free}
                                            for arm in ARMS})
    return Headline(sets, losses, rows, per_set, _gaps(every))


def _set_gaps(headline: Headline, name: str) -> list[str]:
    if name not in headline.per_set:
        return ["–", "–"]
    return [f"{g:+.4f} [{lo:+.4f}, {hi:+.4f}]" for g, lo, hi in headline.per_set[name].values()]


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
    sets = [[s.name, seed_ranges(s.seeds), seed_ranges(s.chose) or "–",
             str(len(s.seeds) - len(s.chose)), s.source, s.cpu,
             *_set_gaps(headline, s.name)] for s in headline.seed_sets]
    chose = sorted(seed for s in headline.seed_sets for seed in s.chose)
    stopped = sum(len(s.seeds) - len(s.chose) for s in headline.seed_sets
                  if s.source == "`seeds_until_resolved.json`")
    added = "; ".join(f"{name} {g:+.4f} [{lo:+.4f}, {hi:+.4f}]"
                      for name, (g, lo, hi) in headline.with_choosing.items())
    return ("## The demo's answer on the selection-free seeds\n\n"
            f"{n} seeds of the demo's configuration (`moelab study demo`: d_model 64, 4 layers, "
            "context 128, 409,600 tokens per run; `moe` is 4 experts of width 128, top-2). "
            "Best validation loss, nats/token:\n\n"
            + markdown_table(["arm", "seeds", "mean", "seed sd"], arms, "lrrr")
            + "\nDense − MoE, paired by seed (positive: the MoE is lower); p adjusted by Holm "
              "over this section's 2 tests (its own family); the verdict by rule (docs/verdicts.md). "
              "The pool follows the rule 'every seed that chose no setting', applied after the "
              f"blocks' own verdicts were read, and {stopped} of its seeds come from the until-resolved "
              "blocks, whose sizes a stopping rule set (demo-study.md): this fixed-n test "
              "ignores those looks.\n\n"
            + markdown_table(["criterion", "n", "gap", "95 % CI", "p (Holm)", "min. detectable gap",
                              "verdict"], gaps, "lrrrrrl")
            + "\nWhere the seeds come from: every stored block of the demo's configuration, one "
              "CPU's run per seed; the seeds that chose or checked a setting of the recipe "
              "(recipe.json's `demo` rows, fair_lr.json's selection seeds) are left out. Each "
              "block's own gaps over its pooled seeds are descriptive (its interval, no test):\n\n"
            + markdown_table(["seed set", "seeds", "left out (chose)", "pooled", "file", "CPU",
                              "matched active", "matched total"], sets, "lllrllll")
            + f"\nWith the {len(chose)} choosing seeds added back ({seed_ranges(chose)}; "
              f"descriptive): {added}. Not pooled: the other CPUs' runs of the same seeds "
              "(demo-study.md); the compiled runs "
              "(`demo-compiled-seeds0-7.json`, docs/recipe.md), another engine path, whose only "
              "new seed is 7; and the recipe factorial's `untied_warmup0.5` cell (seeds "
              "3100-3105), whose dense_total trains at its own chosen lr, not the demo's.\n")


ANALYSIS: Analysis[ResultsRoot, Headline] = Analysis("paper_a_headline", compute, render)


def summary(headline: Headline) -> str:
    """The README's line: both gaps on the whole pool, with their words."""
    gaps = "; ".join(f"{row.criterion} {row.gap:+.4f} [{row.ci[0]:+.4f}, {row.ci[1]:+.4f}], "
                     f"**{row.verdict.word}**" for row in headline.gaps)
    return (f"On the demo (about 0.4M parameters, 409,600 tokens per run, the demo's recipe), "
            f"over the {len(headline.losses['moe'])} seeds that chose no setting, "
            f"dense − MoE best validation loss: {gaps} (Holm over 2).")
