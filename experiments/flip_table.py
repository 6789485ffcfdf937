"""The matched-total gap against tokens per parameter and against steps, at two model sizes, from
studies already stored (no training):

    .venv/bin/python experiments/flip_table.py      # prints the table, writes flip_table.json

- 591K total parameters: `cpu-budgets` (4 token budgets, seeds 0-2);
- 1.54M total parameters: `cpu-replication`, eager at 2.95M tokens and compiled at 4.13M (seeds
  0-2; the same recipe, lr 0.01, warmup 0.5, untied head; compiling changes rounding only).

Each row is the paired gap dense_total - moe over the seeds (positive: the MoE is ahead), with
its t interval and p, and Holm's adjustment over the rows. The two sizes meet at about 2.7-2.8
tokens per total parameter; there the gaps are compared by Welch's t on the per-seed
differences (the sizes' runs are independent). Writes experiments/results/flip_table.json.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
from scipy import stats

ROOT = Path(__file__).resolve().parents[1]
STUDIES = ROOT / "experiments" / "results" / "studies"
OUT = ROOT / "experiments" / "results" / "flip_table.json"
if str(ROOT / "src") not in sys.path:  # run as a script from a checkout
    sys.path.insert(0, str(ROOT / "src"))

from moelab.fileio import atomic_write_json  # noqa: E402
from moelab.stats.multiple import holm  # noqa: E402


def total_gap_row(study: str, budget: dict | None = None) -> dict:
    """One (size, budget): the matched-total paired gap recomputed from the per-seed losses."""
    record = json.loads((STUDIES / f"{study}.json").read_text("utf-8"))
    arms = (budget or record)["arms"]
    moe = {run["seed"]: run for run in arms["moe"]["runs"]}
    dense = {run["seed"]: run for run in arms["dense_total"]["runs"]}
    seeds = sorted(set(moe) & set(dense))
    differences = np.array([dense[s]["best_val_loss"] - moe[s]["best_val_loss"] for s in seeds])
    n = len(differences)
    mean, se = differences.mean(), differences.std(ddof=1) / np.sqrt(n)
    half = stats.t.ppf(0.975, n - 1) * se
    tokens = moe[seeds[0]]["tokens"]
    total = arms["moe"]["total_params"]
    return {"study": study, "total_params": total, "tokens": tokens,
            "tokens_per_total_param": tokens / total, "steps": moe[seeds[0]]["steps"],
            "seeds": seeds, "differences": differences.tolist(), "gap": mean,
            "ci_low": mean - half, "ci_high": mean + half,
            "p_value": float(2 * stats.t.sf(abs(mean / se), n - 1))}


def main() -> None:
    budgets = json.loads((STUDIES / "cpu-budgets.json").read_text("utf-8"))["budgets"]
    rows = [total_gap_row("cpu-budgets", budget) for budget in budgets]
    rows += [total_gap_row("cpu-replication-lr0.01"), total_gap_row("cpu-replication-compiled")]
    for row, adjusted in zip(rows, holm([row["p_value"] for row in rows])):
        row["p_holm"] = adjusted
    print(f"{'total':>8} {'tokens':>8} {'tok/param':>9} {'steps':>6}  gap dense_total - moe")
    for row in rows:
        print(f"{row['total_params']:>8,} {row['tokens']:>8,} {row['tokens_per_total_param']:9.2f} "
              f"{row['steps']:>6}  {row['gap']:+.4f} [{row['ci_low']:+.4f}, {row['ci_high']:+.4f}]"
              f" p {row['p_value']:.2g} (Holm {row['p_holm']:.2g}, {len(rows)} tests)")

    # The two sizes at about the same tokens per parameter: 591K at 1.64M tokens, 1.54M at 4.13M.
    small = min(rows[:4], key=lambda r: abs(r["tokens_per_total_param"] - 2.7))
    large = rows[-1]
    welch = stats.ttest_ind(small["differences"], large["differences"], equal_var=False)
    ci = welch.confidence_interval(0.95)
    comparison = {"small": {k: small[k] for k in ("total_params", "tokens", "gap")},
                  "large": {k: large[k] for k in ("total_params", "tokens", "gap")},
                  "difference": small["gap"] - large["gap"], "ci_low": float(ci.low),
                  "ci_high": float(ci.high), "p_value": float(welch.pvalue),
                  "df": float(welch.df)}
    print(f"at ~2.7 tokens per parameter: {small['total_params']:,} {small['gap']:+.4f}, "
          f"{large['total_params']:,} {large['gap']:+.4f}: difference "
          f"{comparison['difference']:+.4f} [{ci.low:+.4f}, {ci.high:+.4f}], Welch p "
          f"{welch.pvalue:.2g} (df {welch.df:.1f})")
    atomic_write_json(OUT, {"command": "experiments/flip_table.py", "rows": rows,
                            "multiple_testing": f"Holm over {len(rows)} tests",
                            "same_tokens_per_param": comparison})
    print(f"wrote {OUT.relative_to(ROOT)}")


if __name__ == "__main__":
    from moelab.cli import run_command

    raise SystemExit(run_command(main, "flip_table"))
