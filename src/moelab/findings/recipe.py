"""The recipe factorial: does the matched-total gap's sign depend on the recipe?

experiments/recipe_factorial.py trained the demo's arms in a 2 x 2 of head tying (tied /
untied) x warmup (2 % / 50 % of the steps), each arm's lr chosen per cell on seeds 3000-3001
and reported on seeds 3100-3105; a fifth cell (tied, 10 % warmup) was added afterwards with a
family of its own. This page recomputes from the per-seed losses stored in
recipe_factorial.json: the pre-set family (the 2 x 2's 12 gaps and 3 contrasts of the
matched-total gap), then, labelled post hoc, the simple effects that the unstable cell leaves
measurable, with the Holm family enlarged by them.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field

from moelab.findings.source import ResultsRoot, SeedLosses, seed_losses
from moelab.report import markdown_table
from moelab.report.analysis import Analysis, Findings
from moelab.stats.intervals import mean_interval, summarize, t_p_value
from moelab.stats.multiple import holm
from moelab.stats.verdicts import Difference, Verdict, difference_verdict

FILE = "recipe_factorial.json"
CRITERIA = {"active": ("moe", "dense_active"), "total": ("moe", "dense_total"),
            "compute": ("moe_compute", "dense_total")}
"""Each criterion's (MoE arm, dense arm); the gap is dense − MoE."""
PRESET_CONTRASTS = {
    "tied − untied": {"tied_warmup0.02": 0.5, "tied_warmup0.5": 0.5,
                      "untied_warmup0.02": -0.5, "untied_warmup0.5": -0.5},
    "warmup 2 % − 50 %": {"tied_warmup0.02": 0.5, "untied_warmup0.02": 0.5,
                          "tied_warmup0.5": -0.5, "untied_warmup0.5": -0.5},
    "interaction (tie x warmup)": {"tied_warmup0.02": 1.0, "tied_warmup0.5": -1.0,
                                   "untied_warmup0.02": -1.0, "untied_warmup0.5": 1.0},
}
"""The pre-set contrasts of the matched-total gap (weights over cells)."""
POST_HOC_CONTRASTS = {
    "tying, at warmup 50 %": {"tied_warmup0.5": 1.0, "untied_warmup0.5": -1.0},
    "2 % warmup, untied head": {"untied_warmup0.02": 1.0, "untied_warmup0.5": -1.0},
    "tying's effect − the warmup's": {"tied_warmup0.5": 1.0, "untied_warmup0.02": -1.0},
}
"""Post hoc contrasts of the matched-total gap that avoid the unstable tied + 2 % cell."""
UNSTABLE_FACTOR = 3.0
"""A cell is unstable when one of its arms' seed sd exceeds this many times the median arm sd
of the factorial (stable cells here are within 0.034 nats; the median is about 0.02)."""


@dataclass(frozen=True)
class Test:
    """One test of the page: an estimate over the reporting seeds, its interval and p."""

    name: str
    family: str
    estimate: float
    ci: tuple[float, float]
    p: float
    n: int
    contrast: bool = False
    """A contrast of the matched-total gap (else a dense − MoE gap)."""
    p_holm: float = math.nan
    verdict: Verdict = field(default_factory=lambda: Verdict("undetermined", "not adjusted"))


@dataclass(frozen=True)
class Factorial:
    seeds: list[int]
    lrs: dict[str, dict[str, float]]
    means: dict[str, dict[str, float]]
    sds: dict[str, dict[str, float]]
    unstable: list[str]
    preset: list[Test]
    """The pre-set tests, adjusted (and read) in the family enlarged by the post hoc ones."""
    preset_holm: list[float]
    """Their Holm p over the pre-set family alone, as it was fixed before looking."""
    post_hoc: list[Test]
    added_cell: list[Test]
    own_best: dict[str, str]
    """{arm: the cell of its lowest mean loss} over the 2 x 2 (not a test)."""
    lr_grid: list[float]


def _gap_by_seed(cell_runs: dict[str, SeedLosses], moe: str, dense: str) -> SeedLosses:
    return {s: cell_runs[dense][s] - cell_runs[moe][s] for s in cell_runs[moe]}


def _test(name: str, family: str, values: list[float]) -> Test:
    summary = summarize(values)
    interval = mean_interval(values)
    se = summary.std / math.sqrt(summary.n)
    p = t_p_value(summary.mean, se, summary.n - 1)
    return Test(name, family, summary.mean, (interval.low, interval.high) if interval else
                (math.nan, math.nan), math.nan if p is None else p, summary.n)


def _contrast(name: str, family: str, weights: dict[str, float],
              gaps: dict[str, SeedLosses]) -> Test:
    seeds = sorted(next(iter(gaps.values())))
    test = _test(name, family, [sum(w * gaps[cell][s] for cell, w in weights.items())
                                for s in seeds])
    return Test(test.name, family, test.estimate, test.ci, test.p, test.n, contrast=True)


def _adjust(tests: list[Test], family: str) -> list[Test]:
    adjusted = holm([t.p for t in tests])
    words = {False: ("MoE ahead", "dense ahead"), True: ("raises the gap", "lowers the gap")}
    return [Test(t.name, family, t.estimate, t.ci, t.p, t.n, t.contrast, p,
                 difference_verdict(Difference(t.estimate, t.ci, p, family),
                                    ahead=words[t.contrast][0], behind=words[t.contrast][1]))
            for t, p in zip(tests, adjusted)]


def compute(results: ResultsRoot, findings: Findings) -> Factorial:
    record = results.json(FILE)
    report, factorial = record["report"], record["factorial"]
    runs = {cell: {arm: seed_losses(by_seed, "best_val_loss")
                   for arm, by_seed in report[cell]["runs"].items()} for cell in report}
    gaps = {cell: {criterion: _gap_by_seed(runs[cell], *arms)
                   for criterion, arms in CRITERIA.items()} for cell in runs}
    total = {cell: gaps[cell]["total"] for cell in gaps}
    preset = [_test(f"{cell}: matched {criterion}", "pre-set",
                    list(gaps[cell][criterion].values()))
              for cell in factorial for criterion in CRITERIA]
    preset += [_contrast(name, "pre-set", weights, total)
               for name, weights in PRESET_CONTRASTS.items()]
    post_hoc = [_contrast(name, "post hoc", weights, total)
                for name, weights in POST_HOC_CONTRASTS.items()]
    enlarged = f"Holm over the {len(preset) + len(post_hoc)} tests (pre-set and post hoc)"
    adjusted = _adjust(preset + post_hoc, enlarged)
    preset_only = _adjust(preset, f"Holm over the {len(preset)} pre-set tests")
    added = [cell for cell in runs if cell not in factorial]
    added_tests = _adjust([_test(f"{cell}: matched {criterion}", "added cell",
                                 list(gaps[cell][criterion].values()))
                           for cell in added for criterion in CRITERIA],
                          f"Holm over the added cell's {len(added) * len(CRITERIA)} tests")
    means = {cell: {arm: statistics.fmean(v.values()) for arm, v in runs[cell].items()}
             for cell in runs}
    sds = {cell: {arm: statistics.stdev(v.values()) for arm, v in runs[cell].items()}
           for cell in runs}
    median_sd = statistics.median(sd for cell in sds.values() for sd in cell.values())
    unstable = [cell for cell in runs
                if max(sds[cell].values()) > UNSTABLE_FACTOR * median_sd]
    arms = list(next(iter(runs.values())))
    own_best = {arm: min(factorial, key=lambda cell: means[cell][arm]) for arm in arms}
    return Factorial(sorted(int(s) for s in record["report_seeds"]),
                     {cell: report[cell]["lr"] for cell in runs}, means, sds, unstable,
                     adjusted[:len(preset)], [t.p_holm for t in preset_only],
                     adjusted[len(preset):], added_tests, own_best,
                     sorted(float(lr) for lr in record["lrs"]))


def _rows(tests: list[Test]) -> list[list[str]]:
    return [[t.name, f"{t.estimate:+.4f}", f"[{t.ci[0]:+.4f}, {t.ci[1]:+.4f}]", f"{t.p:.2g}",
             f"{t.p_holm:.2g}", f"**{t.verdict.word}**"] for t in tests]


def _preset_rows(factorial: Factorial) -> list[list[str]]:
    """The pre-set tests with both Holm columns: the pre-set family's and the enlarged one's,
    whose p the verdict reads."""
    return [[*row[:4], f"{alone:.2g}", *row[4:]]
            for row, alone in zip(_rows(factorial.preset), factorial.preset_holm)]


HEADERS = ["test", "estimate", "95 % CI", "p", "p (Holm)", "verdict"]
PRESET_HEADERS = ["test", "estimate", "95 % CI", "p", "p (Holm, pre-set 15)",
                  "p (Holm, with post hoc)", "verdict"]


def render(factorial: Factorial | None, results: ResultsRoot, findings: Findings) -> str:
    if factorial is None:
        return ""
    cells = list(factorial.means)
    arms = list(factorial.means[cells[0]])
    loss_rows = [[cell + (" (unstable)" if cell in factorial.unstable else ""),
                  *(f"{factorial.means[cell][arm]:.4f} ± {factorial.sds[cell][arm]:.4f} "
                    f"(lr {factorial.lrs[cell][arm]:g})" for arm in arms)] for cell in cells]
    best = ", ".join(f"`{arm}`: {cell}" for arm, cell in factorial.own_best.items())
    best += _common_best_sentence(factorial)
    return ("## The recipe factorial\n\n"
            f"Reporting seeds {factorial.seeds[0]}-{factorial.seeds[-1]} "
            f"(`{FILE}`; each arm's lr chosen per cell on other seeds). Best validation loss, "
            "mean ± seed sd:\n\n"
            + markdown_table(["cell", *arms], loss_rows, "l" + "r" * len(arms))
            + f"\nUnstable (an arm's seed sd above {UNSTABLE_FACTOR:g}x the factorial's median): "
            + (", ".join(factorial.unstable) or "none") + ".\n\n"
            "### The pre-set family\n\nGaps are dense − MoE (positive: the MoE is lower); "
            "'matched compute' is dense_total against `moe_compute`, the MoE trained on "
            "dense_total's training FLOPs (1.5-1.6x the tokens) at the MoE's lr, which was not "
            "tuned for that longer run. The contrasts are of the matched-total gap. Once the post "
            "hoc tests below join the family, every verdict reads the enlarged family's p.\n\n"
            + markdown_table(PRESET_HEADERS, _preset_rows(factorial), "lrrrrrl")
            + "\n### Post hoc: the simple effects the unstable cell leaves measurable\n\n"
            "Contrasts of the matched-total gap between stable cells only, labelled post hoc; "
            "their p is adjusted over the pre-set tests and these together: "
            f"{factorial.post_hoc[0].family}.\n\n"
            + markdown_table(HEADERS, _rows(factorial.post_hoc), "lrrrrl")
            + "\nThe interaction needs the unstable tied + 2 % cell, so it stays as the pre-set "
            "family reads it.\n\n"
            f"Each arm's own best cell of the 2 x 2 (lowest mean, not a test): {best}.\n\n"
            "### The added cell (its own family)\n\n"
            + markdown_table(HEADERS, _rows(factorial.added_cell), "lrrrrl"))


def _common_best_sentence(factorial: Factorial) -> str:
    """When the MoE and both dense arms share their own best cell, the gaps there."""
    cells = {factorial.own_best.get(arm) for arm in ("moe", "dense_active", "dense_total")}
    cell = cells.pop() if len(cells) == 1 else None
    if cell is None:
        return ""
    tests = [t for t in factorial.preset if t.name.startswith(f"{cell}: matched ")
             and not t.name.endswith("compute")]
    readings = "; ".join(f"{t.name.split(': ')[1]} {t.estimate:+.4f} "
                         f"[{t.ci[0]:+.4f}, {t.ci[1]:+.4f}], {t.verdict.word}" for t in tests)
    at_edge = [arm for arm, lr in factorial.lrs[cell].items()
               if arm in ("moe", "dense_active", "dense_total")
               and lr in (factorial.lr_grid[0], factorial.lr_grid[-1])]
    edge = (f"; {', '.join(at_edge)} chose its lr there at the edge of the lr grid "
            f"({factorial.lr_grid[0]:g}-{factorial.lr_grid[-1]:g})" if at_edge else "")
    return (f". The MoE and both dense arms each have their lowest mean in {cell}; "
            f"there: {readings} ({tests[0].family}){edge}")


ANALYSIS: Analysis[ResultsRoot, Factorial] = Analysis("recipe_factorial", compute, render)


def summary(factorial: Factorial) -> str:
    """The README's line: the post hoc simple effects and the shared best recipe."""
    effects = "; ".join(f"{t.name} {t.estimate:+.3f} [{t.ci[0]:+.3f}, {t.ci[1]:+.3f}], "
                        f"**{t.verdict.word}**" for t in factorial.post_hoc[:2])
    return (f"Recipe factorial: post hoc, in its stable cells, {effects} "
            f"({factorial.post_hoc[0].family}); the pre-set main effects and interaction are not "
            "separated" + _common_best_sentence(factorial) + ".")
