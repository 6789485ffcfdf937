"""Granularity and shared experts at one sparsity (cpu-granularity): s2 at S = 0.75, 409.6K
tokens, seeds 0-2, as 4-choose-1 (G = 1), 8-choose-2 (G = 2) and G = 2 with one expert shared
(7-choose-1 routed beside it), at equal total and active parameters up to the router.

The family was fixed by the grid before any loss was read, and is the sweep report's own
(``moelab.sweep.analyses.granularity``, whose computation this page reuses on the committed
results.csv): every cell against the coarsest G without shared experts, and the shared cell
against the same G without; paired t by seed, Holm over the family, verdict words by rule
(``moelab.stats.verdicts``).
"""

from __future__ import annotations

from moelab.findings.source import ResultsRoot
from moelab.report import markdown_table
from moelab.report.analysis import Analysis, Findings
from moelab.sweep.analyses.granularity import GranularityRecord, granularity_record
from moelab.sweep.folder import read_results

SWEEP = "sweeps/cpu-granularity"


def compute(results: ResultsRoot, findings: Findings) -> GranularityRecord:
    table = read_results(results.root / SWEEP)
    record = granularity_record(table.rows) if table is not None else None
    if record is None:
        raise ValueError(f"{SWEEP} has no cells that differ in G or shared experts")
    return record


def _p(value: float) -> str:
    return f"{value:.2g}"


def _widest(record: GranularityRecord, kind: str) -> float:
    """The largest gap, either sign, that the intervals of one kind of test still admit."""
    return max(abs(bound) for test in record.tests if test.kind == kind for bound in test.ci)


def render(record: GranularityRecord | None, results: ResultsRoot, findings: Findings) -> str:
    if record is None:
        return ""
    seeds = sorted({seed for cell in record.cells for seed in cell.losses})
    cells = [[cell.label, cell.size, f"{cell.S:g}", str(len(cell.losses)), f"{cell.mean:.4f}"]
             for cell in record.cells]
    tests = [[f"{test.cell} minus {test.reference}",
              f"{test.difference:+.4f} [{test.ci[0]:+.4f}, {test.ci[1]:+.4f}]", _p(test.p),
              _p(test.p_holm), f"**{test.verdict}**"] for test in record.tests]
    return (f"## Granularity and shared experts ({SWEEP.split('/')[-1]})\n\n"
            f"Best validation loss, mean over seeds {', '.join(map(str, seeds))} "
            f"(`{SWEEP}/results.csv`):\n\n"
            + markdown_table(["cell", "size", "S", "seeds", "loss"], cells, "llrrr")
            + f"\nEach pre-set pair, paired by seed (95 % t interval; {record.family}); a verdict "
              "says lower or higher only where the Holm-adjusted p < 0.05:\n\n"
            + markdown_table(["pair", "difference [95 % CI]", "p", "p (Holm)", "verdict"], tests,
                             "lrrrl")
            + "\nThe intervals admit gaps of up to "
              f"{_widest(record, 'against the reference'):.3f} against G = 1 and "
              f"{_widest(record, 'shared against none'):.3f} for the shared expert against the "
              "same G without it.\n\n"
              "Confounded: G = 2 also moves from one routed expert per token to two (and, with "
              "the shared expert, to one routed beside one always-on), and under raw-probability "
              "weighting (`model.moe.norm_topk_prob=false`) the output's scale is the "
              "probability the chosen experts hold, which top-1 of 4 and top-2 of 8 need not "
              "share. One size, one sparsity, one budget: nothing here says how the gaps move "
              "with scale or tokens.\n")


ANALYSIS: Analysis[ResultsRoot, GranularityRecord] = Analysis("granularity", compute, render)
