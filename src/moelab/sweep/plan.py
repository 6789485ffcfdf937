"""Planning a sparsity sweep: every seed x budget x size x sparsity of a grid as a run config,
and the sweep folder's grid.json, plan.json and configs/ that every launcher trains from.

The grid (its keys, presets and checks) is ``moelab.sweep.grid.SweepGrid``: a base config, the
model sizes, the sparsities at a fixed top_k and the FLOPs or token budgets. A point's config is
the base config with its size, experts and token budget set field by field
(``dataclasses.replace``), then validated as any loaded config is.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Optional

from moelab.accounting import count_params, flops_per_token
from moelab.config import (
    Config, MoEConfig, apply_overrides, build_config, load_config, read_yaml, spelt_as_today,
    to_dict, NUMERICS_OF_OLD_RUNS,
)
from moelab.data.sources import resolve_source
from moelab.errors import ConfigError, MoelabError, short_repr
from moelab.fileio import atomic_write_json, read_json, remove_stale_temporaries
from moelab.runs import RunSpec, write_run_configs
from moelab.runs.spec import shown_in_wandb
from moelab.runs.families import as_budget_family
from moelab.runs.lr_grid import check_same_selection
from moelab.runs.spec import Finetune, branch_record
from moelab.scaling.isoflop import compute_deviation
from moelab.sweep.grid import (GRID_KEYS, SIZE_KEYS, FinetuneRecipe, SparseVariant, SweepGrid,
                               experts_for, with_seeds_key)

FINETUNE_RUNS = "finetune"
"""The folder under runs/ that holds the finetunes: runs/finetune/<the run's name>."""


@dataclass
class SweepPoint:
    size: str
    sparsity: float
    num_experts: int
    top_k: int
    budget_label: str
    flops_budget: Optional[float]
    config: Config
    shared: int = 0
    """How many of the num_experts (and of the top_k) are shared experts."""
    granularity: int = 1
    """G of the grid's ``granularities`` (1 without)."""

    @property
    def arm(self) -> str:
        """The point's name without its seed: ``C3e+13/s1/S0.750-E4k1``; with shared experts
        ``S0.750-E8k2s1`` (1 of the 8 experts, and of the 2 a token uses, shared)."""
        shared = f"s{self.shared}" if self.shared else ""
        return (f"{self.budget_label}/{self.size}/S{self.sparsity:.3f}-E{self.num_experts}"
                f"k{self.top_k}{shared}")

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


def point_config(base: Config, size: dict, sparsity: float, top_k: int, mode: str,
                 shared: int = 0) -> Config:
    """The base config as this size at this sparsity: the size's model keys, and at S > 0
    E = k / (1 - S) experts of width d_ff / E (fixed_total) or d_ff / k (fixed_expert), over
    the base config's own expert settings (or the defaults for a dense base). ``shared`` of
    the E (and of the k) are shared experts of the same width: E - shared routed experts
    choose k - shared, so the total and active parameters do not change with ``shared``."""
    shape = {key: size[key] for key in SIZE_KEYS if key in size}
    if sparsity == 0.0:
        return replace(base, model=replace(base.model, **shape, moe=None)).validate()
    experts = experts_for(sparsity, top_k)
    d_ff = int(size.get("d_ff", 0)) or None
    if d_ff is None:
        raise ConfigError(f"sweep size {short_repr(size['name'])} needs d_ff (the dense FFN width)")
    divisor = experts if mode == "fixed_total" else top_k
    if d_ff % divisor:
        raise ConfigError(
            f"sweep size {short_repr(size['name'])}: d_ff={d_ff} is invalid for {mode} with E={experts}, "
            f"k={top_k}: must be divisible by {divisor}"
        )
    if not 0 <= shared < top_k:
        raise ConfigError(f"shared experts {shared} is invalid with k={top_k}: allowed 0 to "
                          f"k - 1 (at least one routed expert per token)")
    moe = replace(base.model.moe or MoEConfig(), num_experts=experts - shared,
                  top_k=top_k - shared, d_expert=d_ff // divisor, num_shared_experts=shared,
                  d_shared=None)
    return replace(base, model=replace(base.model, **shape, moe=moe)).validate()


def with_max_tokens(config: Config, tokens: int) -> Config:
    return replace(config, train=replace(config.train, max_tokens=tokens)).validate()


def with_seed(config: Config, seed: int) -> Config:
    return replace(config, train=replace(config.train, seed=seed)).validate()


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
    points: list = []
    budgets = [("flops", b) for b in sorted(grid.flops_budgets)] + [
        ("tokens", b) for b in sorted(grid.token_budgets)]
    config = load_config(grid.base, list(grid.overrides))
    for seed in grid.seeds:
        base = with_seed(config, seed)
        for kind, budget in budgets:
            for size in grid.sizes:
                for sparsity in grid.sparsities:
                    # The dense model has no k: planned once, at the first.
                    variants = grid.sparse_variants
                    points.extend(_plan_point(base, grid, size, float(sparsity), kind, budget,
                                              variant)
                                  for variant in (variants[:1] if sparsity == 0 else variants))
    _check_distinct_folders(points)
    return points


def _plan_point(base: Config, grid: SweepGrid, size: dict, sparsity: float, kind: str,
                budget: float, variant: SparseVariant) -> SweepPoint:
    shared = variant.shared if sparsity > 0 else 0
    config = point_config(base, size, sparsity, variant.top_k, grid.mode, shared)
    if kind == "flops":
        tokens, label = tokens_for_flops(config, budget), f"C{exact_text(budget)}"
    else:
        tokens, label = int(budget), f"D{int(budget)}"
    config = with_max_tokens(config, tokens)
    experts = config.model.moe.num_experts + shared if config.model.moe else 1
    granularity = variant.granularity if sparsity > 0 else 1
    return SweepPoint(size["name"], sparsity, experts, variant.top_k, label,
                      float(budget) if kind == "flops" else None, config, shared, granularity)


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


def run_specs(points: list[SweepPoint]) -> list[RunSpec]:
    """One run per point; under ``train.schedule: wsd`` the budgets of a size, sparsity and
    seed are one budget family (``moelab.runs.families``)."""
    specs = [RunSpec(point.run_name, point.config,
                     {"size": point.size, "sparsity": point.sparsity, "budget": point.budget_label,
                      "seed": point.seed})
             for point in points]
    shapes = [(point.size, point.sparsity, point.top_k, point.shared, point.seed)
              for point in points]
    planned = {spec.name: spec for shape in dict.fromkeys(shapes)
               for spec in as_budget_family([s for s, other in zip(specs, shapes) if other == shape])}
    return [planned[spec.name] for spec in specs]


def finetune_run_name(run_name: str) -> str:
    """The finetune of run ``run_name``: ``finetune/C3e+13/s1/S0.750-E4k1/seed0``."""
    return f"{FINETUNE_RUNS}/{run_name}"


def finetune_overrides(recipe: FinetuneRecipe, config: Config) -> list[str]:
    """The recipe as ``moelab finetune --set`` pairs for a run of ``config``: ``steps`` whole
    steps under a cosine schedule from a fresh warmup, one eval at the end (the reference is
    scored before the first step), no zero-shot tasks, no compile (a few hundred steps do not
    pay back its compile time)."""
    batch_size = recipe.batch_size or config.train.batch_size
    tokens = recipe.steps * batch_size * config.model.max_seq_len
    return [f"train.max_tokens={tokens}", f"train.batch_size={batch_size}",
            f"train.lr={recipe.lr!r}", "train.schedule=cosine",
            f"train.warmup_fraction={recipe.warmup_fraction!r}",
            f"train.eval_interval={recipe.steps}", "train.eval_tasks=[]", "train.compile=false"]


def finetune_specs(recipe: FinetuneRecipe, specs: list[RunSpec]) -> list[RunSpec]:
    """One finetune per run of ``specs``, after it: its config as planned is the run's with the
    recipe applied (the run it trains also names the source's checkpoint and weights)."""
    planned = []
    for spec in specs:
        overrides = finetune_overrides(recipe, spec.config)
        if spec.config.train.logging.wandb:  # else it would log under its source's name
            overrides.append(f"train.logging.wandb_name={finetune_run_name(spec.name)}")
        raw = to_dict(spec.config)
        raw["data"].update(source=recipe.data, max_train_stories=None)
        raw["train"].update(keep_checkpoints_at=[], warmup_steps=None)
        config = build_config(apply_overrides(raw, overrides))
        planned.append(RunSpec(finetune_run_name(spec.name), config,
                               {**spec.labels, "finetune": recipe.data},
                               finetune=Finetune(spec.name, recipe.data, tuple(overrides))))
    return planned


def check_finetune_data(grid: SweepGrid, points: list[SweepPoint]) -> None:
    """Refuse, before any run trains, a ``finetune.data`` that is no corpus: every finetune
    reads it after its run finished, so a folder without train.txt, a file of another type or
    one without stories would otherwise fail them all once the training is spent. Read as the
    first finetune will read it (its split and limits)."""
    if grid.finetune is None or not points:
        return
    data_config = finetune_specs(grid.finetune, run_specs(points[:1]))[0].config.data
    try:
        resolve_source(data_config).load()
    except MoelabError as exc:
        raise MoelabError(f"finetune.data={short_repr(grid.finetune.data)} is invalid: "
                          f"{exc}") from None


def plan_sweep_folder(grid: SweepGrid, out_dir: Path, fit_settings: dict | None = None,
                      adjust_points: Optional[Callable[[list[SweepPoint]], list[SweepPoint]]] = None,
                      extra: Optional[dict] = None) -> tuple[list[SweepPoint], list[RunSpec]]:
    """Plan the grid and write its grid.json, plan.json and run configs into ``out_dir``.
    ``fit_settings`` (``bootstrap_replicates``, ``max_starts``) are kept in plan.json, so that
    ``moelab report DIR`` fits as the sweep did. The specs are the points' runs, in the points'
    order, then (with a ``finetune`` recipe) one finetune per run. ``adjust_points`` changes the
    planned points (each cell's lr, ``--lr-grid``); ``extra`` adds records to plan.json."""
    points = plan_sweep(grid)
    if adjust_points is not None:
        points = adjust_points(points)
    specs = run_specs(points)
    if grid.finetune is not None:
        specs += finetune_specs(grid.finetune, specs)
    specs = shown_in_wandb(specs, group=Path(out_dir).resolve().name,
                           tags=["sweep-sparsity", f"grid={grid.name}"])
    _write_plan(Path(out_dir), grid, points, specs, fit_settings or {}, extra)
    return points, specs


def _read_json_dict(path: Path) -> dict:
    try:
        content = json.loads(path.read_text("utf-8"))
    except (OSError, ValueError):
        return {}
    return content if isinstance(content, dict) else {}


def recorded_fit_settings(out_dir: Path) -> dict:
    """The fit settings a sweep recorded in plan.json (the defaults when it recorded none)."""
    try:
        plan = read_json(Path(out_dir) / "plan.json")
    except (OSError, ValueError):
        return {}
    settings = plan.get("fit") if isinstance(plan, dict) else None
    return {key: settings[key] for key in ("bootstrap_replicates", "max_starts")
            if isinstance(settings, dict) and key in settings}


def grid_json_record(grid: SweepGrid) -> dict:
    """grid.json's record of a grid; the optional keys only when given, so that the
    grid.json of a sweep planned before the keys existed still matches its grid."""
    return {key: to_dict(getattr(grid, key)) for key in GRID_KEYS
            if key not in OPTIONAL_GRID_KEYS or getattr(grid, key)}


OPTIONAL_GRID_KEYS = ("top_ks", "granularities", "shared_experts", "finetune")
"""Grid keys grid.json records only when given (an empty list or None: as if absent)."""


def check_same_grid(out_dir: Path, grid: SweepGrid) -> None:
    """Refuse to mix another grid's runs into this folder."""
    grid_path = out_dir / "grid.json"
    if grid_path.is_file():
        old = _keys_spelt_as_today(with_seeds_key(read_json(grid_path)))
        if _planned_before_numerics(out_dir):
            old = _with_override(old, NATIVE_NUMERICS)
        new = _keys_spelt_as_today(json.loads(json.dumps(grid_json_record(grid))))
        if _same_grid_or_more_seeds(old, new):
            return
        if _same_grid_or_more_seeds(old, _with_override(new, NATIVE_NUMERICS)):
            raise MoelabError(f"{out_dir} holds runs planned before train.numerics existed (they "
                              f"trained with native CPU numerics): resume with --set {NATIVE_NUMERICS}")
        raise MoelabError(f"{out_dir} already holds another sweep grid ({short_repr(old.get('name'))}): "
                          "use another --out folder")


NATIVE_NUMERICS = f"train.numerics={NUMERICS_OF_OLD_RUNS}"
"""The numerics of every run planned before ``train.numerics`` existed (moelab.numerics)."""


def _planned_before_numerics(out_dir: Path) -> bool:
    """Whether the folder's run configs predate ``train.numerics``: those runs trained with
    the CPU's native kernels, so resuming them today (default ``portable``) would mix numerics."""
    stored = sorted((out_dir / "configs").glob("*.yaml"))
    if not stored:
        return False
    train = (read_yaml(stored[0]) or {}).get("train")
    return isinstance(train, dict) and "numerics" not in train


def _with_override(record: dict, override: str) -> dict:
    """The grid record with ``override`` among its overrides unless its key is already set."""
    overrides = list(record.get("overrides") or [])
    key = override.split("=", 1)[0]
    if any(isinstance(item, str) and item.split("=", 1)[0].strip() == key for item in overrides):
        return record
    return {**record, "overrides": [*overrides, override]}


def _keys_spelt_as_today(record: dict) -> dict:
    """A grid record whose overrides spell moved keys as today (``train.progress=false`` of a
    sweep planned before ``train.logging``): the same grid either way."""
    overrides = record.get("overrides")
    if not isinstance(overrides, list):
        return record
    return {**record, "overrides": [spelt_as_today(item) if isinstance(item, str) else item
                                    for item in overrides]}


def _write_plan(out_dir: Path, grid: SweepGrid, points: list[SweepPoint], specs: list[RunSpec],
                fit_settings: dict, extra: Optional[dict] = None) -> None:
    """grid.json + plan.json; refuse to mix another grid's runs into this folder."""
    grid_record = grid_json_record(grid)
    grid_path = out_dir / "grid.json"
    check_same_grid(out_dir, grid)
    if (out_dir / "plan.json").is_file():  # runs at tuned lrs must not be mixed with others
        check_same_selection(_read_json_dict(out_dir / "plan.json"),
                             (extra or {}).get("lr_selection"))
    remove_stale_temporaries(out_dir, out_dir / "configs", out_dir / "figures")
    atomic_write_json(grid_path, grid_record)
    write_run_configs(out_dir, specs)
    atomic_write_json(out_dir / "plan.json", {
        "kind": "sweep-sparsity",
        **({"fit": fit_settings} if fit_settings else {}),
        "runs": [{"name": spec.name, "run_dir": str(spec.run_dir), "config": str(spec.config_path),
                  "size": point.size, "sparsity": point.sparsity, "budget": point.budget_label,
                  "seed": point.seed,
                  **({"granularity": point.granularity, "shared_experts": point.shared}
                     if grid.granularities or grid.shared_experts else {}),
                  "model": to_dict(point.config.model), **branch_record(spec)}
                 for point, spec in zip(points, specs)],
        **({"finetunes": [{"name": spec.name, "run_dir": str(spec.run_dir),
                           "config": str(spec.config_path), **branch_record(spec)}
                          for spec in specs[len(points):]]} if len(specs) > len(points) else {}),
        **(extra or {}),
    })


def _same_grid_or_more_seeds(old: dict, new: dict) -> bool:
    """A folder's runs stay valid for its grid with seeds added: a run depends only on its
    config and seed; and with a finetune recipe added to a grid that had none (its finetunes
    are new runs). A recipe changed or dropped is another grid: finetunes would mix."""
    if old.get("finetune") is not None and old.get("finetune") != new.get("finetune"):
        return False
    # A grid.json without top_ks (older, or a grid of one top_k) has none; so for the other
    # optional lists.
    absent: dict[str, list] = {"top_ks": [], "granularities": [], "shared_experts": []}
    return ({**absent, **old, "seeds": None, "finetune": None}
            == {**absent, **new, "seeds": None, "finetune": None}
            and set(old.get("seeds", [])) <= set(new["seeds"]))
