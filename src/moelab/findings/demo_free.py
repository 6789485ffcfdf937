"""The seeds that chose the demo's recipe, beside the seeds the demo-study page reports, and the
gaps pooled over every reported seed that chose nothing.

The recipe (docs/recipe.md) was chosen and checked on the ``demo`` rows of ``recipe.json`` and
on ``fair_lr.json``'s selection seeds (``moelab.findings.selection``). The page reports the demo
on seeds 0-5 and 617-622 (the first CPU's files are read here; the other CPUs re-ran the same
seeds) and the four ``--until-resolved`` blocks (``seeds_until_resolved.json``). The pool over
the seeds that chose nothing is descriptive: its seed set was drawn after the verdicts were read,
so it gets an interval and no verdict.
"""

from __future__ import annotations

from dataclasses import dataclass

from moelab.findings.selection import (
    FAIR_LR, RECIPE, demo_selection_seeds, describe_uses, recipe_seed_uses, seed_ranges,
)
from moelab.findings.source import ResultsRoot, SeedLosses, arm_losses, seed_losses
from moelab.report import markdown_table
from moelab.report.analysis import Analysis, Findings
from moelab.stats.t_tests import paired_difference

ARMS = ("moe", "dense_active", "dense_total")
CRITERIA = {"matched active": "dense_active", "matched total": "dense_total"}
DEMO_FILES = ("studies/demo-seeds0-5.json", "studies/demo-seeds617-622.json")
"""The first CPU's runs of the demo's two seed sets."""
UNTIL_RESOLVED = "seeds_until_resolved.json"


@dataclass(frozen=True)
class ReportedSet:
    source: str
    seeds: list[int]
    chose: list[int]
    """The seeds of this set that also chose or checked a setting of the recipe."""


@dataclass(frozen=True)
class FreeGap:
    criterion: str
    n: int
    gap: float
    ci: tuple[float, float]


@dataclass(frozen=True)
class SelectionFree:
    uses: str
    """The recipe grid's seed sets and what was tried on them."""
    fair_lr_seeds: list[int]
    reported: list[ReportedSet]
    free_seeds: list[int]
    gaps: list[FreeGap]


def _reported(results: ResultsRoot) -> list[tuple[str, dict[str, SeedLosses]]]:
    """(source, {arm: {seed: best val loss}}) for each reported seed set."""
    sets = []
    for file in DEMO_FILES:
        arms = results.json(file)["arms"]
        sets.append((f"`{file}`", {arm: arm_losses(arms, arm) for arm in ARMS}))
    for rep in results.json(UNTIL_RESOLVED)["repetitions"]:
        sets.append((f"until-resolved block {rep['first_seed']}",
                     {arm: seed_losses(rep["losses"][arm]) for arm in ARMS}))
    return sets


def compute(results: ResultsRoot, findings: Findings) -> SelectionFree:
    chose = demo_selection_seeds(results)
    reported: list[ReportedSet] = []
    pooled: dict[str, SeedLosses] = {arm: {} for arm in ARMS}
    for source, losses in _reported(results):
        seeds = sorted(losses["moe"])
        reported.append(ReportedSet(source, seeds, [s for s in seeds if s in chose]))
        for arm in ARMS:
            pooled[arm].update({s: v for s, v in losses[arm].items() if s not in chose})
    gaps = []
    for name, dense in CRITERIA.items():
        test = paired_difference(pooled[dense], pooled["moe"])
        gaps.append(FreeGap(name, test.n_pairs, test.gap, (test.ci_low, test.ci_high)))
    return SelectionFree(describe_uses(recipe_seed_uses(results, "demo")),
                         sorted(int(s) for s in results.json(FAIR_LR)["select_seeds"]),
                         reported, sorted(pooled["moe"]), gaps)


def render(record: SelectionFree | None, results: ResultsRoot, findings: Findings) -> str:
    if record is None:
        return ""
    overlap = "; ".join(f"{r.source}: seeds {seed_ranges(r.seeds)}, of which "
                        + (f"{seed_ranges(r.chose)} chose" if r.chose else "none chose")
                        for r in record.reported)
    rows = [[g.criterion, str(g.n), f"{g.gap:+.4f}", f"[{g.ci[0]:+.4f}, {g.ci[1]:+.4f}]"]
            for g in record.gaps]
    return ("## The seeds that chose the recipe\n\n"
            f"The recipe was chosen and checked on the demo grid of `{RECIPE}` ({record.uses}) "
            f"and each arm's lr once more on seeds {seed_ranges(record.fair_lr_seeds)} "
            f"(`{FAIR_LR}`). The seeds this page reports overlap them ({overlap}), so the "
            "verdicts below on "
            + ", ".join(seed_ranges(r.seeds) for r in record.reported if r.chose)
            + " read seeds that also chose the recipe they test.\n\n"
            "Dense − MoE pooled over every reported seed that chose nothing (seeds "
            f"{seed_ranges(record.free_seeds)}; seeds 0-5 and 617-622 from the first CPU's "
            "runs), paired by seed (positive: the MoE is lower). Descriptive: the pool was "
            "drawn after the verdicts below were read, so it has an interval and no verdict:\n\n"
            + markdown_table(["criterion", "n", "gap", "95 % CI"], rows, "lrrr")
            + "\nThe headline pool of every stored seed of the demo's configuration that chose "
              "no setting (this page's, plus seed 6 and the fair-lr check's reporting seeds, one "
              "CPU's run per seed), with its verdict and caveats, is on "
              "[dense-vs-moe.md](dense-vs-moe.md).\n")


ANALYSIS: Analysis[ResultsRoot, SelectionFree] = Analysis("demo_selection_free", compute,
                                                          render)
