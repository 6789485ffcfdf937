"""Fair comparisons on the demo: each arm at its own lr (``--tune-lr``), and seeds until resolved.

``studies/demo-tune-lr.json`` is ``moelab study demo --tune-lr 0.005,0.01,0.02,0.04``: each
arm's peak lr chosen on selection seeds 1000000-1000001, the study reported on seeds 0-5 at the
chosen lrs. The chosen lr's word is ``optimum_verdict``'s, each rise to a neighbour a paired test
over the selection seeds (Holm over the arm's two rises); the reported gaps are the study's own
test (``moelab.study.gaps.compare``), Holm over the 2 criteria. When every arm chose the preset's
own lr, the reporting runs repeat a demo study already on the page (found by equal losses): the
page then says so, prints the gaps as descriptive and points to that study's pooled row.

``seeds_until_resolved.json`` holds four repetitions of ``moelab study demo --until-resolved``
(seed blocks 100, 200, 300, 400): where each comparison stopped and its repeated interval, as
the sequential procedure (``moelab.stats.sequential``) recorded them, and every run's loss.
Beside them, a fixed design tested once on the repetition's first 6 seeds (the study's paired
test, Holm over the 2 criteria, recomputed from the losses), and the same test on every seed it
trained as a description only: the stopping rule chose that seed count, so a fixed-n test on it
is no test at its level, and the sequential design is counted by its own repeated intervals.
"""

from __future__ import annotations

from dataclasses import dataclass

from moelab.config.files import load_config
from moelab.findings.source import ResultsRoot, arm_losses, seed_losses
from moelab.report import markdown_table
from moelab.report.analysis import Analysis, Findings
from moelab.stats.multiple import holm
from moelab.stats.t_tests import paired_difference
from moelab.stats.verdicts import Difference, Verdict, difference_verdict, optimum_verdict
from moelab.study.gaps import compare

ARMS = ("moe", "dense_active", "dense_total")
CRITERIA = {"matched active": "dense_active", "matched total": "dense_total"}
TUNED = "studies/demo-tune-lr.json"
UNTIL_RESOLVED = "seeds_until_resolved.json"
GAPS_FAMILY = "Holm over the 2 criteria"
PRESET = "demo"
REPEATED_CANDIDATES = {"first": "studies/demo-seeds0-5.json",
                       "second": "studies/demo-seeds0-5-cpu2.json",
                       "third": "studies/demo-seeds0-5-cpu3.json"}
"""The demo's own runs of seeds 0-5 on each CPU: a tuned study whose arms all chose the preset's
lr trained these same runs again, and is found among them by its losses."""


@dataclass(frozen=True)
class GapRow:
    criterion: str
    n: int
    gap: float
    ci: tuple[float, float]
    p: float
    p_holm: float
    verdict: Verdict


@dataclass(frozen=True)
class ArmLr:
    arm: str
    grid: list[float]
    losses: dict[float, dict[int, float]]
    """lr: {selection seed: best val loss}."""
    chosen: float
    verdict: Verdict


@dataclass(frozen=True)
class TunedDemo:
    selection_seeds: list[int]
    reporting_seeds: list[int]
    arms: list[ArmLr]
    gaps: list[GapRow]
    default_lr: float
    """The preset's shared lr."""
    same_runs: str | None
    """The CPU whose demo study of the same seeds has the same losses to the last digit, when
    every arm chose the default lr (then the tuned study repeated those runs)."""


def _gap_rows(losses: dict[str, dict[int, float]]) -> list[GapRow]:
    gaps = [compare(name, "moe", dense, losses["moe"], losses[dense])
            for name, dense in CRITERIA.items()]
    return [GapRow(g.criterion, g.n_moe, g.gap, (g.ci_low, g.ci_high), g.p_value, p_holm,
                   difference_verdict(Difference(g.gap, (g.ci_low, g.ci_high), p_holm,
                                                 GAPS_FAMILY),
                                      ahead="MoE ahead", behind="dense ahead"))
            for g, p_holm in zip(gaps, holm([g.p_value for g in gaps]))]


def _arm_lr(arm: str, record: dict) -> ArmLr:
    grid = [float(lr) for lr in record["grid"]]
    losses = {float(lr): seed_losses(by_seed) for lr, by_seed in record["losses"].items()}
    by_grid = [losses[lr] for lr in grid]
    best = grid.index(float(record["lr"]))
    # A rise: the neighbour's loss minus the best's, paired by selection seed.
    rises = [paired_difference(by_grid[i], by_grid[best]) if 0 <= i < len(grid) else None
             for i in (best - 1, best + 1)]
    adjusted = holm([r.p_value for r in rises if r is not None])
    family = f"Holm over the arm's {len(adjusted)} rises"
    differences: list[Difference | None] = []
    for rise in rises:
        differences.append(None if rise is None else Difference(
            rise.gap, (rise.ci_low, rise.ci_high), adjusted.pop(0), family))
    return ArmLr(arm, grid, losses, grid[best],
                 optimum_verdict(grid, best, differences[0], differences[1]))


def compute_tuned(results: ResultsRoot, findings: Findings) -> TunedDemo:
    stored = results.json(TUNED)
    selection = stored["lr_selection"]
    arms = [_arm_lr(arm, selection["arms"][arm]) for arm in ARMS]
    losses = _arm_losses(stored)
    default_lr = float(load_config(PRESET).train.lr)
    same_runs = None
    if all(a.chosen == default_lr for a in arms):
        same_runs = next((cpu for cpu, file in REPEATED_CANDIDATES.items()
                          if _arm_losses(results.json(file)) == losses), None)
    return TunedDemo([int(s) for s in selection["selection_seeds"]],
                     [int(s) for s in selection["reporting_seeds"]], arms, _gap_rows(losses),
                     default_lr, same_runs)


def _arm_losses(stored: dict) -> dict[str, dict[int, float]]:
    return {arm: arm_losses(stored["arms"], arm) for arm in ARMS}


def _gaps_table(rows: list[GapRow], first: str = "") -> list[list[str]]:
    return [[*([first] if first else []), r.criterion, str(r.n), f"{r.gap:+.4f}",
             f"[{r.ci[0]:+.4f}, {r.ci[1]:+.4f}]", f"{r.p:.2g}", f"{r.p_holm:.2g}",
             f"**{r.verdict.word}**"] for r in rows]


GAP_HEADERS = ["criterion", "n", "gap", "95 % CI", "p", "p (Holm)", "verdict"]


def render_tuned(tuned: TunedDemo | None, results: ResultsRoot, findings: Findings) -> str:
    if tuned is None:
        return ""
    seeds = tuned.selection_seeds
    lr_rows = [[f"`{a.arm}`", f"{lr:g}", *(f"{a.losses[lr][s]:.4f}" for s in seeds),
                f"{sum(a.losses[lr].values()) / len(a.losses[lr]):.4f}",
                "chosen" if lr == a.chosen else ""]
               for a in tuned.arms for lr in a.grid]
    words = "; ".join(f"`{a.arm}` {a.chosen:g}, **{a.verdict.word}**" for a in tuned.arms)
    runs = len(tuned.reporting_seeds) * len(tuned.arms)
    reporting = (f"\nEvery arm chose lr {tuned.default_lr:g}, the `{PRESET}` preset's shared lr, "
                 f"so the {runs} reporting runs repeat the {tuned.same_runs} CPU's demo study of "
                 f"the same seeds (`{REPEATED_CANDIDATES[tuned.same_runs]}`, the same losses to "
                 "the last digit), which the pooled table above reads as a descriptive half. The "
                 "tuned-lr answer is therefore that CPU's 12-seed row of the pooled table. Dense "
                 "− MoE on these 6 seeds, paired by seed (positive: the MoE is lower), "
                 "descriptive (raw p, no verdict):\n\n") if tuned.same_runs else (
        f"\nDense − MoE on the reporting seeds "
        f"{tuned.reporting_seeds[0]}-{tuned.reporting_seeds[-1]} at the chosen lrs, paired "
        f"by seed (positive: the MoE is lower; {GAPS_FAMILY}):\n\n")
    headers, align = GAP_HEADERS, "lrrrrrl"
    gap_rows = _gaps_table(tuned.gaps)
    if tuned.same_runs:
        headers, align, gap_rows = GAP_HEADERS[:5], "lrrrr", [row[:5] for row in gap_rows]
    return ("## Each arm at its own lr\n\n"
            f"`moelab study demo --tune-lr {','.join(f'{lr:g}' for lr in tuned.arms[0].grid)}` "
            f"(`{TUNED}`): each arm's best validation loss at each peak lr on the selection seeds "
            f"{seeds[0]} and {seeds[1]}, and their mean:\n\n"
            + markdown_table(["arm", "lr", *(f"seed {s}" for s in seeds), "mean", ""], lr_rows,
                             "lrrrrl")
            + f"\nThe chosen lr and its word by rule (docs/verdicts.md; each rise to a neighbouring "
              f"lr paired over the {len(seeds)} selection seeds, Holm over the arm's rises): "
              f"{words}.\n" + reporting + markdown_table(headers, gap_rows, align))


TUNED_ANALYSIS: Analysis[ResultsRoot, TunedDemo] = Analysis("demo_tuned_lr", compute_tuned,
                                                            render_tuned)


@dataclass(frozen=True)
class Stop:
    """Where the sequential procedure stopped one comparison, as it recorded it."""

    criterion: str
    seeds_at_stop: int
    reason: str
    gap: float
    interval: tuple[float, float]


@dataclass(frozen=True)
class Repetition:
    seeds: list[int]
    trained: int
    stops: list[Stop]
    fixed_6: list[GapRow]
    fixed_all: list[GapRow]


def _block(rep: Repetition) -> str:
    """'300-310 (of 300-311 planned)': the seeds trained, and the plan when it stopped early."""
    trained = sorted(rep.seeds[:rep.trained])
    text = f"{trained[0]}-{trained[-1]}"
    if rep.trained < len(rep.seeds):
        text += f" (of {min(rep.seeds)}-{max(rep.seeds)} planned)"
    return text


@dataclass(frozen=True)
class UntilResolved:
    repetitions: list[Repetition]
    fixed_seeds: int
    machine: str
    """The machine that ran the blocks, as the file records it ("" when it does not)."""


def _fixed(rep: dict, count: int) -> list[GapRow]:
    seeds = [int(s) for s in rep["seed_order"][:count]]
    losses = {arm: {s: v for s, v in seed_losses(rep["losses"][arm]).items() if s in seeds}
              for arm in ARMS}
    return _gap_rows(losses)


def compute_until_resolved(results: ResultsRoot, findings: Findings) -> UntilResolved:
    stored = results.json(UNTIL_RESOLVED)
    fixed = int(stored["fixed_seeds"])
    reps = []
    for rep in stored["repetitions"]:
        stops = [Stop(c["criterion"], int(c["seeds_at_stop"]), str(c["reason"]), float(c["gap"]),
                      (float(c["interval"][0]), float(c["interval"][1])))
                 for c in rep["comparisons"]]
        reps.append(Repetition([int(s) for s in rep["seed_order"]], int(rep["seeds_trained"]),
                               stops, _fixed(rep, fixed), _fixed(rep, int(rep["seeds_trained"]))))
    machine = stored.get("machine") or stored.get("cpu") or ""
    return UntilResolved(reps, fixed, machine if isinstance(machine, str) else
                         ", ".join(f"{k} {v}" for k, v in machine.items()))


def render_until_resolved(record: UntilResolved | None, results: ResultsRoot,
                          findings: Findings) -> str:
    if record is None:
        return ""
    stop_rows = [[_block(r), str(r.trained), s.criterion,
                  str(s.seeds_at_stop), f"`{s.reason}`",
                  f"{s.gap:+.4f} [{s.interval[0]:+.4f}, {s.interval[1]:+.4f}]"]
                 for r in record.repetitions for s in r.stops]
    trained = [r.trained for r in record.repetitions]
    fixed_rows = []
    for r in record.repetitions:
        fixed_rows += _gaps_table(r.fixed_6, f"{_block(r)}, first "
                                             f"{record.fixed_seeds}")
        # The seed count of these rows was set by the stopping rule: a fixed-n test on it is no
        # test at its level, so the rows are descriptive.
        fixed_rows += [row[:6] + ["–", "descriptive"] for row in _gaps_table(
            r.fixed_all, f"{_block(r)}, all {r.trained}")]
    ahead = sum(row.verdict.word == "MoE ahead" for r in record.repetitions for row in r.fixed_6)
    comparisons = sum(len(r.stops) for r in record.repetitions)
    resolved = [s for r in record.repetitions for s in r.stops if s.reason == "resolved"]
    lower = sum(s.interval[0] > 0 for s in resolved)
    machine = (f"on {record.machine}" if record.machine
               else "on a CPU the file does not record")
    return ("## Seeds until resolved\n\n"
            f"`moelab study demo --until-resolved --seeds 3 --max-seeds 12` on four disjoint seed "
            f"blocks (`{UNTIL_RESOLVED}`), {machine}. Where each comparison stopped, the stop rule's "
            "outcome as the procedure recorded it (`resolved`: its repeated interval excludes 0; "
            "`undetermined at the maximum`: it reached the last seed first) and the repeated "
            "interval of dense − MoE at the stop (97.5 % per comparison, at least 95 % for the "
            "two together):\n\n"
            + markdown_table(["seed block", "trained", "criterion", "seeds at stop", "outcome",
                              "gap [repeated interval]"], stop_rows, "lrlrll")
            + f"\nSeeds trained: {sum(trained) / len(trained):.2f} on average "
              f"({', '.join(map(str, trained))}) against the fixed design's "
              f"{record.fixed_seeds}.\n\nThe fixed design tested once on the same runs, on each "
              f"block's first {record.fixed_seeds} seeds (paired by seed, {GAPS_FAMILY} of the "
              "block), and on every seed the block trained, descriptive: the stopping rule set "
              "that seed count, so a fixed-n test on it has no verdict:\n\n"
            + markdown_table(["seeds", *GAP_HEADERS], fixed_rows, "llrrrrrl")
            + f"\nThe fixed {record.fixed_seeds}-seed design: **MoE ahead** in {ahead} of the "
              f"{comparisons} comparisons. The sequential design: {len(resolved)} of "
              f"{comparisons} resolved by their repeated intervals, {lower} of them with the MoE "
              "lower.\n")


UNTIL_RESOLVED_ANALYSIS: Analysis[ResultsRoot, UntilResolved] = Analysis(
    "demo_until_resolved", compute_until_resolved, render_until_resolved)
