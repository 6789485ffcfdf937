"""Routing diagnostics of the MoE arms at the end of training (busiest expert, entropy, log-z,
MaxVio, load p90, dead experts, collapses) and their figures: the diagnostics over training,
each expert's final load per layer, and the busiest expert per layer over training."""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Optional

import numpy as np

from moelab.report import discard_figure, format_number, markdown_table, new_figure, save_figure
from moelab.report.analysis import Analysis, Findings, figure_path
from moelab.report.axes import format_axis, format_count_tick, labelled_colourbar
from moelab.study.analyses.ladder import format_dead_experts
from moelab.study.analyses.shared import eval_curve, figure_block, final_runs_by_arm, plot_band
from moelab.study.analyses.statistics import results_of
from moelab.study.folder import CompleteRun, StudyFolder
from moelab.study.results import ArmResult

CURVE_DIAGNOSTICS = (
    ("busiest_fraction", "busiest-expert fraction"),
    ("routing_entropy", "routing entropy / log E"),
    ("mean_log_z", "mean router log-z"),
)


@dataclass
class MoeArms:
    """The arms that recorded routing, with their runs at the budget the report leads with."""

    arms: dict[str, ArmResult]
    runs: dict[str, list[CompleteRun]]


def compute(folder: StudyFolder, findings: Findings) -> MoeArms:
    results = results_of(findings)
    by_arm = final_runs_by_arm(results, folder)
    return MoeArms({arm: r for arm, r in results.arms.items() if r.routing.recorded},
                   {arm: runs for arm, runs in by_arm.items() if results.arms[arm].routing.recorded})


def render(moe: Optional[MoeArms], folder: StudyFolder, findings: Findings) -> str:
    if moe is None:
        return ""
    root = folder.root
    curves = routing_figure(moe.runs, figure_path(root, "routing.png"))
    loads = {arm: r.routing.expert_load for arm, r in moe.arms.items()
             if r.routing.expert_load is not None}
    load = expert_load_figure(loads, figure_path(root, "expert_load.png")) if loads else None
    layers = layer_load_over_training_figure(moe.runs, figure_path(root, "layer_load.png"))
    rows = []
    for arm, r in moe.arms.items():
        routing = r.routing
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
        + "\n" + figure_block("Routing over training", folder, curves, level=3)
        + figure_block("Expert load per layer", folder, load, level=3)
        + figure_block("Busiest expert per layer over training", folder, layers, level=3)
    )


def _layer_mean(row: dict, key: str) -> Optional[float]:
    layers = row.get("routing") or []
    values = [layer[key] for layer in layers if key in layer]
    return float(np.mean(values)) if values else None


def _busiest_fraction(row: dict, layer: int) -> Optional[float]:
    return row["routing"][layer]["busiest_fraction"]


def routing_figure(runs_by_arm: dict[str, list[CompleteRun]], path: Path) -> Optional[Path]:
    """Routing diagnostics over training (mean over layers and seeds) for every MoE arm."""
    fig, axes = new_figure(ncols=len(CURVE_DIAGNOSTICS), width_in=4.5)
    drew = False
    for arm, runs in runs_by_arm.items():
        for ax, (key, label) in zip(axes, CURVE_DIAGNOSTICS):
            tokens, mean, std = eval_curve(runs, partial(_layer_mean, key=key))
            if tokens.size:
                plot_band(ax, tokens, mean, std, arm)
                ax.set_title(label)
                drew = True
    for ax in axes:
        ax.set_xlabel("training tokens")
        format_axis(ax.xaxis, format_count_tick, max_ticks=4)  # three panels side by side: few ticks fit
        ax.grid(alpha=0.3)
    if not drew:
        discard_figure(fig)
        return None
    _draw_balanced(axes, runs_by_arm)
    axes[0].legend()
    return save_figure(fig, path)


def _draw_balanced(axes, runs_by_arm: dict[str, list[CompleteRun]]) -> None:
    """The value each diagnostic takes when every expert gets the same share: a busiest
    expert of 1/E, a routing entropy of log E (1 as a share of it); log-z has none."""
    experts = sorted({run.config.model.moe.num_experts for runs in runs_by_arm.values()
                      for run in runs if run.config.model.moe is not None})
    style = {"color": "black", "linestyle": "--", "linewidth": 0.8}
    for count in experts:
        axes[0].axhline(1.0 / count, **style, label=f"balanced: 1/E = 1/{count}")
    if experts:
        axes[1].axhline(1.0, **style, label="balanced: 1")
        axes[1].legend()


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


def layer_load_over_training_figure(runs_by_arm: dict[str, list[CompleteRun]],
                                    path: Path) -> Optional[Path]:
    """Heatmap per MoE arm: busiest-expert fraction of each layer (rows) at each eval (columns),
    mean over seeds: where and when the load concentrates (a collapse shows as a bright row)."""
    panels = {}
    for arm, runs in runs_by_arm.items():
        n_layers = min((len(row.get("routing") or []) for r in runs for row in r.evals), default=0)
        if n_layers == 0:
            continue
        curves = [eval_curve(runs, partial(_busiest_fraction, layer=i)) for i in range(n_layers)]
        panels[arm] = (curves[0][0], np.stack([mean for _, mean, _ in curves]))
    if not panels:
        return None
    fig, axes = new_figure(ncols=len(panels), width_in=4.5, height_in=3.5)
    axes = axes if isinstance(axes, list) else [axes]
    for ax, (arm, (tokens, busiest_LS)) in zip(axes, panels.items()):
        image = ax.imshow(busiest_LS, vmin=0.0, vmax=1.0, cmap="viridis", aspect="auto",
                          extent=(*_column_span(tokens), busiest_LS.shape[0] - 0.5, -0.5))
        ax.set_xlabel("training tokens")
        format_axis(ax.xaxis, format_count_tick, max_ticks=4)
        ax.set_ylabel("layer")
        ax.set_yticks(range(busiest_LS.shape[0]))
        ax.set_title(f"{arm}: busiest-expert fraction")
        labelled_colourbar(fig, image, ax, "busiest-expert fraction")
    return save_figure(fig, path)


def _column_span(tokens) -> tuple[float, float]:
    """The x extent of the heatmap's columns, the first eval to the last; a run with one eval
    gets a column of its own width around it (equal limits would make a singular axis)."""
    first, last = float(tokens[0]), float(tokens[-1])
    if last > first:
        return first, last
    half = max(abs(first), 1.0) / 2
    return first - half, first + half


ANALYSIS: Analysis[StudyFolder, MoeArms] = Analysis("routing", compute, render)
