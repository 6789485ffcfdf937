"""Fine-tuning against sparsity, from results.csv's finetune columns (a grid with ``finetune``).

moelab's own question, not paper B's: Abnar et al. 2025 read each sparsity by pretraining loss,
in-context few-shot tasks (their §4, App. D.3) and chain-of-thought prompting (App. E), and have
no fine-tuning study. Whether MoEs fine-tune worse than their pretraining suggests is the
question of Artetxe et al. 2021 (arXiv 2112.10684) and ST-MoE (Zoph et al. 2022, arXiv
2202.08906); here it is asked against S. Every run's final weights are fine-tuned by one recipe
on the same new text, and two numbers are read per run: the fine-tuned val loss on the text's held-out part
(``finetune_val_loss``) and the improvement over the weights before fine-tuning
(``finetune_gain`` = ``finetune_source_val_loss`` - ``finetune_val_loss``). For each:

- **at equal pretraining loss**: y = a + b (L - mean L) + c S over every run by least squares,
  L the run's final pretraining val loss (the weights fine-tuned); c, per unit S, is what
  sparsity does to y beyond what the pretraining loss predicts, with a 95 % t interval;
- **at equal pretraining FLOPs** (FLOPs budgets): per budget and S, the size of lowest mean
  pretraining loss (the IsoFLOP optimum among the sizes tried), its mean over seeds with a
  95 % t interval, and its difference from the dense cell paired by seed (the seeds both
  have), with a 95 % t interval over the pairs. Token budgets are not equal FLOPs across S:
  there each size is compared with its own dense model at equal tokens instead.

When an interval includes 0 nothing separates the sparsities; the analysis then gives the
minimum detectable difference, (t_0.975 + t_0.80) x standard error: the true effect that this
many runs would detect at the 5 % level four times out of five.
"""

from __future__ import annotations

import math

import numpy as np
import scipy.stats

from moelab.sweep.zero_shot import equal_loss_fit, mean_interval

METRICS = ("finetune_val_loss", "finetune_gain")
PRETRAINING_LOSS = "final_val_loss"
"""The pretraining loss a finetune is read against: the final weights' (those fine-tuned)."""


def minimum_detectable(se: float, df: int) -> float:
    """The smallest true effect detected with 80 % power by a two-sided 5 % t test."""
    return float((scipy.stats.t.ppf(0.975, df) + scipy.stats.t.ppf(0.80, df)) * se)


def finetune_analysis(rows: list[dict[str, str]], header: list[str]) -> dict | None:
    """Both metrics at equal pretraining loss and per budget (module docstring); None without
    fine-tuned runs."""
    tuned = [row for row in rows if row.get("finetune_val_loss")]
    if not tuned or any(column not in header for column in METRICS):
        return None
    loss = np.array([float(row[PRETRAINING_LOSS]) for row in tuned])
    sparsity = np.array([float(row["S"]) for row in tuned])
    metrics = {}
    for metric in METRICS:
        values = np.array([float(row[metric]) for row in tuned])
        fit = equal_loss_fit(values, loss, sparsity)
        if fit is not None:
            for coefficient in fit.values():
                coefficient["mdd"] = minimum_detectable(coefficient["se"], coefficient["df"])
        metrics[metric] = {"range": [float(values.min()), float(values.max())],
                           "equal_loss": fit,
                           "separates": bool(fit is not None and _excludes_zero(
                               fit["sparsity"]["ci"]))}
    flops = all(row.get("C_budget") for row in tuned)
    return {"runs": len(tuned), "pretraining_loss": PRETRAINING_LOSS, "metrics": metrics,
            "basis": "flops" if flops else "tokens", "per_budget": _per_budget(tuned, flops)}


def _excludes_zero(ci: list[float] | None) -> bool:
    return ci is not None and (ci[0] > 0 or ci[1] < 0)


def _per_budget(rows: list[dict[str, str]], flops: bool) -> list[dict]:
    """Per budget (and, at token budgets, per size) and S: the lowest-loss size's cell, its
    metrics over seeds and each minus dense, paired by seed."""
    cells: dict[tuple, dict[str, list[dict]]] = {}
    for row in rows:
        group = (row["budget"],) if flops else (row["budget"], row["size"])
        cells.setdefault((group, float(row["S"])), {}).setdefault(row["size"], []).append(row)
    chosen = {}
    for key, by_size in cells.items():
        size, runs = min(by_size.items(), key=lambda item: (
            np.mean([float(r[PRETRAINING_LOSS]) for r in item[1]]), item[0]))
        chosen[key] = (size, {int(r["seed"]): r for r in runs})
    table = []
    for (group, sparsity), (size, by_seed) in sorted(chosen.items(), key=_budget_order):
        entry = {"budget": group[0], "sparsity": sparsity, "size": size, "seeds": len(by_seed),
                 "pretraining_loss": float(np.mean([float(r[PRETRAINING_LOSS])
                                                    for r in by_seed.values()]))}
        dense = chosen.get((group, 0.0))
        for metric in METRICS:
            values = np.array([float(r[metric]) for r in by_seed.values()])
            entry[metric] = {"mean": float(values.mean()), "ci": mean_interval(values)}
            if sparsity > 0 and dense is not None:
                entry[metric]["minus_dense"] = _paired(by_seed, dense[1], metric)
        table.append(entry)
    return table


def _budget_order(item) -> tuple:
    (group, sparsity), _ = item
    budget = group[0]
    try:
        value = float(budget[1:])
    except ValueError:
        value = math.inf
    return (value, budget, *group[1:], sparsity)


def _paired(runs: dict[int, dict], dense: dict[int, dict], metric: str) -> dict:
    """Mean of (sparse - dense) over the seeds both have, with its 95 % t interval and minimum
    detectable difference (no interval with fewer than two pairs)."""
    seeds = sorted(set(runs) & set(dense))
    if not seeds:
        return {"pairs": 0, "value": None, "ci": None, "mdd": None}
    differences = np.array([float(runs[s][metric]) - float(dense[s][metric]) for s in seeds])
    record = {"pairs": len(seeds), "value": float(differences.mean()),
              "ci": mean_interval(differences), "mdd": None}
    if len(seeds) >= 2:
        se = float(differences.std(ddof=1) / math.sqrt(len(seeds)))
        record["mdd"] = minimum_detectable(se, len(seeds) - 1)
    return record
