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
from moelab.errors import MoelabError
from moelab.fileio import atomic_write_text
from moelab.runs import is_complete
from moelab.sweep.plan import SweepPoint, exact_text, finetune_run_name, run_specs
from moelab.sweep.results_csv import (
    FINETUNE_COLUMNS, GRANULARITY_COLUMNS, result_columns, task_column,
)
from moelab.tasks import TASK_NAMES, read_run_tasks
from moelab.train.finetune import read_finetune_reference
from moelab.train.run_folder import RunFolder
from moelab.train.run_summary import RunSummary

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
    tuned = _complete_summary(finetune, ("final_val_loss",)).final_val_loss
    assert tuned is not None  # required above
    return {"finetune_source_val_loss": reference.source_val_loss, "finetune_val_loss": tuned,
            "finetune_gain": reference.source_val_loss - tuned}


def _task_fields(run_dir: Path) -> dict:
    """The accuracy of each task the run scored into its tasks.json as it ended."""
    return {task_column(task): entry["accuracy"] for task, entry in read_run_tasks(run_dir).items()}


SUMMARY_KEYS = ("total_params", "active_params", "non_embedding_params", "tokens",
                "flops_per_token_6n", "flops_per_token_kaplan", "best_val_loss", "final_val_loss")


def _run_summary(run: RunFolder) -> RunSummary:
    return _complete_summary(run, SUMMARY_KEYS)


def _complete_summary(run: RunFolder, keys: tuple[str, ...]) -> RunSummary:
    """The summary of a run found complete, with ``keys`` (an error naming the file without)."""
    summary = run.summary()
    if summary is None:  # complete a moment ago: removed since
        raise MoelabError(f"{run.summary_path}: no summary; train the run again")
    return summary.require(keys, run.summary_path)


def result_row(point: SweepPoint, run_dir: str, summary: RunSummary, config: Config) -> dict:
    """A results.csv row. Counts, tokens and FLOPs come from the run's summary.json; experts and
    sparsity from its config.yaml; the plan gives only the names and the nominal budget."""
    moe = config.model.moe
    experts, top_k = (moe.num_experts, moe.top_k) if moe else (1, 1)
    six_n, tokens = summary.flops_per_token_6n, summary.tokens
    assert six_n is not None and tokens is not None  # required by _run_summary
    # E and k count the routed experts; S counts the shared ones too (s of E + s experts are
    # used by every token), so a grid's shared_experts keep their point's S.
    shared = moe.num_shared_experts if moe else 0
    return {
        "run": run_dir, "size": point.size, "budget": point.budget_label,
        "seed": config.train.seed,
        "C_budget": "" if point.flops_budget is None else exact_text(point.flops_budget),
        "N_total": summary.total_params, "N_active": summary.active_params,
        "N_non_embedding": summary.non_embedding_params, "D": summary.tokens,
        "C": six_n * tokens, "S": (experts - top_k) / (experts + shared),
        "E": experts, "k": top_k, "d_expert": moe.d_expert if moe else "",
        "shared_experts": shared, "G": config.model.d_ff / moe.d_expert if moe else "",
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


def _splits_vary(rows: list[dict]) -> bool:
    """Whether some run has shared experts or one (size, budget, S) holds two G."""
    granularities: dict[tuple, set] = {}
    for row in rows:
        if row.get("G") not in (None, ""):
            granularities.setdefault((row["size"], row["budget"], row["S"]), set()).add(row["G"])
    return (any(row.get("shared_experts") for row in rows)
            or any(len(values) > 1 for values in granularities.values()))


def write_results_csv(path: Path, rows: list[dict]) -> Path:
    """The rows under ``ResultRow``'s columns: every run's (the machine columns when some run
    recorded its machine), then a zero-shot column per task some run scored, then the finetune
    columns when some run has a complete finetune (none otherwise). A key that is not one of its
    columns is an error."""
    keys = {key for row in rows for key in row}
    split_experts = _splits_vary(rows)
    if not split_experts:
        rows = [{k: v for k, v in row.items() if k not in GRANULARITY_COLUMNS} for row in rows]
    columns = result_columns({task for task in TASK_NAMES if task_column(task) in keys},
                             bool(keys & set(FINETUNE_COLUMNS)), split_experts,
                             machine="numerics" in keys)
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=columns, lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    return atomic_write_text(path, buffer.getvalue())
