"""One analysis of a report, in one place: its record, its computation and its rendering.

A report (a study's or a sweep's) is a registry of analyses rendered in order, after
lm-evaluation-harness's tasks: each analysis is one module that defines its record type (a
dataclass, written and read by ``moelab.codec``), a ``compute`` that builds the record from the
folder (read once, typed, by the command) and the records of the analyses listed before it, and
a ``render`` that turns the record into markdown (drawing its figures into the report's
``figures/``). The module ends with one ``ANALYSIS = Analysis(...)`` and the package's
``ANALYSES`` tuple lists it: adding a question to a report is one new file and one line.

The folder type is the experiment's own (``SweepFolder``, ``StudyFolder``), so this module knows
nothing of runs, studies or sweeps.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Generic, Optional, TypeVar

FolderT = TypeVar("FolderT")
RecordT = TypeVar("RecordT")


class Findings(Mapping[str, Any]):
    """The records computed so far, by analysis name: what a later analysis may read (an
    analysis that found nothing stores None)."""

    def __init__(self, records: Optional[Mapping[str, Any]] = None) -> None:
        self._records: dict[str, Any] = dict(records or {})

    def __getitem__(self, name: str) -> Any:
        return self._records[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._records)

    def __len__(self) -> int:
        return len(self._records)

    def record(self, analysis: Analysis[Any, RecordT]) -> Optional[RecordT]:
        """``analysis``'s record, typed; None when it found nothing or has not run."""
        return self._records.get(analysis.name)

    def with_record(self, name: str, record: Any) -> Findings:
        return Findings({**self._records, name: record})


@dataclass(frozen=True)
class Analysis(Generic[FolderT, RecordT]):
    """One question a report answers.

    ``compute(folder, findings)`` returns the record, or None when the folder's data support no
    answer (the file, if any, is then removed rather than left stale); ``render(record, folder,
    findings)`` returns the report's markdown for it ("" for nothing). ``file`` names the JSON
    file next to the results that stores the record (None: the record is recomputed at every
    render and stored nowhere).
    """

    name: str
    compute: Callable[[FolderT, Findings], Optional[RecordT]]
    render: Callable[[Optional[RecordT], FolderT, Findings], str]
    file: Optional[str] = None
    record_type: Optional[type] = field(default=None, compare=False)


def compute_all(analyses: Sequence[Analysis[FolderT, Any]], folder: FolderT,
                findings: Optional[Findings] = None) -> Findings:
    """Every analysis's record, in registry order (each sees those before it)."""
    findings = findings or Findings()
    for analysis in analyses:
        findings = findings.with_record(analysis.name, analysis.compute(folder, findings))
    return findings


def render_all(analyses: Sequence[Analysis[FolderT, Any]], folder: FolderT,
               findings: Findings) -> list[str]:
    """Each analysis's markdown, in registry order, leaving out the empty ones."""
    sections = (analysis.render(findings.get(analysis.name), folder, findings)
                for analysis in analyses)
    return [section for section in sections if section]


def figure_path(folder_root: Path, name: str) -> Path:
    """Where an analysis draws figure ``name`` (a PNG) for the report in ``folder_root``."""
    return Path(folder_root) / "figures" / name
