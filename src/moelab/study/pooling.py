"""Several studies of one design as one: the seeds concatenated, each pair kept within its seed.

A source is a study folder (its complete runs, read as ``moelab report`` reads them) or a
study's results.json (as a study writes it, or a copy of one). Pooling is refused, in one line
naming the first difference, unless every source has the same design: the kind, the criteria,
each arm's model and the tokens and steps of its runs at each budget (all of which results.json
holds), and, when every source is a folder, every key of the runs' configs but the seed and
those that only say where and how a run reports (``NOT_DESIGN``; a results.json does not hold
the train and data sections). A model key that an earlier moelab did not write takes its
default, which is how that moelab behaved. The seeds of different sources
must differ too: a seed trained twice is one draw, not two.

The pooled comparison of each budget and criterion is the study's own (``compare``: the paired
t-test on dense[s] - moe[s] over every seed), and every budget's and criterion's test is one
family, adjusted by Holm's method as in a study's report.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

from moelab.codec import to_json
from moelab.config import ModelConfig, from_dict, to_dict, without_logging
from moelab.errors import ConfigError, MoelabError
from moelab.fileio import atomic_write_json, atomic_write_text, read_json
from moelab.report import format_mean_std, format_number, format_p_value, markdown_table
from moelab.runs.tokens import format_token_count
from moelab.study.aggregate import aggregate
from moelab.study.arms import COMPARED_ARMS
from moelab.study.folder import StudyFolder
from moelab.study.results import ResultsBudget, json_safe, read_results_json
from moelab.stats.intervals import summarize
from moelab.study.gaps import Gap, adjust_family, compare

NOT_DESIGN = ("train.seed", "data.cache_dir", "train.log_interval", "train.checkpoint_interval",
              "train.keep_checkpoints_at", "train.sample_tokens")
"""Config keys that say where and how a run reports, not what it trains: not compared (nor
``train.logging``, how it is shown)."""
RUN_DESIGN_FIELDS = ("tokens", "steps")
"""Per-run numbers of results.json that belong to the design: every seed trained as many."""


@dataclass
class StudySource:
    """One study to pool: its design as dotted keys, and its best val losses by seed."""

    name: str
    """The path as given."""
    design: dict[str, Any]
    losses: dict[Optional[int], dict[str, dict[int, float]]]
    """budget (None without ``--budgets``) -> arm -> {seed: best val loss}."""
    from_folder: bool

    @property
    def seeds(self) -> set[int]:
        return {seed for arms in self.losses.values() for by_seed in arms.values()
                for seed in by_seed}


@dataclass
class PooledStudy:
    """The sources' seeds as one study: per budget, each arm's losses and each gap."""

    sources: list[StudySource]
    budgets: list[Optional[int]]
    losses: dict[Optional[int], dict[str, dict[int, float]]]
    gaps: dict[Optional[int], dict[str, Gap]]
    """budget -> criterion -> the pooled gap, Holm-adjusted over every budget and criterion."""

    @property
    def seeds(self) -> list[int]:
        return sorted(set().union(*(source.seeds for source in self.sources)))

    @property
    def compared(self) -> str:
        if all(source.from_folder for source in self.sources):
            return ("every key of the runs' configs but the seed and the logging and output "
                    "settings, and results.json's design")
        return ("results.json's design: kind, criteria, each arm's model, the tokens and steps "
                "of its runs (a results.json holds no train or data section)")

    def to_dict(self) -> dict:
        budgets = []
        for budget in self.budgets:
            arms = {arm: {"best_val_loss": to_json(summarize(list(by_seed.values()))),
                          "seeds": sorted(by_seed)}
                    for arm, by_seed in self.losses[budget].items()}
            gaps = {criterion: to_json(gap) for criterion, gap in self.gaps[budget].items()}
            budgets.append({"tokens": budget, "label": _label(budget), "arms": arms, "gaps": gaps})
        return json_safe({
            "kind": "pooled",
            "sources": [{"source": s.name, "seeds": sorted(s.seeds)} for s in self.sources],
            "seeds": self.seeds,
            "design_compared": self.compared,
            "budgets": budgets,
        })


# --------------------------------------------------------------------------------------------
# Reading the sources
# --------------------------------------------------------------------------------------------


def read_source(path: Path) -> StudySource:
    """A study folder or a study's results.json, as a ``StudySource``."""
    if path.is_dir():
        return _read_folder(path)
    if path.is_file():
        try:
            results = read_json(path)
        except ValueError:
            raise MoelabError(f"{path} is not valid JSON: give a study folder or its "
                              "results.json") from None
        return _from_results(str(path), results, {}, from_folder=False)
    raise MoelabError(f"{path} does not exist: give a study folder or its results.json")


def _read_folder(path: Path) -> StudySource:
    folder = StudyFolder.read(path, purpose="pool")
    config_design: dict[str, set] = {}
    for record in folder.runs:
        for key, value in _flatten(without_logging(to_dict(record.config))).items():
            if key not in NOT_DESIGN and not key.startswith("model."):  # model: per arm, below
                config_design.setdefault(key, set()).add(json.dumps(value))
    # A key whose value varies within the study (train.max_tokens over budgets) is the set.
    config = {key: [json.loads(v) for v in sorted(values)] if len(values) > 1
              else json.loads(next(iter(values))) for key, values in config_design.items()}
    results = aggregate(folder).to_dict()
    return _from_results(str(path), results, config, from_folder=True)


def _from_results(name: str, raw_results: Any, config_design: dict,
                  from_folder: bool) -> StudySource:
    results = read_results_json(name, raw_results)
    if results.kind != "study":
        raise MoelabError(f"{name} has kind {results.kind!r}: pooling compares the "
                          "MoE with its dense arms, kind 'study'")
    groups = results.budgets or [ResultsBudget(results.arms)]
    design = {"kind": results.kind, "criteria": results.criteria,
              "budgets": [group.tokens for group in groups], **config_design}
    losses = {}
    for group in groups:
        budget, arms = group.tokens, {}
        where = f"budgets.{_label(budget)}." if budget is not None else ""
        for arm, result in group.arms.items():
            for key, value in _flatten(_model_design(name, arm, result.model)).items():
                design[f"{where}arms.{arm}.model.{key}"] = value
            for field_name in RUN_DESIGN_FIELDS:
                values = sorted({getattr(run, field_name) for run in result.runs}, key=str)
                design[f"{where}arms.{arm}.{field_name}"] = (values[0] if len(values) == 1
                                                             else values)
            arms[arm] = {run.seed: run.best_val_loss for run in result.runs
                         if run.best_val_loss is not None}
        losses[budget] = arms
    return StudySource(name, design, losses, from_folder)


def _model_design(name: str, arm: str, model: Any) -> dict:
    """An arm's model section with every key a config has: a key that an earlier moelab did not
    write yet (a newer option) takes its default, the behaviour that moelab had."""
    try:
        return to_dict(from_dict(ModelConfig, model, "model"))
    except ConfigError as exc:
        raise MoelabError(f"{name}: arm {arm}'s model does not load ({exc})") from None


def _flatten(record: dict, prefix: str = "") -> dict[str, Any]:
    """{'train': {'lr': 0.01}} -> {'train.lr': 0.01}; a None section stays one key."""
    flat = {}
    for key, value in record.items():
        if isinstance(value, dict) and value:
            flat.update(_flatten(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = value
    return flat


def _label(budget: Optional[int]) -> Optional[str]:
    return format_token_count(budget) if budget is not None else None


# --------------------------------------------------------------------------------------------
# Pooling
# --------------------------------------------------------------------------------------------


def design_difference(first: StudySource, second: StudySource) -> Optional[str]:
    """The first key (in the first source's order) on which two designs differ, as
    'train.lr: 0.01 vs 0.02'; None when they agree. A key only one source can have (the run
    configs, when one source is a results.json) is not compared."""
    both_folders = first.from_folder and second.from_folder
    for key, value in first.design.items():
        if key not in second.design:
            if both_folders or not _config_key(key):
                return f"{key}: {_show(value)} vs (none)"
            continue
        if second.design[key] != value:
            return f"{key}: {_show(value)} vs {_show(second.design[key])}"
    for key in second.design.keys() - first.design.keys():
        if both_folders or not _config_key(key):
            return f"{key}: (none) vs {_show(second.design[key])}"
    return None


def _config_key(key: str) -> bool:
    """A key that only a study folder has (from its runs' config.yaml)."""
    return not (key in ("kind", "criteria", "budgets") or ".arms." in f".{key}")


def _show(value: Any) -> str:
    return json.dumps(value) if not isinstance(value, str) else value


def pool(sources: list[StudySource]) -> PooledStudy:
    """One paired comparison per budget and criterion over the seeds of every source."""
    if len(sources) < 2:
        raise MoelabError("pooling needs 2 or more studies")
    first = sources[0]
    for other in sources[1:]:
        difference = design_difference(first, other)
        if difference is not None:
            raise MoelabError(f"cannot pool {first.name} and {other.name}: their designs "
                              f"differ in {difference}")
    for i, one in enumerate(sources):
        for other in sources[i + 1:]:
            shared = sorted(one.seeds & other.seeds)
            if shared:
                raise MoelabError(f"cannot pool {one.name} and {other.name}: both have seed"
                                  f"{'s' if len(shared) > 1 else ''} "
                                  f"{', '.join(map(str, shared))} (pooled seeds must be "
                                  "separate runs)")
    budgets = list(first.losses)
    losses = {budget: {arm: {seed: loss for source in sources
                             for seed, loss in source.losses[budget][arm].items()}
                       for arm in first.losses[budget]} for budget in budgets}
    keys, tests = [], []
    for budget in budgets:
        for criterion, (moe_arm, dense_arm) in COMPARED_ARMS.items():
            moe, dense = losses[budget].get(moe_arm), losses[budget].get(dense_arm)
            if moe is not None and dense is not None:
                keys.append((budget, criterion))
                tests.append(compare(criterion, moe_arm, dense_arm, moe, dense))
    gaps: dict[Optional[int], dict[str, Gap]] = {budget: {} for budget in budgets}
    for (budget, criterion), gap in zip(keys, adjust_family(tests)):
        gaps[budget][criterion] = gap
    return PooledStudy(sources, budgets, losses, gaps)


# --------------------------------------------------------------------------------------------
# Output
# --------------------------------------------------------------------------------------------


def render_pooled(pooled: PooledStudy) -> str:
    """pooled.md: the sources, then per budget each arm's loss and each pooled gap."""
    sources = "\n".join(f"- `{s.name}`: seeds {', '.join(map(str, sorted(s.seeds)))}"
                        for s in pooled.sources)
    rows = []
    for budget in pooled.budgets:
        for g in pooled.gaps[budget].values():
            rows.append([
                _label(budget) or "–", f"{g.moe_arm} vs {g.dense_arm}",
                format_mean_std(*_mean_std(pooled.losses[budget][g.moe_arm])),
                format_mean_std(*_mean_std(pooled.losses[budget][g.dense_arm])),
                f"{g.gap:+.4f}", _interval(g), format_p_value(g.p_value),
                format_p_value(g.p_adjusted), str(g.paired.n_pairs),
                format_number(g.min_detectable_gap), g.verdict,
            ])
    adjustment = next((g.adjustment for gaps in pooled.gaps.values() for g in gaps.values()),
                      "Holm, 0 tests")
    return (
        f"# Pooled study: {len(pooled.sources)} studies, {len(pooled.seeds)} seeds\n\n"
        f"{sources}\n\nSame design, compared on {pooled.compared}. Gap = dense − MoE best "
        "validation loss (positive: the MoE is better), paired t over the seeds of every "
        "source, each pair within its seed; a winner is named only when the p adjusted over "
        f"every budget's and criterion's test ({adjustment}) is < 0.05.\n\n"
        + markdown_table(["tokens", "arms", "moe", "dense", "gap", "paired 95 % CI", "p",
                          f"p ({adjustment})", "pairs", "min detectable gap", "verdict"],
                         rows, "llrrrrrrrrl")
    )


def _mean_std(by_seed: dict[int, float]) -> tuple[float, float]:
    summary = summarize(list(by_seed.values()))
    return summary.mean, summary.std


def _interval(g: Gap) -> str:
    if g.ci_low != g.ci_low:  # NaN: not testable
        return "–"
    return f"[{format_number(g.ci_low)}, {format_number(g.ci_high)}]"


def check_out_dir(out_dir: Path) -> None:
    """The pooled study's folder: never a study folder (its files stay its own), nor a file."""
    if (out_dir / "runs").exists() or (out_dir / "plan.json").exists():
        raise MoelabError(f"{out_dir} is a study folder: write the pooled study elsewhere")
    if out_dir.exists() and not out_dir.is_dir():
        raise MoelabError(f"{out_dir} is a file: --out must be a folder")


def write_pooled(pooled: PooledStudy, out_dir: Path) -> None:
    """pooled.json and pooled.md in ``out_dir``."""
    check_out_dir(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    atomic_write_json(out_dir / "pooled.json", pooled.to_dict())
    atomic_write_text(out_dir / "pooled.md", render_pooled(pooled))
