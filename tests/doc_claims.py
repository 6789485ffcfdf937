"""The numbers the docs and the README quote, recomputed from the stored results they come from.

    .venv/bin/python tests/doc_claims.py      # every claim; exit 1 if one fails

``tests/test_claims.py`` runs every claim in the suite. A claim fails when the doc no longer
contains its quoted text, or when the text rebuilt from the results file differs from it: a
number edited in the doc, or a results file rerun, is caught either way.

A claim is one row of ``CLAIMS``: the doc, the text exactly as the doc has it (a line break
or a run of spaces reads as one space, since the docs wrap their lines), and a function that
rebuilds that text from a file under experiments/results/. The functions recompute from the
per-seed (or per-point) losses with scipy wherever the file holds them, rather than copy a
statistic the file stores. To add one, append a ``Claim``; the helpers below read the files
and format the numbers the way the docs write them.
"""

from __future__ import annotations

import functools
import json
import math
import re
import sys
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Optional
from collections.abc import Callable

import numpy as np
from scipy import stats
from scipy.optimize import brentq

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "experiments" / "results"
if str(ROOT / "src") not in sys.path:  # run as a script from a checkout
    sys.path.insert(0, str(ROOT / "src"))

from moelab.codec import from_json  # noqa: E402
from moelab.scaling.isoflop_sparsity import SparsityOptima  # noqa: E402
from moelab.stats.multiple import holm  # noqa: E402
from moelab.stats.power import min_detectable_gap  # noqa: E402
from moelab.study.results import read_results_json  # noqa: E402
from moelab.sweep.analyses.isoflop import IsoflopRecord  # noqa: E402
from moelab.sweep.analyses.law_fit import SweepFit  # noqa: E402
from moelab.sweep.folder import read_results  # noqa: E402
from moelab.sweep.results_csv import ResultRow  # noqa: E402


@dataclass(frozen=True)
class Claim:
    doc: str
    """Relative to the repository root."""
    quoted: str
    """The text as the doc has it (whitespace folded)."""
    recompute: Callable[[], str]
    """Rebuilds ``quoted`` from a results file."""


# --------------------------------------------------------------------------------------------
# Reading the results files
# --------------------------------------------------------------------------------------------


@functools.cache
def load(name: str):
    """A JSON file under experiments/results/ (``studies/demo-seeds0-5.json``)."""
    return json.loads((RESULTS / name).read_text("utf-8"))


def losses(study: str, arm: str, tokens: Optional[int] = None) -> dict[int, float]:
    """{seed: best val loss} of an arm in a stored study's results.json (at a budget), read as
    moelab reads a results.json (typed records)."""
    results = read_results_json(study, load(f"studies/{study}.json"))
    arms = results.arms if tokens is None else next(
        group.arms for group in results.budgets if group.tokens == tokens)
    return {run.seed: run.best_val_loss for run in arms[arm].runs}


def sweep_file(sweep: str, name: str, record: type):
    """A stored sweep's analysis file as its typed record (``moelab.codec``)."""
    return from_json(record, load(f"sweeps/{sweep}/{name}"))


def isoflop_optima(sweep: str) -> SparsityOptima:
    optima = sweep_file(sweep, "isoflop.json", IsoflopRecord).sparsity_optima
    assert optima is not None, f"{sweep}'s isoflop.json has no sparsity optima"
    return optima


@dataclass
class Paired:
    """Paired t of first[s] - second[s] over the shared seeds (scipy)."""

    gap: float
    low: float
    high: float
    p: float
    n: int
    std: float

    @property
    def mde(self) -> float:
        return min_detectable_gap(self.std / math.sqrt(self.n), self.n - 1)


def paired(first: dict[int, float], second: dict[int, float]) -> Paired:
    seeds = sorted(first.keys() & second.keys())
    a, b = [first[s] for s in seeds], [second[s] for s in seeds]
    result = stats.ttest_rel(a, b)
    interval = result.confidence_interval(0.95)
    differences = np.subtract(a, b)
    return Paired(float(differences.mean()), interval.low, interval.high, result.pvalue,
                  len(seeds), float(differences.std(ddof=1)))


def mean_std(values, digits: int = 4) -> str:
    values = list(values.values()) if isinstance(values, dict) else list(values)
    return f"{np.mean(values):.{digits}f} ± {np.std(values, ddof=1):.{digits}f}"


def signed(x: float, digits: int, minus: str = "-") -> str:
    return f"{x:+.{digits}f}".replace("-", minus)


def num(x: float, digits: int, minus: str = "-") -> str:
    return f"{x:.{digits}f}".replace("-", minus)


def interval(t: Paired, digits: int, minus: str = "-", plus: bool = False) -> str:
    show = (lambda x: signed(x, digits, minus)) if plus else (lambda x: num(x, digits, minus))
    return f"[{show(t.low)}, {show(t.high)}]"


def p_text(p: float) -> str:
    """Two significant digits, at most four decimals: 0.19, 0.020, 0.0058, 0.0003."""
    return f"{p:#.2g}" if p >= 0.001 else f"{p:.4f}"


def p_exp(p: float) -> str:
    """1e-4, 6e-6: one digit and its power of ten."""
    mantissa, exponent = f"{p:.0e}".split("e")
    return f"{mantissa}e{int(exponent)}"


# --------------------------------------------------------------------------------------------
# The studies
# --------------------------------------------------------------------------------------------

DENSE = {"active": "dense_active", "total": "dense_total"}


def extension_means(family: str, size: str) -> str:
    """'| 3.180 | 3.163 | ...': mean final val loss over seeds 2-4 at dense, S = 0.5, 0.75, 0.875,
    0.9375 (dense from cpu-expertn, '–' where the family has no such point)."""
    def means(sweep: str) -> dict[float, float]:
        by_s: dict[float, list[float]] = {}
        for row in sweep_rows(sweep):
            if row.size == size:
                by_s.setdefault(row.S, []).append(row.final_val_loss)
        return {sparsity: float(np.mean(v)) for sparsity, v in by_s.items()}
    own, dense = means(family), means("cpu-expertn")[0.0]
    cells = [f"{dense:.3f}"] + [f"{own[x]:.3f}" if x in own else "–"
                                for x in (0.5, 0.75, 0.875, 0.9375)]
    return "| " + " | ".join(cells) + " |"




# --------------------------------------------------------------------------------------------
# The per-arm-lr check
# --------------------------------------------------------------------------------------------


def fair_lr_gap(criterion: str) -> str:
    """Dense - MoE on the reporting seeds, each arm at its own best lr (experiments/fair_lr.py),
    Holm over both criteria."""
    own = load("fair_lr.json")["report_runs"]["own"]
    by_seed = {arm: {int(s): run["best_val_loss"] for s, run in runs.items()}
               for arm, runs in own.items()}
    tests = {c: paired(by_seed[DENSE[c]], by_seed["moe"]) for c in DENSE}
    adjusted = dict(zip(tests, holm([t.p for t in tests.values()])))
    t = tests[criterion]
    return (f"{signed(t.gap, 4)} {interval(t, 4, plus=True)}** (p {t.p:.2g}, "
            f"Holm {adjusted[criterion]:.2g})")


# --------------------------------------------------------------------------------------------
# The sweep
# --------------------------------------------------------------------------------------------


def sweep_points(folder: str) -> list[ResultRow]:
    """A stored sweep's results.csv as moelab reads it once: typed rows (``ResultRow``)."""
    return list(sweep_rows(folder))


GRANULARITY_CELLS = {"G = 1": (1.0, 0), "G = 2": (2.0, 0), "G = 2 + 1 shared": (2.0, 1)}
GRANULARITY_PAIRS = [("G = 2", "G = 1"), ("G = 2 + 1 shared", "G = 1"),
                     ("G = 2 + 1 shared", "G = 2")]


def granularity_loss(cell: str) -> dict[int, float]:
    """{seed: best val loss} of one cell of the cpu-granularity sweep (by its G and shared
    experts columns)."""
    granularity, shared = GRANULARITY_CELLS[cell]
    return {int(row.seed): row.best_val_loss for row in sweep_points("cpu-granularity")
            if row.G == granularity and (row.shared_experts or 0) == shared}


def granularity_cell_row(cell: str) -> str:
    """A row of the cell table: the mean best val loss of the 3 seeds."""
    losses = granularity_loss(cell)
    return f"| {cell} | {len(losses)} | {np.mean(list(losses.values())):.4f} |"


def granularity_pair_row(cell: str, reference: str) -> str:
    """A row of the pair table: cell minus reference paired by seed, Holm over the 3 pairs,
    and the verdict the rule gives (lower / higher only at Holm p < 0.05)."""
    tests = {pair: paired(granularity_loss(pair[0]), granularity_loss(pair[1]))
             for pair in GRANULARITY_PAIRS}
    adjusted = dict(zip(tests, holm([t.p for t in tests.values()])))
    t, p_holm = tests[(cell, reference)], adjusted[(cell, reference)]
    # docs/verdicts.md: a direction only at Holm p < 0.05
    verdict = ("lower" if t.gap < 0 else "higher") if p_holm < 0.05 else "not separated"
    show = partial(signed, digits=4, minus="−")
    return (f"| {cell} minus {reference} | {show(t.gap)} [{show(t.low)}, {show(t.high)}] | "
            f"{p_text(t.p)} | {p_text(p_holm)} | {verdict} |")


def wsd_minus_cosine(tokens: int) -> Paired:
    """wsd − cosine best val loss, paired on the points both grids have at seed 0."""
    def point(row):
        return row.size, row.S, row.E, row.k
    cosine = {point(r): r.best_val_loss for r in sweep_points("cpu-cosine")
              if r.budget == f"D{tokens}"}
    wsd = {point(r): r.best_val_loss for r in sweep_points("cpu")
           if r.budget == f"D{tokens}" and r.seed == "0"}
    keys = sorted(cosine.keys() & wsd.keys())
    return paired(dict(enumerate(wsd[k] for k in keys)), dict(enumerate(cosine[k] for k in keys)))


def wsd_lean() -> str:
    small, large = wsd_minus_cosine(1_228_800), wsd_minus_cosine(3_686_400)
    return (f"Paired on the {small.n} points of seed 0 (the cosine grid's only seed), the wsd "
            f"points end above cosine's by {signed(small.gap, 3)} {interval(small, 3)} nats at "
            f"1.2M tokens and {signed(large.gap, 3)} {interval(large, 3)} at 3.7M (wsd − cosine, "
            f"t intervals; p {p_exp(small.p)} and {p_exp(large.p)})")


def fitted(name: str, digits: int) -> str:
    """'delta 0.029 [0.004, 0.039]' from the sweep's fit.json."""
    fit = sweep_file("cpu", "fit.json", SweepFit)
    low, high = fit.ci[name]
    return f"{name} {fit.params[name]:.{digits}f} [{low:.{digits}f}, {high:.{digits}f}]"


def isoflop_s_star() -> str:
    """'The interpolated S* is 0.820 [0.750, 0.875], ...' from cpu-isoflop's isoflop.json."""
    rows = isoflop_optima("cpu-isoflop").optimal_sparsity
    shown = [f"{r.sparsity:.3f} [{r.ci[0]:.3f}, {r.ci[1]:.3f}]" for r in rows]
    return f"The interpolated S* is {', '.join(shown[:-1])} and {shown[-1]}"


def isoflop_slope() -> str:
    trend = isoflop_optima("cpu-isoflop").trend
    low, high = trend.ci
    return (f"The slope of S*(C) is {trend.slope_per_decade:+.3f} [{low:+.3f}, {high:+.3f}] "
            f"per decade of C over the {trend.n_budgets} budgets")


def isoflop_minima(flops: float) -> str:
    """'3.4569 (dense), 3.4160, 3.3996 and 3.3981' at one budget."""
    cells = [c for c in isoflop_optima("cpu-isoflop").cells if c.flops == flops]
    losses = [f"{c.loss:.4f}" for c in cells]
    return f"{losses[0]} (dense), {', '.join(losses[1:-1])} and {losses[-1]}"


def effective_size_exponent() -> str:
    params = sweep_file("cpu", "fit.json", SweepFit).params
    return f"N (1 - S)^{params['delta'] / params['gamma']:.3f}"


# --------------------------------------------------------------------------------------------
# The recipe
# --------------------------------------------------------------------------------------------


def recipe_entry(grid: str, setting: str, seeds: list[int]) -> dict:
    return next(entry for entry in load("recipe.json") if entry["grid"] == grid
                and entry["setting"] == setting and entry["seeds"] == seeds)


def recipe_gap(entry: dict, criterion: str) -> str:
    """'+0.0181 ± 0.0122 (MDE 0.040)': the paired differences' mean ± std and the MDE."""
    arms = entry["arms"]
    seeds = entry["seeds"]
    t = paired(dict(zip(seeds, arms[DENSE[criterion]]["best_val_loss"])),
               dict(zip(seeds, arms["moe"]["best_val_loss"])))
    return f"{signed(t.gap, 4)} ± {t.std:.4f} (MDE {t.mde:.3f})"


def recipe_row(grid: str, setting: str, seeds: list[int], label: str) -> str:
    entry = recipe_entry(grid, setting, seeds)
    arms = [mean_std(entry["arms"][arm]["best_val_loss"]) for arm in ("moe", *DENSE.values())]
    return (f"| {label} | {' | '.join(arms)} | "
            f"{recipe_gap(entry, 'active')} | {recipe_gap(entry, 'total')} |")


def replication_holm(study: str, criterion: str) -> str:
    tests = {c: paired(losses(study, DENSE[c]), losses(study, "moe")) for c in DENSE}
    adjusted = dict(zip(tests, holm([t.p for t in tests.values()])))
    t = tests[criterion]
    return (f"({signed(t.gap, 3)}, p = {t.p:.3f}; {adjusted[criterion]:.3f} after Holm's "
            f"adjustment over the study's {len(tests)} criteria)")






# --------------------------------------------------------------------------------------------
# The claims
# --------------------------------------------------------------------------------------------

# --------------------------------------------------------------------------------------------
# S* at fixed N (cpu-isoflop) and fine-tuning against S (cpu-finetune), from results.csv
# --------------------------------------------------------------------------------------------


@functools.cache
def sweep_rows(sweep: str) -> tuple[ResultRow, ...]:
    table = read_results(RESULTS / "sweeps" / sweep)
    assert table is not None, f"{sweep} has no results.csv"
    return tuple(table.rows)


def fixed_n_argmins() -> dict:
    """{(budget, size): {draw: argmin S}} over cpu-isoflop's 3 draws of its 2 seeds (seed 0
    alone, seed 1 alone, both), and the grid's sparsities; the final val loss's mean."""
    table: dict = {}
    for row in sweep_rows("cpu-isoflop"):
        cell = table.setdefault((row.budget, row.size), {})
        cell.setdefault(row.S, {})[row.seed] = row.final_val_loss
    draws = {"0": ("0",), "1": ("1",), "both": ("0", "1")}
    return {key: {name: min(sorted(by_s), key=lambda s: np.mean([by_s[s][x] for x in seeds]))
                  for name, seeds in draws.items()} for key, by_s in table.items()}


def fixed_n_trend(axis: str) -> tuple[dict, int, int]:
    """Per draw, the sum of sign(S* later - S* earlier) over pairs of cells along ``axis``
    (sizes by N at each budget, or budgets by C at each size), 0 when both are at the top."""
    argmins = fixed_n_argmins()
    sizes, budgets = ("sA", "s0", "s1", "s2", "s3"), ("C3.6e+11", "C1.08e+12", "C3.24e+12")
    lines = ([[(b, s) for s in sizes] for b in budgets] if axis == "size"
             else [[(b, s) for b in budgets] for s in sizes])
    sums, pairs, tied_at_top = {}, 0, 0
    for draw in ("0", "1", "both"):
        total = 0
        for line in lines:
            for i in range(len(line)):
                for j in range(i + 1, len(line)):
                    a, b = argmins[line[i]][draw], argmins[line[j]][draw]
                    if draw == "both":
                        pairs += 1
                        tied_at_top += a == b == 0.875
                    total += 0 if a == b == 0.875 else int(np.sign(b - a))
        sums[draw] = total
    return sums, pairs, tied_at_top


def fixed_n_trend_text(axis: str) -> str:
    """'+13 [+7, +13] over 30 pairs (9 ...': the pooled sum; the interval of 3 draws spans them."""
    sums, pairs, tied = fixed_n_trend(axis)
    low, high = min(sums.values()), max(sums.values())
    return f"{sums['both']:+d} [{low:+d}, {high:+d}] over {pairs} pairs ({tied} with both"


def finetune_pairs() -> list[tuple]:
    """(size, budget, S, seed, dL, d fine-tuned loss, d gain): each sparse run of cpu-finetune
    minus its (size, budget) cell's dense run of the same seed."""
    rows = sweep_rows("cpu-finetune")
    dense = {(r.size, r.budget, r.seed): r for r in rows if r.S == 0}
    out = []
    for r in rows:
        if r.S == 0:
            continue
        d = dense[r.size, r.budget, r.seed]
        out.append((r.size, r.budget, r.S, r.seed,
                    *(getattr(r, k) - getattr(d, k) for k in
                      ("final_val_loss", "finetune_val_loss", "finetune_gain"))))
    return out


def finetune_clustered(metric: int) -> tuple[np.ndarray, np.ndarray, int]:
    """dy = b dL + c S by least squares over the pairs; CR1 standard errors over (size, seed)."""
    pairs = finetune_pairs()
    x = np.array([[p[4], p[2]] for p in pairs])
    y = np.array([p[metric] for p in pairs])
    beta, *_ = np.linalg.lstsq(x, y, rcond=None)
    e = y - x @ beta
    groups = sorted({(p[0], p[3]) for p in pairs})
    meat = sum(np.outer(v, v) for v in (
        sum(x[i] * e[i] for i, p in enumerate(pairs) if (p[0], p[3]) == g) for g in groups))
    inv = np.linalg.inv(x.T @ x)
    g, n = len(groups), len(y)
    se = np.sqrt(np.diag(inv @ meat @ inv * g / (g - 1) * (n - 1) / (n - 2)))
    return beta, se, g - 1


def finetune_b_within_and_pooled() -> str:
    """b over the pairs (within cells) and the pooled OLS of y on (1, L, S) over all runs."""
    rows = sweep_rows("cpu-finetune")
    x = np.array([[1.0, r.final_val_loss, r.S] for r in rows])
    y = np.array([r.finetune_val_loss for r in rows])
    pooled_b = np.linalg.lstsq(x, y, rcond=None)[0][1]
    within_b = finetune_clustered(5)[0][0]
    return f"(within cells b is {within_b:.2f}, pooled {pooled_b:.2f})"


SCALING, RECIPE = "docs/scaling.md", "docs/recipe.md"
ISOFLOP_BY_HAND = "docs/findings/isoflop-sweep-hand-read.md"
SWEEPS_BY_HAND = "docs/findings/sweeps-hand-read.md"
"""docs/scaling.md's measured sections that are not generated, moved verbatim (README.md
quotes none of these numbers: its findings are generated)."""


# --------------------------------------------------------------------------------------------
# Fair comparisons: --tune-lr on the demo, --lr-grid on cpu-isoflop (study-by-hand.md, scaling.md)
# --------------------------------------------------------------------------------------------


def isoflop_lr() -> dict:
    return load("isoflop_lr.json")


def isoflop_lr_families() -> str:
    lrs = isoflop_lr()["lrs"]
    lowered = {cell.split("/", 1)[1] for cell, lr in lrs.items() if lr == 0.005}
    families = {cell.split("/", 1)[1] for cell in lrs}
    return f"{len(lowered)} of the {len(families)} families chose 0.005"


def isoflop_lr_margins() -> str:
    """How many families' choice was decided by less than 0.017 nats (best against runner-up)."""
    selection = isoflop_lr()["selection"]
    margins = [np.diff(sorted(by_lr.values()))[0] for by_lr in selection.values()]
    return f"{sum(m < 0.017 for m in margins)} of the {len(margins)} choices were decided by less than 0.017"


def isoflop_lr_changes() -> str:
    record = isoflop_lr()
    lrs, change = record["lrs"], record["loss_change"]["per_run"]
    moved = {run: d for run, d in change.items() if lrs[run.rsplit("/", 1)[0]] != 0.01}
    s3 = np.array([d for run, d in moved.items() if run.split("/")[1] == "s3"])
    assert (s3 < 0).all()
    return (f"all {len(s3)} runs of s3 improve, by {-s3.max():.2f} to {-s3.min():.2f} nats (mean "
            f"{s3.mean():.2f})")


def isoflop_lr_other_sizes() -> str:
    """The changed runs outside s3, and the t interval over their families' mean changes."""
    record = isoflop_lr()
    lrs, change = record["lrs"], record["loss_change"]["per_run"]
    families: dict[str, list[float]] = {}
    for run, d in change.items():
        cell = run.rsplit("/", 1)[0]
        if lrs[cell] != 0.01 and cell.split("/")[1] != "s3":
            families.setdefault(cell.split("/", 1)[1], []).append(d)
    runs = np.concatenate([np.array(v) for v in families.values()])
    means = np.array([np.mean(v) for v in families.values()])
    low, high = stats.t.interval(0.95, len(means) - 1, means.mean(), stats.sem(means))
    return (f"The other {len(runs)} changed runs move by {runs.mean():+.3f} on average (range "
            f"{runs.min():.3f} to {runs.max():+.3f}). Over their {len(means)} families the mean "
            f"change is {means.mean():+.3f} [{low:+.3f}, {high:+.3f}]")


def isoflop_lr_minimum_row(flops: float) -> str:
    record = isoflop_lr()["isoflop_minima"]
    cells = []
    for shared, tuned in zip(record["shared"], record["tuned"]):
        if shared["flops"] != flops:
            continue
        def text(m):
            return f"{m['loss']:.4f} [{m['loss_ci'][0]:.4f}, {m['loss_ci'][1]:.4f}]"
        cells.append(text(shared) + (", same" if text(shared) == text(tuned) else f" / {text(tuned)}"))
    return f"| {flops:.3g} | " + " | ".join(cells) + " |"


def isoflop_lr_sign_sums() -> str:
    fixed = isoflop_lr()["fixed_size"]
    def text(trend):
        low, high = trend["interval"]
        return f"{trend['statistic']:+d} [{low:+.0f}, {high:+.0f}]"
    return (f"{text(fixed['shared']['rises_with_size'])} to {text(fixed['tuned']['rises_with_size'])} "
            f"over {fixed['tuned']['rises_with_size']['pairs']} pairs")



def exact_over_shortcut(df: int) -> float:
    """The exact minimum detectable effect (power 0.8 of the two-sided 5 % t test, solved on
    scipy's noncentral t) over the shortcut (t_0.975 + t_0.80), per unit standard error."""
    critical = stats.t.ppf(0.975, df)

    def power(delta: float) -> float:
        return stats.nct.sf(critical, df, delta) + stats.nct.cdf(-critical, df, delta) - 0.8

    return brentq(power, 0.5, 8.0) / (critical + stats.t.ppf(0.8, df))


def mde_growth() -> str:
    return (f"It is {100 * (exact_over_shortcut(2) - 1):.1f} % larger than the shortcut (t_0.975 + "
            f"t_0.80) x standard error used before at 3 seeds (2 df), "
            f"{100 * (exact_over_shortcut(5) - 1):.1f} % at 5 df")

# --------------------------------------------------------------------------------------------
# Predictions: the rollout (docs/findings/sweeps-hand-read.md) and the pre-registered test (docs/scaling.md)
# --------------------------------------------------------------------------------------------

def rollout_row(form: str) -> str:
    """The rollout table's row of one form, recounted from the stored cells: inside where the
    measured mean lies in the stored interval, errors and z from the measured, predicted and sd."""
    cells = [c for r in load("rollout.json")["rollouts"] if r["form"] == form and r["score"]
             for c in r["score"]["cells"] if c["interval"] is not None and c["measured"] is not None]
    sweeps = {r["sweep"] for r in load("rollout.json")["rollouts"] if r["form"] == form
              and r["score"] and r["score"]["scored"]}
    inside = sum(c["interval"][0] <= c["measured"] <= c["interval"][1] for c in cells)
    errors = np.array([c["measured"] - c["predicted"] for c in cells])
    z = errors / np.array([c["sd"] for c in cells])
    return (f"| `{form}` | {len(sweeps)} | {len(cells)} | {inside}/{len(cells)} "
            f"({inside / len(cells):.0%}) | {errors.mean():+.4f} | {np.abs(errors).mean():.4f} | "
            f"{np.sqrt(np.mean(z ** 2)):.2f} |")


def preregistered_row(form: str) -> str:
    """A row of the pre-registered table, each interval rebuilt from its stored parts with
    scipy's t quantile: loss +- t(0.95, df) sqrt(parameters^2 + misfit^2 + extrapolation^2 +
    noise^2 / seeds)."""
    record = json.loads((RESULTS / "preregistered" / f"prediction-{form}.json").read_text())
    cells = []
    for c in record["cells"]:
        sd = math.sqrt(c["parameter_sd"] ** 2 + c["misfit_sd"] ** 2 + c["extrapolation_sd"] ** 2
                       + c["noise_sd"] ** 2 / c["seeds"])
        half = stats.t.ppf(0.95, c["df"]) * sd
        cells.append(f"{c['loss']:.3f} [{c['loss'] - half:.3f}, {c['loss'] + half:.3f}]")
    return f"| `{form}` | " + " | ".join(cells) + " |"


CLAIMS = [
    # The per-arm-lr check (docs/recipe.md).
    Claim(RECIPE, "+0.0151 [+0.0039, +0.0263]** (p 0.015, Holm 0.015)",
          partial(fair_lr_gap, "active")),
    Claim(RECIPE, "+0.0176 [+0.0078, +0.0275]** (p 0.0039, Holm 0.0078)",
          partial(fair_lr_gap, "total")),
    # The sweeps, read by hand (docs/findings/*-hand-read.md, moved from docs/scaling.md).
    Claim(SWEEPS_BY_HAND, "Paired on the 16 points of seed 0 (the cosine grid's only seed), the wsd "
          "points end above cosine's by +0.013 [0.009, 0.017] nats at 1.2M tokens and +0.018 "
          "[0.009, 0.026] at 3.7M (wsd − cosine, t intervals; p 6e-6 and 4e-4)", wsd_lean),
    Claim(SWEEPS_BY_HAND, "delta 0.029 [0.004, 0.039]", lambda: fitted("delta", 3)),
    Claim(SWEEPS_BY_HAND, "gamma 0.62 [0.43, 0.79], beta 0.80 [0.55, 1.16], e 2.18 [1.95, 2.34]",
          lambda: ", ".join(fitted(name, 2) for name in ("gamma", "beta", "e"))),
    Claim(SWEEPS_BY_HAND, "N (1 - S)^0.047", effective_size_exponent),
    Claim(ISOFLOP_BY_HAND, "The interpolated S* is 0.820 [0.750, 0.875], 0.853 [0.790, 0.875] and "
          "0.797 [0.761, 0.869]", isoflop_s_star),
    Claim(ISOFLOP_BY_HAND, "The slope of S*(C) is -0.024 [-0.103, +0.062] per decade of C over the 3 "
          "budgets", isoflop_slope),
    Claim(ISOFLOP_BY_HAND, "3.4569 (dense), 3.4160, 3.3996 and 3.3981", lambda: isoflop_minima(3.6e11)),
    # The recipe (docs/recipe.md).
    Claim(RECIPE, "| untied_warmup0.5_b8 | 0-2 | 409,600 | 3.3581 ± 0.0118 | 3.3762 ± 0.0066 | "
          "3.3759 ± 0.0093 | +0.0181 ± 0.0122 (MDE 0.040) | +0.0178 ± 0.0031 (MDE 0.010) |",
          lambda: recipe_row("demo", "untied_warmup0.5_b8", [0, 1, 2],
                             "untied_warmup0.5_b8 | 0-2 | 409,600")),
    Claim(RECIPE, "| untied_warmup0.5_b8 | 100-104 | 409,600 | 3.3595 ± 0.0111 | "
          "3.3713 ± 0.0082 | 3.3759 ± 0.0053 | +0.0118 ± 0.0103 (MDE 0.017) | +0.0164 ± 0.0104 (MDE 0.017) |",
          lambda: recipe_row("demo", "untied_warmup0.5_b8", [100, 101, 102, 103, 104],
                             "untied_warmup0.5_b8 | 100-104 | 409,600")),
    Claim(RECIPE, "| untied_warmup0.5_b8_lr0.005 | 0-2 | 409,600 | 3.3872 ± 0.0264 | "
          "3.4186 ± 0.0110 | 3.4293 ± 0.0160 | +0.0314 ± 0.0154 (MDE 0.050) | "
          "+0.0421 ± 0.0104 (MDE 0.034) |",
          lambda: recipe_row("demo", "untied_warmup0.5_b8_lr0.005", [0, 1, 2],
                             "untied_warmup0.5_b8_lr0.005 | 0-2 | 409,600")),
    Claim(RECIPE, "| untied_warmup0.5_b8_lr0.02 | 0-2 | 409,600 | 3.3765 ± 0.0048 | "
          "3.3732 ± 0.0140 | 3.3808 ± 0.0081 | -0.0033 ± 0.0095 (MDE 0.031) | "
          "+0.0042 ± 0.0035 (MDE 0.012) |",
          lambda: recipe_row("demo", "untied_warmup0.5_b8_lr0.02", [0, 1, 2],
                             "untied_warmup0.5_b8_lr0.02 | 0-2 | 409,600")),
    Claim(RECIPE, "| `recipe_lr0.01` (the preset before) | 0-2 | 2.5802 ± 0.0127 | "
          "2.5960 ± 0.0140 | 2.5948 ± 0.0377 | +0.0158 ± 0.0259 (MDE 0.085) | +0.0146 ± 0.0285 (MDE 0.093) |",
          lambda: recipe_row("cpu-replication", "recipe_lr0.01", [0, 1, 2],
                             "`recipe_lr0.01` (the preset before) | 0-2")),
    Claim(RECIPE, "(+0.037, p = 0.016; 0.031 after Holm's adjustment over the study's 2 criteria)",
          lambda: replication_holm("cpu-replication-recipe", "total")),
    *[Claim(SWEEPS_BY_HAND, quoted, partial(granularity_cell_row, cell)) for cell, quoted in (
        ("G = 1", "| G = 1 | 3 | 3.4531 |"), ("G = 2", "| G = 2 | 3 | 3.4386 |"),
        ("G = 2 + 1 shared", "| G = 2 + 1 shared | 3 | 3.4600 |"))],
    Claim(SWEEPS_BY_HAND, "| G = 2 minus G = 1 | −0.0146 [−0.0427, +0.0135] | 0.16 | 0.35 | "
          "not separated |", partial(granularity_pair_row, "G = 2", "G = 1")),
    Claim(SWEEPS_BY_HAND, "| G = 2 + 1 shared minus G = 1 | +0.0069 [−0.0043, +0.0180] | 0.12 | 0.35 | "
          "not separated |", partial(granularity_pair_row, "G = 2 + 1 shared", "G = 1")),
    Claim(SWEEPS_BY_HAND, "| G = 2 + 1 shared minus G = 2 | +0.0214 [−0.0167, +0.0596] | 0.14 | 0.35 | "
          "not separated |", partial(granularity_pair_row, "G = 2 + 1 shared", "G = 2")),
    # The extension past the edge (cpu-fixedn, cpu-expertn), seeds 2-4.
    Claim(ISOFLOP_BY_HAND, "| 3.180 | 3.163 | 3.137 | 3.123 | 3.140 |", partial(extension_means, "cpu-fixedn", "s0")),
    Claim(ISOFLOP_BY_HAND, "| 3.179 | 3.111 | 3.075 | 3.079 | 3.078 |", partial(extension_means, "cpu-fixedn", "s1")),
    Claim(ISOFLOP_BY_HAND, "| 3.358 | 3.220 | 3.155 | 3.129 | 3.111 |", partial(extension_means, "cpu-fixedn", "s2")),
    Claim(ISOFLOP_BY_HAND, "| 3.180 | – | 3.148 | 3.159 | 3.161 |", partial(extension_means, "cpu-expertn", "s0")),
    Claim(ISOFLOP_BY_HAND, "| 3.179 | – | 3.155 | 3.170 | 3.177 |", partial(extension_means, "cpu-expertn", "s1")),
    Claim(ISOFLOP_BY_HAND, "| 3.358 | – | 3.326 | 3.338 | 3.325 |", partial(extension_means, "cpu-expertn", "s2")),
    # The readings not yet generated (docs/findings/not-yet-generated.md).
    # S* at fixed total parameters (cpu-isoflop): argmins over the 3 draws of 2 seeds.
    Claim(ISOFLOP_BY_HAND, "+13 [+7, +13] over 30 pairs (9 with both", lambda: fixed_n_trend_text("size")),
    Claim(ISOFLOP_BY_HAND, "-2 [-2, +2] over 15 pairs (7 with both", lambda: fixed_n_trend_text("budget")),
    # Fine-tuning against S (cpu-finetune): within cells, paired, clustered, Holm over 26.
    Claim(SWEEPS_BY_HAND, "(within cells b is 0.65, pooled 0.87)", finetune_b_within_and_pooled),
    # Fair comparisons (docs/findings/study-by-hand.md, docs/scaling.md).
    Claim(ISOFLOP_BY_HAND, "9 of the 20 families chose 0.005", isoflop_lr_families),
    Claim(ISOFLOP_BY_HAND, "10 of the 20 choices were decided by less than 0.017", isoflop_lr_margins),
    Claim(ISOFLOP_BY_HAND, "all 16 runs of s3 improve, by 0.04 to 0.62 nats (mean -0.18)", isoflop_lr_changes),
    Claim(ISOFLOP_BY_HAND, "The other 20 changed runs move by +0.007 on average (range -0.043 to +0.076). "
          "Over their 5 families the mean change is +0.007 [-0.018, +0.032]", isoflop_lr_other_sizes),
    Claim(ISOFLOP_BY_HAND, "| 3.6e+11 | 3.4569 [3.4413, 3.4711], same | 3.4158 [3.4029, 3.4278], same | "
          "3.3986 [3.3969, 3.3993] / 3.4358 [3.4063, 3.4399] | 3.3976 [3.3721, 3.4155] / 3.3984 "
          "[3.3739, 3.4211] |", partial(isoflop_lr_minimum_row, 3.6e11)),
    Claim(ISOFLOP_BY_HAND, "| 1.08e+12 | 3.1482 [3.1428, 3.1531] / 3.1490 [3.1431, 3.1543] | 3.0840 "
          "[3.0658, 3.1046], same | 3.0580 [3.0546, 3.0613] / 3.0636 [3.0588, 3.0683] | 3.0461 "
          "[3.0341, 3.0557] / 3.0386 [3.0276, 3.0487] |", partial(isoflop_lr_minimum_row, 1.08e12)),
    Claim(ISOFLOP_BY_HAND, "+3 [+3, +5] to +8 [+8, +12] over 20 pairs", isoflop_lr_sign_sums),
    Claim(SCALING, "It is 5.4 % larger than the shortcut (t_0.975 + t_0.80) x standard error used "
          "before at 3 seeds (2 df), 0.7 % at 5 df", mde_growth),
    # Predictions (docs/findings/sweeps-hand-read.md, "Calibration by rollout"; docs/scaling.md,
    # "A pre-registered prediction").
    *[Claim(SWEEPS_BY_HAND, row, partial(rollout_row, form)) for form, row in (
        ("sparsity", "| `sparsity` | 7 | 116 | 84/116 (72%) | -0.0635 | 0.0743 | 1.89 |"),
        ("sparsity-interaction",
         "| `sparsity-interaction` | 7 | 116 | 86/116 (74%) | -0.0641 | 0.0775 | 2.24 |"),
        ("sparsity-additive",
         "| `sparsity-additive` | 7 | 116 | 87/116 (75%) | -0.0466 | 0.0562 | 1.53 |"),
        ("sparsity-effective-size",
         "| `sparsity-effective-size` | 7 | 116 | 103/116 (89%) | -0.0361 | 0.0508 | 1.27 |"),
        ("chinchilla", "| `chinchilla` | 7 | 116 | 96/116 (83%) | -0.0472 | 0.0575 | 1.51 |"),
        ("isoflop-parabola",
         "| `isoflop-parabola` | 2 | 36 | 24/36 (67%) | -0.1356 | 0.1765 | 10.24 |"),
    )],
    Claim("docs/findings/preregistered-design.md", "| `isoflop-parabola` | 2.630 [2.587, 2.672] | 2.701 [2.622, 2.781] | "
          "2.637 [2.589, 2.685] | 2.543 [2.507, 2.579] | 2.504 [2.457, 2.551] | "
          "2.463 [2.426, 2.500] |", partial(preregistered_row, "isoflop-parabola")),
]


# --------------------------------------------------------------------------------------------
# Checking
# --------------------------------------------------------------------------------------------


def folded(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip()


@functools.cache
def doc_text(doc: str) -> str:
    return folded((ROOT / doc).read_text("utf-8"))


def check(claim: Claim, text: Optional[str] = None) -> Optional[str]:
    """Why the claim fails, or None: the doc (or ``text``) must contain the quoted text, and the
    results file must rebuild it."""
    text = doc_text(claim.doc) if text is None else folded(text)
    if folded(claim.quoted) not in text:
        return f"{claim.doc} no longer contains: {claim.quoted}"
    rebuilt = claim.recompute()
    if folded(rebuilt) != folded(claim.quoted):
        return f"{claim.doc} quotes {claim.quoted!r}, its results give {rebuilt!r}"
    return None


def main() -> int:
    failures = [message for message in map(check, CLAIMS) if message]
    for message in failures:
        print(f"FAIL {message}")
    print(f"{len(CLAIMS) - len(failures)} of {len(CLAIMS)} claims hold")
    return 1 if failures else 0


if __name__ == "__main__":
    from moelab.cli import run_command

    raise SystemExit(run_command(main, "doc_claims"))
