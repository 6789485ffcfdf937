"""The setup every arm shares: the base model, data, batch, lr, budgets and seeds."""

from __future__ import annotations

from typing import Optional

from moelab.numerics import machine_bullet
from moelab.report import format_count
from moelab.report.analysis import Analysis, Findings
from moelab.study.analyses.statistics import results_of
from moelab.study.folder import StudyFolder
from moelab.study.results import StudyResults


def compute(folder: StudyFolder, findings: Findings) -> StudyResults:
    return results_of(findings)


def render(results: Optional[StudyResults], folder: StudyFolder, findings: Findings) -> str:
    if results is None:
        return ""
    config = folder.runs[0].config
    model, data, train = config.model, config.data, config.train
    seeds = ", ".join(str(s) for s in results.seeds)
    budgets = ", ".join(g.label or "" for g in results.budgets) or format_count(train.max_tokens)
    lrs = {run.config.train.lr for run in folder.runs}
    lr_text = (f"peak lr {train.lr}" if len(lrs) <= 1
               else "peak lr per arm (see Learning rate per arm)")
    return (
        "## Setup\n\n"
        f"- Shared by every arm: d_model {model.d_model}, {model.n_layers} layers, "
        f"{model.n_heads} heads, context {model.max_seq_len}, vocab "
        f"{model.vocab_size}; data `{data.source}`; batch {train.batch_size} "
        f"sequences; {lr_text}; token budget per run {budgets}.\n"
        f"- Seeds: {seeds} (n = {len(results.seeds)}); a seed sets the weight init and the "
        "data order; the validation windows are the same for every run.\n"
        "- Loss: best validation loss over training, nats/token (bits/byte alongside).\n"
    ) + machine_bullet([run.summary.machine for run in folder.runs])


ANALYSIS: Analysis[StudyFolder, StudyResults] = Analysis("setup", compute, render)
