"""The matched-total gap at two model sizes: cpu-budgets (591K total parameters, four budgets)
beside the cpu-replication studies (1.54M, two budgets), the rows of
``experiments/flip_table.py`` (``flip_table.json`` names each row's study, size and steps).

Each row's gap is dense_total − MoE best validation loss, paired by seed from the study's own
results (``moelab.study.gaps.compare``). The comparison of the two rows at about the same
tokens per parameter was chosen after seeing the table (Welch's t on the two rows' per-seed
gaps). Every test here is one of the budget-trend page's family (``budget_family``): the
cpu-budgets rows are the gaps table's own tests, read at the same Holm p; the larger size's rows
and the comparison were added after looking and join it (docs/verdicts.md).

cpu-replication's lr was chosen on the seeds its rows report (``recipe.json``'s
``cpu-replication`` grid), and the sizes differ in more than their parameters: the confounds
(steps, tokens per step, context, depth and width) are read from the studies' own records.
"""

from __future__ import annotations

from dataclasses import dataclass

from moelab.findings.budget_family import (
    FLIP as FILE, TWO_SIZES, page_family, row_key, two_size_tests,
)
from moelab.findings.selection import RECIPE, describe_uses, recipe_seed_uses, seed_ranges
from moelab.findings.source import ResultsRoot
from moelab.report import markdown_table
from moelab.report.analysis import Analysis, Findings
from moelab.stats.verdicts import Difference, Verdict, difference_verdict

POST_HOC = f"{TWO_SIZES} (post hoc)"
REPLICATION_GRID = "cpu-replication"
"""The recipe grid whose rows chose cpu-replication's lr (recipe.json)."""


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
class Shape:
    """What one study of the table trains besides its size, from its own record."""

    study: str
    layers: int
    width: int
    context: int
    tokens_per_step: int
    seeds: list[int]


@dataclass(frozen=True)
class Flip:
    rows: list[FlipRow]
    family: str
    post_hoc: FlipRow
    """The Welch comparison of two rows (its gap: the smaller size's minus the larger's)."""
    shapes: list[Shape]
    replication_choice: str
    """recipe.json's cpu-replication grid: its seed sets and the settings tried on them."""
    grid_rows: dict[str, str]
    """study: the recipe-grid setting whose MoE runs it holds (the same losses), if any."""


def _shape(results: ResultsRoot, study: str) -> Shape:
    stored = results.json(f"studies/{study}.json")
    arms = (stored.get("budgets") or [stored])[0]["arms"]
    model, run = arms["moe"]["model"], arms["moe"]["runs"][0]
    return Shape(study, int(model["n_layers"]), int(model["d_model"]), int(model["max_seq_len"]),
                 int(run["tokens"]) // int(run["steps"]), [int(s) for s in stored["seeds"]])


def _grid_rows(results: ResultsRoot, studies: list[str]) -> dict[str, str]:
    """study: the recipe.json row of REPLICATION_GRID whose MoE losses it holds."""
    found = {}
    for entry in results.json(RECIPE):
        if entry.get("grid") != REPLICATION_GRID or entry.get("kind") != "grid":
            continue
        for study in studies:
            runs = results.json(f"studies/{study}.json").get("arms", {}).get("moe", {})
            losses = [float(r["best_val_loss"]) for r in runs.get("runs", [])]
            if losses and losses == [float(v) for v in entry["arms"]["moe"]["best_val_loss"]]:
                found[study] = str(entry["setting"])
    return found


def compute(results: ResultsRoot, findings: Findings) -> Flip:
    stored = results.json(FILE)
    two = two_size_tests(results)
    family = page_family(results)
    adjusted = family.adjusted()
    rows = []
    for row in stored["rows"]:
        key = (str(row["study"]), int(row["tokens"]))
        t = two.rows[key]
        rows.append(_row(row, t.n_moe, t.gap, (t.ci_low, t.ci_high), t.p_value,
                         adjusted[row_key(key)], family.label, "MoE ahead", "dense ahead"))
    welch = two.welch
    post_hoc = _row({"study": POST_HOC, "total_params": 0, "tokens": 0,
                     "tokens_per_total_param": 0.0, "steps": 0}, welch.n_moe + welch.n_dense,
                    welch.gap, (welch.ci_low, welch.ci_high), welch.p_value,
                    adjusted[TWO_SIZES], family.label, "smaller MoE lead at the larger size",
                    "larger MoE lead at the larger size")
    studies = list(dict.fromkeys(str(row["study"]) for row in stored["rows"]))
    return Flip(rows, family.label, post_hoc, [_shape(results, s) for s in studies],
                describe_uses(recipe_seed_uses(results, REPLICATION_GRID)),
                _grid_rows(results, studies))


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
              f"{b.p_holm:.2g}: **{b.verdict.word}**. " + _confounds(flip))


def _confounds(flip: Flip) -> str:
    shapes = "; ".join(f"`{s.study}` {s.layers} layers of width {s.width}, context {s.context}, "
                       f"{s.tokens_per_step:,} tokens per step" for s in flip.shapes)
    grid_rows = "".join(f" `{study}` holds that grid's `{setting}` runs (the same losses)."
                        for study, setting in flip.grid_rows.items())
    replication = [s for s in flip.shapes if s.study.startswith(REPLICATION_GRID)]
    seeds = sorted({seed for s in replication for seed in s.seeds})
    return ("The larger size also trained fewer steps (the steps column) and differs in its "
            f"shape ({shapes}), so size, steps, tokens per step, context and depth and width "
            "are confounded in it. cpu-replication's lr 0.01 was chosen on its recipe grid "
            f"(`{RECIPE}`: {flip.replication_choice}), on the seeds its rows report "
            f"({seed_ranges(seeds)}), and its compiled 4.13M budget after those runs "
            f"(docs/recipe.md, 'The cpu-replication shape').{grid_rows}\n")


ANALYSIS: Analysis[ResultsRoot, Flip] = Analysis("flip_two_sizes", compute, render)
