"""results.json, results.csv, figures/ and report.md of a study folder, from its run files.

``write_outputs(DIR)`` is all ``moelab report DIR`` does, and the last step of every study: the
report can always be rebuilt, and it only prints numbers read from the run folders. Wording is
tied to the statistics: a difference is claimed only when the test the verdict used (paired t
when the arms share their seeds, Welch's t otherwise) supports it.
"""

from __future__ import annotations

from pathlib import Path

from moelab.errors import MoelabError
from moelab.fileio import atomic_write_json, atomic_write_text, read_json, remove_stale_temporaries
from moelab.runs import is_complete
from moelab.report import (
    format_count, format_mean_std, format_number, format_p_value, markdown_table,
)
from moelab.study import figures
from moelab.study.arms import LADDER_DESCRIPTIONS
from moelab.study.aggregate import aggregate
from moelab.study import rounds, tuning
from moelab.study.finished_runs import RunRecord, find_runs, read_plan
from moelab.study.study_results import (
    ArmResult, BudgetFamilyTokens, RoutingResult, StudyResults, results_csv,
)
from moelab.stats.intervals import ALPHA
from moelab.stats.power import MAX_SEEDS, POWER
from moelab.study.gaps import REFERENCE_GAP, TEST_NAMES, Gap
from moelab.study.zero_shot import TaskResult
from moelab.numerics import machine_bullet

CRITERION_TEXT = {
    "active": "matched on active parameters per token",
    "total": "matched on total stored parameters",
    "flops": "matched on training FLOPs per token (the kaplan count)",
    "compute": "matched on total parameters at equal training FLOPs",
}


def write_outputs(study_dir: Path) -> StudyResults:
    """Aggregate the complete runs of ``study_dir`` and write every output file; return results."""
    study_dir = Path(study_dir)
    if not (study_dir / "runs").is_dir():
        raise MoelabError(f"{study_dir} is not a study folder: it has no runs/ folder")
    records = find_runs(study_dir)
    if not records:
        raise MoelabError(f"{study_dir} has no complete runs yet: nothing to report")
    # What a killed report left; its writer holds the folder's lock, so none is being written.
    remove_stale_temporaries(study_dir, study_dir / "figures")
    results = aggregate(study_dir, records)
    fair_json, fair_text = fair_sections(study_dir, results, records)
    atomic_write_json(study_dir / "results.json", {**results.to_dict(), **fair_json})
    atomic_write_text(study_dir / "results.csv", results_csv(results))
    figure_paths = draw_figures(study_dir, results, records)
    atomic_write_text(study_dir / "report.md",
                      render_report(results, records, figure_paths, fair_text))
    return results


def fair_sections(study_dir: Path, results: StudyResults,
                  records: list[RunRecord]) -> tuple[dict, str]:
    """results.json's records and report.md's sections of ``--tune-lr`` (each arm's lr) and
    ``--until-resolved`` (where each comparison stopped), from plan.json and the run folders;
    nothing for a study without them."""
    plan = read_plan(study_dir)
    records_json, sections = {}, []
    choices = tuning.read_tuning(study_dir, plan)
    if choices is not None:
        records_json[tuning.RECORD_KEY] = tuning.tuning_json(plan, choices, results.seeds)
        sections.append(tuning.tuning_section(plan, choices, results.seeds))
    sequential = rounds.read_sequential(plan)
    if sequential is not None:
        comparisons = rounds.analyse(sequential, records)
        records_json[rounds.RECORD_KEY] = rounds.rounds_json(sequential, comparisons)
        sections.append(rounds.rounds_section(sequential, comparisons))
    return records_json, "\n".join(sections)


def check_recorded_runs(study_dir: Path) -> None:
    """Refuse to rebuild a study whose results.json reports runs that are no longer complete in
    their folders (a results folder kept without runs/, runs deleted since): the rebuilt
    report would drop them, and nothing could bring their numbers back."""
    study_dir = Path(study_dir)
    results_path = study_dir / "results.json"
    if not results_path.is_file():
        return
    try:
        recorded = _run_dirs(read_json(results_path))
    except (OSError, ValueError):
        return  # unreadable: nothing there to lose, the rebuild writes it again
    absent = sorted({d for d in recorded if not is_complete(study_dir / d)})
    if absent:
        raise MoelabError(
            f"{results_path} reports {len(absent)} runs whose folders are missing or incomplete "
            f"({', '.join(absent[:3])}{', ...' if len(absent) > 3 else ''}): restore them to "
            "rebuild the report; results.json, results.csv, report.md and figures/ are left as "
            "they are")


def _run_dirs(record) -> list[str]:
    """Every ``run_dir`` a results.json names, at any depth (arms, budgets)."""
    if isinstance(record, dict):
        found = [record["run_dir"]] if isinstance(record.get("run_dir"), str) else []
        return found + [d for value in record.values() for d in _run_dirs(value)]
    if isinstance(record, list):
        return [d for value in record for d in _run_dirs(value)]
    return []


def final_budget_records(results: StudyResults,
                         records: list[RunRecord]) -> dict[str, list[RunRecord]]:
    """The runs of each arm at the budget the report leads with (the largest of a sweep)."""
    return {arm: [r for r in records if r.arm == arm and r.budget == results.final.tokens]
            for arm in results.arms}


def draw_figures(study_dir: Path, results: StudyResults,
                 records: list[RunRecord]) -> dict[str, str]:
    """Every figure the data allows; returns {figure key: path relative to the study folder}."""
    folder = study_dir / "figures"
    by_arm = final_budget_records(results, records)
    moe_arms = {arm: runs for arm, runs in by_arm.items() if results.arms[arm].routing.recorded}
    loads = {arm: results.arms[arm].routing.expert_load for arm in moe_arms
             if results.arms[arm].routing.expert_load is not None}
    drawn = {
        "val_loss": figures.val_loss_figure(by_arm, folder / "val_loss.png"),
        "gaps": figures.gap_bar_figure(results.gaps, folder / "gaps.png"),
        "paired_differences": figures.paired_differences_figure(
            results.gaps, folder / "paired_differences.png"),
        "gaps_vs_tokens": (figures.gap_vs_tokens_figure(results.budgets, folder / "gaps_vs_tokens.png")
                           if len(results.budgets) > 1 else None),
        "routing": figures.routing_figure(moe_arms, folder / "routing.png"),
        "expert_load": figures.expert_load_figure(loads, folder / "expert_load.png") if loads else None,
        "layer_load": figures.layer_load_over_training_figure(moe_arms, folder / "layer_load.png"),
    }
    return {key: path.relative_to(study_dir).as_posix() for key, path in drawn.items() if path}


# --------------------------------------------------------------------------------------------
# Markdown
# --------------------------------------------------------------------------------------------


def render_report(results: StudyResults, records: list[RunRecord],
                  figure_paths: dict[str, str], fair_text: str = "") -> str:
    ablation = results.is_ablation
    title = "Routing-stability ladder" if ablation else "Dense vs MoE study"
    parts = [f"# {title}: {results.study_dir}\n", setup_section(results, records), fair_text]
    if ablation:
        parts += [ladder_section(results.arms), rung_steps_section(results.rung_steps)]
    else:
        parts += [arms_section(results.arms), comparison_section(results.gaps),
                  figure_block("Gap per criterion", figure_paths, "gaps"),
                  figure_block("Per-seed differences", figure_paths, "paired_differences")
                  + (tokens_per_param_caption(results.arms) if "gaps" in figure_paths else "")]
        if results.budgets:
            parts.append(budget_section(results, figure_paths))
    parts += [
        zero_shot_section(results.zero_shot),
        figure_block("Validation loss", figure_paths, "val_loss")
        + (tokens_per_param_caption(results.arms) if "val_loss" in figure_paths else ""),
        routing_section(results.arms, figure_paths),
        throughput_section(results.arms),
        runs_section(results),
        notes_section(ablation, bool(results.zero_shot)),
    ]
    return "\n".join(part for part in parts if part)


def setup_section(results: StudyResults, records: list[RunRecord]) -> str:
    config = records[0].config
    model, data, train = config.model, config.data, config.train
    seeds = ", ".join(str(s) for s in results.seeds)
    budgets = ", ".join(g.label for g in results.budgets) or format_count(train.max_tokens)
    lrs = {r.config.train.lr for r in records if r.config is not None}
    lr_text = (f"peak lr {train.lr}" if len(lrs) <= 1
               else "peak lr per arm (see Learning rate per arm)")
    return (
        "## Setup\n\n"
        f"- Shared by every arm: d_model {model.d_model}, {model.n_layers} layers, "
        f"{model.n_heads} heads, context {model.max_seq_len}, vocab "
        f"{model.vocab_size}; data `{data.source}`; batch {train.batch_size} "
        f"sequences; {lr_text}; token budget per run {budgets}.\n"
        f"- Seeds: {seeds} (n = {len(results.seeds)}); a seed sets the weight init and the "
        "data order; the validation windows are the same for every run.\n"
        "- Loss: best validation loss over training, nats/token (bits/byte alongside).\n"
    ) + machine_bullet([record.summary.machine for record in records])


def arms_section(arms: dict[str, ArmResult]) -> str:
    rows = []
    for arm, r in arms.items():
        loss = r.best_val_loss
        rows.append([
            arm, CRITERION_TEXT.get(r.criterion, "–") if r.criterion else "(the MoE)",
            r.description, format_count(r.active_params), format_count(r.total_params),
            format_count(r.flops_per_token_6n), format_count(r.tokens),
            _training_flops(r), format_tokens_per_param(r),
            f"{format_mean_std(loss.mean, loss.std)} (n={loss.n})",
            format_mean_std(r.best_val_bpb.mean, r.best_val_bpb.std),
        ])
    return "## Arms\n\n" + markdown_table(
        ["arm", "criterion", "FFN", "active params", "total params", "FLOPs/token (6N)",
         "tokens", "training FLOPs (6N x tokens)", "tokens/param (total / active)",
         "best val loss (mean ± std)", "bits/byte"], rows, "lllrrrrrrrr")


def _training_flops(arm: ArmResult) -> str:
    """6 x active parameters x the tokens every seed of the arm trained."""
    if not arm.tokens or arm.flops_per_token_6n is None:
        return "–"
    return f"{arm.flops_per_token_6n * arm.tokens:.3g}"


def format_tokens_per_param(arm: ArmResult) -> str:
    """Training tokens per total and per active parameter, e.g. ``28.6 / 37.1``."""
    tokens = arm.tokens
    if not tokens or not arm.total_params or not arm.active_params:
        return "–"
    return f"{tokens / arm.total_params:.3g} / {tokens / arm.active_params:.3g}"


def tokens_per_param_caption(arms: dict[str, ArmResult]) -> str:
    """The line under a figure saying how long each arm trained for its size."""
    shown = [f"{arm} {format_tokens_per_param(r)}" for arm, r in arms.items()
             if format_tokens_per_param(r) != "–"]
    return ("Tokens per parameter (total / active): " + "; ".join(shown) + ".\n") if shown else ""


def comparison_section(gaps: dict[str, Gap], heading: str = "## Comparisons") -> str:
    if not gaps:
        return f"{heading}\n\nNo comparison: the MoE arm or every dense arm lacks complete runs.\n"
    test_rows, power_rows = [], []
    for criterion, g in gaps.items():
        paired, welch = g.paired, g.welch
        test_rows.append([
            CRITERION_TEXT[criterion], f"{g.moe_arm} vs {g.dense_arm}",
            _signed(paired.gap), _interval(paired), _p_value(paired), str(paired.n_pairs),
            format_number(paired.std_diff), _signed(welch.gap), _interval(welch),
            _p_value(welch), format_number(welch.df, 1), format_p_value(g.p_adjusted),
            g.verdict,
        ])
        observed, reference = g.seeds_needed
        power_rows.append([
            CRITERION_TEXT[criterion], TEST_NAMES[g.test], format_number(g.min_detectable_gap),
            f"{_seeds_text(g, observed)} (for {observed['gap']:.4f})", _seeds_text(g, reference),
        ])
    sentences = "\n".join(f"- {comparison_sentence(g)}" for g in gaps.values())
    return (
        f"{heading}\n\nGap = dense − MoE best validation loss: positive means the MoE is better. "
        "The arms of one seed share the data order and the validation windows, so the paired "
        "t-test on the per-seed differences is used whenever both arms have the same seeds; "
        "Welch's t-test (Welch–Satterthwaite degrees of freedom) when they do not. Both are "
        "shown with 95 % confidence intervals (when the seeds differ, the paired columns use "
        "the seeds both arms have); the verdict names the test it used, and a winner is named "
        f"only when that test's p, adjusted for the report's {_family(gaps)}, is < 0.05.\n\n"
        + markdown_table(["criterion", "arms", "paired gap", "paired 95 % CI", "paired p",
                          "pairs", "std of differences", "Welch gap", "Welch 95 % CI", "Welch p",
                          "Welch df", f"p ({_adjustment(gaps)})", "verdict"],
                         test_rows, "llrrrrrrrrrrl")
        + "\n" + sentences + "\n\n"
        + f"Power (two-sided α = {ALPHA:.2g}, power {POWER:g}, from the noncentral t "
        "distribution): the minimum detectable gap is the smallest |gap| the test used detects "
        "at the observed spread and n; seeds needed is the number of paired seeds (per arm) at "
        "which a gap reaches that power, given the observed std of the per-seed differences "
        "(without pairs: √(s²_moe + s²_dense)).\n\n"
        + markdown_table(["criterion", "test", "min detectable gap", "seeds needed (observed gap)",
                          f"seeds needed ({REFERENCE_GAP:g} nats)"], power_rows, "llrrr")
    )


def _adjustment(tests: dict) -> str:
    """The adjustment of a family of tests as its column names it: 'Holm, 8 tests'."""
    return next(iter(tests.values())).adjustment


def _family(tests: dict) -> str:
    """'8 tests (Holm)': the family a verdict's p was adjusted over, in a sentence."""
    method, count = _adjustment(tests).split(", ", 1)
    return f"{count} ({method})"


def _interval(test) -> str:
    """The 95 % interval of a test (or of a mean over seeds); '–' when it has none."""
    if test.ci_low is None:
        return "–"
    return f"[{format_number(test.ci_low)}, {format_number(test.ci_high)}]"


def _p_value(test) -> str:
    return format_p_value(test.p_value)


def _signed(gap) -> str:
    return f"{gap:+.4f}" if gap is not None else "–"


def _seeds_text(g: Gap, needed: dict) -> str:
    if needed["seeds"] is not None:
        return str(needed["seeds"])
    if g.outcome == "not testable" or not needed["gap"]:
        return "–"
    return f"more than {MAX_SEEDS:,}"


def comparison_sentence(g: Gap) -> str:
    """One sentence per criterion that says no more than the test supports."""
    n = f"n={g.n_moe}" if g.n_moe == g.n_dense else f"n={g.n_moe}/{g.n_dense}"
    criterion = CRITERION_TEXT[g.criterion].capitalize()
    what = f"{criterion} ({g.moe_arm} vs {g.dense_arm}, {n} seeds)"
    test, size = TEST_NAMES[g.test], abs(g.gap)
    interval = f"{g.ci_low:.4f} to {g.ci_high:.4f}" if g.ci_low is not None else ""
    p_text = f"p = {g.p_value:.2g}, {g.adjustment.split(',')[0]} p = {g.p_adjusted:.2g}" \
        if g.p_value is not None else ""
    if g.outcome == "MoE better":
        return (f"{what}: the MoE is better by {size:.4f} nats/token ({test}: "
                f"95 % CI {interval}, {p_text}).")
    if g.outcome == "dense better":
        return (f"{what}: the dense model is better by {size:.4f} nats/token ({test}: "
                f"95 % CI of dense − MoE {interval}, {p_text}).")
    if g.outcome == "not significant":
        return (f"{what}: {g.verdict}; the observed gap {g.gap:+.4f} is not distinguishable "
                f"from seed noise, so no winner is claimed (gaps from "
                f"{format_number(g.min_detectable_gap)} up would be detected with power "
                f"{POWER:g}).")
    return (f"{what}: {g.verdict}; the observed gap {g.gap:+.4f} cannot be tested, so no "
            "winner is claimed.")


def budget_section(results: StudyResults, figure_paths: dict[str, str]) -> str:
    criteria = results.criteria
    rows = []
    for group in results.budgets:
        row = [group.label]
        for criterion in criteria:
            g = group.gaps.get(criterion)
            row.append(f"{g.gap:+.4f}: {g.verdict}; p {format_p_value(g.p_value)}, "
                       f"adjusted {format_p_value(g.p_adjusted)}; min detectable "
                       f"{format_number(g.min_detectable_gap)}" if g else "–")
        rows.append(row)
    table = markdown_table(["tokens", *(CRITERION_TEXT[c] for c in criteria)], rows)
    return ("## Budget sweep\n\n" + _budget_runs_text(results.budget_family) +
            "Gap = dense − MoE best val loss; seeds are paired within each budget. Every "
            f"budget's and criterion's test is one family, {_family(results.gaps)}: the "
            "verdicts use the adjusted p.\n\n" + table + "\n"
            + figure_block("Gap against the token budget", figure_paths, "gaps_vs_tokens", level=3))


def _budget_runs_text(family: BudgetFamilyTokens | None) -> str:
    if family is None:
        return "Each budget is a separate set of runs with its own full schedule. "
    saved = 1 - family.tokens_trained / family.tokens_one_run_per_budget
    return ("Under `train.schedule: wsd` each arm and seed is one budget family: its largest "
            "budget's run is trained in full and each smaller budget's run is a cooldown branch "
            f"from it ({family.branches} branches, plan.json), the same run as a separate wsd "
            f"run of that budget. The complete runs trained {family.tokens_trained:,} tokens "
            f"against {family.tokens_one_run_per_budget:,} for one run per budget "
            f"({saved:.0%} fewer). ")


def ladder_section(arms: dict[str, ArmResult]) -> str:
    rows = []
    for rung, r in arms.items():
        routing, loss = r.routing, r.best_val_loss
        rows.append([
            rung, LADDER_DESCRIPTIONS.get(rung, r.description), format_count(r.active_params),
            format_tokens_per_param(r),
            f"{format_mean_std(loss.mean, loss.std)} (n={loss.n})",
            f"{r.collapsed_runs}/{loss.n}",
            format_number(routing.max_busiest_fraction, 3),
            format_number(routing.routing_entropy, 3),
            format_number(routing.mean_log_z, 3),
            format_number(routing.max_violation, 3),
            format_dead_experts(routing),
        ])
    return (
        "## Ladder\n\nSame base model, budget and seeds; only the routing changes. Collapse is the "
        "training engine's flag (one expert takes more than `train.collapse_threshold` of the "
        "token-slots in some layer); busiest fraction is the worst layer at the end, routing "
        "entropy (÷ log E), log-z and MaxVio (max load / mean load − 1) are means over layers "
        "and seeds; dead experts (load under 1 % of the mean) are per layer, first layer "
        "first, mean over seeds.\n\n"
        + markdown_table(["rung", "routing", "active params", "tokens/param (total / active)",
                          "best val loss (mean ± std)", "collapsed runs", "busiest fraction",
                          "routing entropy", "mean log-z", "MaxVio", "dead experts per layer"],
                         rows, "llrrrrrrrrr")
    )


def rung_steps_section(steps: list) -> str:
    """Each rung against the one it changes, paired by seed, Holm over the steps."""
    if not steps:
        return ""
    rows = [[f"{s.earlier} → {s.later}", _signed(s.difference), _interval(s),
             _p_value(s), format_p_value(s.p_adjusted), str(s.n_pairs), s.verdict]
            for s in steps]
    steps_by_name = {f"{s.earlier} → {s.later}": s for s in steps}
    return (
        "## Adjacent rungs\n\nDifference = earlier − later rung's best validation loss, per "
        "seed, then the paired t-test on those differences: positive means the later rung (the "
        "one change) is better. The steps are one family of tests, and a rung is named better "
        f"only when its p, adjusted over them ({_family(steps_by_name)}), is < 0.05.\n\n"
        + markdown_table(["step", "difference", "paired 95 % CI", "paired p",
                          f"p ({_adjustment(steps_by_name)})", "pairs", "verdict"],
                         rows, "lrrrrrl")
    )


def zero_shot_section(zero_shot: dict[str, TaskResult]) -> str:
    """Accuracy per task and arm over seeds, and the paired MoE - dense differences; '' for a
    study whose runs scored no tasks."""
    if not zero_shot:
        return ""
    arm_rows, difference_rows = [], []
    for task, result in zero_shot.items():
        for arm, r in result.arms.items():
            accuracy = r.accuracy
            arm_rows.append([
                task, arm, f"{format_mean_std(accuracy.mean, accuracy.std)} "
                           f"(n={accuracy.n})",
                _interval(r), format_number(r.chance),
            ])
        for criterion, c in result.comparisons.items():
            difference_rows.append([
                task, CRITERION_TEXT[criterion], f"{c.moe_arm} vs {c.dense_arm}",
                _signed(c.difference), _interval(c), _p_value(c),
                format_p_value(c.p_adjusted), str(c.n_pairs), c.verdict,
            ])
    section = (
        "## Zero-shot tasks\n\nScored by every run on its final weights as training ended "
        "(`train.eval_tasks`; docs/training.md, 'Zero-shot tasks'). Accuracy is the mean over "
        "seeds ± std, with the 95 % t interval of that mean over seeds: the spread of seeds, "
        "not the Wilson interval over the items that each run's tasks.json also holds.\n\n"
        + markdown_table(["task", "arm", "accuracy (mean ± std)", "95 % CI over seeds",
                          "chance"], arm_rows, "llrrr")
    )
    if difference_rows:
        comparisons = {(task, criterion): c for task, result in zero_shot.items()
                       for criterion, c in result.comparisons.items()}
        section += (
            "\nDifference = MoE − dense accuracy, per seed, then the paired t-test on those "
            "differences as for the loss: positive means the MoE is better, and a winner is "
            "named only when p, adjusted for every task's and criterion's test "
            f"({_family(comparisons)}), is < 0.05.\n\n"
            + markdown_table(["task", "criterion", "arms", "difference", "paired 95 % CI",
                              "paired p", f"p ({_adjustment(comparisons)})", "pairs",
                              "verdict"], difference_rows, "lllrrrrrl")
        )
    return section


def routing_section(arms: dict[str, ArmResult], figure_paths: dict[str, str]) -> str:
    rows = []
    for arm, r in arms.items():
        routing = r.routing
        if not routing.recorded:
            continue
        rows.append([
            arm, format_number(routing.busiest_fraction, 3),
            format_number(routing.max_busiest_fraction, 3),
            format_number(routing.usage_variance_scaled, 4),
            format_number(routing.routing_entropy, 3),
            format_number(routing.effective_experts, 2),
            format_number(routing.mean_log_z, 3),
            format_number(routing.max_violation, 3),
            format_number(routing.load_p90, 3),
            format_dead_experts(routing),
            f"{r.collapsed_runs}/{len(r.runs)}",
        ])
    if not rows:
        return ""
    return (
        "## Routing diagnostics\n\nAt the end of training, on the validation windows; mean over "
        "layers and seeds (worst layer for the max). MaxVio: max load / mean load − 1 (Wang et "
        "al. 2024); load p90: the 90th percentile over experts of load / mean load (per layer "
        "and per logged step in metrics.jsonl, with p50 and max). Dead experts: experts whose "
        "load is under 1 % of the mean load 1/E, per layer (first layer first), mean over "
        "seeds.\n\n"
        + markdown_table(["arm", "busiest fraction", "max over layers", "E²·usage variance",
                          "routing entropy / log E", "effective experts", "mean log-z",
                          "MaxVio", "load p90", "dead experts per layer", "collapsed runs"],
                         rows, "lrrrrrrrrrr")
        + "\n" + figure_block("Routing over training", figure_paths, "routing", level=3)
        + figure_block("Expert load per layer", figure_paths, "expert_load", level=3)
        + figure_block("Busiest expert per layer over training", figure_paths, "layer_load", level=3)
    )


def format_dead_experts(routing: RoutingResult) -> str:
    """Dead experts of each layer (mean over seeds), e.g. ``0 / 1 / 0.33 / 0``; '–' when the
    runs did not record them."""
    per_layer = routing.dead_experts_per_layer
    if per_layer is None:
        return "–"
    return " / ".join(f"{value:.2f}".rstrip("0").rstrip(".") for value in per_layer)


def throughput_section(arms: dict[str, ArmResult]) -> str:
    reference = next((a for a in ("dense_active", *arms) if a in arms), None)
    reference_speed = arms[reference].tokens_per_s.mean if reference else None
    rows = []
    for arm, r in arms.items():
        speed = r.tokens_per_s.mean
        ratio = speed / reference_speed if speed and reference_speed else None
        rows.append([arm, format_mean_std(speed, r.tokens_per_s.std, 0),
                     format_number(ratio, 2), format_mean_std(r.wall_time_s.mean,
                                                              r.wall_time_s.std, 1)])
    return (
        "## Throughput\n\nSecondary context, not a claim: training tokens/s as measured on the "
        f"machine that ran each arm (shared machines are noisy). Relative to `{reference}`.\n\n"
        + markdown_table(["arm", "tokens/s (mean ± std)", "relative", "wall time s"], rows, "lrrr")
    )


def runs_section(results: StudyResults) -> str:
    lines = []
    if results.missing_runs:
        lines.append("Planned runs without a complete result (not in any statistic): "
                     + ", ".join(f"`{name}`" for name in results.missing_runs) + ".")
    for name, error in results.failed_runs.items():
        lines.append(f"- `{name}` failed: {error}")
    return "## Incomplete runs\n\n" + "\n".join(lines) + "\n" if lines else ""


def notes_section(ablation: bool, has_tasks: bool = False) -> str:
    files = "`metrics.jsonl`, `config.yaml`" + (", `tasks.json`" if has_tasks else "")
    notes = [
        f"Every number above is read from the run folders (`runs/…/summary.json`, "
        f"{files}); `moelab report DIR` rebuilds this file from them.",
        "Standard deviations are over seeds (ddof = 1).",
    ]
    if not ablation:
        # The zero-shot section names its own family: this line is the same with or without it.
        notes.append("The tests of the loss gaps (every budget and criterion) are one family: "
                     "each verdict is at α = 0.05 on the "
                     "Holm-adjusted p (the intervals are each test's own 95 %); with few seeds, "
                     "'not significant' means 'not shown', not 'equal' (the minimum detectable "
                     "gap says how large a gap could go unseen).")
    return "## Notes\n\n" + "\n".join(f"- {note}" for note in notes) + "\n"


def figure_block(title: str, figure_paths: dict[str, str], key: str, level: int = 2) -> str:
    if key not in figure_paths:
        return ""
    return f"{'#' * level} {title}\n\n![{title}]({figure_paths[key]})\n"
