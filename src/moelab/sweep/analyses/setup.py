"""The report's title and its Setup section: the grid and how every number below counts N, D,
C and the loss (from grid.json alone)."""

from __future__ import annotations

from moelab.numerics import machine_bullet
from moelab.report.analysis import Analysis, Findings
from moelab.sweep.analyses.common import no_record
from moelab.sweep.folder import SweepFolder


def render(record: None, folder: SweepFolder, findings: Findings) -> str:
    grid = folder.grid
    return "\n".join([
        f"# Sparsity sweep `{grid.name}`\n",
        "## Setup\n\n"
        f"- Grid: {grid.describe()}.\n"
        "- S = (E - k) / E; S = 0 is the dense model. N is the *total* parameter count, "
        "N_active the parameters one token uses; D is the tokens trained; C = 6 N_active D "
        "is the compute a run actually spent, C_budget the budget it was planned for. "
        "Every budget, IsoFLOP fit and S* below counts FLOPs this way (moelab's `six_n` "
        "count, the budget convention of Abnar et al. 2025), not with the attention "
        "FLOPs over the context.\n"
        "- Loss: best validation loss (nats/token) over training, on the same validation "
        "windows for every run. Every number below comes from `results.csv`, whose rows come "
        "from the runs' `summary.json` and `config.yaml`, or from the analysis files next to "
        "it (`analysis.json` lists what was computed).\n"
        + machine_bullet([row.machine for row in folder.rows] if folder.results else [])])


ANALYSIS: Analysis[SweepFolder, None] = Analysis("setup", no_record, render)
