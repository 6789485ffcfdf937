"""The sweep report's sections on what the runs say about sparsity without trusting one law:
the forms tested against the seeds' own noise (F tests, N total and non-embedding, held-out
largest S and D), the loss at S minus dense at fixed N and D, S*(C) read off the IsoFLOP
minima, and the warning when the chosen form makes S*(C) constant by construction."""

from __future__ import annotations

from pathlib import Path
from collections.abc import Sequence

from moelab.report import format_count, markdown_table
from moelab.scaling.form_tests import CONSTANT_S_STAR, FormChoice
from moelab.scaling.isoflop import BudgetOptimum
from moelab.scaling.isoflop_sparsity import IsoflopCell, SparsityOptima, SparsityOptimum
from moelab.sweep.figures import isoflop_optima_figure, sparsity_delta_figure
from moelab.sweep.analysis_records import (
    Coefficient, CountChecks, ExpertPair, FinetuneEstimate, FinetuneRecord, FormsRecord,
    FormTestsRecord, SparsityDeltas, TaskAccuracy,
)

COUNT_NAMES = {"total": "total parameters", "non_embedding": "non-embedding parameters"}


def constant_s_star_text(law_name: str) -> str:
    """Said in words when the chosen form fixes S*(C): it cannot answer how S* moves with C."""
    reason = CONSTANT_S_STAR.get(law_name)
    if reason is None:
        return ""
    return (f"**The chosen form `{law_name}` cannot answer how S* moves with compute**: {reason}. "
            "A constant S*(C) below is that artefact, not a finding; a FLOPs-budget sweep's "
            "IsoFLOP minima (no law) can answer it.\n\n")


def form_tests_section(out_dir: Path, record: FormTestsRecord, forms: FormsRecord | None) -> str:
    parts = []
    if record.by_count is not None:
        parts.append(_f_tests_text(record, forms))
    if record.sparsity_deltas is not None:
        parts.append(_deltas_text(out_dir, record.sparsity_deltas))
    return "\n".join(part.rstrip("\n") + "\n" for part in parts)


def _mae(value) -> str:
    """A held-out error: 4 decimals, or 3 digits for a prediction that ran off."""
    if value is None:
        return "–"
    return f"{value:.4f}" if value < 1 else f"{value:.3g}"


def _p(value) -> str:
    return "–" if value is None else (f"{value:.2g}" if value >= 1e-4 else "< 1e-4")


def _f_tests_text(record: FormTestsRecord, forms: FormsRecord | None) -> str:
    pure, holdouts = record.pure_error, record.holdouts or []
    assert pure is not None and pure.variance is not None and record.by_count is not None
    text = ("## Law forms against the seeds' noise\n\n"
            f"The {pure.n_points} runs sit at {pure.groups} distinct (N, D, S) points; the "
            "spread of a point's seeds is noise no law can fit (the pure error: sum of squares "
            f"{pure.ss:.3g} of log loss on {pure.df} degrees of freedom, a seed std of "
            f"{pure.variance ** 0.5:.4f} in log loss). Each form is tested against it: "
            "lack of fit F = ((SS - SS_pe) / (g - p)) / s^2, and each larger form against the "
            "smaller one it nests, F = ((SS_small - SS_large) / extra parameters) / s^2 "
            "(`form_tests.json`; the fits minimise a Huber loss, so the tests are "
            "approximate). Held out: the largest S and, separately, the largest D (an "
            "extrapolation in data, where the budgets' spacing fixes the D exponent).\n\n")
    for count, result in record.by_count.items():
        text += (f"N counted as {COUNT_NAMES[count]}:\n\n"
                 + markdown_table(["form", "parameters", "SS (log loss)", "lack of fit F (df), p",
                                   *(f"held-out MAE, {h}" for h in holdouts)],
                                  _form_rows(result, holdouts), "lrrrrr") + "\n")
        misfit = [f for f in result.forms if f.lack_of_fit and f.lack_of_fit.p < 0.05]
        if misfit and len(misfit) == len([f for f in result.forms if f.ss is not None]):
            text += ("Every form misses the points' seed means by more than the seeds' noise "
                     "(lack of fit p < 0.05 for all): no form describes these runs to within "
                     "their noise, and against the pure error a nested F test takes any term "
                     "that absorbs some of the misfit, so read it beside the likelihood-ratio "
                     "test.\n\n")
        text += _selection_text(result.selection, count)
    if forms is not None and forms.chosen:
        text += (f"The identification and held-out checks above (N total) chose "
                 f"`{forms.chosen}`; `fit.json` and the optima use that form.\n")
    return text


def _form_rows(result: CountChecks, holdouts: list[str]) -> list[list[str]]:
    """A table row per form: its SS, lack of fit and held-out errors, or that it was skipped."""
    rows = []
    for form in result.forms:
        if form.ss is None:
            rows.append([f"`{form.law}`", str(form.num_params), "–", "skipped", "–", "–"])
            continue
        lack = form.lack_of_fit
        lack_text = (f"{lack.F:.2f} ({lack.df[0]}, {lack.df[1]}), p {_p(lack.p)}"
                     if lack else "–")
        maes = [_mae((form.holdout_mae or {}).get(h)) for h in holdouts]
        rows.append([f"`{form.law}`", str(form.num_params), f"{form.ss:.4g}", lack_text, *maes])
    return rows


def _selection_text(selection: FormChoice | None, count: str) -> str:
    if selection is None:
        return "No form could be fitted.\n\n"
    tests = [[f"`{t.small}` → `{t.large}`", f"{t.F:.2f} ({t.df[0]}, {t.df[1]})",
              _p(t.p), _p(t.p_likelihood_ratio)] for t in selection.tests]
    text = (markdown_table(["nested test", "F (df)", "p", "likelihood-ratio p"], tests, "lrrr")
            + f"\nBy F tests at {selection.alpha:g} (N {COUNT_NAMES[count]}): "
            f"{_path_text(selection.path)}, so **`{selection.chosen}`** (from the "
            "smallest form, a larger one is taken only while it fits significantly better "
            "than the noise allows).")
    if selection.constant_s_star:
        text += (f" That form cannot answer how S* moves with compute: "
                 f"{selection.constant_s_star}.")
    if selection.path_likelihood_ratio is not None:  # older form_tests.json lack it
        text += (f" By likelihood-ratio tests (variance from the larger form's residuals): "
                 f"{_path_text(selection.path_likelihood_ratio)}, so "
                 f"`{selection.chosen_likelihood_ratio}`.")
    return text + "\n\n"


def _path_text(path: list[str]) -> str:
    if len(path) == 1:
        return f"no larger form fits significantly better than `{path[0]}`"
    return " → ".join(f"`{name}`" for name in path)


def _deltas_text(out_dir: Path, deltas: SparsityDeltas) -> str:
    columns = sorted({(d.sparsity, d.E) for d in deltas.deltas})
    several_e = len({s for s, _ in columns}) < len(columns)
    cells: dict[tuple, dict] = {(d.size, d.budget): {} for d in deltas.deltas}
    for d in deltas.deltas:
        cells[(d.size, d.budget)][(d.sparsity, d.E)] = (
            f"{d.delta:+.3f} [{d.ci[0]:+.3f}, {d.ci[1]:+.3f}]")
    rows = [[size, budget, *(by_s.get(c, "–") for c in columns)]
            for (size, budget), by_s in cells.items()]
    names = [f"S = {s:g}" + (f", E = {e}" if several_e else "") for s, e in columns]
    figure = sparsity_delta_figure(out_dir / "figures" / "sparsity_deltas.png", deltas)
    significant = sum(1 for d in deltas.deltas if d.ci[0] > 0 or d.ci[1] < 0)
    return ("## Sparsity at fixed N and D (no law)\n\n"
            "The mean loss of a point's seeds at S minus the dense model's of the same size and "
            "token budget, with 95 % t intervals on the pooled seed std "
            f"({deltas.seed_std:.4f} nats, {deltas.df} degrees of freedom; "
            "`form_tests.json`, sparsity_deltas). Positive: the sparse model of the same total "
            f"size, trained on the same tokens, is worse. {significant} of "
            f"{len(deltas.deltas)} differences exclude 0.\n\n"
            + markdown_table(["size", "budget", *names], rows, "ll" + "r" * len(names))
            + (f"\n![Loss at S minus dense](figures/{figure.name})\n\n" if figure else "\n")
            + _expert_pairs_text(deltas.expert_pairs or []))


def _expert_pairs_text(pairs: list[ExpertPair]) -> str:
    """Top-k against E at one sparsity, paired by seed."""
    if not pairs:
        return ""
    rows = [[p.size, p.budget, f"{p.sparsity:g}", f"E = {p.E[1]} minus E = {p.E[0]}",
             str(p.seeds), f"{p.difference:+.4f} [{p.ci[0]:+.4f}, {p.ci[1]:+.4f}]"]
            for p in pairs]
    return ("\n### Top-k against E at one sparsity\n\nThe loss of the run with more experts (and "
            "so a larger k) minus the one with fewer, seed by seed (the same seed shares the "
            "data order), with a 95 % t interval over the seeds (`form_tests.json`, "
            "expert_pairs).\n\n"
            + markdown_table(["size", "budget", "S", "pair", "seeds", "loss difference"], rows,
                             "llrlrr"))


def _shares_text(probability_best: dict[str, float], seeds: int) -> str:
    if seeds < MIN_SEEDS_FOR_SHARES:
        return f"– ({seeds} seed{'s' if seeds != 1 else ''}: too few)"
    return ", ".join(f"{s}: {p:.2f}" for s, p in probability_best.items()) or "–"


def _ci_text(value, ci, fmt: str) -> str:
    if value is None:
        return "no minimum"
    shown = fmt.format(value) if fmt else format_count(value)
    if ci is None:
        return shown
    low, high = ((fmt.format(v) if fmt else format_count(v)) for v in ci)
    return f"{shown} [{low}, {high}]"


MIN_SEEDS_FOR_SHARES = 3
"""A resample of fewer seeds per cell has so few distinct outcomes that "best in x % of
replicates" only says whether the seeds agree: shares are shown from 3 seeds on."""


def isoflop_optima_text(out_dir: Path, optima: SparsityOptima, seeds: int) -> str:
    """S*(C) from the minima of each sparsity's IsoFLOP parabolas, no law involved; the
    replicates' shares only with ``MIN_SEEDS_FOR_SHARES`` seeds or more."""
    drawn = (any(c.loss is not None for c in optima.cells)
             and any(r.sparsity is not None for r in optima.optimal_sparsity))
    if drawn:
        isoflop_optima_figure(out_dir / "figures" / "isoflop_optima.png", optima)
    intervals = (f"95 % intervals from {optima.replicates} bootstrap replicates (resampling "
                 f"{optima.resampling})" if optima.replicates
                 else f"no intervals (resampling {optima.resampling})")
    cells = [[f"{c.flops:.3g}", f"{c.sparsity:g}", _cell_sizes(c),
              _ci_text(c.params, c.params_ci, ""),
              _ci_text(c.loss, c.loss_ci, "{:.4f}"), _residual_ratio(c),
              "" if c.inside_data or c.loss is None else "yes"] for c in optima.cells]
    best = [[f"{r.flops:.3g}", _s_star_text(r, optima.sparsities),
             _ci_text(r.best_sampled, r.best_sampled_ci, "{:g}"),
             _shares_text(r.probability_best, seeds)]
            for r in optima.optimal_sparsity]
    window = (f"within {optima.window_factor:g}x of its vertex"
              if optima.estimator == "window" else "all of them")
    return ("\n### Optimal sparsity per budget from the IsoFLOP minima (no law)\n\n"
            f"Per budget C and sparsity S, a parabola in log N through that sparsity's runs at "
            f"the sizes {window}; its "
            "vertex is N*(C, S) and L*(C, S). S*(C) is where L*(C, S) is lowest: between the "
            "sampled sparsities, the vertex of a parabola of L* in -log(1 - S) kept inside "
            "them, and the sampled sparsity of lowest L* with the share of replicates in which "
            f"each sparsity is lowest. {intervals}; `isoflop.json`, sparsity_optima.\n\n"
            + markdown_table(["C", "S", "sizes used", "N*", "L*", "residual / seed noise",
                              "vertex outside sizes"], cells, "rrrrrrl")
            + poorly_supported_text("minima", optima.cells)
            + "\n" + markdown_table(["C", "S*", "best sampled S", "share of replicates best"],
                                    best, "rrrl")
            + "\n" + _trend_sentence(optima)
            + ("\n![IsoFLOP minima and S*(C)](figures/isoflop_optima.png)\n" if drawn else ""))


def _cell_sizes(cell: IsoflopCell) -> str:
    used = cell.sizes_used
    return f"{cell.n_sizes}" if used is None else f"{len(used)} of {cell.n_sizes}"


def _residual_ratio(cell: IsoflopCell) -> str:
    support = cell.support
    if not support or support.residual_to_noise is None:
        return "–"
    return f"{support.residual_to_noise:.2g}"


def poorly_supported_text(what: str, rows: Sequence[BudgetOptimum | IsoflopCell]) -> str:
    """The IsoFLOP vertices (``what``) the data support poorly, and why: one line naming each
    row's budget (and its sparsity, for the per-sparsity minima) with its warnings; "" when
    none."""
    def where(row: BudgetOptimum | IsoflopCell) -> str:
        per_sparsity = f", S = {row.sparsity:g}" if isinstance(row, IsoflopCell) else ""
        return f"C = {row.flops:.3g}" + per_sparsity

    flagged = [row for row in rows if row.warnings]
    if not flagged:
        return ""
    return (f"\n**Poorly supported {what}**: "
            + "; ".join(f"{where(row)}: {', '.join(row.warnings)}" for row in flagged) + ".\n")


def _s_star_text(row: SparsityOptimum, sparsities: list[float]) -> str:
    """S* with its interval; where it sits on the grid's end, only the bound it gives."""
    edge = row.at_edge
    if edge == "upper":
        return f"≥ {max(sparsities):g} (unbounded)"
    if edge == "lower":
        return f"≤ {min(sparsities):g} (unbounded)"
    text = _ci_text(row.sparsity, row.ci, "{:.3f}")
    if row.ci is not None and row.ci[1] >= max(sparsities) - 1e-9:
        text += " (interval reaches the grid's largest S)"
    return text


def _trend_sentence(optima: SparsityOptima) -> str:
    """Does S* rise with compute? The slope of S*(C) per decade of C (not when an S* sits on
    the grid's edge), and per sparse S the slope of its advantage over dense."""
    trend = optima.trend
    if trend.slope_per_decade is None:
        return "No trend of S* with C: fewer than 2 budgets have an S*.\n"
    if trend.clamped:
        return ("No slope of S*(C) is given: at some budget S* sits on the grid's edge, so a "
                "slope would measure where the grid ends, not how S* moves; a grid reaching "
                "further in S is needed to test whether S* rises with C.\n")
    slope = f"{trend.slope_per_decade:+.3f}"
    if trend.ci is None:
        return (f"S*(C) changes by {slope} per decade of C over {trend.n_budgets} budgets; "
                "without resamples there is no interval, so no test of whether S* rises.\n")
    verdict = ("**S* rises with compute**" if trend.rises else
               "**S* falls with compute**" if trend.falls else
               "**no trend of S* with compute is detected** (the interval contains 0)")
    text = (f"Test of whether S* rises with C: S*(C) changes by {slope} "
            f"[{trend.ci[0]:+.3f}, {trend.ci[1]:+.3f}] per decade of C over "
            f"{trend.n_budgets} budgets (one-sided bootstrap p of no rise "
            f"{trend.p_not_rising:.3f}): {verdict}.")
    advantages = [f"S = {a.sparsity:g}: {a.slope_per_decade:+.4f}"
                  + (f" [{a.ci[0]:+.4f}, {a.ci[1]:+.4f}]" if a.ci else "")
                  for a in optima.advantage_trend if a.slope_per_decade is not None]
    if advantages:
        text += (" The advantage over dense, L*(C, 0) - L*(C, S), changes per decade of C by "
                 + "; ".join(advantages) + " nats. That is not a test of S*: a difference that "
                 "scales with L - e shrinks as the loss falls even when S* stays put (the "
                 "effective-size law's L - e ~ C^(-k) g(S) does exactly that).")
    return text + "\n"




def zero_shot_analysis_text(analysis: dict[str, TaskAccuracy]) -> str:
    """Accuracy against S at equal loss and at equal FLOPs, per task, and whether the tasks
    separate anything at all."""
    text = ("### Accuracy against sparsity\n\n"
            "Per task: accuracy = a + b (loss - mean loss) + c S over every run, by least "
            "squares (c: what sparsity adds beyond what its loss predicts, at equal loss), and "
            "at each FLOPs budget the lowest-loss size of each sparsity, its accuracy over its "
            "seeds (at equal FLOPs); 95 % intervals (`zero_shot.json`).\n\n")
    rows = []
    for task, result in analysis.items():
        fit = result.equal_loss

        def coefficient(c: Coefficient | None) -> str:
            return "–" if c is None else f"{c.value:+.3f} [{c.ci[0]:+.3f}, {c.ci[1]:+.3f}]"

        rows.append([task, str(result.runs), str(result.items),
                     f"{result.accuracy_range[0]:.3f}-{result.accuracy_range[1]:.3f}",
                     f"±{result.median_wilson_half_width:.3f}",
                     coefficient(fit.loss if fit else None),
                     coefficient(fit.sparsity if fit else None), "yes" if result.separates else "**no**"])
    text += markdown_table(["task", "runs", "items", "accuracy range", "Wilson half-width",
                            "b (per nat of loss)", "c (per unit S)", "separates"], rows,
                           "lrrrrrrl")
    silent = [task for task, result in analysis.items() if not result.separates]
    if silent:
        text += (f"\n**{', '.join(silent)} cannot separate anything at this scale**: accuracy "
                 "follows neither the loss nor the sparsity beyond the items' binomial noise, "
                 "so these runs say nothing about sparsity downstream.\n")
    for task, result in analysis.items():
        if result.equal_flops:
            table = [[f"{r.flops:.3g}", f"{r.sparsity:g}", r.size, str(r.seeds),
                      f"{r.accuracy:.3f}" + (f" [{r.ci[0]:.3f}, {r.ci[1]:.3f}]" if r.ci else ""),
                      f"{r.minus_dense:+.3f}" if r.minus_dense is not None else ""]
                     for r in result.equal_flops]
            text += (f"\n{task} at equal FLOPs:\n\n"
                     + markdown_table(["C", "S", "lowest-loss size", "seeds", "accuracy",
                                       "minus dense"], table, "rrlrrr"))
    return text + "\n"


FINETUNE_LABELS = {"finetune_val_loss": "fine-tuned val loss", "finetune_gain": "gain"}


def finetune_analysis_text(analysis: FinetuneRecord) -> str:
    """The fine-tuned loss and the gain against S: every effect within a (size, budget) cell,
    paired to the cell's dense run of the same seed; at equal pretraining loss with errors
    clustered by (size, seed); Holm over every test; what nothing separates is said in words,
    with the minimum detectable difference (``moelab.sweep.finetune``)."""
    if analysis.cells is None:  # finetune.json of an older analysis: `moelab report DIR` redoes it
        return ("## Fine-tuning against sparsity\n\nfinetune.json is from an older analysis; "
                "`moelab report DIR` recomputes it.\n")
    equal = ("equal FLOPs and total parameters" if analysis.basis == "flops"
             else "equal tokens")
    text = ("## Fine-tuning against sparsity\n\n"
            f"Every run's final weights fine-tuned by the grid's one recipe ({analysis.runs} "
            "finetunes, runs/finetune/): the fine-tuned val loss on the new text's held-out part "
            "and the gain (the weights' loss there before fine-tuning minus after); moelab's own "
            "stage (anchored on Artetxe et al. 2021 and ST-MoE, Zoph et al. 2022), not paper B's. "
            f"Each sparse run is paired with its cell's (size, budget: {equal}) dense run of the "
            f"same seed ({analysis.pairs} pairs), and every effect is sparse minus dense. At "
            "equal pretraining loss: dy = b dL + c S over the pairs without intercept, dL the "
            "pair's difference of final pretraining val loss; c per unit S with its 95 % "
            f"interval, errors clustered by {analysis.cluster_unit} ({analysis.clusters} "
            f"clusters, t with {(analysis.clusters or 0) - 1} df). Holm over all "
            f"{analysis.tests} fine-tuning tests of this section (`finetune.json`).\n\n")
    rows, silent = [], []
    for metric, result in analysis.metrics.items():
        fit = result.equal_loss
        if fit is None:
            rows.append([FINETUNE_LABELS[metric], "–", "–", "–", "–", "–"])
            continue
        loss, sparsity = fit.loss, fit.sparsity
        rows.append([FINETUNE_LABELS[metric], _coefficient_text(loss),
                     _coefficient_text(sparsity), _p_pair(sparsity), f"±{sparsity.mdd:.3f}",
                     "yes" if result.separates else "**no**"])
        if not result.separates:
            silent.append(f"{FINETUNE_LABELS[metric]} (an effect smaller than "
                          f"{sparsity.mdd:.3f} per unit S would go unseen)")
    text += markdown_table(["metric", "b (per nat of pretraining loss)", "c (per unit S)",
                            "p (Holm)", "detectable c", "S separates"], rows, "lrrrrl")
    if any(result.equal_loss is None for result in analysis.metrics.values()):
        text += ("\nThe equal-loss fit needs at least 4 pairs in 3 or more (size, seed) "
                 "clusters: too few here.\n")
    if silent:
        text += ("\n**At equal pretraining loss nothing separates the sparsities** for "
                 + "; ".join(silent) + ": the interval of c includes 0.\n")
    table = []
    for cell in analysis.cells:
        line = [cell.budget, cell.size, f"{cell.sparsity:g}", str(cell.pairs),
                _minus_dense_text(cell.pretraining_minus_dense)]
        for metric in FINETUNE_LABELS:
            record = getattr(cell, metric).minus_dense
            line.append(_minus_dense_text(record) + (f", p {_p_pair(record)}"
                                                     if record.p is not None else ""))
        table.append(line)
    text += (f"\nPer cell and S, at {equal}: the mean over seeds of sparse minus dense, paired "
             "by seed, with its 95 % t interval, p and Holm's p (where an interval includes 0 "
             "nothing separates it from dense; ± is its minimum detectable difference):\n\n")
    text += markdown_table(["budget", "size", "S", "pairs", "pretraining loss minus dense",
                            "fine-tuned loss minus dense", "gain minus dense"], table, "llrrrrr")
    return text + "\n"


def _p_pair(record: FinetuneEstimate) -> str:
    """'0.018 (0.21)': raw p and Holm's."""
    if record.p is None:
        return "–"
    return f"{record.p:.2g} ({record.p_holm:.2g})"


def _coefficient_text(coefficient: FinetuneEstimate) -> str:
    assert coefficient.ci is not None  # a fitted coefficient always has its interval
    low, high = coefficient.ci
    return f"{coefficient.value:+.3f} [{low:+.3f}, {high:+.3f}]"


def _minus_dense_text(record: FinetuneEstimate | None) -> str:
    if record is None or record.value is None:
        return ""
    text = f"{record.value:+.4f}"
    if record.ci:
        low, high = record.ci
        text += f" [{low:+.4f}, {high:+.4f}]"
        if low <= 0 <= high and record.mdd is not None:
            text += f" n.s. (±{record.mdd:.4f})"
    return text
