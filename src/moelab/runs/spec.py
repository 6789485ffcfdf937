"""What one planned run is: a name (its folder under runs/) and its resolved config."""

from __future__ import annotations

import contextlib

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Optional
from collections.abc import Iterable

import yaml

from moelab.codec import to_json
from moelab.config import (
    NUMERICS_OF_OLD_RUNS, Config, build_config, dump_config, read_yaml, to_dict,
    with_numerics_of_its_day, without_logging,
)
from moelab.errors import MoelabError, short_repr
from moelab.fileio import atomic_write_text, is_inside
from moelab.train.run_folder import first_difference


@dataclass(frozen=True)
class Branch:
    """Where a run starts: another run of the plan's kept checkpoint at ``step`` (a wsd budget
    family's cooldown, ``moelab.train.branch_run``), instead of from scratch."""

    source: str
    """The name of the run it branches from."""
    step: int


@dataclass(frozen=True)
class Finetune:
    """A run that fine-tunes another run of the plan: that run's final weights trained on
    ``data`` with ``overrides`` (``moelab.train.finetune``), once that run has finished."""

    source: str
    """The name of the run it fine-tunes."""
    data: str
    """The new text's ``data.source`` (e.g. ``adaptation``)."""
    overrides: tuple[str, ...] = ()
    """The train keys of the fine-tuning recipe, as ``moelab finetune --set`` pairs."""


@dataclass
class RunSpec:
    """One planned training run of a study or sweep folder."""

    name: str
    """Its path under runs/, e.g. ``moe/seed0`` or ``s1/S0.5/D409600``."""
    config: Config
    labels: dict[str, Any] = field(default_factory=dict)
    """What the planner knows it by (arm, seed, budget; size, sparsity): kept in plan.json."""
    branch: Optional[Branch] = None
    """Set for a run that starts from another run's checkpoint: it trains after that run."""
    finetune: Optional[Finetune] = None
    """Set for a run that fine-tunes another run's final weights: it trains after that run
    (and after the branches, which a finetune may start from). Its ``config`` is the source's
    with the recipe applied, as planned; the run writes the one it trains (which names the
    source's checkpoint and weights) into its folder."""

    @property
    def source(self) -> Optional[str]:
        """The run this one must wait for: the run it branches from or fine-tunes, or None."""
        if self.branch is not None:
            return self.branch.source
        return self.finetune.source if self.finetune is not None else None

    @property
    def run_dir(self) -> Path:
        return Path("runs") / self.name

    @property
    def config_path(self) -> Path:
        return Path("configs") / (self.name.replace("/", "-") + ".yaml")


def shown_in_wandb(specs: list[RunSpec], group: str, tags: Iterable[str] = ()) -> list[RunSpec]:
    """The specs whose config logs to W&B given their place in the plan, where the config does
    not set it itself: the group ``group`` (the plan's folder), the run's name (``moe/seed0``)
    and its labels as tags (``arm=moe``, ``seed=0``) after ``tags``. A study's runs then show
    together in W&B, and apart from each other."""
    return [_shown_in_wandb(spec, group, list(tags)) for spec in specs]


def _shown_in_wandb(spec: RunSpec, group: str, tags: list[str]) -> RunSpec:
    shown = spec.config.train.logging
    if not shown.wandb:
        return spec
    labels = [f"{key}={value}" for key, value in spec.labels.items() if value is not None]
    shown = replace(shown, wandb_group=shown.wandb_group or group,
                    wandb_name=shown.wandb_name or spec.name,
                    wandb_tags=list(dict.fromkeys([*shown.wandb_tags, *tags, *labels])))
    train = replace(spec.config.train, logging=shown)
    return replace(spec, config=replace(spec.config, train=train).validate())


def write_run_configs(folder: Path, specs: list[RunSpec]) -> None:
    """Each run's resolved config under ``configs/``: what every launcher trains from.

    First every run's folder and config file must lie inside ``folder``, links resolved (as a
    run's checkpoints/ must lie inside the run): a linked run folder would have its run write
    elsewhere."""
    for spec in specs:
        for path in (folder / spec.run_dir, folder / spec.config_path):
            if not is_inside(path, folder):
                raise MoelabError(f"{path} resolves to {path.resolve()}, outside {folder}: "
                                  f"refused (replace the link with a folder inside {folder})")
    check_planned_configs(folder, specs)
    for spec in specs:
        atomic_write_text(folder / spec.config_path, dump_config(spec.config))


def check_planned_configs(folder: Path, specs: list[RunSpec]) -> None:
    """Refuse a plan that gives a run already planned in ``folder`` another config.

    Every command that plans runs (study, compare, sweep) comes through here: a rerun with one
    side or one key changed would otherwise find that run finished, skip it, and report the
    old config's result under the new config's name. How a run is shown (``train.logging``,
    or its flat keys in a config planned before they moved) may change; keys added to moelab
    since take their defaults."""
    for spec in specs:
        path = folder / spec.config_path
        old = _planned_config(path)
        if old is None:
            continue
        new = without_logging(to_dict(spec.config))
        key, before, now = first_difference(old, new) or (None, None, None)
        if key is not None:
            raise MoelabError(
                f"{folder} already holds run {spec.name} planned with another config: "
                f"{key}={short_repr(before)} (now {short_repr(now)}); use another --out folder "
                f"or the same config{_numerics_hint(key, before)}")


def _numerics_hint(key: str, before: object) -> str:
    if key == "train.numerics" and before == NUMERICS_OF_OLD_RUNS:
        return f" (resume with --set train.numerics={NUMERICS_OF_OLD_RUNS})"
    return ""


def _planned_config(path: Path) -> dict | None:
    """A run's planned config as written (with the defaults of keys added since), less its
    logging keys; None when there is none, or it cannot be read (it is written anew)."""
    if not path.is_file():
        return None
    try:
        raw = read_yaml(path)
    except (OSError, ValueError, yaml.YAMLError):
        return None
    if not isinstance(raw, dict):
        return None
    raw = with_numerics_of_its_day(raw)
    with contextlib.suppress(MoelabError):  # a config this moelab no longer builds: compare raw
        raw = to_dict(build_config(raw))
    return without_logging(raw)




def branch_record(spec: RunSpec) -> dict:
    """plan.json's ``branch`` entry of a run that starts from another's checkpoint, or its
    ``finetune`` entry (or none)."""
    if spec.finetune is not None:
        return {"finetune": to_json(spec.finetune)}
    if spec.branch is None:
        return {}
    return {"branch": to_json(spec.branch)}
