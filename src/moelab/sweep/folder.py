"""A sweep folder read once, at the command boundary, into a typed ``SweepFolder``: grid.json,
plan.json, results.csv (as ``ResultRow``s), analysis.json (``AnalysisSettings``), what the runs'
tasks.json and the lr selection runs say, and the analyses' stored records (``Findings``).

Every analysis (``moelab.sweep.analyses``) and the report take the folder object and read no
file themselves; each problem with a file is a one-line error naming it. Writing the analyses'
records back is ``store_findings``.
"""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Optional

import numpy as np

from moelab.codec import from_json, to_json
from moelab.errors import ConfigError, MoelabError, short_repr
from moelab.fileio import atomic_write_json, read_json as read_json_file
from moelab.report.analysis import Analysis, Findings, figure_path
from moelab.runs.lr_grid import LrChoice, read_choices
from moelab.scaling.fit_record import OMIT_NONE
from moelab.scaling.table import RESULTS_CSV_COLUMNS, fit_table_from_rows, read_csv_rows
from moelab.sweep.grid import with_seeds_key
from moelab.sweep.results_csv import ResultRow, ResultsTable, parse_results, task_column
from moelab.tasks import TASK_NAMES, read_run_tasks

SWEEP_FIT_COLUMNS = RESULTS_CSV_COLUMNS
"""How results.csv's columns map to the law's: N is the total parameter count."""
LR_SELECTION_KEY = "lr_selection"
"""plan.json's record of an ``--lr-grid`` selection."""


@dataclass
class GridRecord:
    """grid.json as the analysis and the report read it (``read_grid``): the keys they use,
    each with the type it must have (``SweepGrid`` writes the whole grid)."""

    name: str
    base: str
    sizes: list[dict]
    sparsities: list[float]
    top_k: int
    mode: str
    flops_budgets: list[float]
    token_budgets: list[float]
    seeds: list[int]
    holdout: str

    @classmethod
    def from_dict(cls, record: dict) -> GridRecord:
        return cls(**{f.name: record[f.name] for f in dataclasses.fields(cls)})

    def describe(self) -> str:
        budgets = (", ".join(f"{b:.3g} FLOPs" for b in self.flops_budgets)
                   or ", ".join(f"{int(b):,} tokens" for b in self.token_budgets))
        sparsities = ", ".join(f"{s:g}" for s in self.sparsities)
        seeds = ("seed " if len(self.seeds) == 1 else "seeds ") + ", ".join(map(str, self.seeds))
        return (f"{len(self.sizes)} sizes ({', '.join(s['name'] for s in self.sizes)}) x "
                f"{len(self.sparsities)} sparsities ({sparsities}, top-{self.top_k}, "
                f"{self.mode}) x {len(self.flops_budgets or self.token_budgets)} budgets "
                f"({budgets}), {seeds}, base config {self.base!r}")


GRID_FIELDS: dict[str, type] = {name: typing.get_origin(kind) or kind
                                for name, kind in typing.get_type_hints(GridRecord).items()}
"""The grid.json keys the analysis and the report read, with their types (GridRecord's)."""


@dataclass
class AnalysisStatus:
    """What was and was not computed, and why (analysis.json's ``status``); a step that did not
    run has no entry."""

    results: Optional[str] = field(default=None, metadata=OMIT_NONE)
    """Set only when results.csv has no complete runs (and then alone)."""
    law: Optional[str] = field(default=None, metadata=OMIT_NONE)
    """chosen, no_form_identified, one_sparsity or too_few_points."""
    throughput: Optional[str] = field(default=None, metadata=OMIT_NONE)
    """'model fitted', 'no model: <why>' or 'not measured (results.csv has no tokens_per_s)'."""
    optima: Optional[str] = field(default=None, metadata=OMIT_NONE)
    """computed, no_law, one_sparsity or no_sparsity_term."""
    seconds: Optional[str] = field(default=None, metadata=OMIT_NONE)
    """The wall-clock optimum: 'computed' or 'no throughput model: <why>'."""


@dataclass
class AnalysisSettings:
    """analysis.json: the fit settings, what was computed (``status``) and, with results, the
    number of runs and their shared fraction."""

    bootstrap_replicates: int
    """Bootstrap resamples of the law fit (``--bootstrap``)."""
    max_starts: Optional[int]
    """Most starting points of each fit (``--starts``); null: the law's whole start grid."""
    columns: dict[str, str]
    """How results.csv's columns map to the law's (N is the total parameter count)."""
    status: AnalysisStatus = field(default_factory=AnalysisStatus)
    """What was computed, and why not."""
    n_points: Optional[int] = field(default=None, metadata=OMIT_NONE)
    """The runs in results.csv; None when it has none yet."""
    shared_fraction: Optional[float] = field(default=None, metadata={"omit_with": "n_points"})
    """The runs' share of parameters outside the experts; None when every run is dense."""


@dataclass(frozen=True)
class SweepFolder:
    """A sweep folder as the analyses and the report read it, every file read once."""

    root: Path
    grid: GridRecord
    plan: dict
    """plan.json ({} without one)."""
    results: Optional[ResultsTable]
    """results.csv; None while it holds no complete run."""
    settings: Optional[AnalysisSettings] = None
    """analysis.json; set by the analysis before it computes, None in a folder not analysed."""
    findings: Findings = field(default_factory=Findings)
    """Each analysis's record, by analysis name (None where its file is absent)."""
    task_chance: dict[str, float] = field(default_factory=dict)
    """Each zero-shot task's chance accuracy, from the runs' tasks.json."""
    lr_choices: Optional[dict[str, LrChoice]] = None
    """Each cell's lr choice, read from the selection runs (sweeps run with --lr-grid)."""
    log: Callable[[str], None] = field(default=print, compare=False, repr=False)
    """Where the analysis reports its progress."""

    @property
    def rows(self) -> list[ResultRow]:
        """results.csv's runs ([] without results)."""
        return self.results.rows if self.results else []

    @property
    def results_path(self) -> Path:
        return self.root / "results.csv"

    def figure(self, name: str) -> Path:
        """Where an analysis draws its figure ``name``."""
        return figure_path(self.root, name)

    def law_columns(self) -> dict[str, np.ndarray]:
        """results.csv as the law's columns (N, N_active, D, S, loss), through analysis.json's
        column map."""
        assert self.results is not None and self.settings is not None
        return fit_table_from_rows(self.results_path, self.results.header, self.results.cells,
                                   True, self.settings.columns)

    def record(self, analysis: Analysis[Any, Any]) -> Any:
        """``analysis``'s record (None when it found nothing)."""
        return self.findings.record(analysis)


def read_json(path: Path) -> dict:
    """A JSON object from ``path``, or a one-line error naming it."""
    try:
        record = read_json_file(path)
    except FileNotFoundError:
        raise MoelabError(f"cannot read {path}: no such file; {path.parent} is not a sweep "
                          "folder (moelab sweep-sparsity writes one)") from None
    except OSError as exc:
        raise MoelabError(f"cannot read {path}: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        raise MoelabError(f"{path} is not UTF-8 text (byte {exc.start})") from None
    except (ValueError, RecursionError):
        raise MoelabError(f"{path} is not JSON: rerun moelab sweep-sparsity to rewrite it") from None
    if not isinstance(record, dict):
        raise MoelabError(f"{path} is invalid: expected a JSON object")
    return record


def read_optional_json(path: Path) -> dict | None:
    return read_json(path) if path.exists() else None


def read_grid_record(out_dir: Path) -> dict:
    """grid.json as a dict, its fields checked (a hand-edited or torn file is named)."""
    path = Path(out_dir) / "grid.json"
    try:
        record = with_seeds_key(read_json(path))  # older files name one seed
    except ConfigError as exc:
        raise MoelabError(f"{path}: {exc}") from None
    for key, kind in GRID_FIELDS.items():
        value = record.get(key)
        if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
            raise MoelabError(f"{path}: {key}={short_repr(value)} is invalid: expected a {kind.__name__} "
                              "(the grid moelab sweep-sparsity wrote)")
    if not all(isinstance(s, dict) and isinstance(s.get("name"), str) for s in record["sizes"]):
        raise MoelabError(f"{path}: sizes is invalid: expected a list of mappings with a name")
    for key in ("sparsities", "flops_budgets", "token_budgets", "seeds"):
        if not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in record[key]):
            raise MoelabError(f"{path}: {key}={short_repr(record[key])} is invalid: expected numbers")
    return record


def read_grid(out_dir: Path) -> GridRecord:
    """grid.json, its fields checked, as a GridRecord."""
    return GridRecord.from_dict(read_grid_record(out_dir))


def read_results(out_dir: Path) -> ResultsTable | None:
    """results.csv, parsed into typed rows; None when there are no results yet (no file, or a
    header alone: every run failed or none finished). A malformed file is an error naming it."""
    path = Path(out_dir) / "results.csv"
    if not path.exists():
        return None
    try:
        header, cells = read_csv_rows(path)
    except MoelabError as exc:
        if "has no data rows" in str(exc):
            return None
        raise
    return parse_results(path, header, cells)


def read_settings(out_dir: Path) -> AnalysisSettings | None:
    """analysis.json (None without one)."""
    settings = read_optional_json(Path(out_dir) / "analysis.json")
    return None if settings is None else from_json(AnalysisSettings, settings)


def load_sweep_folder(out_dir: Path, analyses: Optional[Sequence[Analysis[SweepFolder, Any]]] = None,
                      log: Callable[[str], None] = print) -> SweepFolder:
    """The folder's files, each read once. With ``analyses``, also analysis.json and their
    stored records (a folder to render); without, only what the analysis reads (a folder to
    analyse: its old analysis files are not read, so a stale or damaged one is replaced)."""
    root = Path(out_dir)
    grid = read_grid(root)
    plan = read_optional_json(root / "plan.json") or {}
    results = read_results(root)
    selection = plan.get(LR_SELECTION_KEY)
    folder = SweepFolder(root=root, grid=grid, plan=plan, results=results,
                         task_chance=_task_chance(root, results),
                         lr_choices=read_choices(root, selection) if selection else None, log=log)
    if analyses is None:
        return folder
    return replace(folder, settings=read_settings(root), findings=read_findings(root, analyses))


def _task_chance(root: Path, results: ResultsTable | None) -> dict[str, float]:
    """Each scored task's chance level, from the first run whose tasks.json names it (read only
    when results.csv has a zero-shot column)."""
    if results is None or not any(results.has_column(task_column(t)) for t in TASK_NAMES):
        return {}
    chance: dict[str, float] = {}
    for row in results.rows:
        for task, entry in read_run_tasks(root / row.run).items():
            chance.setdefault(task, entry["chance"])
    return chance


def read_findings(root: Path, analyses: Sequence[Analysis[SweepFolder, Any]]) -> Findings:
    """The record of each analysis that stores one, read from its file (None where absent)."""
    records: dict[str, Any] = {}
    for analysis in analyses:
        if analysis.file is not None:
            data = read_optional_json(root / analysis.file)
            records[analysis.name] = None if data is None else _decoded(analysis, data)
    return Findings(records)


def stored_form(analysis: Analysis[SweepFolder, Any], record: Any) -> Any:
    """``record`` as its file holds it: what reading it back gives, without the bookkeeping
    fields that are never written."""
    if record is None or analysis.file is None:
        return record
    return _decoded(analysis, to_json(record))


def _decoded(analysis: Analysis[SweepFolder, Any], data: Any) -> Any:
    """``data`` read as ``analysis``'s record type."""
    kind: Any = analysis.record_type
    assert kind is not None, f"{analysis.name} stores {analysis.file} but names no record type"
    return from_json(kind, data)


def store_findings(folder: SweepFolder, analyses: Sequence[Analysis[SweepFolder, Any]],
                   findings: Findings, settings: AnalysisSettings) -> SweepFolder:
    """Each analysis's file and analysis.json; a file the analysis no longer supports (its
    record is None) is removed rather than left stale. Returns the folder holding the records
    as stored."""
    for analysis in analyses:
        if analysis.file is None:
            continue
        path = folder.root / analysis.file
        record = findings.get(analysis.name)
        if record is not None:
            atomic_write_json(path, to_json(record))
        elif path.exists():
            path.unlink()
    atomic_write_json(folder.root / "analysis.json", to_json(settings))
    stored = Findings({analysis.name: stored_form(analysis, findings.get(analysis.name))
                       for analysis in analyses})
    return replace(folder, settings=settings, findings=stored)
