"""The dense-vs-MoE comparisons of the budget the report leads with: per criterion both tests
(paired and Welch), the Holm-adjusted verdict, a sentence that claims no more than it, the power
table, and the figures of the gaps and of the per-seed differences. Shown for a study."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import numpy as np

from moelab.report import (
    format_number, format_p_value, markdown_table, new_figure, save_figure,
)
from moelab.report.analysis import Analysis, Findings, figure_path
from moelab.report.axes import LOSS_UNIT
from moelab.stats.intervals import ALPHA
from moelab.stats.power import MAX_SEEDS, POWER
from moelab.study.analyses.shared import (
    CRITERION_LABELS, CRITERION_TEXT, GAP_LABEL, OUTCOME_COLOURS, adjustment, family,
    figure_block, interval, p_value, signed, tests_used,
)
from moelab.study.analyses.statistics import results_of
from moelab.study.folder import StudyFolder
from moelab.study.gaps import REFERENCE_GAP, TEST_NAMES, Gap

SEED_GAP_LABEL = f"dense − MoE best val loss per seed\n({LOSS_UNIT}; >0: MoE better)"


def compute(folder: StudyFolder, findings: Findings) -> Optional[dict[str, Gap]]:
    results = results_of(findings)
    return None if results.is_ablation else results.gaps


def render(gaps: Optional[dict[str, Gap]], folder: StudyFolder, findings: Findings) -> str:
    """The tables and sentences, then the two figures (each arm's tokens per parameter is under
    the validation loss figure, whose curves run over training tokens: said once)."""
    if gaps is None:
        return ""
    gaps_figure = gap_bar_figure(gaps, figure_path(folder.root, "gaps.png"))
    differences = paired_differences_figure(gaps, figure_path(folder.root,
                                                              "paired_differences.png"))
    parts = [comparison_section(gaps), figure_block("Gap per criterion", folder, gaps_figure),
             figure_block("Per-seed differences", folder, differences)]
    return "\n".join(part for part in parts if part)


def comparison_section(gaps: dict[str, Gap]) -> str:
    if not gaps:
        return "## Comparisons\n\nNo comparison: the MoE arm or every dense arm lacks complete runs.\n"
    test_rows, power_rows = [], []
    for criterion, g in gaps.items():
        paired, welch = g.paired, g.welch
        test_rows.append([
            CRITERION_TEXT[criterion], f"{g.moe_arm} vs {g.dense_arm}",
            signed(paired.gap), interval(paired), p_value(paired), str(paired.n_pairs),
            format_number(paired.std_diff), signed(welch.gap), interval(welch),
            p_value(welch), format_number(welch.df, 1), format_p_value(g.p_adjusted),
            g.verdict,
        ])
        observed, reference = g.seeds_needed
        power_rows.append([
            CRITERION_TEXT[criterion], TEST_NAMES[g.test], format_number(g.min_detectable_gap),
            f"{_seeds_text(g, observed)} (for {observed['gap']:.4f})", _seeds_text(g, reference),
        ])
    sentences = "\n".join(f"- {comparison_sentence(g)}" for g in gaps.values())
    return (
        "## Comparisons\n\nGap = dense − MoE best validation loss: positive means the MoE is "
        "better. The arms of one seed share the data order and the validation windows, so the "
        "paired t-test on the per-seed differences is used whenever both arms have the same "
        "seeds; Welch's t-test (Welch–Satterthwaite degrees of freedom) when they do not. Both "
        "are shown with 95 % confidence intervals (when the seeds differ, the paired columns use "
        "the seeds both arms have); the verdict names the test it used, and a winner is named "
        f"only when that test's p, adjusted for the report's {family(gaps)}, is < 0.05.\n\n"
        + markdown_table(["criterion", "arms", "paired gap", "paired 95 % CI", "paired p",
                          "pairs", "std of differences", "Welch gap", "Welch 95 % CI", "Welch p",
                          "Welch df", f"p ({adjustment(gaps)})", "verdict"],
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
    between = f"{g.ci_low:.4f} to {g.ci_high:.4f}" if g.ci_low is not None else ""
    p_text = f"p = {g.p_value:.2g}, {g.adjustment.split(',')[0]} p = {g.p_adjusted:.2g}" \
        if g.p_value is not None else ""
    if g.outcome == "MoE better":
        return (f"{what}: the MoE is better by {size:.4f} nats/token ({test}: "
                f"95 % CI {between}, {p_text}).")
    if g.outcome == "dense better":
        return (f"{what}: the dense model is better by {size:.4f} nats/token ({test}: "
                f"95 % CI of dense − MoE {between}, {p_text}).")
    if g.outcome == "not significant":
        return (f"{what}: {g.verdict}; the observed gap {g.gap:+.4f} is not distinguishable "
                f"from seed noise, so no winner is claimed (gaps from "
                f"{format_number(g.min_detectable_gap)} up would be detected with power "
                f"{POWER:g}).")
    return (f"{what}: {g.verdict}; the observed gap {g.gap:+.4f} cannot be tested, so no "
            "winner is claimed.")


def gap_bar_figure(gaps: dict[str, Gap], path: Path) -> Optional[Path]:
    """One bar per criterion: dense - MoE best val loss with its 95 % CI."""
    if not gaps:
        return None
    fig, ax = new_figure(width_in=5.0)
    names = list(gaps)
    values = [gaps[c].gap for c in names]
    errors = np.array([
        [g.gap - g.ci_low, g.ci_high - g.gap] if g.ci_low is not None else [0, 0]
        for g in gaps.values()
    ]).T
    ax.bar([CRITERION_LABELS.get(c, c) for c in names], values, yerr=errors, capsize=6,
           color=[OUTCOME_COLOURS.get(g.outcome, "tab:gray") for g in gaps.values()])
    ax.axhline(0.0, color="black", linewidth=0.8)
    ax.set_ylabel(GAP_LABEL)
    note = _interval_and_colour_note(gaps, tests_used(gaps.values()))
    ax.set_title(f"Gap per fairness criterion\n{note}", fontsize=10)
    ax.grid(axis="y", alpha=0.3)
    return save_figure(fig, path)


def _interval_and_colour_note(gaps: dict[str, Gap], tests: str) -> str:
    """Why an interval may exclude 0 beside a 'not significant' verdict: the interval drawn is
    the test's own (unadjusted), the verdict (the colour) uses the p adjusted for the family."""
    return (f"error bars: unadjusted 95 % CI ({tests})\n"
            f"colour: verdict at p adjusted over {family(gaps)}")


def paired_differences_figure(gaps: dict[str, Gap], path: Path) -> Optional[Path]:
    """Per criterion: one point per seed (dense - MoE of that seed), and beside them the paired
    mean with its 95 % CI; the zero line is 'no difference'."""
    paired = {c: g for c, g in gaps.items() if g.paired.differences}
    if not paired:
        return None
    fig, ax = new_figure(width_in=max(4.0, 2.5 * len(paired)))
    for position, g in enumerate(paired.values()):
        differences = g.paired.differences
        # Spread the seeds a little sideways so equal differences stay visible.
        offsets = np.linspace(-0.12, 0.12, len(differences)) if len(differences) > 1 else [0.0]
        x = position - 0.15 + np.asarray(offsets)
        y = [d["diff"] for d in differences]
        ax.scatter(x, y, color="tab:blue", zorder=3, label="one seed" if position == 0 else None)
        for x_seed, y_seed, d in zip(x, y, differences):
            ax.annotate(str(d["seed"]), (x_seed, y_seed), textcoords="offset points",
                        xytext=(4, 2), fontsize=7, color="tab:blue")
        mean, low, high = g.paired.gap, g.paired.ci_low, g.paired.ci_high
        error = [[mean - low], [high - mean]] if low is not None and high is not None else None
        # Coloured by the verdict only when the verdict came from this (the paired) test.
        colour = OUTCOME_COLOURS.get(g.outcome, "black") if g.test == "paired" else "black"
        ax.errorbar([position + 0.25], [mean], yerr=error, fmt="s", capsize=6, zorder=3,
                    color=colour,
                    label="paired mean, unadjusted 95 % CI" if position == 0 else None)
    ax.axhline(0.0, color="black", linewidth=0.8)
    ax.set_xticks(range(len(paired)), labels=[CRITERION_LABELS.get(c, c) for c in paired])
    ax.set_xlim(-0.6, len(paired) - 0.4)
    ax.set_ylabel(SEED_GAP_LABEL)
    ax.set_title("Per-seed paired differences (labels: seed)\n"
                 f"{_interval_and_colour_note(gaps, TEST_NAMES['paired'])}", fontsize=10)
    ax.grid(axis="y", alpha=0.3)
    ax.legend()
    return save_figure(fig, path)


ANALYSIS: Analysis[StudyFolder, dict[str, Gap]] = Analysis("comparisons", compute, render)
