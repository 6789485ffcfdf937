"""The seeds that chose the demo's recipe, beside the seeds the demo-study page reports.

The recipe (docs/recipe.md) was chosen and checked on the ``demo`` rows of ``recipe.json`` and
on ``fair_lr.json``'s selection seeds (``moelab.findings.selection``). The page reports the demo
on seeds 0-5 and 617-622 (the first CPU's files are read here; the other CPUs re-ran the same
seeds) and the four ``--until-resolved`` blocks (``seeds_until_resolved.json``). The gaps
pooled over the seeds that chose nothing are the headline of ``paper_a`` (dense-vs-moe.md).
"""

from __future__ import annotations

from dataclasses import dataclass

from moelab.findings.selection import (
    FAIR_LR, RECIPE, demo_selection_seeds, describe_uses, recipe_seed_uses, seed_ranges,
)
from moelab.findings.source import ResultsRoot, arm_losses, seed_losses
from moelab.report.analysis import Analysis, Findings

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
class SelectionFree:
    uses: str
    """The recipe grid's seed sets and what was tried on them."""
    fair_lr_seeds: list[int]
    reported: list[ReportedSet]


def _reported(results: ResultsRoot) -> list[tuple[str, list[int]]]:
    """(source, seeds) of each reported seed set."""
    sets = [(f"`{file}`", sorted(arm_losses(results.json(file)["arms"], "moe")))
            for file in DEMO_FILES]
    for rep in results.json(UNTIL_RESOLVED)["repetitions"]:
        sets.append((f"until-resolved block {rep['first_seed']}",
                     sorted(seed_losses(rep["losses"]["moe"]))))
    return sets


def compute(results: ResultsRoot, findings: Findings) -> SelectionFree:
    chose = demo_selection_seeds(results)
    reported = [ReportedSet(source, seeds, [s for s in seeds if s in chose])
                for source, seeds in _reported(results)]
    return SelectionFree(describe_uses(recipe_seed_uses(results, "demo")),
                         sorted(int(s) for s in results.json(FAIR_LR)["select_seeds"]),
                         reported)


def render(record: SelectionFree | None, results: ResultsRoot, findings: Findings) -> str:
    if record is None:
        return ""
    overlap = "; ".join(f"{r.source}: seeds {seed_ranges(r.seeds)}, of which "
                        + (f"{seed_ranges(r.chose)} chose" if r.chose else "none chose")
                        for r in record.reported)
    return ("## The seeds that chose the recipe\n\n"
            f"The recipe was chosen and checked on the demo grid of `{RECIPE}` ({record.uses}) "
            f"and each arm's lr once more on seeds {seed_ranges(record.fair_lr_seeds)} "
            f"(`{FAIR_LR}`). The seeds this page reports overlap them ({overlap}), so the "
            "verdicts below on "
            + ", ".join(seed_ranges(r.seeds) for r in record.reported if r.chose)
            + " read seeds that also chose the recipe they test. The gaps over every stored "
              "seed of the demo's configuration that chose no setting (this page's seeds without "
              "those, plus seed 6 and the fair-lr check's reporting seeds, one CPU's run per "
              "seed), with their verdict and caveats, are the headline on "
              "[dense-vs-moe.md](dense-vs-moe.md).\n")


ANALYSIS: Analysis[ResultsRoot, SelectionFree] = Analysis("demo_selection_free", compute,
                                                          render)
