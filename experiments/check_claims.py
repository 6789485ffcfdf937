"""The numbers the docs and the README quote, recomputed from the stored results they come from.

    .venv/bin/python experiments/check_claims.py      # every claim; exit 1 if one fails

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

import csv
import functools
import json
import math
import re
import sys
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Callable, Optional

import numpy as np
from scipy import stats

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "experiments" / "results"
if str(ROOT / "src") not in sys.path:  # run as a script from a checkout
    sys.path.insert(0, str(ROOT / "src"))

from moelab.study.stats import holm, min_detectable_gap  # noqa: E402


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
    """{seed: best val loss} of an arm in a stored study's results.json (at a budget)."""
    results = load(f"studies/{study}.json")
    arms = results["arms"] if tokens is None else next(
        group["arms"] for group in results["budgets"] if group["tokens"] == tokens)
    return {run["seed"]: run["best_val_loss"] for run in arms[arm]["runs"]}


def pooled(arm: str, *studies: str) -> dict[int, float]:
    """{seed: best val loss} over several studies with distinct seeds."""
    merged: dict[int, float] = {}
    for study in studies:
        merged.update(losses(study, arm))
    return merged


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
CPU_BUDGETS = {409_600: "409.6K", 819_200: "819.2K", 1_638_400: "1.64M", 3_276_800: "3.28M"}


def budget_gap(tokens: int, criterion: str) -> Paired:
    return paired(losses("cpu-budgets", DENSE[criterion], tokens),
                  losses("cpu-budgets", "moe", tokens))


def budget_holm(tokens: int, criterion: str) -> float:
    """The Holm-adjusted p of one of cpu-budgets' 8 tests (4 budgets x 2 criteria)."""
    keys = [(t, c) for t in CPU_BUDGETS for c in DENSE]
    adjusted = holm([budget_gap(t, c).p for t, c in keys])
    return adjusted[keys.index((tokens, criterion))]


def budget_cell(tokens: int, criterion: str) -> str:
    """'+0.018 [−0.022, 0.058], p 0.19, 0.23, MDE 0.052' (docs/study.md's cpu-budgets table)."""
    t = budget_gap(tokens, criterion)
    return (f"{signed(t.gap, 3)} {interval(t, 3, '−')}, p {p_text(t.p)}, "
            f"{p_text(budget_holm(tokens, criterion))}, MDE {t.mde:.3f}")


def budget_row(tokens: int) -> str:
    arms = [mean_std(losses("cpu-budgets", arm, tokens)) for arm in ("moe", *DENSE.values())]
    cells = [budget_cell(tokens, c) for c in DENSE]
    return f"| {CPU_BUDGETS[tokens]} | {' | '.join(arms)} | {' | '.join(cells)} |"


def active_gap_fall() -> str:
    """The active gap per seed at 3.28M minus at 1.64M, paired over the seeds."""
    def per_seed(tokens):
        dense = losses("cpu-budgets", "dense_active", tokens)
        moe = losses("cpu-budgets", "moe", tokens)
        return {s: dense[s] - moe[s] for s in moe}
    t = paired(per_seed(1_638_400), per_seed(3_276_800))
    return (f"falls from 1.64M to 3.28M by {t.gap:.3f} on average (paired over the {t.n} seeds, "
            f"p {t.p:.2f})")




def readme_pooled_row(criterion: str) -> str:
    t, p_holm = demo_pooled("first", criterion)
    return (f"| matched {criterion} | {signed(t.gap, 4)} | {interval(t, 4)} | {p_holm:.4f} | "
            f"{t.mde:.4f} |")


def readme_pooled_gap(criterion: str) -> str:
    t, _ = demo_pooled("first", criterion)
    return f"{signed(t.gap, 4)} {interval(t, 4)}"


def readme_active_trend() -> str:
    gaps = [signed(budget_gap(tokens, "active").gap, 3) for tokens in CPU_BUDGETS]
    return f"{', '.join(gaps)} at 0.4M-3.3M tokens"


def readme_total_at_largest() -> str:
    tests = {(tokens, c): budget_gap(tokens, c) for tokens in CPU_BUDGETS for c in DENSE}
    adjusted = dict(zip(tests, holm([t.p for t in tests.values()])))
    t = tests[3_276_800, "total"]
    return f"{signed(t.gap, 3)} (Holm p {adjusted[3_276_800, 'total']:.2f}) at 3.28M tokens"


DEMO_SETS = {"first": ("demo-seeds0-5", "demo-seeds617-622"),
             "second": ("demo-seeds0-5-cpu2", "demo-seeds617-622-cpu2"),
             "third": ("demo-seeds0-5-cpu3", "demo-seeds617-622-cpu3")}


def demo_pooled(cpu: str, criterion: str) -> tuple[Paired, float]:
    """The 12-seed paired gap on one CPU and its Holm p over the 2 criteria."""
    studies = DEMO_SETS[cpu]
    tests = {c: paired(pooled(DENSE[c], *studies), pooled("moe", *studies)) for c in DENSE}
    adjusted = dict(zip(tests, holm([t.p for t in tests.values()])))
    return tests[criterion], adjusted[criterion]


def demo_pooled_row(criterion: str) -> str:
    t, p_holm = demo_pooled("first", criterion)
    return (f"| matched {criterion} | {signed(t.gap, 4)} | {interval(t, 4)} | {t.p:.4f} | "
            f"{p_holm:.4f} | {t.mde:.4f} |")


def demo_cpu_row(cpu: str) -> str:
    cells = []
    for criterion in DENSE:
        t, p_holm = demo_pooled(cpu, criterion)
        cells.append(f"{signed(t.gap, 4)} {interval(t, 4)}, p {p_text(t.p)} ({p_text(p_holm)})")
    return f"| {cpu} | {' | '.join(cells)} |"


def seed_sets_apart() -> str:
    """Welch's t between the two seed sets' per-seed differences (matched active), per CPU."""
    def differences(study):
        dense, moe = losses(study, "dense_active"), losses(study, "moe")
        return [dense[s] - moe[s] for s in sorted(moe)]
    p_values = [stats.ttest_ind(differences(first), differences(second), equal_var=False).pvalue
                for first, second in DEMO_SETS.values()]
    return (f"Welch's t on their per-seed differences gives p {p_values[0]:.2f}, "
            f"{p_values[1]:.2f} and {p_values[2]:.2f} on the three CPUs")


def demo_gap_line(criterion: str) -> str:
    """'paired t: 95% CI [0.0066, 0.0245], p=0.0066' (the demo's terminal summary, seeds 0-5)."""
    t = paired(losses("demo-seeds0-5", DENSE[criterion]), losses("demo-seeds0-5", "moe"))
    return f"{signed(t.gap, 4)}: MoE better (paired t, n={t.n})"


def demo_p(criterion: str) -> float:
    """The paired p of the demo's seeds 0-5."""
    return paired(losses("demo-seeds0-5", DENSE[criterion]), losses("demo-seeds0-5", "moe")).p


def demo_interval_line(criterion: str) -> str:
    t = paired(losses("demo-seeds0-5", DENSE[criterion]), losses("demo-seeds0-5", "moe"))
    return f"paired t: 95% CI {interval(t, 4)}, p={t.p:.4f}, n={t.n} pairs"


# --------------------------------------------------------------------------------------------
# Zero-shot tasks
# --------------------------------------------------------------------------------------------

TASKS_STUDY = "studies/demo-tasks-active.json"


def task_runs(task: str) -> list[dict]:
    arms = load(TASKS_STUDY)["zero_shot"][task]["arms"]
    return [run for arm in arms.values() for run in arm["runs"]]


def task_row(task: str) -> str:
    """'+0.0064 [−0.0094, 0.0222], p 0.34, 0.69': MoE − dense_active, paired, Holm over the 3."""
    def accuracy(name, arm):
        runs = load(TASKS_STUDY)["zero_shot"][name]["arms"][arm]["runs"]
        return {run["seed"]: run["accuracy"] for run in runs}
    tasks = list(load(TASKS_STUDY)["zero_shot"])
    tests = [paired(accuracy(name, "moe"), accuracy(name, "dense_active")) for name in tasks]
    t, p_holm = tests[tasks.index(task)], holm([test.p for test in tests])[tasks.index(task)]
    return f"{signed(t.gap, 4)} {interval(t, 4, '−')}, p {t.p:.2f}, {p_holm:.2f} |"


def wilson(run: dict) -> tuple[float, float]:
    found = stats.binomtest(run["correct"], run["items"]).proportion_ci(0.95, method="wilson")
    return found.low, found.high


def ending_against_chance() -> str:
    runs = task_runs("ending")
    inside = sum(low <= run["chance"] <= high for run in runs for low, high in [wilson(run)])
    (items,) = {run["items"] for run in runs}
    (chance,) = {run["chance"] for run in runs}
    best = max(runs, key=lambda run: run["correct"])
    low, high = wilson(best)
    every = "every one" if inside == len(runs) else f"{inside}"
    return (f"{every} of the {len(runs)} runs' Wilson intervals over the {items} items contains "
            f"{chance:g} (the best run, {best['correct']} of {items} = {best['accuracy']:.3f}, "
            f"has [{low:.3f}, {high:.3f}])")


# --------------------------------------------------------------------------------------------
# Schedules, balancing, the ladder
# --------------------------------------------------------------------------------------------


def setting_losses(grid: str, setting: str) -> dict[int, float]:
    results = load(grid)
    runs = results["settings"][setting]["runs"]
    return dict(zip(results["seeds"], (run["best_val_loss"] for run in runs)))


def setting_row(grid: str, setting: str, p_format: Callable[[float], str]) -> str:
    """'| `wsd_sqrt` | 3.3815 ± 0.0176 | -0.0216 [-0.0266, -0.0167], p 1e-4 |'."""
    baseline = load(grid)["baseline"]
    t = paired(setting_losses(grid, baseline), setting_losses(grid, setting))
    return (f"| `{setting}` | {mean_std(setting_losses(grid, setting))} | {signed(t.gap, 4)} "
            f"{interval(t, 4, plus=True) if grid == 'balancing.json' else interval(t, 4)}, "
            f"p {p_format(t.p)}")


def wsd_budget_row(tokens: int) -> str:
    row = load("wsd_budgets.json")["by_budget"][str(tokens)]
    cosine = {int(s): v for s, v in row["cosine_best_val_loss"].items()}
    wsd = {int(s): v for s, v in row["wsd_best_val_loss"].items()}
    t = paired(cosine, wsd)
    return (f"| {tokens:,} | {mean_std(cosine)} | {mean_std(wsd)} | {signed(t.gap, 4)} "
            f"{interval(t, 4, plus=True)}, p {t.p:.2f} |")


def ladder_steps() -> str:
    """The paired differences earlier minus later rung (n = 3), as docs/study.md lists them."""
    arms = load("studies/demo-ladder-seeds0-2.json")["arms"]
    by_seed = {rung: {run["seed"]: run["best_val_loss"] for run in arm["runs"]}
               for rung, arm in arms.items()}
    steps = [("naive_top1", "top1_lb", "+ balancing"), ("top1_lb", "top2_lb", "top-2"),
             ("top2_lb", "top2_lb_z", "+ z-loss"),
             ("top2_lb_z", "top2_bias_z", "bias instead of the loss")]
    parts = []
    for earlier, later, what in steps:
        t = paired(by_seed[earlier], by_seed[later])
        parts.append(f"{signed(t.gap, 3)} (p {t.p:.2f}, {what})")
    return f"{', '.join(parts[:-1])} and {parts[-1]}"


CPU_LADDER = "studies/cpu-ablation-seeds1-4.json"
LADDER_STEPS = [("naive_top1", "top1_lb", "balancing"), ("top1_lb", "top2_lb", "top-2"),
                ("top2_lb", "top2_lb_z", "z-loss"),
                ("top2_lb_z", "top2_global_lb_z", "global-batch balancing"),
                ("top2_lb_z", "top2_bias_z", "bias balancing instead of the loss")]


def cpu_ladder_step(index: int) -> str:
    """One step of the cpu-ablation ladder as docs/study.md lists it: earlier - later rung,
    interval, raw p and Holm's p over the 5 steps."""
    arms = load(CPU_LADDER)["arms"]
    by_seed = {rung: {run["seed"]: run["best_val_loss"] for run in arm["runs"]}
               for rung, arm in arms.items()}
    tests = [paired(by_seed[earlier], by_seed[later]) for earlier, later, _ in LADDER_STEPS]
    adjusted = holm([t.p for t in tests])
    t, what = tests[index], LADDER_STEPS[index][2]
    holm_text = "1.0" if adjusted[index] > 0.995 else f"{adjusted[index]:.3f}"
    return (f"{what} {signed(t.gap, 3)} {interval(t, 3, plus=True)} (p {t.p:.2g}; "
            f"Holm {holm_text})")


def cpu_ladder_busiest() -> str:
    """Naive top-1 against top-1 with balancing: the worst layer's busiest-expert fraction at
    the end, paired over seeds (the runs' routing per layer)."""
    runs = load("studies/cpu-ablation-seeds1-4-routing.json")["runs"]

    def worst(rung: str) -> dict[int, float]:
        return {int(name.split("seed")[1]): max(run["busiest_fraction"])
                for name, run in runs.items() if name.startswith(f"{rung}/")}
    t = paired(worst("naive_top1"), worst("top1_lb"))
    return f"falls by {t.gap:.2f} {interval(t, 2)} (paired over the {t.n} seeds, p {t.p:.3f})"


def readme_fair_lr() -> str:
    own = load("fair_lr.json")["report_runs"]["own"]
    by_seed = {arm: {int(s): run["best_val_loss"] for s, run in runs.items()}
               for arm, runs in own.items()}
    gaps = {c: paired(by_seed[DENSE[c]], by_seed["moe"]).gap for c in DENSE}
    return (f"still leads by {signed(gaps['active'], 3)} (active) and "
            f"{signed(gaps['total'], 3)} (total)")


def readme_collapse() -> str:
    runs = load("studies/cpu-ablation-seeds1-4-routing.json")["runs"]
    worst = max(max(run["busiest_fraction"]) for name, run in runs.items()
                if name.startswith("naive_top1/"))
    return f"one expert takes {worst:.3f} of a layer"


def readme_top2() -> str:
    step = cpu_ladder_step(1)  # "top-2 +0.161 [+0.055, +0.267] (p 0.017; Holm 0.084)"
    gap_and_interval, holm_p = step.removeprefix("top-2 ").split(" (p ")[0], step.split("Holm ")[1]
    return f"{gap_and_interval} nats, Holm p {holm_p.rstrip(')')}"


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


def sweep_points(folder: str) -> list[dict]:
    with open(RESULTS / "sweeps" / folder / "results.csv", encoding="utf-8") as handle:
        return list(csv.DictReader(handle))


TOPK_PAIRS = [(size, low, high) for size in ("s2", "s3") for low, high in ((4, 8), (4, 16), (8, 16))]


def topk_loss(size: str, experts: int) -> dict[int, float]:
    """{seed: best val loss} of one (size, E) of the cpu-topk sweep."""
    return {int(row["seed"]): float(row["best_val_loss"]) for row in sweep_points("cpu-topk")
            if row["size"] == size and int(row["E"]) == experts}


def topk_pair_row(size: str, low: int, high: int) -> str:
    """A row of docs/scaling.md's top-k table: E = high minus E = low, Holm over the 6 pairs."""
    tests = {pair: paired(topk_loss(pair[0], pair[2]), topk_loss(pair[0], pair[1]))
             for pair in TOPK_PAIRS}
    adjusted = dict(zip(tests, holm([t.p for t in tests.values()])))
    t = tests[(size, low, high)]
    show = partial(signed, digits=3, minus="−")
    return (f"| {size} | E = {high} minus E = {low} | {show(t.gap)} [{show(t.low)}, {show(t.high)}]"
            f" | {p_text(t.p)} | {p_text(adjusted[(size, low, high)])} |")


def fair_wsd_gap(schedule: str, steps: int) -> str:
    """cosine - wsd at each schedule's own lr on the reporting seeds, Holm over the 4 tests."""
    losses = load("wsd_cosine.json")["final_val_loss"]
    by_seed = {(name, n): {int(seed): loss for seed, loss in losses[name][str(n)].items()}
               for name in ("wsd20", "wsd30") for n in (1000, 3000)}
    tests = {key: paired(losses_cosine, by_seed[key]) for key in by_seed
             for losses_cosine in [{int(s): v for s, v in losses["cosine"][str(key[1])].items()}]}
    adjusted = dict(zip(tests, holm([t.p for t in tests.values()])))
    t = tests[(schedule, steps)]
    show = partial(signed, digits=4, minus="\u2212")
    return (f"{show(t.gap)} [{show(t.low)}, {show(t.high)}], Holm p "
            f"{p_text(adjusted[(schedule, steps)])}")


def wsd_minus_cosine(tokens: int) -> Paired:
    """wsd − cosine best val loss, paired on the points both grids have at seed 0."""
    def point(row):
        return row["size"], row["S"], row["E"], row["k"]
    cosine = {point(r): float(r["best_val_loss"]) for r in sweep_points("cpu-cosine")
              if r["budget"] == f"D{tokens}"}
    wsd = {point(r): float(r["best_val_loss"]) for r in sweep_points("cpu")
           if r["budget"] == f"D{tokens}" and r["seed"] == "0"}
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
    fit = load("sweeps/cpu/fit.json")
    low, high = fit["ci"][name]
    return f"{name} {fit['params'][name]:.{digits}f} [{low:.{digits}f}, {high:.{digits}f}]"


def effective_size_exponent() -> str:
    params = load("sweeps/cpu/fit.json")["params"]
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

STUDY, SCALING, RECIPE, README = "docs/study.md", "docs/scaling.md", "docs/recipe.md", "README.md"

def total_gap_by_seed(study: str, tokens: Optional[int] = None) -> list[float]:
    dense, moe = losses(study, "dense_total", tokens), losses(study, "moe", tokens)
    return [dense[s] - moe[s] for s in sorted(dense.keys() & moe.keys())]


def flip_across_sizes() -> str:
    """The matched-total gap at 591K (1.64M tokens) minus at 1.54M (4.13M tokens), Welch."""
    small = total_gap_by_seed("cpu-budgets", 1638400)
    large = total_gap_by_seed("cpu-replication-compiled")
    welch = stats.ttest_ind(small, large, equal_var=False)
    ci = welch.confidence_interval(0.95)
    return (f"a difference of {signed(np.mean(small) - np.mean(large), 3)} [{num(ci.low, 3)}, "
            f"{num(ci.high, 3)}] (Welch, p {p_text(welch.pvalue)}")


CLAIMS = [
    # The demo, 12 seeds pooled (docs/study.md), and seeds 0-5 alone.
    Claim(STUDY, "| matched active | +0.0117 | [0.0050, 0.0185] | 0.0027 | 0.0027 | 0.0094 |",
          partial(demo_pooled_row, "active")),
    Claim(STUDY, "| matched total | +0.0180 | [0.0103, 0.0258] | 0.0003 | 0.0007 | 0.0109 |",
          partial(demo_pooled_row, "total")),
    Claim(STUDY, "| first | +0.0117 [0.0050, 0.0185], p 0.0027 (0.0027) | "
          "+0.0180 [0.0103, 0.0258], p 0.0003 (0.0007) |", partial(demo_cpu_row, "first")),
    Claim(STUDY, "| second | +0.0099 [0.0020, 0.0177], p 0.018 (0.018) | "
          "+0.0162 [0.0072, 0.0251], p 0.0022 (0.0044) |", partial(demo_cpu_row, "second")),
    Claim(STUDY, "| third | +0.0118 [0.0053, 0.0183], p 0.0020 (0.0020) | "
          "+0.0182 [0.0112, 0.0253], p 0.0001 (0.0003) |", partial(demo_cpu_row, "third")),
    Claim(STUDY, "Welch's t on their per-seed differences gives p 0.23, 0.26 and 0.11 on the "
          "three CPUs", seed_sets_apart),
    Claim(STUDY, "| moe | 394.82K | 591.42K | 3.3598 ± 0.0138 | 6 |",
          lambda: f"| moe | 394.82K | 591.42K | {mean_std(losses('demo-seeds0-5', 'moe'))} | 6 |"),
    Claim(STUDY, "| dense_active | 393.79K | 393.79K | 3.3754 ± 0.0107 | 6 |",
          lambda: (f"| dense_active | 393.79K | 393.79K | "
                   f"{mean_std(losses('demo-seeds0-5', 'dense_active'))} | 6 |")),
    Claim(STUDY, "| dense_total | 590.40K | 590.40K | 3.3764 ± 0.0104 | 6 |",
          lambda: (f"| dense_total | 590.40K | 590.40K | "
                   f"{mean_std(losses('demo-seeds0-5', 'dense_total'))} | 6 |")),
    Claim(STUDY, "+0.0156: MoE better (paired t, n=6)", partial(demo_gap_line, "active")),
    Claim(STUDY, "+0.0165: MoE better (paired t, n=6)", partial(demo_gap_line, "total")),
    Claim(STUDY, "paired t: 95% CI [0.0066, 0.0245], p=0.0066, n=6 pairs",
          partial(demo_interval_line, "active")),
    Claim(STUDY, "paired t: 95% CI [0.0021, 0.0310], p=0.0324, n=6 pairs",
          partial(demo_interval_line, "total")),
    Claim(STUDY, "adjusted (Holm, 2 tests): p=0.0132", lambda: (
        "adjusted (Holm, 2 tests): p="
        f"{holm([demo_p(c) for c in DENSE])[0]:.4f}")),
    # cpu-budgets with Holm over its 8 tests, and the active gap's fall at the largest budget.
    Claim(STUDY, "| 409.6K | 3.4243 ± 0.0091 | 3.4426 ± 0.0080 | 3.4456 ± 0.0079 | "
          "+0.018 [−0.022, 0.058], p 0.19, 0.23, MDE 0.052 | "
          "+0.021 [−0.005, 0.048], p 0.075, 0.23, MDE 0.035 |", partial(budget_row, 409_600)),
    Claim(STUDY, "| 819.2K | 3.1267 ± 0.0071 | 3.1838 ± 0.0201 | 3.1928 ± 0.0189 | "
          "+0.057 [0.018, 0.096], p 0.024, 0.12, MDE 0.051 | "
          "+0.066 [0.025, 0.107], p 0.020, 0.12, MDE 0.054 |", partial(budget_row, 819_200)),
    Claim(STUDY, "| 1.64M | 2.8093 ± 0.0069 | 2.8671 ± 0.0102 | 2.8506 ± 0.0094 | "
          "+0.058 [0.039, 0.077], p 0.0058, 0.041, MDE 0.025 | "
          "+0.041 [0.009, 0.074], p 0.032, 0.13, MDE 0.043 |", partial(budget_row, 1_638_400)),
    Claim(STUDY, "| 3.28M | 2.5997 ± 0.0100 | 2.6395 ± 0.0118 | 2.6148 ± 0.0083 | "
          "+0.040 [0.035, 0.045], p 0.0008, 0.0062, MDE 0.006 | "
          "+0.015 [−0.005, 0.035], p 0.083, 0.23, MDE 0.026 |", partial(budget_row, 3_276_800)),
    Claim(STUDY, "at 1.64M (p 0.041) and 3.28M (p 0.0062)",
          lambda: (f"at 1.64M (p {p_text(budget_holm(1_638_400, 'active'))}) and 3.28M "
                   f"(p {p_text(budget_holm(3_276_800, 'active'))})")),
    Claim(STUDY, "(raw p 0.020 and 0.032 at 819.2K and 1.64M; Holm 0.12 and 0.13)",
          lambda: (f"(raw p {p_text(budget_gap(819_200, 'total').p)} and "
                   f"{p_text(budget_gap(1_638_400, 'total').p)} at 819.2K and 1.64M; Holm "
                   f"{p_text(budget_holm(819_200, 'total'))} and "
                   f"{p_text(budget_holm(1_638_400, 'total'))})")),
    Claim(STUDY, "falls from 1.64M to 3.28M by 0.018 on average (paired over the 3 seeds, p 0.08)",
          active_gap_fall),
    # Zero-shot tasks: MoE − dense_active, Holm over the 3 tasks; ending against chance.
    Claim(STUDY, "+0.0067 [−0.0057, 0.0190], p 0.22, 0.67 |", partial(task_row, "last_word")),
    Claim(STUDY, "+0.0064 [−0.0094, 0.0222], p 0.34, 0.69 |", partial(task_row, "ending")),
    Claim(STUDY, "+0.0076 [−0.0112, 0.0263], p 0.35, 0.69 |", partial(task_row, "agreement")),
    Claim(STUDY, "every one of the 12 runs' Wilson intervals over the 233 items contains 0.25 "
          "(the best run, 68 of 233 = 0.292, has [0.237, 0.353])", ending_against_chance),
    # Schedules, balancing, one WSD run for three budgets, the ladder.
    Claim(STUDY, "| `wsd_sqrt` | 3.3815 ± 0.0176 | -0.0216 [-0.0266, -0.0167], p 1e-4",
          lambda: setting_row("schedule.json", "wsd_sqrt", p_exp)),
    Claim(STUDY, "| `wsd_linear` | 3.3932 ± 0.0185 | -0.0333 [-0.0396, -0.0271], p 4e-5",
          lambda: setting_row("schedule.json", "wsd_linear", p_exp)),
    Claim(STUDY, "| `bias` | 3.3742 ± 0.0146 | -0.0135 [-0.0274, +0.0004], p 0.055",
          lambda: setting_row("balancing.json", "bias", lambda p: f"{p:.3f}")),
    Claim(STUDY, "| 204,800 | 3.7386 ± 0.0086 | 3.7456 ± 0.0118 | -0.0071 [-0.0241, +0.0099], "
          "p 0.21 |", partial(wsd_budget_row, 204_800)),
    Claim(STUDY, "| 409,600 | 3.4243 ± 0.0091 | 3.4279 ± 0.0124 | -0.0036 [-0.0173, +0.0101], "
          "p 0.38 |", partial(wsd_budget_row, 409_600)),
    Claim(STUDY, "| 819,200 | 3.1267 ± 0.0071 | 3.1363 ± 0.0116 | -0.0096 [-0.0352, +0.0160], "
          "p 0.25 |", partial(wsd_budget_row, 819_200)),
    Claim(STUDY, "+0.008 (p 0.67, + balancing), +0.016 (p 0.33, top-2), -0.009 (p 0.20, + z-loss) "
          "and -0.006 (p 0.21, bias instead of the loss)", ladder_steps),
    Claim(STUDY, "balancing -0.033 [-0.138, +0.072] (p 0.39; Holm 1.0)",
          partial(cpu_ladder_step, 0)),
    Claim(STUDY, "top-2 +0.161 [+0.055, +0.267] (p 0.017; Holm 0.084)",
          partial(cpu_ladder_step, 1)),
    Claim(STUDY, "global-batch balancing +0.012 [-0.012, +0.036] (p 0.22",
          lambda: cpu_ladder_step(3).split("; Holm")[0]),
    Claim(STUDY, "falls by 0.52 [0.30, 0.75] (paired over the 4 seeds, p 0.005)",
          cpu_ladder_busiest),
    Claim(RECIPE, "+0.0151 [+0.0039, +0.0263]** (p 0.015, Holm 0.015)",
          partial(fair_lr_gap, "active")),
    Claim(RECIPE, "+0.0176 [+0.0078, +0.0275]** (p 0.0039, Holm 0.0078)",
          partial(fair_lr_gap, "total")),
    # The sweep (docs/scaling.md).
    Claim(SCALING, "Paired on the 16 points of seed 0 (the cosine grid's only seed), the wsd "
          "points end above cosine's by +0.013 [0.009, 0.017] nats at 1.2M tokens and +0.018 "
          "[0.009, 0.026] at 3.7M (wsd − cosine, t intervals; p 6e-6 and 4e-4)", wsd_lean),
    Claim(SCALING, "delta 0.029 [0.004, 0.039]", lambda: fitted("delta", 3)),
    Claim(SCALING, "gamma 0.62 [0.43, 0.79], beta 0.80 [0.55, 1.16], e 2.18 [1.95, 2.34]",
          lambda: ", ".join(fitted(name, 2) for name in ("gamma", "beta", "e"))),
    Claim(SCALING, "N (1 - S)^0.047", effective_size_exponent),
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
    Claim(SCALING, '| s2 | E = 8 minus E = 4 | −0.015 [−0.056, +0.026] | 0.25 | 0.25 |',
          partial(topk_pair_row, "s2", 4, 8)),
    Claim(SCALING, '| s2 | E = 16 minus E = 4 | −0.038 [−0.075, −0.000] | 0.049 | 0.10 |',
          partial(topk_pair_row, "s2", 4, 16)),
    Claim(SCALING, '| s2 | E = 16 minus E = 8 | −0.022 [−0.035, −0.010] | 0.016 | 0.065 |',
          partial(topk_pair_row, "s2", 8, 16)),
    Claim(SCALING, '| s3 | E = 8 minus E = 4 | −0.031 [−0.034, −0.029] | 0.0003 | 0.0015 |',
          partial(topk_pair_row, "s3", 4, 8)),
    Claim(SCALING, '| s3 | E = 16 minus E = 4 | −0.058 [−0.081, −0.034] | 0.0088 | 0.044 |',
          partial(topk_pair_row, "s3", 4, 16)),
    Claim(SCALING, '| s3 | E = 16 minus E = 8 | −0.026 [−0.047, −0.005] | 0.034 | 0.10 |',
          partial(topk_pair_row, "s3", 8, 16)),
    Claim(STUDY, "\u22120.0040 [\u22120.0138, +0.0059], Holm p 0.34",
          partial(fair_wsd_gap, "wsd20", 3000)),
    Claim(STUDY, "+0.0067 [\u22120.0023, +0.0158], Holm p 0.23", partial(fair_wsd_gap, "wsd30", 3000)),
    Claim(STUDY, "a difference of +0.030 [0.003, 0.058] (Welch, p 0.038", flip_across_sizes),
    # The README.
    Claim(README, "| matched active | +0.0117 | [0.0050, 0.0185] | 0.0027 | 0.0094 |",
          partial(readme_pooled_row, "active")),
    Claim(README, "| matched total | +0.0180 | [0.0103, 0.0258] | 0.0007 | 0.0109 |",
          partial(readme_pooled_row, "total")),
    Claim(README, "+0.0117 [0.0050, 0.0185], 395K active", lambda: readme_pooled_gap("active")
          + ", 395K active"),
    Claim(README, "+0.0180 [0.0103, 0.0258]: MoE better", lambda: readme_pooled_gap("total")
          + ": MoE better"),
    Claim(README, "still leads by +0.015 (active) and +0.018 (total)", readme_fair_lr),
    Claim(README, "+0.018, +0.057, +0.058, +0.040 at 0.4M-3.3M tokens", readme_active_trend),
    Claim(README, "+0.015 (Holm p 0.23) at 3.28M tokens", readme_total_at_largest),
    Claim(README, "one expert takes 0.994 of a layer", readme_collapse),
    Claim(README, "lowers the worst busiest fraction by 0.52 [0.30, 0.75]",
          lambda: "lowers the worst busiest fraction by "
          + cpu_ladder_busiest().removeprefix("falls by ").split(" (")[0]),
    Claim(README, "+0.161 [+0.055, +0.267] nats, Holm p 0.084", readme_top2),
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

    raise SystemExit(run_command(main, "check_claims"))
