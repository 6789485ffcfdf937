"""Which seeds chose a recipe: read from the files of the experiments that chose it, so a page
can name the seeds that chose a setting beside the seeds it reports (docs/verdicts.md: selection
and reporting seeds are disjoint, or the overlap is said).

``recipe.json`` holds every row of the recipe grid (``experiments/recipe.py``) with its seeds:
the demo's recipe (head, warmup, batch, lr, min lr, token budget) was chosen and checked on the
``demo`` grid's rows, cpu-replication's lr on the ``cpu-replication`` grid's. ``fair_lr.json``'s
selection seeds chose each arm's lr of the demo once more.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

from moelab.findings.source import ResultsRoot

RECIPE = "recipe.json"
FAIR_LR = "fair_lr.json"
CHOOSING_KINDS = ("grid", "trace")
"""recipe.json's entries that tried a setting (a rescoring entry re-reads trained runs)."""


@dataclass(frozen=True)
class SeedUse:
    """One set of seeds and the recipe-grid settings run on it."""

    seeds: tuple[int, ...]
    settings: list[str]


def recipe_seed_uses(results: ResultsRoot, grid: str) -> list[SeedUse]:
    """Each distinct seed set of recipe.json's ``grid`` rows and the settings tried on it, in the
    file's order."""
    uses: dict[tuple[int, ...], list[str]] = {}
    for entry in results.json(RECIPE):
        if entry.get("grid") == grid and entry.get("kind") in CHOOSING_KINDS:
            settings = uses.setdefault(tuple(int(s) for s in entry["seeds"]), [])
            label = str(entry["setting"]) + (" (trace)" if entry["kind"] == "trace" else "")
            if label not in settings:
                settings.append(label)
    return [SeedUse(seeds, settings) for seeds, settings in uses.items()]


def demo_selection_seeds(results: ResultsRoot) -> set[int]:
    """Every seed that chose or checked a setting of the demo's recipe: recipe.json's ``demo``
    grid and fair_lr.json's selection seeds."""
    seeds = {s for use in recipe_seed_uses(results, "demo") for s in use.seeds}
    return seeds | {int(s) for s in results.json(FAIR_LR)["select_seeds"]}


def seed_ranges(seeds: set[int] | list[int] | tuple[int, ...]) -> str:
    """'0-4, 100-104, 617': runs of consecutive seeds."""
    ordered = sorted(set(seeds))
    parts = []
    for _, run in itertools.groupby(enumerate(ordered), key=lambda pair: pair[1] - pair[0]):
        values = [seed for _, seed in run]
        parts.append(f"{values[0]}-{values[-1]}" if len(values) > 1 else f"{values[0]}")
    return ", ".join(parts)


def describe_uses(uses: list[SeedUse]) -> str:
    """'seeds 0-2 (14 settings), seeds 0-4 (`untied_warmup0.5_b8_614K`)': each seed set with
    the settings run on it (named when there are at most 2)."""
    parts = []
    for use in uses:
        traces = [s for s in use.settings if s.endswith(" (trace)")]
        named = (", ".join(f"`{s}`" for s in use.settings) if len(use.settings) <= 2
                 else f"{len(use.settings)} traces" if len(traces) == len(use.settings)
                 else f"{len(use.settings)} settings")
        parts.append(f"seeds {seed_ranges(use.seeds)} ({named})")
    return "; ".join(parts)
