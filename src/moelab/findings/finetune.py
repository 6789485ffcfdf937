"""Fine-tuning against sparsity: do sparser models fine-tune worse than their pretraining
suggests (Artetxe et al. 2021, arXiv:2112.10684; ST-MoE, Zoph et al. 2022, arXiv:2202.08906)?
Paper B has no fine-tuning study.

cpu-finetune fine-tunes every run by one recipe (chosen on seed 0; seeds 1-3 reported), and its
analysis (``moelab.sweep.analyses.finetune``, stored in finetune.json) pairs each sparse run
with its (size, budget) cell's dense run of the same seed: at equal pretraining loss dy = b·dL +
c·S with errors clustered by (size, seed), and per cell the paired difference; Holm over the
analysis's 26 tests. The words come from ``moelab.stats.verdicts``.
"""

from __future__ import annotations

from dataclasses import dataclass

from moelab.findings.source import ResultsRoot
from moelab.report import markdown_table
from moelab.report.analysis import Analysis, Findings
from moelab.stats.verdicts import Difference, Verdict, difference_verdict

SWEEP = "sweeps/cpu-finetune"
METRICS = {"finetune_val_loss": "fine-tuned loss", "finetune_gain": "gain from fine-tuning"}


@dataclass(frozen=True)
class Estimate:
    value: float
    ci: tuple[float, float]
    p: float
    p_holm: float
    minimum_detectable: float
    verdict: Verdict


@dataclass(frozen=True)
class CellEffect:
    budget: str
    size: str
    sparsity: float
    pretraining: float
    loss: Estimate
    gain: Estimate


@dataclass(frozen=True)
class Finetune:
    pairs: int
    clusters: int
    tests: int
    family: str
    slope_b: dict[str, tuple[float, tuple[float, float]]]
    equal_loss: dict[str, Estimate]
    cells: list[CellEffect]


def _estimate(record: dict, family: str, ahead: str, behind: str) -> Estimate:
    ci = (float(record["ci"][0]), float(record["ci"][1]))
    p_holm = float(record["p_holm"])
    return Estimate(float(record["value"]), ci, float(record["p"]), p_holm, float(record["mdd"]),
                    difference_verdict(Difference(float(record["value"]), ci, p_holm, family),
                                       ahead=ahead, behind=behind))


def compute(results: ResultsRoot, findings: Findings) -> Finetune:
    stored = results.json(f"{SWEEP}/finetune.json")
    family = f"Holm over the {stored['tests']} fine-tuning tests of cpu-finetune"
    slopes, equal = {}, {}
    for metric in METRICS:
        fit = stored["metrics"][metric]["equal_loss"]
        slopes[metric] = (float(fit["loss"]["value"]),
                          (float(fit["loss"]["ci"][0]), float(fit["loss"]["ci"][1])))
        equal[metric] = _estimate(fit["sparsity"], family, "rises with S", "falls with S")
    cells = [CellEffect(c["budget"], c["size"], float(c["sparsity"]),
                        float(c["pretraining_minus_dense"]["value"]),
                        _estimate(c["finetune_val_loss"]["minus_dense"], family,
                                  "sparse higher", "sparse lower"),
                        _estimate(c["finetune_gain"]["minus_dense"], family,
                                  "sparse higher", "sparse lower"))
             for c in stored["cells"]]
    return Finetune(int(stored["pairs"]), int(stored["clusters"]), int(stored["tests"]), family,
                    slopes, equal, cells)


def _cell(e: Estimate) -> list[str]:
    return [f"{e.value:+.3f} [{e.ci[0]:+.3f}, {e.ci[1]:+.3f}]", f"{e.p_holm:.2g}",
            f"**{e.verdict.word}**"]


def render(record: Finetune | None, results: ResultsRoot, findings: Findings) -> str:
    if record is None:
        return ""
    equal = [[METRICS[m], f"{record.slope_b[m][0]:+.3f} [{record.slope_b[m][1][0]:+.3f}, "
              f"{record.slope_b[m][1][1]:+.3f}]", *_cell(e), f"{e.minimum_detectable:.3f}"]
             for m, e in record.equal_loss.items()]
    cells = [[c.budget.lstrip("C"), c.size, f"{c.sparsity:g}", f"{c.pretraining:+.3f}",
              *_cell(c.loss), *_cell(c.gain)] for c in record.cells]
    return ("## Fine-tuning against S (cpu-finetune)\n\n"
            f"At equal pretraining loss: dy = b·dL + c·S over the {record.pairs} sparse-minus-"
            f"dense pairs, errors clustered by (size, seed) ({record.clusters} clusters; "
            f"{record.family}; `{SWEEP}/finetune.json`):\n\n"
            + markdown_table(["metric", "b per nat of pretraining loss", "c per unit S",
                              "p (Holm)", "verdict", "minimum detectable c"], equal, "lrrrlr")
            + "\nAt equal FLOPs and total parameters: each (budget, size, S) cell minus its dense "
              "run, paired by seed (negative: the sparse model lower):\n\n"
            + markdown_table(["budget", "size", "S", "pretraining loss", "fine-tuned loss",
                              "p (Holm)", "verdict", "gain", "p (Holm)", "verdict"], cells,
                             "llrrrrlrrl")
            + "\nThe recipe (100 steps at lr 0.003 on the adaptation set) was chosen on seed 0; "
              "these are seeds 1-3, 98K-173K parameters, one adaptation set.\n")


ANALYSIS: Analysis[ResultsRoot, Finetune] = Analysis("finetune", compute, render)


def summary(record: Finetune) -> str:
    loss = record.equal_loss["finetune_val_loss"]
    lower = sum(c.loss.verdict.word == "sparse lower" for c in record.cells)
    below = sum(c.loss.value < 0 for c in record.cells)
    pretrain_below = sum(c.pretraining < 0 for c in record.cells)
    return (f"Fine-tuning against S (cpu-finetune, seeds 1-3): at equal pretraining loss the "
            f"fine-tuned loss per unit S is {loss.value:+.3f} [{loss.ci[0]:+.3f}, "
            f"{loss.ci[1]:+.3f}], **{loss.verdict.word}**; at equal FLOPs and total size "
            f"{lower} of {len(record.cells)} cells is **sparse lower** after Holm over "
            f"{record.tests} (the sparse mean is lower in {below}, a count of signs, and they "
            f"pretrain lower in {pretrain_below}).")
