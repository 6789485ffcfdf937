"""Throughput measured by the runs themselves: per (N, S) the median tokens/s, step time and peak
memory of its runs against dense, and the throughput model fitted to every run
(``moelab.scaling.throughput``), which the wall-clock optima read. Written as
``throughput.json``, a throughput table that ``moelab optimal fit.json --seconds T`` finds next
to fit.json."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional

from moelab.errors import MoelabError
from moelab.report import format_count, markdown_table
from moelab.report.analysis import Analysis, Findings
from moelab.scaling.throughput import (
    ThroughputModel, ThroughputModelRecord, ThroughputRow, ShapeThroughput, fit_throughput,
    moe_versus_dense, per_shape_means,
)
from moelab.sweep.folder import SweepFolder
from moelab.sweep.results_csv import ResultRow

MODEL_REPLICATES = 100
"""Bootstrap replicates of the throughput model (as many as the optima's curves use)."""


@dataclass
class ThroughputRecord:
    """throughput.json: per (N, S) the median tokens/s of its runs, and the throughput model
    fitted to every run (None with the reason in ``model_problem``)."""

    source: str
    """Where the speeds come from (results.csv)."""
    rows: list[ShapeThroughput]
    """Per (N_total, S): its runs' median speed, beside dense."""
    runs: int
    """Runs with a measured speed."""
    devices: list[str]
    """The devices they trained on."""
    model: Optional[ThroughputModelRecord]
    """The throughput model fitted to every run; null when it cannot be."""
    model_problem: Optional[str]
    """Why there is no model; null when there is."""

    def fitted_model(self) -> ThroughputModel | None:
        """The stored throughput model, or None."""
        return self.model.model() if self.model else None


def throughput_record(rows: list[ResultRow]) -> ThroughputRecord | None:
    """Per (N, S): the median tokens/s of its runs; and the throughput model fitted to every
    run (None when the runs did not record their speed: synthetic or older results)."""
    if any(not row.tokens_per_s for row in rows):
        return None
    runs = [_throughput_row(row, row.tokens_per_s) for row in rows if row.tokens_per_s]
    shapes = per_shape_means(runs)
    ratios = {(r.N_total, r.S): r for r in moe_versus_dense(shapes)}
    for shape in shapes:  # measured against dense models, no throughput model involved
        ratio = ratios.get((shape.N_total, shape.S))
        if ratio is not None:
            shape.tokens_per_s_vs_dense = ratio.tokens_per_s_vs_same_size_dense
            shape.step_time_vs_equal_flops_dense = ratio.step_time_vs_equal_flops_dense
    model, problem = None, None
    try:
        # The folder's own file, not its path: a copied or moved sweep folder stays the same.
        model = fit_throughput(runs, bootstrap_replicates=MODEL_REPLICATES, source="results.csv")
    except MoelabError as exc:
        problem = str(exc)
    return ThroughputRecord(source="results.csv", rows=shapes, runs=len(runs),
                            devices=sorted({row.device for row in rows}),
                            model=model.record() if model else None, model_problem=problem)


def _throughput_row(row: ResultRow, tokens_per_s: float) -> ThroughputRow:
    """The run as ``moelab.scaling.throughput`` reads one (its measured ``tokens_per_s``)."""
    return ThroughputRow(N_total=row.N_total, N_active=row.N_active, S=row.S, E=float(row.E),
                         tokens_per_s=tokens_per_s, k=float(row.k or 1), device=row.device,
                         step_time_s=row.step_time_s, peak_memory_bytes=row.peak_memory_bytes,
                         tokens_per_step=row.tokens_per_step)


def throughput_status(record: ThroughputRecord | None) -> str:
    """analysis.json's status.throughput."""
    if record is None:
        return "not measured (results.csv has no tokens_per_s)"
    return "model fitted" if record.model else f"no model: {record.model_problem}"


def compute(folder: SweepFolder, findings: Findings) -> ThroughputRecord | None:
    return None if folder.results is None else throughput_record(folder.rows)


def render(throughput: ThroughputRecord | None, folder: SweepFolder, findings: Findings) -> str:
    if folder.results is None or folder.settings is None:
        return ""
    if throughput is None:
        return ("## Throughput\n\n"
                f"Not measured: {folder.settings.status.throughput or 'no throughput.json'}.\n")
    rows = [[format_count(r.N_total), format_count(r.N_active), f"{r.S:g}",
             f"{r.E:g}", f"{r.tokens_per_s:,.0f}",
             f"{r.step_time_s * 1e3:.1f}" if r.step_time_s else "–",
             f"{r.peak_memory_bytes / 2**20:,.0f}" if r.peak_memory_bytes else "–",
             f"{r.tokens_per_s_vs_dense:.2f}" if r.tokens_per_s_vs_dense else "–",
             f"{r.step_time_vs_equal_flops_dense:.2f}"
             if r.step_time_vs_equal_flops_dense else "–",
             str(r.runs)] for r in throughput.rows]
    text = ("## Throughput\n\n"
            "Training tokens/s each run measured on the machine that ran it (training time "
            "only, eval and checkpoints excluded; median over the runs of a shape, "
            f"`throughput.json`; device {', '.join(throughput.devices)}). 'vs dense': "
            "tokens/s against the dense model of the same total size; 'vs equal FLOPs': step "
            "time against a dense step of the same FLOPs (the dense runs' time per token "
            "interpolated log-log at this N_active; '–' outside the dense sizes). "
            "Peak memory is the training process's "
            "peak resident set on a CPU (a process that trained several runs reports the "
            "largest so far), allocated tensors on a GPU. Runs trained side by side (`--jobs`) "
            "share the machine, so these are speeds under that load.\n\n"
            + markdown_table(["N total", "N active", "S", "E", "tokens/s", "ms/step",
                              "peak MiB", "vs dense", "vs equal FLOPs", "runs"], rows,
                             "rrrrrrrrrr"))
    model = throughput.model
    if model is None:
        return text + f"\nNo throughput model: {throughput.model_problem}\n"
    coefficients, ci = model.coefficients, model.ci
    terms = [[name, f"{coefficients[name]:.3g}",
              f"[{ci[name][0]:.3g}, {ci[name][1]:.3g}]" if ci else "–"] for name in coefficients]
    overhead = (coefficients["a"] + coefficients["m"]) / coefficients["a"] if coefficients["a"] else math.nan
    return (text + f"\nThroughput model (`moelab.scaling.throughput`), fitted to all "
            f"{model.n_rows} runs: {model.form}, with 95 % intervals from "
            f"{model.bootstrap.replicates} resamples of the distinct shapes. A FLOP inside "
            f"the expert layers costs (a + m) / a = {overhead:.2f} x a dense FLOP; attention, "
            "embedding and head FLOPs are priced as dense.\n\n"
            + markdown_table(["term", "seconds per token per unit", "95 % CI"], terms, "lrr"))


ANALYSIS: Analysis[SweepFolder, ThroughputRecord] = Analysis(
    "throughput", compute, render, file="throughput.json", record_type=ThroughputRecord)
