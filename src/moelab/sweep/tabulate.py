"""A sweep's results.csv: one row per complete run, rebuilt from the run folders alone (each
row's numbers from that run's summary.json, config.yaml and tasks.json, with its actual compute
C next to the nominal C_budget, and its finetune's finetune.json and summary.json when the
grid fine-tunes); the analysis and the report read nothing else of the runs, and read the file
back as typed rows (``moelab.sweep.results_csv``).
"""

from __future__ import annotations

import csv
import io
from pathlib import Path

from moelab.config import Config
from moelab.fileio import atomic_write_text
from moelab.runs import is_complete
from moelab.sweep.plan import SweepPoint, exact_text, finetune_run_name, run_specs
from moelab.sweep.results_csv import task_column
from moelab.tasks import TASK_NAMES, read_run_tasks
from moelab.train.finetune import read_finetune_reference
from moelab.train.run_folder import RunFolder
from moelab.train.run_summary import RunSummary

MACHINE_COLUMNS = ("cpu", "cpu_capability", "torch_version", "blas", "threads", "numerics")
"""The run's summary.json machine record (moelab.numerics.Machine): CPU model, torch's kernel
set, torch and BLAS versions, torch threads, train.numerics. Written after RESULT_COLUMNS when
some run has the record (none in a sweep whose runs all predate it, so its file is unchanged)."""
RESULT_COLUMNS = (
    "run", "size", "budget", "seed", "C_budget", "N_total", "N_active", "N_non_embedding", "D",
    "C", "S", "E", "k", "d_expert", "flops_per_token_6n", "flops_per_token_kaplan", "best_val_loss",
    "final_val_loss", "collapse", "tokens_per_s", "step_time_s", "tokens_per_step",
    "peak_memory_bytes", "device",
)
"""The last five: how fast the run trained on the machine that ran it (training time only,
eval and checkpoints excluded), its peak memory and its device; empty for older runs."""
FINETUNE_COLUMNS = ("finetune_source_val_loss", "finetune_val_loss", "finetune_gain")
"""With a ``finetune`` recipe: the run's final weights scored on the new text's held-out part
before fine-tuning (its finetune.json), its finetune's final val loss there (its summary.json),
and the gain, the first minus the second; empty while the finetune is not complete."""


def collect_results(out_dir: Path, points: list[SweepPoint]) -> list[dict]:
    """One row per complete run, from its summary.json and config.yaml (nothing else)."""
    rows = []
    for point, spec in zip(points, run_specs(points)):
        run = RunFolder(out_dir / spec.run_dir)
        if is_complete(run.path):
            row = result_row(point, str(spec.run_dir), _run_summary(run), run.read_config())
            finetune = RunFolder(out_dir / "runs" / finetune_run_name(spec.name))
            rows.append({**row, **_task_fields(run.path), **_finetune_fields(finetune)})
    return rows


def _finetune_fields(finetune: RunFolder) -> dict:
    """FINETUNE_COLUMNS of a complete finetune (none for a run without one)."""
    if not is_complete(finetune.path):
        return {}
    reference = read_finetune_reference(finetune.path)
    tuned = finetune.summary().require(("final_val_loss",), finetune.summary_path).final_val_loss
    return {"finetune_source_val_loss": reference.source_val_loss, "finetune_val_loss": tuned,
            "finetune_gain": reference.source_val_loss - tuned}


def _task_fields(run_dir: Path) -> dict:
    """The accuracy of each task the run scored into its tasks.json as it ended."""
    return {task_column(task): entry["accuracy"] for task, entry in read_run_tasks(run_dir).items()}


SUMMARY_KEYS = ("total_params", "active_params", "non_embedding_params", "tokens",
                "flops_per_token_6n", "flops_per_token_kaplan", "best_val_loss", "final_val_loss")


def _run_summary(run: RunFolder) -> RunSummary:
    return run.summary().require(SUMMARY_KEYS, run.summary_path)


def result_row(point: SweepPoint, run_dir: str, summary: RunSummary, config: Config) -> dict:
    """A results.csv row. Counts, tokens and FLOPs come from the run's summary.json; experts and
    sparsity from its config.yaml; the plan gives only the names and the nominal budget."""
    moe = config.model.moe
    experts, top_k = (moe.num_experts, moe.top_k) if moe else (1, 1)
    return {
        "run": run_dir, "size": point.size, "budget": point.budget_label,
        "seed": config.train.seed,
        "C_budget": "" if point.flops_budget is None else exact_text(point.flops_budget),
        "N_total": summary.total_params, "N_active": summary.active_params,
        "N_non_embedding": summary.non_embedding_params, "D": summary.tokens,
        "C": summary.flops_per_token_6n * summary.tokens, "S": (experts - top_k) / experts,
        "E": experts, "k": top_k, "d_expert": moe.d_expert if moe else "",
        "flops_per_token_6n": summary.flops_per_token_6n,
        "flops_per_token_kaplan": summary.flops_per_token_kaplan,
        "best_val_loss": summary.best_val_loss, "final_val_loss": summary.final_val_loss,
        "collapse": bool(summary.collapse),
        **_throughput_fields(summary), **machine_fields(summary),
    }


def machine_fields(summary: RunSummary) -> dict:
    """MACHINE_COLUMNS from the summary's machine record (none for a run without one)."""
    machine = summary.machine
    if machine is None:
        return {}
    return {"cpu": machine.cpu, "cpu_capability": machine.capability,
            "torch_version": machine.torch, "blas": machine.blas, "threads": machine.threads,
            "numerics": machine.numerics}


def _throughput_fields(summary: RunSummary) -> dict:
    """tokens/s, step time, peak memory and device ('' where an older run lacks them)."""
    fields = {"tokens_per_s": summary.tokens_per_s, "step_time_s": summary.step_time_s,
              "tokens_per_step": summary.tokens_per_step,
              "peak_memory_bytes": summary.peak_memory_bytes, "device": summary.device}
    return {key: "" if value is None else value for key, value in fields.items()}


def write_results_csv(path: Path, rows: list[dict]) -> Path:
    """RESULT_COLUMNS, MACHINE_COLUMNS when some run recorded its machine, then a zero-shot
    column per task some run scored, then FINETUNE_COLUMNS when some run has a complete
    finetune (none otherwise)."""
    scored = {key for row in rows for key in row if key not in RESULT_COLUMNS}
    columns = RESULT_COLUMNS + (MACHINE_COLUMNS if "numerics" in scored else ())
    columns += tuple(task_column(t) for t in TASK_NAMES if task_column(t) in scored)
    if scored & set(FINETUNE_COLUMNS):
        columns += FINETUNE_COLUMNS
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=columns, lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    return atomic_write_text(path, buffer.getvalue())
