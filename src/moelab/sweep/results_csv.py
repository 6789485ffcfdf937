"""results.csv as typed rows: the file is parsed once, here, and the analysis and the report
read ``ResultRow`` attributes, never cell text.

Older files lack some columns (seed, k, the throughput columns, the zero-shot and finetune
columns): their fields are None. A cell that is not a number where a number belongs is a
one-line error naming the file, the line and the cell.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

from moelab.errors import MoelabError, short_repr
from moelab.numerics import Machine
from moelab.tasks import TASK_NAMES

REQUIRED_COLUMNS = ("run", "size", "budget", "N_total", "N_active", "D", "C", "S", "E",
                    "best_val_loss")
"""Columns every results.csv moelab ever wrote has: a file without one is not a sweep's."""


def task_column(task: str) -> str:
    """results.csv's column of a zero-shot task's accuracy (runs with ``train.eval_tasks``)."""
    return f"zero_shot_{task}"


@dataclass(frozen=True)
class ResultRow:
    """One run of results.csv (``moelab.sweep.tabulate`` writes the file from the run folders)."""

    run: str
    """The run folder, relative to the sweep folder."""
    size: str
    budget: str
    """The budget's label: ``C1e+18`` (a FLOPs budget) or ``D1228800`` (a token budget)."""
    seed: str
    """The seed column, or the run folder's ``seed<N>`` in files older than the column."""
    N_total: float
    N_active: float
    D: float
    """Tokens trained."""
    C: float
    """Actual compute, 6 N_active D per token (C_budget is the nominal one)."""
    S: float
    E: int
    best_val_loss: float
    C_budget: float | None = None
    """The nominal FLOPs budget the run was planned under; None at a token budget."""
    N_non_embedding: float | None = None
    k: int | None = None
    final_val_loss: float | None = None
    tokens_per_s: float | None = None
    step_time_s: float | None = None
    tokens_per_step: float | None = None
    peak_memory_bytes: float | None = None
    device: str = ""
    cpu: str = ""
    """The CPU model, torch's kernel set, torch and BLAS versions, torch threads and
    train.numerics the run trained with (its summary's machine record; empty for older runs)."""
    cpu_capability: str = ""
    torch_version: str = ""
    blas: str = ""
    threads: int | None = None
    numerics: str = ""
    zero_shot: dict[str, float] = field(default_factory=dict)
    """Accuracy per task the run scored (its zero_shot_<task> cells that are not empty)."""
    finetune_source_val_loss: float | None = None
    finetune_val_loss: float | None = None
    finetune_gain: float | None = None

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

    def result_row(self) -> ResultRow:
        number, optional = self.number, self.optional_number
        return ResultRow(
            run=self.text("run"), size=self.text("size"), budget=self.text("budget"),
            seed=self.seed(), N_total=number("N_total"), N_active=number("N_active"),
            D=number("D"), C=number("C"), S=number("S"), E=self.count("E"),
            best_val_loss=number("best_val_loss"), C_budget=optional("C_budget"),
            N_non_embedding=optional("N_non_embedding"),
            k=self.count("k") if self.text("k") else None,
            final_val_loss=optional("final_val_loss"), tokens_per_s=optional("tokens_per_s"),
            step_time_s=optional("step_time_s"), tokens_per_step=optional("tokens_per_step"),
            peak_memory_bytes=optional("peak_memory_bytes"), device=self.text("device"),
            cpu=self.text("cpu"), cpu_capability=self.text("cpu_capability"),
            torch_version=self.text("torch_version"), blas=self.text("blas"),
            threads=self.count("threads") if self.text("threads") else None,
            numerics=self.text("numerics"),
            zero_shot={task: number(task_column(task)) for task in TASK_NAMES
                       if self.text(task_column(task))},
            finetune_source_val_loss=optional("finetune_source_val_loss"),
            finetune_val_loss=optional("finetune_val_loss"),
            finetune_gain=optional("finetune_gain"))
