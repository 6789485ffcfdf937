"""Efficiency leverage in a study: each dense arm's loss against compute, read at the MoE's loss.

A study trains dense arms and an MoE at several compute budgets, several seeds each. At each
MoE budget C, the MoE's mean loss L is placed on a dense arm's curve of mean loss against log C
(piecewise linear between the dense budgets, which must fall with C): C_dense is the compute at
which that dense arm reaches L, and EL = C_dense / C (Tian et al. 2025's dense compute over MoE
compute at equal loss, here without any fitted law). A loss outside the dense arm's measured
range has no C_dense inside the budgets: "beyond the budgets" (≥ the largest or ≤ the smallest),
never a number. The interval resamples seeds with replacement within every arm and budget
(the seeds of one arm and budget are the unit; runs that share a budget family would need
their family resampled instead: pass family means) and takes the 95 % percentile interval of
the replicates' EL; replicates that fall beyond the budgets are counted and named.

A self-contained analysis (record, ``compute``, ``render``) for a study report's registry;
numpy only.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Optional

import numpy as np

ArmLosses = Mapping[float, Mapping[int, float]]
"""{compute budget C (FLOPs or seconds): {seed: loss}} of one arm."""


@dataclass
class BudgetLeverage:
    dense_arm: str
    budget: float
    moe_loss: float
    C_dense: Optional[float]
    """None: the MoE's loss lies beyond the dense arm's budgets (``beyond``)."""
    leverage: Optional[float]
    beyond: str = ""
    """"above the largest budget" / "below the smallest budget" when C_dense is None."""
    ci: list[float] = field(default_factory=list)
    replicates_beyond: int = 0
    """Bootstrap replicates whose MoE loss fell outside the dense range (left out of ci)."""


@dataclass
class StudyLeverage:
    moe_arm: str
    unit: str
    """What the budgets count: "FLOPs" or "seconds"."""
    replicates: int
    rows: list[BudgetLeverage]


def dense_compute_at(budgets: np.ndarray, losses: np.ndarray, loss: float
                     ) -> tuple[Optional[float], str]:
    """The compute at which the piecewise-linear (in log C) dense curve reaches ``loss``, or
    None and which side it lies beyond."""
    if loss > losses[0]:
        return None, "below the smallest budget"
    if loss < losses[-1]:
        return None, "above the largest budget"
    # losses fall with C: interpolate log C against the reversed (rising) losses
    log_c = np.interp(loss, losses[::-1], np.log(budgets)[::-1])
    return float(math.exp(log_c)), ""


def _means(arm: ArmLosses) -> tuple[np.ndarray, np.ndarray]:
    budgets = np.array(sorted(arm))
    return budgets, np.array([np.mean(list(arm[b].values())) for b in budgets])


def _resampled(arm: ArmLosses, rng: np.random.Generator) -> dict[float, dict[int, float]]:
    out = {}
    for budget, by_seed in arm.items():
        values = np.array(list(by_seed.values()))
        out[budget] = dict(enumerate(rng.choice(values, size=len(values), replace=True)))
    return out


def compute(dense_arms: Mapping[str, ArmLosses], moe_arm: str, moe: ArmLosses,
            unit: str = "FLOPs", replicates: int = 2000, seed: int = 0
            ) -> Optional[StudyLeverage]:
    """EL of the MoE at each of its budgets against each dense arm; None without a dense arm
    of two or more budgets whose mean loss falls with compute."""
    usable = {}
    for name, arm in dense_arms.items():
        budgets, losses = _means(arm)
        if len(budgets) >= 2 and np.all(np.diff(losses) < 0):
            usable[name] = arm
    if not usable or not moe:
        return None
    rng = np.random.default_rng(seed)
    record = StudyLeverage(moe_arm=moe_arm, unit=unit, replicates=replicates, rows=[])
    for name, arm in usable.items():
        budgets, losses = _means(arm)
        for budget in sorted(moe):
            loss = float(np.mean(list(moe[budget].values())))
            c_dense, beyond = dense_compute_at(budgets, losses, loss)
            row = BudgetLeverage(dense_arm=name, budget=float(budget), moe_loss=loss,
                                 C_dense=c_dense, beyond=beyond,
                                 leverage=None if c_dense is None else c_dense / budget)
            values = []
            for _ in range(replicates):
                d_budgets, d_losses = _means(_resampled(arm, rng))
                m_loss = float(np.mean(rng.choice(list(moe[budget].values()),
                                                  size=len(moe[budget]), replace=True)))
                if np.any(np.diff(d_losses) >= 0):
                    row.replicates_beyond += 1  # a resampled curve that does not fall
                    continue
                c, _ = dense_compute_at(d_budgets, d_losses, m_loss)
                if c is None:
                    row.replicates_beyond += 1
                else:
                    values.append(c / budget)
            if values:
                row.ci = [float(np.percentile(values, 2.5)), float(np.percentile(values, 97.5))]
            record.rows.append(row)
    return record


def render(record: Optional[StudyLeverage]) -> str:
    """The markdown section ("" for none)."""
    if record is None:
        return ""
    lines = []
    for row in record.rows:
        if row.leverage is None:
            value = f"beyond the dense budgets ({row.beyond})"
        else:
            value = f"{row.leverage:.3g}"
            if row.ci:
                value += f" [{row.ci[0]:.3g}, {row.ci[1]:.3g}]"
        note = (f"{row.replicates_beyond} of {record.replicates}" if row.replicates_beyond
                else "0")
        lines.append(f"| {row.dense_arm} | {row.budget:.3g} | {row.moe_loss:.4f} | "
                     f"{'–' if row.C_dense is None else f'{row.C_dense:.3g}'} | {value} | {note} |")
    return ("## Efficiency leverage\n\n"
            f"Dense compute over MoE compute at the MoE's loss ({record.unit}): each dense arm's "
            "mean loss against log compute, piecewise linear between its budgets, read at the "
            f"{record.moe_arm} arm's mean loss at each of its budgets. 95 % percentile interval "
            f"over {record.replicates} resamples of the seeds within every arm and budget; "
            "replicates whose loss falls outside the dense budgets are left out and counted. "
            "A loss beyond the dense budgets is reported as such, not as a number.\n\n"
            f"| dense arm | MoE budget | MoE loss | C_dense | EL [95 % CI] | replicates beyond |\n"
            "|---|---:|---:|---:|---:|---:|\n" + "\n".join(lines) + "\n")
