"""Schedules and load balancing on the demo's MoE: paired comparisons of one setting against a
baseline, on the same seeds.

Three kinds of file: a settings grid (``schedule.json``: cosine against WSD at the demo's recipe;
``balancing.json``: the Switch loss per micro batch against per optimizer step and aux-loss-free
bias balancing), the fair WSD-against-cosine experiment (``wsd_cosine.json``: each schedule at
its own lr, one shared short warmup, two horizons), and one WSD run for three budgets
(``wsd_budgets.json``). Every gap is paired by seed (``moelab.stats.t_tests``), Holm over the
file's own tests, the word by rule (``moelab.stats.verdicts``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from moelab.config.files import load_config
from moelab.findings.selection import demo_selection_seeds, seed_ranges
from moelab.findings.source import ResultsRoot, SeedLosses, arm_losses, seed_losses
from moelab.report import format_mean_std, markdown_table
from moelab.report.analysis import Analysis, Findings
from moelab.stats.intervals import summarize
from moelab.stats.multiple import holm
from moelab.stats.power import min_detectable_gap
from moelab.stats.t_tests import PairedTest, paired_difference
from moelab.stats.verdicts import Difference, Verdict, difference_verdict

GRIDS = {"schedule.json": "the schedule", "balancing.json": "load balancing"}
DEMO_MOE_RUNS = ("studies/demo-seeds0-5.json", "studies/demo-seeds0-5-cpu2.json",
                 "studies/demo-seeds0-5-cpu3.json", "studies/cpu-budgets.json")
"""Studies whose MoE runs a baseline may repeat (found by equal losses, said beside it)."""


@dataclass(frozen=True)
class Test:
    """first − second, paired by seed, Holm-adjusted over ``family``."""

    label: str
    n: int
    gap: float
    ci: tuple[float, float]
    p: float
    p_holm: float
    min_detectable_gap: float
    verdict: Verdict


def _tests(pairs: Mapping[str, tuple[SeedLosses, SeedLosses]], family: str, ahead: str,
           behind: str) -> list[Test]:
    """Each named pair's paired test (first − second), Holm over all of them."""
    tests: dict[str, PairedTest] = {label: paired_difference(first, second)
                                    for label, (first, second) in pairs.items()}
    adjusted = holm([t.p_value for t in tests.values()])
    return [Test(label, t.n_pairs, t.gap, (t.ci_low, t.ci_high), t.p_value, p_holm,
                 min_detectable_gap(t.standard_error, t.n_pairs - 1),
                 difference_verdict(Difference(t.gap, (t.ci_low, t.ci_high), p_holm, family),
                                    ahead=ahead, behind=behind))
            for (label, t), p_holm in zip(tests.items(), adjusted)]


def _loss(losses: SeedLosses) -> str:
    summary = summarize(list(losses.values()))
    return format_mean_std(summary.mean, summary.std)


def _test_cells(t: Test) -> list[str]:
    return [f"{t.gap:+.4f}", f"[{t.ci[0]:+.4f}, {t.ci[1]:+.4f}]", f"{t.p:.2g}", f"{t.p_holm:.2g}",
            f"{t.min_detectable_gap:.4f}", f"**{t.verdict.word}**"]


TEST_HEADERS = ["gap", "95 % CI", "p", "p (Holm)", "min. detectable gap", "verdict"]


# --- settings grids (schedule.json, balancing.json) -------------------------------------------


@dataclass(frozen=True)
class Setting:
    name: str
    overrides: list[str]
    losses: SeedLosses
    effective_experts: float
    """Mean over layers and seeds, at the final evaluation."""
    busiest_fraction: float
    """Each run's worst layer's busiest-expert fraction, mean over seeds."""
    dead_experts: float
    """Experts under 1 % of the mean load, summed over layers, mean over seeds."""


@dataclass(frozen=True)
class Grid:
    file: str
    topic: str
    common: list[str]
    seeds: list[int]
    baseline: str
    settings: list[Setting]
    tests: list[Test]
    chose: list[int]
    """The grid's seeds that also chose or checked the demo's recipe."""
    baseline_runs: str | None
    """The study whose MoE runs the baseline's are (the same losses), if any."""


def _setting(name: str, record: dict, seeds: list[int]) -> Setting:
    runs = record["runs"]
    layers = len(runs[0]["busiest_fraction"])
    return Setting(name, list(record["overrides"]),
                   {seed: float(r["best_val_loss"]) for seed, r in zip(seeds, runs)},
                   sum(sum(r["effective_experts"]) / layers for r in runs) / len(runs),
                   sum(max(r["busiest_fraction"]) for r in runs) / len(runs),
                   sum(sum(r["dead_experts"]) for r in runs) / len(runs))


def compute_grids(results: ResultsRoot, findings: Findings) -> list[Grid]:
    grids = []
    for file, topic in GRIDS.items():
        stored = results.json(file)
        seeds = [int(s) for s in stored["seeds"]]
        settings = [_setting(name, record, seeds) for name, record in stored["settings"].items()]
        base = next(s for s in settings if s.name == stored["baseline"])
        others = [s for s in settings if s is not base]
        tests = _tests({s.name: (base.losses, s.losses) for s in others},
                       f"Holm over the grid's {len(others)} tests",
                       ahead="variant lower", behind="variant higher")
        chose = sorted(set(seeds) & demo_selection_seeds(results))
        grids.append(Grid(file, topic, list(stored["common"]), seeds, base.name, settings, tests,
                          chose, _same_moe_runs(results, base.losses)))
    return grids


def _study_moe_losses(results: ResultsRoot, file: str) -> list[SeedLosses]:
    """The MoE arm's {seed: best val loss} of a study, one per budget (one when it has none)."""
    stored = results.json(file)
    groups = [g["arms"] for g in stored.get("budgets") or []] or [stored["arms"]]
    return [arm_losses(arms, "moe") for arms in groups]


def _same_moe_runs(results: ResultsRoot, losses: SeedLosses) -> str | None:
    """The first study of DEMO_MOE_RUNS whose MoE runs have exactly these losses."""
    return next((file for file in DEMO_MOE_RUNS
                 if losses in _study_moe_losses(results, file)), None)


def _selection_note(chose: list[int], baseline: str, runs: str | None) -> str:
    note = (f" Seeds {seed_ranges(chose)} of these also chose or checked the demo's recipe, its "
            "lr and 50 % warmup among them (`recipe.json`, `fair_lr.json`)." if chose else "")
    if runs:
        note += (f" The `{baseline}` runs are the MoE runs of `{runs}` (the same losses to the "
                 "last digit).")
    return note


def render_grids(grids: list[Grid] | None, results: ResultsRoot, findings: Findings) -> str:
    if not grids:
        return ""
    parts = ["## One setting against a baseline: schedule and balancing\n\n"
             "The demo's MoE (4 experts, top-2, 409,600 tokens) on the same seeds under each "
             "setting; best validation loss, mean ± seed sd, and the paired gap baseline − "
             "variant (positive: the variant is lower), Holm over the grid's tests, the verdict "
             "by rule (docs/verdicts.md). Routing at each run's final evaluation: effective "
             "experts (mean over layers and seeds), each run's worst layer's busiest-expert "
             "fraction, mean over seeds (1/4 is balanced), dead experts (load under 1 % of the "
             "mean, summed over layers).\n"]
    for grid in grids:
        tests = {t.label: t for t in grid.tests}
        rows = [[f"`{s.name}`", ", ".join(f"`{o}`" for o in s.overrides), _loss(s.losses),
                 *(_test_cells(tests[s.name]) if s.name in tests else ["–"] * 6),
                 f"{s.effective_experts:.3f}", f"{s.busiest_fraction:.3f}", f"{s.dead_experts:g}"]
                for s in grid.settings]
        common = ", ".join(f"`{c}`" for c in grid.common) or "none"
        parts.append(f"\n{grid.topic.capitalize()} (`{grid.file}`; seeds {grid.seeds[0]}-"
                     f"{grid.seeds[-1]}; overrides common to every setting: {common})."
                     + _selection_note(grid.chose, grid.baseline, grid.baseline_runs) + "\n\n"
                     + markdown_table(["setting", "overrides", "best val loss", *TEST_HEADERS,
                                       "effective experts", "busiest fraction", "dead experts"],
                                      rows, "llrrrrrrlrrr"))
    return "".join(parts)


GRIDS_ANALYSIS: Analysis[ResultsRoot, list[Grid]] = Analysis("setting_grids", compute_grids,
                                                             render_grids)


# --- WSD against cosine, each at its own lr (wsd_cosine.json) ----------------------------------


@dataclass(frozen=True)
class FairWsd:
    lrs: list[float]
    select_seeds: list[int]
    selection: dict[str, dict[float, float]]
    """schedule: {lr: mean final val loss over the selection seeds}."""
    best_lr: dict[str, float]
    cooldowns: dict[str, float]
    warmup_steps: int
    report_seeds: list[int]
    chose: list[int]
    """The reporting seeds that also chose or checked the demo's recipe (head, batch: kept here)."""
    losses: dict[str, dict[int, SeedLosses]]
    """schedule: {horizon in steps: {seed: final val loss}}."""
    tests: list[Test]


def compute_fair_wsd(results: ResultsRoot, findings: Findings) -> FairWsd:
    stored = results.json("wsd_cosine.json")
    losses = {name: {int(steps): seed_losses(by_seed) for steps, by_seed in horizons.items()}
              for name, horizons in stored["final_val_loss"].items()}
    horizons = [int(h) for h in stored["horizons_steps"]]
    pairs = {f"{h:,} steps: cosine − {name}": (losses["cosine"][h], losses[name][h])
             for h in horizons for name in stored["cooldowns"]}
    tests = _tests(pairs, f"Holm over the {len(pairs)} tests", ahead="WSD lower",
                   behind="cosine lower")
    return FairWsd([float(lr) for lr in stored["lrs"]], [int(s) for s in stored["select_seeds"]],
                   {name: {float(lr): float(v) for lr, v in by_lr.items()}
                    for name, by_lr in stored["selection_mean_final_val_loss"].items()},
                   {name: float(lr) for name, lr in stored["best_lr"].items()},
                   {name: float(f) for name, f in stored["cooldowns"].items()},
                   int(stored["warmup_steps"]), [int(s) for s in stored["report_seeds"]],
                   sorted({int(s) for s in stored["report_seeds"]}
                          & demo_selection_seeds(results)),
                   losses, tests)


def render_fair_wsd(fair: FairWsd | None, results: ResultsRoot, findings: Findings) -> str:
    if fair is None:
        return ""
    schedules = list(fair.losses)
    selection = [[f"`{name}`", *(f"{fair.selection[name][lr]:.3f}" for lr in fair.lrs),
                  f"{fair.best_lr[name]:g}"] for name in schedules]
    horizons = sorted(fair.losses["cosine"])
    means = [[f"{h:,} steps", *(_loss(fair.losses[name][h]) for name in schedules)]
             for h in horizons]
    tests = [[t.label, str(t.n), *_test_cells(t)] for t in fair.tests]
    cooldowns = ", ".join(f"`{name}` the last {share:.0%}" for name, share in fair.cooldowns.items())
    return ("## WSD against cosine, each at its own lr\n\n"
            "`experiments/wsd_cosine.py` (`wsd_cosine.json`, the demo's MoE on TinyStories): "
            f"one shared {fair.warmup_steps}-step warmup, 1 - sqrt cooldowns ({cooldowns}), "
            f"each schedule's lr chosen on seeds {fair.select_seeds[0]}-{fair.select_seeds[-1]} "
            "at the short horizon (mean final validation loss; no test, so the chosen lr is the "
            "lowest mean, not a bounded optimum) and reused at the long one:\n\n"
            + markdown_table(["schedule", *(f"lr {lr:g}" for lr in fair.lrs), "chosen"],
                             selection, "l" + "r" * (len(fair.lrs) + 1))
            + f"\nFinal validation loss on the reporting seeds {fair.report_seeds[0]}-"
              f"{fair.report_seeds[-1]}, mean ± seed sd"
            + (f" (seeds {seed_ranges(fair.chose)} of them also checked the demo's recipe, whose "
               "head and batch these runs keep: `recipe.json`)" if fair.chose else "")
            + ":\n\n"
            + markdown_table(["horizon", *(f"`{name}`" for name in schedules)], means,
                             "l" + "r" * len(schedules))
            + "\ncosine − wsd, paired by seed (positive: WSD is lower), Holm over the 4 tests:\n\n"
            + markdown_table(["comparison", "n", *TEST_HEADERS], tests, "lrrrrrrl"))


FAIR_WSD_ANALYSIS: Analysis[ResultsRoot, FairWsd] = Analysis("fair_wsd", compute_fair_wsd,
                                                             render_fair_wsd)


# --- One WSD run for three budgets (wsd_budgets.json) ------------------------------------------


@dataclass(frozen=True)
class Budget:
    tokens: int
    cosine: SeedLosses
    wsd: SeedLosses


@dataclass(frozen=True)
class WsdBudgets:
    seeds: list[int]
    warmup_steps: int
    budgets: list[Budget]
    tests: list[Test]
    tokens: dict[str, int]
    """plan: tokens trained over every seed (counted from the run folders)."""
    train_time_s: dict[str, float]
    cosine_warmup: dict[int, tuple[int, int]]
    """tokens: (warmup steps, steps) of the cosine run, from the preset's schedule."""
    cosine_runs: dict[int, str]
    """tokens: the study whose MoE runs the cosine runs at that budget are (same losses)."""
    chose: list[int]
    """The seeds that also chose or checked the demo's recipe."""


def compute_wsd_budgets(results: ResultsRoot, findings: Findings) -> WsdBudgets:
    stored = results.json("wsd_budgets.json")
    budgets = [Budget(int(tokens), seed_losses(row["cosine_best_val_loss"]),
                      seed_losses(row["wsd_best_val_loss"]))
               for tokens, row in stored["by_budget"].items()]
    tests = _tests({f"{b.tokens:,}": (b.cosine, b.wsd) for b in budgets},
                   f"Holm over the {len(budgets)} budgets", ahead="WSD family lower",
                   behind="cosine lower")
    measured = stored["measured"]
    train = load_config(stored["preset"]).train
    tokens_per_step = train.batch_size * load_config(stored["preset"]).model.max_seq_len
    warmup = {b.tokens: (round(train.warmup_fraction * b.tokens // tokens_per_step),
                         b.tokens // tokens_per_step) for b in budgets}
    runs = {b.tokens: file for b in budgets
            if (file := _same_moe_runs(results, b.cosine)) is not None}
    seeds = [int(s) for s in stored["seeds"]]
    return WsdBudgets(seeds, int(stored["warmup_steps"]), budgets,
                      tests, {plan: int(m["tokens"]) for plan, m in measured.items()},
                      {plan: float(m["train_time_s"]) for plan, m in measured.items()},
                      warmup, runs, sorted(set(seeds) & demo_selection_seeds(results)))


def render_wsd_budgets(record: WsdBudgets | None, results: ResultsRoot,
                       findings: Findings) -> str:
    if record is None:
        return ""
    tests = {t.label: t for t in record.tests}
    rows = [[f"{b.tokens:,}", _loss(b.cosine), _loss(b.wsd), *_test_cells(tests[f"{b.tokens:,}"])]
            for b in record.budgets]
    saved = 1 - record.tokens["wsd"] / record.tokens["cosine"]
    plans = [[plan, f"{record.tokens[plan]:,}", f"{record.train_time_s[plan]:.0f} s"]
             for plan in record.tokens]
    return ("## One WSD run for three budgets\n\n"
            "`experiments/wsd_budgets.py` (`wsd_budgets.json`, the demo's MoE on a TinyStories "
            f"subset, seeds {record.seeds[0]}-{record.seeds[-1]}): a cosine run per budget from "
            "scratch against one WSD run whose smaller budgets are cooldown branches "
            f"(`moelab.train.wsd_budget_family`, a shared {record.warmup_steps}-step warmup)."
            + _wsd_confounds(record) +
            " Best validation loss, mean ± seed sd; cosine − wsd paired by seed (positive: the "
            "family is lower):\n\n"
            + markdown_table(["tokens", "cosine", "wsd family", *TEST_HEADERS], rows, "rrrrrrrrl")
            + "\nTokens trained over the seeds (counted from the run folders) and training "
              "time (measured on a shared machine, the two plans at different moments):\n\n"
            + markdown_table(["plan", "tokens", "training time"], plans, "lrr")
            + f"\nThe family trains {saved:.0%} fewer tokens than the cosine runs.\n")


def _wsd_confounds(record: WsdBudgets) -> str:
    warmups = ", ".join(f"{w:,} of {n:,}" for w, n in record.cosine_warmup.values())
    text = (f" The cosine runs warm up for their preset's share of their own steps ({warmups} "
            f"steps), the WSD family for {record.warmup_steps}: the warmup changes with the "
            "schedule, a confound of every gap below.")
    by_file: dict[str, list[int]] = {}
    for tokens, file in record.cosine_runs.items():
        by_file.setdefault(file, []).append(tokens)
    for file, budgets in by_file.items():
        text += (f" The cosine runs at {' and '.join(f'{t:,}' for t in budgets)} tokens are "
                 f"the MoE runs of `{file}` (the same losses to the last digit).")
    if record.chose:
        text += (f" Seeds {seed_ranges(record.chose)} also chose or checked the demo's recipe "
                 "(`recipe.json`), on other data.")
    return text


WSD_BUDGETS_ANALYSIS: Analysis[ResultsRoot, WsdBudgets] = Analysis(
    "wsd_budgets", compute_wsd_budgets, render_wsd_budgets)
