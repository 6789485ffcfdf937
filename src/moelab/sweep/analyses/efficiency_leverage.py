"""Efficiency leverage of the sweep's MoE points: dense compute over MoE compute at the MoE's
fitted loss (``moelab.scaling.efficiency_leverage``), in FLOPs and in the runs' measured
seconds, with the 95 % percentile interval over the fit's bootstrap replicates.

Read off the law the report uses (``fit.json``), only when its form has a term in S: a law that
holds dense models at S = 0 as the same law. Chinchilla's law, where S pays only through
compute, would fix the answer by construction, so a sweep whose chosen form has no S term, or
that chose none, has no leverage and the report no section. Written as
``efficiency_leverage.json``.
"""

from __future__ import annotations

from typing import Optional

from moelab.report.analysis import Analysis, Findings
from moelab.scaling import efficiency_leverage
from moelab.scaling.efficiency_leverage import EfficiencyLeverage
from moelab.scaling.laws import get_law
from moelab.sweep.analyses.law_fit import ANALYSIS as LAW_FIT, has_sparsity_term
from moelab.sweep.folder import SweepFolder


def compute(folder: SweepFolder, findings: Findings) -> Optional[EfficiencyLeverage]:
    fit = findings.record(LAW_FIT)
    if folder.results is None or fit is None or not has_sparsity_term(fit):
        return None
    law = get_law(fit.law)
    return efficiency_leverage.compute(folder.rows, law, fit.params, law, fit.params,
                                       fit.replicas, fit.replicas)


def render(record: Optional[EfficiencyLeverage], folder: SweepFolder, findings: Findings) -> str:
    return efficiency_leverage.render(record)


ANALYSIS: Analysis[SweepFolder, EfficiencyLeverage] = Analysis(
    "efficiency_leverage", compute, render, file="efficiency_leverage.json",
    record_type=EfficiencyLeverage)
