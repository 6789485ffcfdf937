"""results.csv as typed rows: the file is parsed once, here, and the analysis and the report
read ``ResultRow`` attributes, never cell text.

Older files lack some columns (seed, k, the throughput columns, the zero-shot and finetune
columns): their fields are None. A cell that is not a number where a number belongs is a
one-line error naming the file, the line and the cell.
"""

from __future__ import annotations

import math
from dataclasses import MISSING, Field, dataclass, field, fields
from pathlib import Path
from typing import Any, Optional

from moelab.errors import MoelabError, short_repr
from moelab.numerics import Machine
from moelab.tasks import TASK_NAMES

def task_column(task: str) -> str:
    """results.csv's column of a zero-shot task's accuracy (runs with ``train.eval_tasks``)."""
    return f"zero_shot_{task}"


ZERO_SHOT = {"columns": "zero_shot"}
"""A field written as one column per task some run scored (``task_column``), after the run's
own columns."""
FINETUNE = {"columns": "finetune"}
"""A field of a complete finetune: the group's columns are written only when some run has one."""
WHOLE = {"read": "count"}
"""A field read as a whole number."""
MACHINE = {"columns": "machine"}
"""A field of the machine record, written after device only when some run has one (older
sweeps' files stay as they were)."""
GRANULARITY = {"columns": "granularity", "read": "count"}
"""A field of the expert splits, written in place (after d_expert) only in a sweep whose runs
split experts differently at one sparsity (``granularity_columns``); a file without them reads
as no shared experts."""


@dataclass(frozen=True, kw_only=True)
class ResultRow:
    """One run of results.csv, and the file's schema: its columns are these fields, in this
    order (``RESULT_COLUMNS``), then the zero-shot and the finetune groups. The writer
    (``moelab.sweep.tabulate``) and the reader (``parse_results``) both follow it, so a new
    column is a new field here (and its value where the writer reads the run)."""

    run: str
    """The run folder, relative to the sweep folder."""
    size: str
    """The grid's size label (s0, s1, ...): one d_model and depth."""
    budget: str
    """The budget's label: ``C1e+18`` (a FLOPs budget) or ``D1228800`` (a token budget)."""
    seed: str = field(metadata={"read": "seed"})
    """The seed column, or the run folder's ``seed<N>`` in files older than the column."""
    C_budget: Optional[float] = None
    """The nominal FLOPs budget the run was planned under; None at a token budget."""
    N_total: float
    """Total parameters, every expert and the embeddings included."""
    N_active: float
    """Parameters one token uses (k of the E routed experts per layer)."""
    N_non_embedding: Optional[float] = None
    """N_total less the token embedding (and an untied head); empty in older files."""
    D: float
    """Tokens trained."""
    C: float
    """Actual compute, 6 N_active D per token (C_budget is the nominal one)."""
    S: float
    """Sparsity (E - k) / E of the routed experts; 0 for dense."""
    E: int = field(metadata=WHOLE)
    """Routed experts per MoE layer; 1 for dense."""
    k: Optional[int] = field(default=None, metadata=WHOLE)
    """Experts each token is routed to; empty in older files."""
    d_expert: Optional[int] = field(default=None, metadata=WHOLE)
    """None for a dense run."""
    shared_experts: Optional[int] = field(default=None, metadata=GRANULARITY)
    """Shared experts of each MoE layer (E and k count the routed ones alone)."""
    G: Optional[float] = field(default=None, metadata={**GRANULARITY, "read": "number"})
    """Granularity d_ff / d_expert (Krajewski et al. 2024); None for a dense run."""
    flops_per_token_6n: Optional[float] = None
    """6 N_active, the FLOPs per token the laws count (summary.json's)."""
    flops_per_token_kaplan: Optional[float] = None
    """Kaplan et al.'s FLOPs per token, attention over the context included (summary.json's;
    flops_per_token_full in older files)."""
    best_val_loss: float
    """The run's lowest validation loss (nats per token): what the laws fit."""
    final_val_loss: Optional[float] = None
    """Validation loss at the last step."""
    collapse: Optional[bool] = field(default=None, metadata={"read": "flag"})
    """Whether the run's routing collapsed (moelab writes True or False)."""
    tokens_per_s: Optional[float] = None
    """This and the next four: how fast the run trained on the machine that ran it (training
    time only, eval and checkpoints excluded), its peak memory and its device; empty for older
    runs."""
    step_time_s: Optional[float] = None
    """Mean seconds per optimizer step (training time only)."""
    tokens_per_step: Optional[float] = None
    """Tokens per optimizer step, batch_size x max_seq_len."""
    peak_memory_bytes: Optional[float] = None
    """Peak allocated GPU memory, or the process's peak resident memory on a CPU."""
    device: str = ""
    """The device the run trained on, e.g. cpu."""
    cpu: str = field(default="", metadata=MACHINE)
    """The CPU model, torch's kernel set, torch and BLAS versions, torch threads and
    train.numerics the run trained with (its summary's machine record; empty for older runs)."""
    cpu_capability: str = field(default="", metadata=MACHINE)
    """torch's CPU kernel set in use (DEFAULT, AVX2, AVX512)."""
    torch_version: str = field(default="", metadata=MACHINE)
    """The torch version the run trained with."""
    blas: str = field(default="", metadata=MACHINE)
    """The BLAS torch was built with, and its version."""
    threads: Optional[int] = field(default=None, metadata={**MACHINE, "read": "count"})
    """torch's intra-op threads."""
    numerics: str = field(default="", metadata=MACHINE)
    """The run's train.numerics: portable or native."""
    zero_shot: dict[str, float] = field(default_factory=dict, metadata=ZERO_SHOT)
    """Accuracy per task the run scored (its zero_shot_<task> cells that are not empty)."""
    finetune_source_val_loss: Optional[float] = field(default=None, metadata=FINETUNE)
    """With a ``finetune`` recipe: the run's final weights scored on the new text's held-out
    part before fine-tuning (its finetune.json), its finetune's final val loss there (its
    summary.json), and the gain, the first minus the second; empty while the finetune is not
    complete."""
    finetune_val_loss: Optional[float] = field(default=None, metadata=FINETUNE)
    """The finetune's final val loss on the new text's held-out part (see
    finetune_source_val_loss)."""
    finetune_gain: Optional[float] = field(default=None, metadata=FINETUNE)
    """finetune_source_val_loss minus finetune_val_loss: what fine-tuning gained."""

    @property
    def machine(self) -> Machine | None:
        """The machine columns as a record; None for a run older than them."""
        if not self.numerics:
            return None
        return Machine(cpu=self.cpu, capability=self.cpu_capability, torch=self.torch_version,
                       blas=self.blas, threads=self.threads or 0, numerics=self.numerics)

    @property
    def point(self) -> tuple[str, str, float, int]:
        """(size, budget, S, E): the grid point the run is one seed of."""
        return (self.size, self.budget, self.S, self.E)


RESULT_COLUMNS = tuple(f.name for f in fields(ResultRow) if "columns" not in f.metadata)
"""The columns of every run, in the file's order."""
MACHINE_COLUMNS = tuple(f.name for f in fields(ResultRow)
                        if f.metadata.get("columns") == MACHINE["columns"])
"""The machine columns, after device, when some run recorded its machine."""
GRANULARITY_COLUMNS = tuple(f.name for f in fields(ResultRow)
                            if f.metadata.get("columns") == GRANULARITY["columns"])
"""The expert-split columns, after d_expert, when the runs' splits vary."""
FINETUNE_COLUMNS = tuple(f.name for f in fields(ResultRow)
                         if f.metadata.get("columns") == FINETUNE["columns"])
"""The columns of a complete finetune, written when some run has one."""
REQUIRED_COLUMNS = tuple(f.name for f in fields(ResultRow)
                         if f.default is MISSING and f.default_factory is MISSING
                         and f.metadata.get("read") != "seed")
"""Columns every results.csv moelab ever wrote has (the fields without a default, but the
seed): a file without one is not a sweep's."""


def result_columns(scored_tasks: set[str], finetuned: bool, split_experts: bool = False,
                   machine: bool = False) -> tuple[str, ...]:
    """results.csv's header: RESULT_COLUMNS (with GRANULARITY_COLUMNS after d_expert when
    ``split_experts``, MACHINE_COLUMNS after device when ``machine``), a zero-shot column per
    task in ``scored_tasks`` (in TASK_NAMES order), and FINETUNE_COLUMNS when some run has a
    finetune."""
    columns = RESULT_COLUMNS
    if split_experts:
        after = columns.index("d_expert") + 1
        columns = columns[:after] + GRANULARITY_COLUMNS + columns[after:]
    if machine:
        after = columns.index("device") + 1
        columns = columns[:after] + MACHINE_COLUMNS + columns[after:]
    return (columns + tuple(task_column(t) for t in TASK_NAMES if t in scored_tasks)
            + (FINETUNE_COLUMNS if finetuned else ()))


@dataclass(frozen=True)
class ResultsTable:
    """results.csv read once: its header, its rows as ``ResultRow`` and the same rows as cell
    text, for the law fit's column map (``moelab fit --columns`` may name any column)."""

    header: list[str]
    rows: list[ResultRow]
    cells: list[dict[str, str]]

    def has_column(self, name: str) -> bool:
        return name in self.header


def parse_results(path: Path, header: list[str], cells: list[dict[str, str]]) -> ResultsTable:
    """The typed rows of results.csv's ``cells`` (``path`` names the file in errors)."""
    missing = [name for name in REQUIRED_COLUMNS if name not in header]
    if missing:
        raise MoelabError(f"{path}: column {short_repr(missing[0])} is missing; found: "
                          f"{', '.join(header)} (a sweep's results.csv, as moelab writes it)")
    rows = [_CellReader(path, line, row).result_row()
            for line, row in enumerate(cells, start=2)]  # line 1 is the header
    return ResultsTable(header, rows, cells)


@dataclass(frozen=True)
class _CellReader:
    """One row's cells, each read as its field's type, an error naming the cell otherwise."""

    path: Path
    line: int
    cells: dict[str, str]

    def text(self, name: str) -> str:
        value = self.cells.get(name)
        return "" if value is None else str(value)

    def number(self, name: str) -> float:
        text = self.text(name)
        try:
            return float(text)
        except ValueError:
            raise MoelabError(f"{self.path} line {self.line}: {name}={short_repr(text)} "
                              "is not a number") from None

    def optional_number(self, name: str) -> float | None:
        return self.number(name) if self.text(name) else None

    def count(self, name: str) -> int:
        value = self.number(name)
        if not math.isfinite(value) or value != int(value):
            raise MoelabError(f"{self.path} line {self.line}: {name}={short_repr(self.text(name))}"
                              " is invalid: expected a whole number")
        return int(value)

    def seed(self) -> str:
        return self.text("seed") or self.text("run").rsplit("/seed", 1)[-1]

    def flag(self, name: str) -> bool | None:
        text = self.text(name)
        if not text:
            return None
        if text not in ("True", "False"):
            raise MoelabError(f"{self.path} line {self.line}: {name}={short_repr(text)} is "
                              "invalid: expected True or False")
        return text == "True"

    def value(self, column: Field) -> Any:
        """The field's cell(s), read as its type says."""
        name, read = column.name, column.metadata.get("read")
        if column.metadata.get("columns") == ZERO_SHOT["columns"]:
            return {task: self.number(task_column(task)) for task in TASK_NAMES
                    if self.text(task_column(task))}
        if read == "seed":
            return self.seed()
        if read == "flag":
            return self.flag(name)
        if read == "count":
            return self.count(name) if self.text(name) or not _optional(column) else None
        if read == "number":
            return self.optional_number(name)
        if column.type == "str":
            return self.text(name)
        return self.optional_number(name) if _optional(column) else self.number(name)

    def result_row(self) -> ResultRow:
        return ResultRow(**{column.name: self.value(column) for column in fields(ResultRow)})


def _optional(column: Field) -> bool:
    """Whether the field may be empty (older files lack the column)."""
    return (column.default is not MISSING or column.default_factory is not MISSING)
