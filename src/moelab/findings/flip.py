"""The matched-total gap at two model sizes: cpu-budgets (591K total parameters, four budgets)
beside the cpu-replication studies (1.54M, two budgets), the rows of
``experiments/flip_table.py`` (``flip_table.json`` names each row's study, size and steps).

Each row's gap is dense_total − MoE best validation loss, paired by seed from the study's own
results (``moelab.study.gaps.compare``). The six rows are one family; the comparison of the two
rows at about the same tokens per parameter was chosen after seeing the table, so it joins the
family as post hoc (Welch's t on the two rows' per-seed gaps) and every row is read at the
enlarged family's Holm p (docs/verdicts.md).
"""

from __future__ import annotations

from dataclasses import dataclass

from moelab.findings.source import ResultsRoot, SeedLosses
from moelab.report import markdown_table
from moelab.report.analysis import Analysis, Findings
from moelab.stats.t_tests import welch_test
from moelab.stats.verdicts import Difference, Family, Verdict, difference_verdict
from moelab.study.gaps import compare

FILE = "flip_table.json"
POST_HOC = "smaller size − larger size, at about the same tokens per parameter (post hoc)"


@dataclass(frozen=True)
class FlipRow:
    study: str
    total_params: int
    tokens: int
    tokens_per_param: float
    steps: int
    n: int
    gap: float
    ci: tuple[float, float]
    p: float
    p_holm: float
    verdict: Verdict


@dataclass(frozen=True)
class Flip:
    rows: list[FlipRow]
    family: str
    post_hoc: FlipRow
    """The Welch comparison of two rows (its gap: the smaller size's minus the larger's)."""


def _per_seed(results: ResultsRoot, study: str, tokens: int) -> tuple[SeedLosses, SeedLosses]:
    stored = results.json(f"studies/{study}.json")
    groups = [g for g in stored.get("budgets") or [] if int(g["tokens"]) == tokens]
    arms = groups[0]["arms"] if groups else stored["arms"]
    moe, dense = ({int(r["seed"]): float(r["best_val_loss"]) for r in arms[arm]["runs"]}
                  for arm in ("moe", "dense_total"))
    return moe, dense


def compute(results: ResultsRoot, findings: Findings) -> Flip:
    stored = results.json(FILE)
    tests, gaps_by_row = {}, {}
    for row in stored["rows"]:
        moe, dense = _per_seed(results, row["study"], int(row["tokens"]))
        key = (row["study"], int(row["tokens"]))
        tests[key] = compare("total", "moe", "dense_total", moe, dense)
        gaps_by_row[key] = [dense[s] - moe[s] for s in sorted(moe)]
    same = stored["same_tokens_per_param"]
    small, large = (next(key for key in tests if key[1] == int(same[side]["tokens"]))
                    for side in ("small", "large"))
    welch = welch_test(gaps_by_row[large], gaps_by_row[small])  # mean(small) − mean(large)
    family = Family("the two-size table (its 6 rows and the post hoc comparison)",
                    {**{f"{k}": t.p_value for k, t in tests.items()}, POST_HOC: welch.p_value})
    adjusted = family.adjusted()
    rows = []
    for row in stored["rows"]:
        key = (row["study"], int(row["tokens"]))
        t = tests[key]
        rows.append(_row(row, t.n_moe, t.gap, (t.ci_low, t.ci_high), t.p_value,
                         adjusted[f"{key}"], family.label, "MoE ahead", "dense ahead"))
    post_hoc = _row({"study": POST_HOC, "total_params": 0, "tokens": 0,
                     "tokens_per_total_param": 0.0, "steps": 0}, welch.n_moe + welch.n_dense,
                    welch.gap, (welch.ci_low, welch.ci_high), welch.p_value, adjusted[POST_HOC],
                    family.label, "smaller MoE lead at the larger size",
                    "larger MoE lead at the larger size")
    return Flip(rows, family.label, post_hoc)


def _row(row: dict, n: int, gap: float, ci: tuple[float, float], p: float, p_holm: float,
         family: str, ahead: str, behind: str) -> FlipRow:
    return FlipRow(row["study"], int(row["total_params"]), int(row["tokens"]),
                   float(row["tokens_per_total_param"]), int(row["steps"]), n, gap, ci, p,
                   p_holm, difference_verdict(Difference(gap, ci, p_holm, family),
                                              ahead=ahead, behind=behind))


def _cells(r: FlipRow) -> list[str]:
    return [f"{r.gap:+.3f}", f"[{r.ci[0]:+.3f}, {r.ci[1]:+.3f}]", f"{r.p:.2g}",
            f"{r.p_holm:.2g}", f"**{r.verdict.word}**"]


def render(flip: Flip | None, results: ResultsRoot, findings: Findings) -> str:
    if flip is None:
        return ""
    rows = [[f"`{r.study}`", f"{r.total_params / 1e3:,.0f}K", f"{r.tokens:,}",
             f"{r.tokens_per_param:.2f}", f"{r.steps:,}", str(r.n), *_cells(r)]
            for r in flip.rows]
    b = flip.post_hoc
    return ("## The matched-total gap at two sizes\n\n"
            f"dense_total − MoE best validation loss, paired by seed (positive: the MoE is "
            f"lower), at each size and budget (`{FILE}` names the rows); {flip.family}:\n\n"
            + markdown_table(["study", "total params", "tokens", "tokens per param", "steps",
                              "n", "gap", "95 % CI", "p", "p (Holm)", "verdict"], rows,
                             "lrrrrrrrrrl")
            + "\nPost hoc (chosen after seeing the table), at about the same tokens per "
              "parameter: the gap at the smaller size minus at the larger (Welch's t on the "
              f"per-seed gaps) {b.gap:+.3f} [{b.ci[0]:+.3f}, {b.ci[1]:+.3f}], p {b.p:.2g}, Holm "
              f"{b.p_holm:.2g}: **{b.verdict.word}**. The larger size also trained fewer steps "
              "(the steps column), with the cpu-replication preset's longer context, so size, "
              "steps and context are confounded in it.\n")


ANALYSIS: Analysis[ResultsRoot, Flip] = Analysis("flip_two_sizes", compute, render)
