"""A sweep folder's files, each problem a one-line error naming the file.

The analysis (``moelab.sweep.analysis``) and the report (``moelab.sweep.report``) read a sweep
through these alone: ``grid.json`` (as moelab sweep-sparsity wrote it, or as a GridRecord),
``results.csv`` and the analysis's JSON files, which are written and read back here as a
``SweepAnalysis``. Neither imports the sweep runner.
"""

from __future__ import annotations

from dataclasses import is_dataclass, replace
from pathlib import Path

from moelab.codec import from_json, to_json
from moelab.errors import ConfigError, MoelabError, short_repr
from moelab.fileio import atomic_write_json, read_json as read_json_file
from moelab.scaling.fit_record import LawFit
from moelab.scaling.table import RESULTS_CSV_COLUMNS, read_csv_rows
from moelab.sweep.grid import with_seeds_key
from moelab.sweep.analysis_records import (
    AnalysisStatus, FinetuneRecord, FixedSizeRecord, FormsRecord, FormTestsRecord, GridRecord,
    IsoflopRecord, OptimaRecord, SweepAnalysis, SweepFit, TaskAccuracy, ThroughputRecord,
)
from moelab.sweep.results_csv import ResultsTable, parse_results

SWEEP_FIT_COLUMNS = RESULTS_CSV_COLUMNS
"""How results.csv's columns map to the law's: N is the total parameter count."""

GRID_FIELDS = {"name": str, "base": str, "sizes": list, "sparsities": list, "top_k": int,
               "mode": str, "flops_budgets": list, "token_budgets": list, "seeds": list,
               "holdout": str}
"""The grid.json keys the analysis and the report read, with their types."""


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


ANALYSIS_FILES = ("analysis.json", "forms.json", "fit.json", "fit_holdout.json", "isoflop.json",
                  "throughput.json", "optima.json", "form_tests.json", "zero_shot.json",
                  "finetune.json", "fixed_size.json")


def write_analysis(out_dir: Path, analysis: SweepAnalysis) -> None:
    """analysis.json and the files beside it; a file the analysis no longer supports (its record
    is None) is removed rather than left stale."""
    records = {
        "forms.json": analysis.forms and to_json(analysis.forms),
        "fit.json": analysis.fit and to_json(analysis.fit),
        "fit_holdout.json": analysis.holdout_fit and to_json(analysis.holdout_fit),
        "isoflop.json": analysis.isoflop and to_json(analysis.isoflop),
        "throughput.json": analysis.throughput and to_json(analysis.throughput),
        "optima.json": analysis.optima and to_json(analysis.optima),
        "form_tests.json": analysis.form_tests and to_json(analysis.form_tests),
        "zero_shot.json": analysis.zero_shot and to_json(analysis.zero_shot),
        "finetune.json": analysis.finetune and to_json(analysis.finetune),
        "fixed_size.json": analysis.fixed_size and to_json(analysis.fixed_size),
    }
    for name, record in records.items():
        path = Path(out_dir) / name
        if record is not None:
            atomic_write_json(path, record)
        elif path.exists():
            path.unlink()
    atomic_write_json(Path(out_dir) / "analysis.json", analysis.settings_dict())


def read_analysis(out_dir: Path) -> SweepAnalysis:
    """analysis.json's settings and status (``with_derived_files`` adds the files beside it)."""
    settings = read_json(Path(out_dir) / "analysis.json")
    return SweepAnalysis(
        bootstrap_replicates=settings["bootstrap_replicates"], max_starts=settings["max_starts"],
        columns=settings["columns"], status=from_json(AnalysisStatus, settings["status"]),
        n_points=settings.get("n_points"), shared_fraction=settings.get("shared_fraction"))


def with_derived_files(out_dir: Path, analysis: SweepAnalysis) -> SweepAnalysis:
    """``analysis`` with the records of the files ``write_analysis`` wrote beside analysis.json
    (None for a file that is not there)."""
    out_dir = Path(out_dir)

    def optional(name: str, parse):
        """The file's record: ``parse`` a typed record's class (read by the codec) or a
        function of the JSON."""
        record = read_optional_json(out_dir / name)
        if record is None:
            return None
        if isinstance(parse, type) and is_dataclass(parse):
            return from_json(parse, record)
        return parse(record)

    return replace(
        analysis, fit=optional("fit.json", SweepFit),
        forms=optional("forms.json", FormsRecord),
        holdout_fit=optional("fit_holdout.json", LawFit),
        throughput=optional("throughput.json", ThroughputRecord),
        optima=optional("optima.json", OptimaRecord),
        isoflop=optional("isoflop.json", IsoflopRecord),
        form_tests=optional("form_tests.json", FormTestsRecord),
        zero_shot=optional("zero_shot.json",
                           lambda data: from_json(dict[str, TaskAccuracy], data)),
        finetune=optional("finetune.json", FinetuneRecord),
        fixed_size=optional("fixed_size.json", lambda data: from_json(FixedSizeRecord, data)))
