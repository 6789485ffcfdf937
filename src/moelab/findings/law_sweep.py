"""The law on the `cpu` sweep: the form its checks chose (forms.json), that form's fit with its
bootstrap intervals (fit.json, ``moelab.sweep.analyses.law_fit``), and the wsd schedule's cost
against the cosine grid it replaced (cpu-cosine, one seed), paired point by point.

The fit's intervals are the sweep's own (200 bootstrap refits over the points, seed 0); the wsd
- cosine gaps are paired t tests over the points both grids trained at seed 0, one per shared
budget, Holm over them, verdict words by rule (``moelab.stats.verdicts``).
"""

from __future__ import annotations

from dataclasses import dataclass

from moelab.codec import from_json
from moelab.findings.source import ResultsRoot
from moelab.report import markdown_table
from moelab.report.analysis import Analysis, Findings
from moelab.stats.multiple import family_label, holm
from moelab.stats.t_tests import paired_difference
from moelab.stats.verdicts import Difference, difference_verdict
from moelab.sweep.analyses.law_fit import SweepFit
from moelab.sweep.folder import read_results
from moelab.sweep.results_csv import ResultRow

SWEEP, COSINE = "sweeps/cpu", "sweeps/cpu-cosine"
COSINE_SEED = "0"
"""The cosine grid trained one seed; the wsd grid's runs of that seed are its pairs."""


@dataclass(frozen=True)
class FittedParameter:
    name: str
    value: float
    ci: tuple[float, float]


@dataclass(frozen=True)
class ScheduleGap:
    """wsd minus cosine best val loss at one budget, paired on the points both trained."""

    tokens: float
    points: int
    estimate: float
    ci: tuple[float, float]
    p: float
    p_holm: float
    verdict: str


@dataclass(frozen=True)
class LawSweep:
    chosen: str | None
    points: int
    replicates: int
    parameters: list[FittedParameter]
    largest_sparsity: float
    gaps: list[ScheduleGap]
    family: str


def _point(row: ResultRow) -> tuple[str, float, int, int | None]:
    return row.size, row.S, row.E, row.k


def _schedule_gaps(results: ResultsRoot) -> tuple[list[ScheduleGap], str]:
    wsd, cosine = (read_results(results.root / name) for name in (SWEEP, COSINE))
    if wsd is None or cosine is None:
        raise ValueError(f"{SWEEP} or {COSINE} has no results")
    raw = []
    for budget in sorted({r.budget for r in wsd.rows} & {r.budget for r in cosine.rows},
                         key=lambda b: float(b.lstrip("D"))):
        ours = {_point(r): r.best_val_loss for r in wsd.rows
                if r.budget == budget and r.seed == COSINE_SEED}
        theirs = {_point(r): r.best_val_loss for r in cosine.rows if r.budget == budget}
        keys = sorted(ours.keys() & theirs.keys(), key=str)
        raw.append((float(budget.lstrip("D")), paired_difference(
            dict(enumerate(ours[k] for k in keys)), dict(enumerate(theirs[k] for k in keys)))))
    family = family_label(len(raw))
    gaps = []
    for (tokens, test), p_holm in zip(raw, holm([t.p_value for _, t in raw])):
        ci = (test.ci_low, test.ci_high)
        gaps.append(ScheduleGap(tokens, test.n_pairs, test.gap, ci, test.p_value, p_holm,
                                difference_verdict(Difference(test.gap, ci, p_holm, family),
                                                   ahead="wsd higher", behind="wsd lower").word))
    return gaps, family


def compute(results: ResultsRoot, findings: Findings) -> LawSweep:
    fit = from_json(SweepFit, results.json(f"{SWEEP}/fit.json"))
    chosen = results.json(f"{SWEEP}/forms.json").get("chosen")
    table = read_results(results.root / SWEEP)
    if table is None:
        raise ValueError(f"{SWEEP} has no results")
    parameters = [FittedParameter(name, float(fit.params[name]),
                                  (float(fit.ci[name][0]), float(fit.ci[name][1])))
                  for name in fit.params if fit.ci and name in fit.ci]
    gaps, family = _schedule_gaps(results)
    replicates = fit.bootstrap.replicates if fit.bootstrap else 0
    return LawSweep(chosen, fit.n_points, replicates, parameters,
                    max(row.S for row in table.rows), gaps, family)


def _value(x: float) -> str:
    return f"{x:.3g}" if abs(x) < 1e4 else f"{x:.2e}"


def _effective_size(record: LawSweep) -> str:
    by_name = {p.name: p for p in record.parameters}
    if "delta" not in by_name or "gamma" not in by_name:
        return ""
    delta, gamma = by_name["delta"], by_name["gamma"]
    exponent = delta.value / gamma.value
    excludes = delta.ci[0] > 0 or delta.ci[1] < 0
    factor = (1 - record.largest_sparsity) ** exponent
    return (f"\nIn this form a sparse model of N total parameters enters the law as a dense one "
            f"of N (1 - S)^(delta / gamma) = N (1 - S)^{exponent:.3f}: {factor:.2f} N at "
            f"S = {record.largest_sparsity:g}, the grid's largest. delta's interval "
            f"{'excludes' if excludes else 'includes'} 0.\n")


def render(record: LawSweep | None, results: ResultsRoot, findings: Findings) -> str:
    if record is None:
        return ""
    fitted = [[p.name, _value(p.value), f"[{_value(p.ci[0])}, {_value(p.ci[1])}]"]
              for p in record.parameters]
    gaps = [[f"{g.tokens / 1e6:.2f}M", str(g.points),
             f"{g.estimate:+.3f} [{g.ci[0]:+.3f}, {g.ci[1]:+.3f}]", f"{g.p:.1e}",
             f"{g.p_holm:.1e}", f"**{g.verdict}**"] for g in record.gaps]
    chosen = f"`{record.chosen}`" if record.chosen else "no form"
    return ("## The identified form (cpu)\n\n"
            f"The form checks chose {chosen} (`{SWEEP}/forms.json`); its fit to the "
            f"{record.points} runs with {record.replicates} bootstrap refits' 95 % intervals "
            f"(`{SWEEP}/fit.json`):\n\n"
            + markdown_table(["parameter", "value", "95 % interval"], fitted, "lrr")
            + _effective_size(record)
            + "\n## wsd against the cosine grid it replaced\n\n"
              f"Best val loss of the wsd grid minus the cosine grid (`{COSINE}`), paired on the "
              f"points both trained at seed {COSINE_SEED} (the cosine grid's only seed), at each "
              f"budget both have ({record.family}):\n\n"
            + markdown_table(["tokens", "points", "wsd - cosine [95 % CI]", "p", "p (Holm)",
                              "verdict"], gaps, "lrrrrl")
            + "\nBoth grids ran at the lr tuned for cosine, so the gap is not what a wsd run at "
              "its own lr would cost.\n")


ANALYSIS: Analysis[ResultsRoot, LawSweep] = Analysis("law_sweep", compute, render)
