"""The study's figures, drawn from run records and results (never from a live training)."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Optional

import numpy as np

from moelab.report import discard_figure, new_figure, save_figure
from moelab.report.axes import (
    LOSS_UNIT, format_axis, format_count_tick, format_flops_tick, label_ticks, labelled_colourbar,
    loss_label,
)
from moelab.study.finished_runs import RunRecord
from moelab.study.study_results import BudgetResults
from moelab.study.gaps import TEST_NAMES, Gap

CURVE_DIAGNOSTICS = (
    ("busiest_fraction", "busiest-expert fraction"),
    ("routing_entropy", "routing entropy / log E"),
    ("mean_log_z", "mean router log-z"),
)
CRITERION_LABELS = {"active": "matched active", "total": "matched total", "flops": "matched FLOPs"}
# Colour by the verdict, not the sign: grey when the test shows no difference.
OUTCOME_COLOURS = {"MoE better": "tab:green", "dense better": "tab:red"}
GAP_LABEL = f"dense − MoE best val loss ({LOSS_UNIT}; >0: MoE better)"
SEED_GAP_LABEL = f"dense − MoE best val loss per seed ({LOSS_UNIT}; >0: MoE better)"


def eval_curve(records: list[RunRecord], value) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Tokens, mean and std over seeds of ``value(eval_record)`` at the eval steps all share."""
    by_step: dict[int, list[float]] = defaultdict(list)
    tokens_at: dict[int, float] = {}
    for record in records:
        for row in record.evals:
            y = value(row)
            if y is not None:
                by_step[row["step"]].append(y)
                tokens_at[row["step"]] = row.get("tokens", row["step"])
    steps = sorted(s for s, ys in by_step.items() if len(ys) == len(records))
    tokens = np.array([tokens_at[s] for s in steps], dtype=float)
    values = [np.array(by_step[s]) for s in steps]
    mean = np.array([v.mean() for v in values])
    std = np.array([v.std(ddof=1) if v.size > 1 else 0.0 for v in values])
    return tokens, mean, std


def _plot_band(ax, tokens, mean, std, label):
    line, = ax.plot(tokens, mean, label=label)
    ax.fill_between(tokens, mean - std, mean + std, color=line.get_color(), alpha=0.2)


def val_loss_figure(records_by_arm: dict[str, list[RunRecord]], path: Path) -> Optional[Path]:
    """Validation loss per arm (the seed mean, a band of one std) against training tokens and,
    beside it, against training compute: arms matched on parameters spend different FLOPs per
    token (dense_total ~1.5x the MoE's), so equal tokens are not equal cost."""
    fig, (by_tokens, by_flops) = new_figure(ncols=2, width_in=5.5)
    drew = False
    for arm, records in records_by_arm.items():
        tokens, mean, std = eval_curve(records, lambda row: row.get("val_loss"))
        if tokens.size:
            label = f"{arm} (n={len(records)})"
            _plot_band(by_tokens, tokens, mean, std, label)
            flops_per_token = _flops_per_token(records)
            if flops_per_token is not None:
                _plot_band(by_flops, tokens * flops_per_token, mean, std, label)
            drew = True
    by_tokens.set_xlabel("training tokens")
    format_axis(by_tokens.xaxis, format_count_tick)
    by_flops.set_xlabel("training compute (FLOPs, 6 N_active per token)")
    format_axis(by_flops.xaxis, format_flops_tick, max_ticks=4)
    for ax in (by_tokens, by_flops):
        ax.set_ylabel(loss_label())
        ax.grid(alpha=0.3)
    by_tokens.set_title("against tokens")
    by_flops.set_title("against training compute")
    fig.suptitle("Validation loss (mean over seeds, band: ±1 std)")
    if not drew:
        discard_figure(fig)
        return None
    by_tokens.legend()
    return save_figure(fig, path)


def _flops_per_token(records: list[RunRecord]) -> Optional[float]:
    """The arm's training FLOPs per token (6 N_active, as the arms table), None when a run's
    summary predates the count or the seeds disagree (they share one config)."""
    counts = {record.summary.flops_per_token_6n for record in records}
    return float(counts.pop()) if len(counts) == 1 and None not in counts else None


def _layer_mean(row: dict, key: str) -> Optional[float]:
    layers = row.get("routing") or []
    values = [layer[key] for layer in layers if key in layer]
    return float(np.mean(values)) if values else None


def routing_figure(records_by_arm: dict[str, list[RunRecord]], path: Path) -> Optional[Path]:
    """Routing diagnostics over training (mean over layers and seeds) for every MoE arm."""
    fig, axes = new_figure(ncols=len(CURVE_DIAGNOSTICS), width_in=4.5)
    drew = False
    for arm, records in records_by_arm.items():
        for ax, (key, label) in zip(axes, CURVE_DIAGNOSTICS):
            tokens, mean, std = eval_curve(records, lambda row, key=key: _layer_mean(row, key))
            if tokens.size:
                _plot_band(ax, tokens, mean, std, arm)
                ax.set_title(label)
                drew = True
    for ax in axes:
        ax.set_xlabel("training tokens")
        format_axis(ax.xaxis, format_count_tick, max_ticks=4)  # three panels side by side: few ticks fit
        ax.grid(alpha=0.3)
    if not drew:
        discard_figure(fig)
        return None
    axes[0].legend()
    return save_figure(fig, path)


def expert_load_figure(loads_by_arm: dict[str, list[list[float]]], path: Path) -> Optional[Path]:
    """Heatmap per MoE arm: share of token-slots each expert gets, per layer, at the end."""
    if not loads_by_arm:
        return None
    fig, axes = new_figure(ncols=len(loads_by_arm), width_in=4.0, height_in=3.5)
    axes = axes if isinstance(axes, list) else [axes]
    for ax, (arm, loads) in zip(axes, loads_by_arm.items()):
        load_LE = np.asarray(loads)
        image = ax.imshow(load_LE, vmin=0.0, vmax=max(1.0 / load_LE.shape[1] * 2, load_LE.max()),
                          cmap="viridis", aspect="auto")
        ax.set_xlabel("expert")
        ax.set_ylabel("layer")
        ax.set_title(f"{arm}: expert load")
        ax.set_xticks(range(load_LE.shape[1]))
        ax.set_yticks(range(load_LE.shape[0]))
        labelled_colourbar(fig, image, ax, "share of the layer's token-slots")
    return save_figure(fig, path)


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
    ax.set_title(f"Gap per fairness criterion (95 % CI, {_tests_used(gaps.values())})")
    ax.grid(axis="y", alpha=0.3)
    return save_figure(fig, path)


def _tests_used(gaps) -> str:
    """'paired t', 'Welch t' or both: the tests behind the plotted intervals."""
    used = dict.fromkeys(g.test for g in gaps)
    return " / ".join(TEST_NAMES[test] for test in used)


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
        error = [[mean - low], [high - mean]] if low is not None else None
        # Coloured by the verdict only when the verdict came from this (the paired) test.
        colour = OUTCOME_COLOURS.get(g.outcome, "black") if g.test == "paired" else "black"
        ax.errorbar([position + 0.25], [mean], yerr=error, fmt="s", capsize=6, zorder=3,
                    color=colour, label="paired mean, 95 % CI" if position == 0 else None)
    ax.axhline(0.0, color="black", linewidth=0.8)
    ax.set_xticks(range(len(paired)), labels=[CRITERION_LABELS.get(c, c) for c in paired])
    ax.set_xlim(-0.6, len(paired) - 0.4)
    ax.set_ylabel(SEED_GAP_LABEL)
    ax.set_title("Per-seed paired differences (labels: seed)")
    ax.grid(axis="y", alpha=0.3)
    ax.legend()
    return save_figure(fig, path)


def gap_vs_tokens_figure(budget_groups: list[BudgetResults], path: Path) -> Optional[Path]:
    """Gap per criterion against the token budget, with 95 % CI bands."""
    criteria = sorted({c for group in budget_groups for c in group.gaps})
    if not criteria:
        return None
    fig, ax = new_figure()
    for criterion in criteria:
        rows = [(g.tokens, g.gaps[criterion]) for g in budget_groups if criterion in g.gaps]
        tokens = np.array([t for t, _ in rows], dtype=float)
        gap = np.array([r.gap for _, r in rows])
        line, = ax.plot(tokens, gap, marker="o", label=CRITERION_LABELS.get(criterion, criterion))
        low = np.array([r.ci_low if r.ci_low is not None else r.gap for _, r in rows])
        high = np.array([r.ci_high if r.ci_high is not None else r.gap for _, r in rows])
        ax.fill_between(tokens, low, high, color=line.get_color(), alpha=0.2)
    ax.axhline(0.0, color="black", linewidth=0.8)
    ax.set_xscale("log")
    budgets = [group.tokens for group in budget_groups]
    label_ticks(ax.xaxis, budgets, format_count_tick)
    ax.set_xlabel("training tokens (budget of each run)")
    ax.set_ylabel(GAP_LABEL)
    tests_used = _tests_used(g for group in budget_groups for g in group.gaps.values())
    ax.set_title(f"Gap against the token budget (95 % CI, {tests_used})")
    ax.grid(alpha=0.3)
    ax.legend()
    return save_figure(fig, path)


def layer_load_over_training_figure(records_by_arm: dict[str, list[RunRecord]],
                                    path: Path) -> Optional[Path]:
    """Heatmap per MoE arm: busiest-expert fraction of each layer (rows) at each eval (columns),
    mean over seeds: where and when the load concentrates (a collapse shows as a bright row)."""
    panels = {}
    for arm, records in records_by_arm.items():
        n_layers = min((len(row.get("routing") or []) for r in records for row in r.evals), default=0)
        if n_layers == 0:
            continue
        curves = [eval_curve(records, lambda row, i=i: row["routing"][i]["busiest_fraction"])
                  for i in range(n_layers)]
        panels[arm] = (curves[0][0], np.stack([mean for _, mean, _ in curves]))
    if not panels:
        return None
    fig, axes = new_figure(ncols=len(panels), width_in=4.5, height_in=3.5)
    axes = axes if isinstance(axes, list) else [axes]
    for ax, (arm, (tokens, busiest_LS)) in zip(axes, panels.items()):
        # One eval (a tiny budget) is one column, drawn around its tokens: equal x limits
        # would make matplotlib warn and pick its own.
        half = max(0.5 * tokens[0], 0.5)
        left, right = ((tokens[0], tokens[-1]) if tokens[-1] > tokens[0]
                       else (tokens[0] - half, tokens[0] + half))
        image = ax.imshow(busiest_LS, vmin=0.0, vmax=1.0, cmap="viridis", aspect="auto",
                          extent=(left, right, busiest_LS.shape[0] - 0.5, -0.5))
        ax.set_xlabel("training tokens")
        format_axis(ax.xaxis, format_count_tick, max_ticks=4)
        ax.set_ylabel("layer")
        ax.set_yticks(range(busiest_LS.shape[0]))
        ax.set_title(f"{arm}: busiest-expert fraction")
        labelled_colourbar(fig, image, ax, "busiest-expert fraction")
    return save_figure(fig, path)
