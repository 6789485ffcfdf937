"""Sparsity-sweep grids: the model sizes, sparsities and budgets a sweep trains.

A grid is a YAML file, or a preset by name from ``moelab/presets/sweeps/`` (``moelab
sweep-sparsity demo``), read into ``SweepGrid`` by the config parser
(``moelab.config.from_dict``: the keys, types and one-line errors of ``model`` and ``train``).
It names a base config and varies three things:

- **size**: model-shape overrides per size (d_model, n_layers, n_heads, n_kv_heads, d_ff);
- **sparsity** S = (E - k) / E at a fixed top_k k, so E = k / (1 - S); S = 0 is the dense
  model with FFN width d_ff. How the experts are sized (``mode``):
  - ``fixed_total``: d_expert = d_ff / E, so every sparsity of a size stores the dense model's
    FFN parameters (plus a small router) and activates k / E of them: the fixed-total-parameters
    question of Abnar et al. 2025 (§2.2), asked with experts that narrow as E grows, so S and
    expert granularity move together (their expert width is set by a granularity G = 1 or
    2, not by E);
  - ``fixed_expert``: d_expert = d_ff / k, so the active FFN equals the dense one and the
    total grows with E (vary E at fixed k and expert size);
- **granularity and shared experts** (optional): ``granularities`` plans every sparse point
  once per G with E and k multiplied by G, so each expert is G times narrower and the total and
  active parameters stay those of G = 1 (Krajewski et al. 2024's granularity; with
  ``fixed_expert`` and top_k 1, G = d_ff / d_expert exactly as they define it);
  ``shared_experts`` turns s of a point's k·G active experts into shared ones that every token
  uses (DeepSeekMoE's shared-expert isolation): E·G − s routed experts choose k·G − s, each as
  wide as before, so N and N_active again stay fixed;
- **finetune** (optional): every run fine-tuned by one fixed recipe once it has finished;
- **budget**: training compute C in FLOPs (``flops_budgets``: D = C / (6 N_active), rounded
  down to whole optimizer steps, so every point of a budget lies on one IsoFLOP curve, up to
  one step short of it) or tokens (``token_budgets``, plain or as 409.6K, 3.7M).
"""

from __future__ import annotations

import dataclasses
import math
import re
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal, Optional

from moelab.config import (
    Parsed, apply_overrides, from_dict, preset_names, read_raw, spelt_as_today, to_dict,
)
from moelab.data.sources import ALLOWED_PATHS, HUB_PREFIX, NAMED_SOURCES
from moelab.errors import ConfigError, short_repr
from moelab.runs.tokens import TokenCount

SWEEP_PRESETS = "sweeps"
"""The folder of moelab/presets/ that holds the grid presets."""
Mode = Literal["fixed_total", "fixed_expert"]
MODES = typing.get_args(Mode)
# A size's name becomes a folder under --out: one plain path component, nothing that climbs out.
SIZE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.+-]{0,63}")


@dataclass
class SizeShape:
    """One model size of a grid: the dense model's shape; a key not given keeps the base
    config's value."""

    name: str
    """The size's name in run folders and the report (letters, digits, _ . + -)."""
    d_model: Optional[int] = None
    n_layers: Optional[int] = None
    n_heads: Optional[int] = None
    n_kv_heads: Optional[int] = None
    d_ff: Optional[int] = None
    """The dense FFN width; the experts of a sparse point split it (``mode``)."""


SIZE_KEYS = tuple(f.name for f in dataclasses.fields(SizeShape) if f.name != "name")


def _sizes(value: Any, key: str) -> list[dict]:
    """Each size checked as a SizeShape and kept as a plain mapping of the keys it gives: the
    grid's record (grid.json) and the model overrides are these mappings."""
    if not isinstance(value, list):
        raise ConfigError(f"{key}={short_repr(value)} is invalid: expected a list of mappings")
    shapes = [from_dict(SizeShape, item, f"{key}[{index}]") for index, item in enumerate(value)]
    return [{k: v for k, v in to_dict(shape).items() if v is not None} for shape in shapes]


@dataclass
class FinetuneRecipe:
    """How every run of a sweep is fine-tuned once it has finished (``finetune:`` in a grid):
    one fixed recipe for all points, so their fine-tuned losses compare (docs/scaling.md,
    "Fine-tuning against sparsity")."""

    steps: int
    """Optimizer steps of each finetune."""
    lr: float
    """Peak lr of the finetune's cosine schedule (fresh optimizer and schedule)."""
    data: str = "adaptation"
    """The new text's ``data.source``: the bundled adaptation set by default."""
    batch_size: Optional[int] = None
    """Sequences per step (null: the run's own)."""
    warmup_fraction: float = 0.1
    """Share of the finetune's steps spent warming up."""

    def validate(self, where: str) -> None:
        if self.steps < 1:
            raise ConfigError(f"{where}: finetune.steps={self.steps} is invalid: must be >= 1")
        if not (math.isfinite(self.lr) and self.lr > 0):
            raise ConfigError(f"{where}: finetune.lr={self.lr} is invalid: must be a finite "
                              "number > 0")
        if self.batch_size is not None and self.batch_size < 1:
            raise ConfigError(f"{where}: finetune.batch_size={self.batch_size} is invalid: "
                              "must be >= 1")
        if not 0.0 <= self.warmup_fraction < 1.0:
            raise ConfigError(f"{where}: finetune.warmup_fraction={self.warmup_fraction} is "
                              "invalid: allowed [0, 1)")
        if (self.data not in NAMED_SOURCES and not self.data.startswith(HUB_PREFIX)
                and not Path(self.data).expanduser().exists()):
            raise ConfigError(f"{where}: finetune.data={short_repr(self.data)} is invalid: no "
                              f"such file or folder; {ALLOWED_PATHS}")


@dataclass(kw_only=True)
class SweepGrid:
    name: str
    """The grid's name (default: the file's or preset's name); the sweep folder is out/<name>-sweep."""
    base: str
    """A config preset or YAML file all points derive from (data, optimizer, eval, vocab)."""
    overrides: list[str] = field(default_factory=list)
    """Dotted overrides applied to the base config first (e.g. a shorter eval)."""
    sizes: Annotated[list[dict], Parsed(_sizes)]
    """Each a mapping: a name and any of SIZE_KEYS, the dense model of that size."""
    sparsities: list[float]
    """S = (E - k) / E; E = top_k / (1 - S) must be a whole number; 0 is the dense model."""
    top_k: int = 1
    """Experts per token k of every sparse point."""
    top_ks: list[int] = field(default_factory=list)
    """Several k instead of one: every sparse point is planned once per k (E = k / (1 - S)),
    so one S is compared as 4-choose-1, 8-choose-2, 16-choose-4 at the same total and active
    parameters (fixed_total); the dense point once. Empty: top_k alone."""
    granularities: list[int] = field(default_factory=list)
    """G: every sparse point planned once per G, with E and k multiplied by G and each expert G
    times narrower (N and N_active fixed; results.csv's G column is d_ff / d_expert). Empty:
    G = 1 alone. Not with top_ks (several k at one S is the same axis)."""
    shared_experts: list[int] = field(default_factory=list)
    """Shared experts s: every sparse point (and G) planned once per s, s of its k·G active
    experts shared (always used) and E·G − s routed ones choosing k·G − s (N and N_active
    fixed). A point with k·G <= s would route nothing and is not planned. Empty: none."""
    mode: Mode = "fixed_total"
    """How experts are sized: fixed_total (d_expert = d_ff / E) or fixed_expert (d_ff / k)."""
    flops_budgets: list[float] = field(default_factory=list)
    """Training compute budgets C in FLOPs (give these or token_budgets)."""
    token_budgets: list[TokenCount] = field(default_factory=list)
    """Training budgets D in tokens (give these or flops_budgets)."""
    seeds: list[int] = field(default_factory=lambda: [0])
    """The train.seed values: every point is trained once per seed, and the fit pools them
    (two seeds halve the variance of a point's mean, which short CPU runs need)."""
    holdout: str = "S=max"
    """Points the held-out check leaves out of the fit."""
    finetune: Optional[FinetuneRecipe] = None
    """Fine-tune every run once it has finished, with this recipe, into a run of its own
    (runs/finetune/<run>); results.csv gains its before/after loss on the new text. None: no
    finetunes."""

    def validate(self) -> SweepGrid:
        """What the types alone do not say; the parser has checked keys and types."""
        where = f"sweep grid {short_repr(self.name)}"
        if self.mode not in MODES:
            raise ConfigError(f"{where}: mode={short_repr(self.mode)} is invalid: allowed {', '.join(MODES)}")
        if not self.sizes or not self.sparsities:
            raise ConfigError(f"{where}: sizes and sparsities must be non-empty lists")
        if bool(self.flops_budgets) == bool(self.token_budgets):
            raise ConfigError(f"{where}: give exactly one of flops_budgets or token_budgets")
        if self.top_k < 1:
            raise ConfigError(f"{where}: top_k={self.top_k} is invalid: must be >= 1")
        if any(k < 1 for k in self.top_ks) or len(set(self.top_ks)) < len(self.top_ks):
            raise ConfigError(f"{where}: top_ks={self.top_ks!r} is invalid: expected distinct "
                              "whole numbers >= 1")
        self._check_variants(where)
        for sparsity in self.sparsities:
            for k in self.planned_top_ks:
                experts_for(sparsity, k)  # raises on a sparsity with no whole E
        if not self.seeds or len(set(self.seeds)) < len(self.seeds) or min(self.seeds) < 0:
            raise ConfigError(f"{where}: seeds={short_repr(self.seeds)} is invalid: expected a non-empty "
                              "list of distinct whole numbers >= 0")
        for budget in list(self.flops_budgets) + list(self.token_budgets):
            if not (math.isfinite(budget) and budget > 0):
                raise ConfigError(f"{where}: budget {budget} is invalid: must be a finite number > 0")
        for index, item in enumerate(self.overrides):
            if "=" not in item:
                raise ConfigError(f"{where}: overrides[{index}]={short_repr(item)} is invalid: expected "
                                  "KEY=VALUE, e.g. train.eval_interval=100")
        for size in self.sizes:
            _check_size(size, where)
        if self.finetune is not None:
            self.finetune.validate(where)
        _check_base(self.base, where)
        return self


    def _check_variants(self, where: str) -> None:
        if any(g < 1 for g in self.granularities) or len(set(self.granularities)) < len(
                self.granularities):
            raise ConfigError(f"{where}: granularities={self.granularities!r} is invalid: "
                              "expected distinct whole numbers >= 1")
        if any(s < 0 for s in self.shared_experts) or len(set(self.shared_experts)) < len(
                self.shared_experts):
            raise ConfigError(f"{where}: shared_experts={self.shared_experts!r} is invalid: "
                              "expected distinct whole numbers >= 0")
        if self.top_ks and self.granularities:
            raise ConfigError(f"{where}: top_ks and granularities are both given: give one "
                              "(several k at one S is a granularity axis already)")
        if self.sparse_variants == []:
            raise ConfigError(f"{where}: shared_experts={self.shared_experts!r} is invalid: "
                              "every (G, s) leaves no routed expert (k·G <= s)")

    @property
    def planned_top_ks(self) -> list[int]:
        """The k each sparse point is planned at (shared experts included): top_ks, or
        top_k·G for each G of granularities, or top_k alone."""
        return list(dict.fromkeys(variant.top_k for variant in self.sparse_variants))

    @property
    def sparse_variants(self) -> list[SparseVariant]:
        """Every (k, G, s) a sparse point is planned at, in the grid's order; a (G, s) with no
        routed expert (k·G <= s) is left out (``skipped_variants``)."""
        return [v for v in self._all_variants() if v.routes]

    @property
    def skipped_variants(self) -> list[SparseVariant]:
        """The (G, s) of the grid that route nothing (k·G <= s): not planned."""
        return [v for v in self._all_variants() if not v.routes]

    def _all_variants(self) -> list[SparseVariant]:
        if self.top_ks:
            return [SparseVariant(k, 1, 0) for k in self.top_ks]
        return [SparseVariant(self.top_k * g, g, s) for g in (self.granularities or [1])
                for s in (self.shared_experts or [0])]


@dataclass(frozen=True)
class SparseVariant:
    """How one sparse point of a grid splits its experts."""

    top_k: int
    """Experts each token uses, shared ones included (E = top_k / (1 - S) counts them too)."""
    granularity: int
    """G: top_k / the grid's top_k (1 for a grid without granularities)."""
    shared: int
    """How many of the top_k are shared experts, used by every token."""

    @property
    def routes(self) -> bool:
        return self.top_k > self.shared


GRID_KEYS = tuple(f.name for f in dataclasses.fields(SweepGrid))


def _check_size(size: dict, where: str) -> None:
    if not isinstance(size.get("name"), str) or not SIZE_NAME.fullmatch(size["name"]):
        raise ConfigError(f"{where}: size name {short_repr(size.get('name'))} is invalid: allowed 1-64 "
                          f"letters, digits and _ . + - (starting with a letter or digit), no / or ..")
    for key in (key for key in SIZE_KEYS if key in size):
        value = size[key]
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            raise ConfigError(f"{where}: size {short_repr(size['name'])} "
                              f"{key}={short_repr(value)} is invalid: expected a whole number > 0")


def _check_base(base: str, where: str) -> None:
    if not (Path(base).is_file() or base in preset_names()):
        raise ConfigError(f"{where}: base={short_repr(base)} is invalid: expected a config preset "
                          f"({', '.join(preset_names())}) or a YAML file")


def experts_for(sparsity: float, top_k: int) -> int:
    """E = k / (1 - S), which must be a whole number (S = 0: the dense model, E = 1)."""
    if not 0.0 <= sparsity < 1.0:
        raise ConfigError(f"sparsity {sparsity} is invalid: allowed [0, 1)")
    experts = top_k / (1.0 - sparsity)
    if abs(experts - round(experts)) > 1e-6:
        raise ConfigError(
            f"sparsity {sparsity} is invalid with top_k={top_k}: E = k / (1 - S) = {experts:.4g} "
            f"must be a whole number (e.g. S in 0, 0.5, 0.75, 0.875 for k=1)"
        )
    return int(round(experts))


def with_seeds_key(record: dict) -> dict:
    """Grids (and grid.json files) written before ``seeds`` named one ``seed``: read it as a
    list of one. Both at once is ambiguous."""
    if "seed" not in record:
        return record
    if "seeds" in record:
        raise ConfigError(f"seed={short_repr(record['seed'])} and "
                          f"seeds={short_repr(record['seeds'])} are both given: "
                          "give seeds alone (a list, e.g. seeds=[0,1])")
    record = dict(record)
    seed = record.pop("seed")
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise ConfigError(f"seed={short_repr(seed)} is invalid: expected a whole number")
    return {**record, "seeds": [seed]}


def grid_preset_names() -> list[str]:
    return preset_names(SWEEP_PRESETS)


CONFIG_SECTIONS = ("model.", "data.", "train.")


def load_sweep_grid(source: str | Path, overrides: list[str]) -> SweepGrid:
    """The grid after ``--set`` pairs: grid keys as given, config keys (model./data./train.)
    appended to the grid's own ``overrides`` list, after the ones it has."""
    config_pairs = [pair for pair in overrides if pair.startswith(CONFIG_SECTIONS)]
    grid = load_grid(source, [pair for pair in overrides if pair not in config_pairs])
    if not config_pairs:
        return grid
    return dataclasses.replace(grid, overrides=[*grid.overrides, *config_pairs])


def load_grid(source: str | Path, overrides: list[str] | None = None, *,
              record: bool = False) -> SweepGrid:
    """A preset name (``grid_preset_names()``) or a YAML file with the keys of SweepGrid, after
    dotted ``key=value`` overrides (as ``--set``). A ``record`` (a folder's grid.json, which
    moelab wrote) spells its flat logging keys as today silently, as a run's config.yaml."""
    raw = read_raw(source, "sweep grid", SWEEP_PRESETS)
    raw.setdefault("name", Path(source).stem)
    if record and isinstance(raw.get("overrides"), list):
        raw["overrides"] = [spelt_as_today(item) if isinstance(item, str) else item
                            for item in raw["overrides"]]
    raw = apply_overrides(raw, list(overrides or []))
    try:
        grid = from_dict(SweepGrid, with_seeds_key(raw))
    except ConfigError as exc:
        raise ConfigError(f"sweep grid {short_repr(raw.get('name'))}: {exc}") from None
    return grid.validate()
