"""Sparsity sweeps: plan model size x sparsity x budget, train each point, tabulate the results.

The grid (its keys, presets and checks) is ``moelab.scaling.grid.SweepGrid``: a base config, the
model sizes, the sparsities at a fixed top_k and the FLOPs or token budgets.

Running goes through ``moelab.runs`` with any launcher: finished runs (their summary.json says
complete) are skipped, torn ones resume from their checkpoint. ``results.csv``
is rebuilt from the run folders alone (each row's numbers from that run's summary.json and
config.yaml, with its actual compute C next to the nominal C_budget); ``report.md`` from
results.csv alone.
"""

from __future__ import annotations

import csv
import io
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional

from moelab.accounting import count_params, flops_per_token
from moelab.config import Config, load_config, override
from moelab.errors import ConfigError, MoelabError
from moelab.fileio import atomic_write_json, atomic_write_text, remove_stale_temporaries
from moelab.scaling.fitting import check_num_starts
from moelab.scaling.grid import GRID_KEYS, SweepGrid, experts_for, with_seeds_key
from moelab.scaling.isoflop import compute_deviation
from moelab.train.summary import RunSummary


# --------------------------------------------------------------------------------------------
# Planning
# --------------------------------------------------------------------------------------------


@dataclass
class SweepPoint:
    size: str
    sparsity: float
    num_experts: int
    top_k: int
    budget_label: str
    flops_budget: Optional[float]
    config: Config

    @property
    def arm(self) -> str:
        """The point's name without its seed: ``C3e+13/s1/S0.750-E4k1``."""
        return f"{self.budget_label}/{self.size}/S{self.sparsity:.3f}-E{self.num_experts}k{self.top_k}"

    @property
    def seed(self) -> int:
        return self.config.train.seed

    @property
    def run_name(self) -> str:
        """The point's run: ``C3e+13/s1/S0.750-E4k1/seed0`` (its folder under runs/)."""
        return f"{self.arm}/seed{self.seed}"

    def describe(self) -> str:
        counts = count_params(self.config.model)
        tokens = self.config.train.max_tokens
        text = f"{self.run_name}: N_total={counts.total:,} N_active={counts.active:,} D={tokens:,}"
        if self.flops_budget is not None:
            flops = flops_per_token(self.config.model).six_n * tokens
            text += f" C={flops:.4g} ({compute_deviation(flops, self.flops_budget):+.1%} vs budget)"
        return text


def model_overrides(size: dict, sparsity: float, top_k: int, mode: str) -> list[str]:
    """The dotted overrides that turn the base config into this size at this sparsity."""
    changes = [f"model.{key}={value}" for key, value in size.items() if key != "name"]
    if sparsity == 0.0:
        return changes + ["model.moe=null"]
    experts = experts_for(sparsity, top_k)
    d_ff = int(size.get("d_ff", 0)) or None
    if d_ff is None:
        raise ConfigError(f"sweep size {size['name']!r} needs d_ff (the dense FFN width)")
    divisor = experts if mode == "fixed_total" else top_k
    if d_ff % divisor:
        raise ConfigError(
            f"sweep size {size['name']!r}: d_ff={d_ff} is invalid for {mode} with E={experts}, "
            f"k={top_k}: must be divisible by {divisor}"
        )
    return changes + [f"model.moe.num_experts={experts}", f"model.moe.top_k={top_k}",
                      f"model.moe.d_expert={d_ff // divisor}"]


def tokens_for_flops(config: Config, flops: float) -> int:
    """D = C / (6 N_active), rounded down to whole optimizer steps (at least one).

    So a run spends up to one step less than the budget, or more when one step alone exceeds
    it; results.csv keeps the actual C and the report says how far it is from the budget.
    """
    tokens_per_step = config.train.batch_size * config.model.max_seq_len
    steps = max(1, int(flops / flops_per_token(config.model).six_n // tokens_per_step))
    return steps * tokens_per_step


def plan_sweep(grid: SweepGrid) -> list[SweepPoint]:
    """Every seed x budget x size x sparsity: the first seed's whole grid first, each grid
    smallest budget first (a stopped sweep is already useful)."""
    points = []
    budgets = [("flops", b) for b in sorted(grid.flops_budgets)] + [
        ("tokens", b) for b in sorted(grid.token_budgets)]
    for seed in grid.seeds:
        base = load_config(grid.base, list(grid.overrides) + [f"train.seed={seed}"])
        for kind, budget in budgets:
            for size in grid.sizes:
                for sparsity in grid.sparsities:
                    points.append(_plan_point(base, grid, size, float(sparsity), kind, budget))
    _check_distinct_folders(points)
    return points


def _plan_point(base: Config, grid: SweepGrid, size: dict, sparsity: float, kind: str,
                budget: float) -> SweepPoint:
    config = override(base, model_overrides(size, sparsity, grid.top_k, grid.mode))
    if kind == "flops":
        tokens, label = tokens_for_flops(config, budget), f"C{exact_text(budget)}"
    else:
        tokens, label = int(budget), f"D{int(budget)}"
    config = override(config, [f"train.max_tokens={tokens}"])
    experts = config.model.moe.num_experts if config.model.moe else 1
    return SweepPoint(size["name"], sparsity, experts, grid.top_k, label,
                      float(budget) if kind == "flops" else None, config)


def exact_text(value: float) -> str:
    """The shortest ``1.2e+11``-style text that reads back as the same float: budget labels
    must be lossless, or two budgets would share run folders (and an IsoFLOP curve)."""
    for digits in range(16):
        text = f"{value:.{digits}e}"
        if float(text) == value:
            return text
    return f"{value:.16e}"  # 17 significant digits read back as any float


def _check_distinct_folders(points: list[SweepPoint]) -> None:
    seen = set()
    for point in points:
        if point.run_name in seen:
            raise ConfigError(
                f"sweep point {point.run_name} is planned twice: size names must be distinct and "
                f"sparsities and budgets must not repeat"
            )
        seen.add(point.run_name)


# --------------------------------------------------------------------------------------------
# Running and tabulating
# --------------------------------------------------------------------------------------------

RESULT_COLUMNS = (
    "run", "size", "budget", "seed", "C_budget", "N_total", "N_active", "N_non_embedding", "D",
    "C", "S", "E", "k", "d_expert", "flops_per_token_6n", "flops_per_token_full", "best_val_loss",
    "final_val_loss", "collapse", "tokens_per_s", "step_time_s", "tokens_per_step",
    "peak_memory_bytes", "device",
)
"""The last five: how fast the run trained on the machine that ran it (training time only,
eval and checkpoints excluded), its peak memory and its device; empty for older runs."""


def _run_specs(points: list[SweepPoint]):
    """One run per point; under ``train.schedule: wsd`` the budgets of a size, sparsity and
    seed are one budget family (``moelab.runs.families``)."""
    from moelab.runs import RunSpec
    from moelab.runs.families import as_budget_family

    specs = [RunSpec(point.run_name, point.config,
                     {"size": point.size, "sparsity": point.sparsity, "budget": point.budget_label,
                      "seed": point.seed})
             for point in points]
    shapes = [(point.size, point.sparsity, point.seed) for point in points]
    planned = {spec.name: spec for shape in dict.fromkeys(shapes)
               for spec in as_budget_family([s for s, other in zip(specs, shapes) if other == shape])}
    return [planned[spec.name] for spec in specs]


def plan_sweep_folder(grid: SweepGrid, out_dir: Path, fit_settings: dict | None = None
                      ) -> tuple[list[SweepPoint], list]:
    """Plan the grid and write its grid.json, plan.json and run configs into ``out_dir``.
    ``fit_settings`` (``bootstrap_replicates``, ``max_starts``) are kept in plan.json, so that
    ``moelab report DIR`` fits as the sweep did."""
    points = plan_sweep(grid)
    specs = _run_specs(points)
    _write_plan(Path(out_dir), grid, points, specs, fit_settings or {})
    return points, specs


def recorded_fit_settings(out_dir: Path) -> dict:
    """The fit settings a sweep recorded in plan.json (the defaults when it recorded none)."""
    try:
        plan = json.loads((Path(out_dir) / "plan.json").read_text("utf-8"))
    except (OSError, ValueError):
        return {}
    settings = plan.get("fit") if isinstance(plan, dict) else None
    return {key: settings[key] for key in ("bootstrap_replicates", "max_starts")
            if isinstance(settings, dict) and key in settings}


def run_sweep(grid: SweepGrid, out_dir: Path, *, bootstrap_replicates: int = 200,
              max_starts: int | None = None, train_fn: Optional[Callable[..., dict]] = None,
              log: Callable[[str], None] = print, jobs: int = 1, launcher=None) -> Path:
    """Plan, train what is missing (with ``launcher``; default: this machine, ``jobs`` at a
    time), write results.csv, fit, and write report.md; returns its path. ``max_starts``
    limits the law fit's start grid (``--starts``)."""
    from moelab.runs import execute_plan, is_complete
    from moelab.runs.data import prepare_shared_data
    from moelab.runs.launchers.local import LocalLauncher

    # The fit runs after all the training: check its settings first.
    if bootstrap_replicates < 0:
        raise MoelabError(f"--bootstrap {bootstrap_replicates} is invalid: must be >= 0")
    check_num_starts(max_starts)
    out_dir = Path(out_dir)
    points, specs = plan_sweep_folder(grid, out_dir, {"bootstrap_replicates": bootstrap_replicates,
                                                      "max_starts": max_starts})
    if launcher is None:
        launcher = LocalLauncher(jobs=jobs, train_fn=train_fn)
    if any(not is_complete(out_dir / spec.run_dir) for spec in specs):
        prepare_shared_data(points[0].config, log)
    execute_plan(out_dir, specs, launcher, log)
    return write_sweep_outputs(out_dir, grid, points, bootstrap_replicates=bootstrap_replicates,
                               max_starts=max_starts, log=log)


def write_sweep_outputs(out_dir: Path, grid: SweepGrid, points: list[SweepPoint], *,
                        bootstrap_replicates: int = 200, max_starts: int | None = None,
                        log: Callable[[str], None] = print) -> Path:
    """results.csv from the run folders, then the fit and report.md; returns the report's path."""
    from moelab.scaling.sweep_report import write_sweep_report

    rows = collect_results(out_dir, points)
    write_results_csv(out_dir / "results.csv", rows)
    if len(rows) < len(points):
        log(f"{len(points) - len(rows)} of {len(points)} runs are not complete: see failures.json")
    return write_sweep_report(out_dir, bootstrap_replicates=bootstrap_replicates,
                              max_starts=max_starts, log=log)


def _write_plan(out_dir: Path, grid: SweepGrid, points: list[SweepPoint], specs,
                fit_settings: dict) -> None:
    """grid.json + plan.json; refuse to mix another grid's runs into this folder."""
    from moelab.config import to_dict
    from moelab.runs import write_run_configs
    from moelab.runs.spec import branch_record

    grid_record = {key: getattr(grid, key) for key in GRID_KEYS}
    grid_path = out_dir / "grid.json"
    if grid_path.is_file():
        old = with_seeds_key(json.loads(grid_path.read_text("utf-8")))
        if not _same_grid_or_more_seeds(old, json.loads(json.dumps(grid_record))):
            raise MoelabError(f"{out_dir} already holds another sweep grid ({old.get('name')!r}): "
                              "use another --out folder")
    remove_stale_temporaries(out_dir, out_dir / "configs", out_dir / "figures")
    atomic_write_json(grid_path, grid_record)
    write_run_configs(out_dir, specs)
    atomic_write_json(out_dir / "plan.json", {
        "kind": "sweep-sparsity",
        **({"fit": fit_settings} if fit_settings else {}),
        "runs": [{"name": spec.name, "run_dir": str(spec.run_dir), "config": str(spec.config_path),
                  "size": point.size, "sparsity": point.sparsity, "budget": point.budget_label,
                  "seed": point.seed,
                  "model": to_dict(point.config.model), **branch_record(spec)}
                 for point, spec in zip(points, specs)],
    })


def _same_grid_or_more_seeds(old: dict, new: dict) -> bool:
    """A folder's runs stay valid for its grid with seeds added: a run depends only on its
    config and seed."""
    return ({**old, "seeds": None} == {**new, "seeds": None}
            and set(old.get("seeds", [])) <= set(new["seeds"]))


def collect_results(out_dir: Path, points: list[SweepPoint]) -> list[dict]:
    """One row per complete run, from its summary.json and config.yaml (nothing else)."""
    from moelab.runs import is_complete
    from moelab.train.run_folder import RunFolder

    rows = []
    for point, spec in zip(points, _run_specs(points)):
        run = RunFolder(out_dir / spec.run_dir)
        if is_complete(run.path):
            row = result_row(point, str(spec.run_dir), _run_summary(run), run.read_config())
            rows.append({**row, **_task_fields(run.path)})
    return rows


def task_column(task: str) -> str:
    """results.csv's column of a zero-shot task's accuracy (runs with ``train.eval_tasks``)."""
    return f"zero_shot_{task}"


def _task_fields(run_dir: Path) -> dict:
    """The accuracy of each task the run scored into its tasks.json as it ended."""
    from moelab.tasks import read_run_tasks

    return {task_column(task): entry["accuracy"] for task, entry in read_run_tasks(run_dir).items()}


SUMMARY_KEYS = ("total_params", "active_params", "non_embedding_params", "tokens",
                "flops_per_token_6n", "flops_per_token_full", "best_val_loss", "final_val_loss")


def _run_summary(run) -> RunSummary:
    return run.summary().require(SUMMARY_KEYS, run.summary_path)


def result_row(point: SweepPoint, run_dir: str, summary: RunSummary, config: Config) -> dict:
    """A results.csv row. Counts, tokens and FLOPs come from the run's summary.json; experts and
    sparsity from its config.yaml; the plan gives only the names and the nominal budget."""
    moe = config.model.moe
    experts, top_k = (moe.num_experts, moe.top_k) if moe else (1, 1)
    return {
        "run": run_dir, "size": point.size, "budget": point.budget_label,
        "seed": config.train.seed, "C_budget": "" if point.flops_budget is None else exact_text(point.flops_budget),
        "N_total": summary.total_params, "N_active": summary.active_params,
        "N_non_embedding": summary.non_embedding_params, "D": summary.tokens,
        "C": summary.flops_per_token_6n * summary.tokens, "S": (experts - top_k) / experts,
        "E": experts, "k": top_k, "d_expert": moe.d_expert if moe else "",
        "flops_per_token_6n": summary.flops_per_token_6n,
        "flops_per_token_full": summary.flops_per_token_full,
        "best_val_loss": summary.best_val_loss, "final_val_loss": summary.final_val_loss,
        "collapse": bool(summary.collapse),
        **_throughput_fields(summary),
    }


def _throughput_fields(summary: RunSummary) -> dict:
    """tokens/s, step time, peak memory and device ('' where an older run lacks them)."""
    fields = {"tokens_per_s": summary.tokens_per_s, "step_time_s": summary.step_time_s,
              "tokens_per_step": summary.tokens_per_step,
              "peak_memory_bytes": summary.peak_memory_bytes, "device": summary.device}
    return {key: "" if value is None else value for key, value in fields.items()}


def write_results_csv(path: Path, rows: list[dict]) -> Path:
    """RESULT_COLUMNS, then a zero-shot column per task some run scored (none otherwise)."""
    from moelab.tasks import TASK_NAMES

    scored = {key for row in rows for key in row if key not in RESULT_COLUMNS}
    columns = RESULT_COLUMNS + tuple(task_column(t) for t in TASK_NAMES if task_column(t) in scored)
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=columns, lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    return atomic_write_text(path, buffer.getvalue())
