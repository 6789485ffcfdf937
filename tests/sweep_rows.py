"""results.csv rows of a planned sweep with losses from a known law (shared by the sweep tests)."""

from __future__ import annotations

import numpy as np

from moelab.accounting import count_params, flops_per_token
from moelab.scaling.laws import SPARSITY
from moelab.sweep.plan import plan_sweep


def synthetic_results(grid, truth: dict, law=SPARSITY) -> list[dict]:
    """results.csv rows for every planned point, losses from a known law (0.1 % noise)."""
    rng = np.random.default_rng(0)
    rows = []
    for point in plan_sweep(grid):
        counts, flops = count_params(point.config.model), flops_per_token(point.config.model)
        tokens = point.config.train.max_tokens
        loss = float(law.predict_loss(truth, N=counts.total, D=tokens, S=point.sparsity)[0])
        rows.append({
            "run": f"runs/{point.run_name}", "size": point.size, "budget": point.budget_label,
            "seed": point.seed,
            "C_budget": f"{point.flops_budget:.6g}", "N_total": counts.total,
            "N_active": counts.active, "N_non_embedding": counts.non_embedding, "D": tokens,
            "C": flops.six_n * tokens, "S": point.sparsity, "E": point.num_experts, "k": 1,
            "d_expert": "", "flops_per_token_6n": flops.six_n, "flops_per_token_kaplan": flops.kaplan,
            "best_val_loss": loss * float(np.exp(rng.normal(0, 0.001))), "final_val_loss": loss,
            "collapse": False,
        })
    return rows


def write_grid_json(folder, grid):
    """grid.json as ``moelab sweep-sparsity`` writes it (the report reads the grid from it);
    returns the folder."""
    import json
    from pathlib import Path

    from moelab.sweep.plan import grid_json_record

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "grid.json").write_text(json.dumps(grid_json_record(grid)))
    return folder


def results_table(rows: list[dict], header: list[str] | None = None):
    """``rows`` read as moelab reads results.csv: as cell text, through its parser. A required
    column the rows leave out (one the code under test does not read) is filled with 1."""
    from pathlib import Path

    from moelab.sweep.results_csv import REQUIRED_COLUMNS, parse_results

    header = list(header or dict.fromkeys(key for row in rows for key in row))
    filler = [name for name in REQUIRED_COLUMNS if name not in header]
    cells = [{**dict.fromkeys(filler, "1"), **{key: str(row.get(key, "")) for key in header}}
             for row in rows]
    return parse_results(Path("results.csv"), header + filler, cells)
