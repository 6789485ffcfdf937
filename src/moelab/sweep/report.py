"""The sweep report: ``report.md`` and its figures, the registry of analyses
(``moelab.sweep.analyses``) rendered in order from a ``SweepFolder``.

Every number it prints is in grid.json, results.csv or an analysis's file (read once, into the
folder); it computes nothing but the fitted law's curves in the figures. ``write_sweep_report``
runs the analysis first; ``render_sweep_report`` redraws a folder already analysed.
``load_sweep`` (to render) and ``sweep_inputs`` (to analyse) read a folder at the command
boundary.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from moelab.fileio import atomic_write_text
from moelab.report.analysis import render_all
import moelab.sweep.analyses as registry
from moelab.sweep.analysis import analyse_sweep
from moelab.sweep.folder import SweepFolder, load_sweep_folder, read_json


def load_sweep(out_dir: Path, log: Callable[[str], None] = print) -> SweepFolder:
    """The sweep folder ``out_dir`` to render: each file read once, with analysis.json and the
    analyses' stored records."""
    return load_sweep_folder(out_dir, registry.ANALYSES, log)


def sweep_inputs(out_dir: Path, log: Callable[[str], None] = print) -> SweepFolder:
    """The sweep folder ``out_dir`` to analyse: grid.json, plan.json, results.csv and what the
    runs say, without the analysis files it replaces."""
    return load_sweep_folder(out_dir, None, log)


def write_sweep_report(folder: SweepFolder, *, bootstrap_replicates: int = 200,
                       max_starts: int | None = None,
                       log: Callable[[str], None] = print) -> Path:
    """Analyse ``folder`` (its grid and results), write the analysis files and report.md;
    returns the report's path. ``max_starts`` limits the sparsity law's start grid (None: its
    default seeded subset)."""
    analysed = analyse_sweep(replace(folder, log=log), bootstrap_replicates=bootstrap_replicates,
                             max_starts=max_starts)
    return render_sweep_report(analysed)


def render_sweep_report(folder: SweepFolder) -> Path:
    """report.md and figures/*.png from the folder's records; returns the report's path."""
    if folder.settings is None:  # a folder never analysed: the error names analysis.json
        read_json(folder.root / "analysis.json")
    sections = render_all(registry.ANALYSES, folder, folder.findings)
    return atomic_write_text(folder.root / "report.md", "\n".join(sections))
