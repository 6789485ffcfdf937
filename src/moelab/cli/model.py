"""``moelab params``, ``moelab match`` and ``moelab config show``: parameter/FLOP counts,
matched dense baselines, and the resolved config of a preset or file."""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass, field
from typing import Optional

from moelab.accounting import (
    CRITERIA, count_params, equal_compute_tokens, flops_per_token, match_dense,
)
from moelab.cli import add_config_arguments, positive_int
import yaml

from moelab.codec import to_json
from moelab.config import (
    ModelConfig, apply_overrides, build_config, dump_config, load_config, read_with_base,
)
from moelab.errors import MoelabError
from moelab.report import format_count


def register(subparsers: argparse._SubParsersAction) -> None:
    params = subparsers.add_parser("params", help="parameter and FLOP counts of a config")
    add_config_arguments(params)
    params.add_argument("--json", action="store_true", help="print JSON")
    params.set_defaults(func=run_params)

    match = subparsers.add_parser("match", help="dense baselines matched to an MoE config")
    add_config_arguments(match)
    match.add_argument(
        "--criterion", choices=MATCH_CRITERIA, action="append",
        help="match on active params, total params or training FLOPs/token, or 'compute': "
        "dense_total against the MoE trained on as many tokens as spend its training FLOPs "
        "(repeatable; default: all four)",
    )
    match.add_argument("--step", type=positive_int, default=32,
                       help="d_ff is a multiple of this (32)")
    match.add_argument("--json", action="store_true", help="print JSON")
    match.set_defaults(func=run_match)

    config = subparsers.add_parser("config", help="show the resolved config of a preset or file")
    actions = config.add_subparsers(dest="action", metavar="ACTION", required=True)
    show = actions.add_parser(
        "show", help="print the resolved YAML (every key, overrides applied)",
        description="Print the config a preset or YAML file resolves to, its study base merged "
        "in and --set overrides applied, as YAML to copy and edit: moelab config show demo "
        "> my.yaml, then moelab train my.yaml (or study my.yaml).",
    )
    add_config_arguments(show)
    show.add_argument("--comments", action="store_true",
                      help="a comment line above each key: the first sentence of its meaning "
                           "(docs/reference/config.md has the whole of it)")
    show.set_defaults(func=run_config_show)


MATCH_CRITERIA = (*CRITERIA, "compute")


def model_counts(cfg: ModelConfig) -> dict[str, int]:
    """The counts ``params`` prints, under their JSON names."""
    params, flops = count_params(cfg), flops_per_token(cfg)
    return {
        "total_params": params.total,
        "active_params": params.active,
        "non_embedding_params": params.non_embedding,
        "active_non_embedding_params": params.active_non_embedding,
        "flops_per_token_6n": flops.six_n,
        "flops_per_token_kaplan": flops.kaplan,
        "flops_per_token_palm": flops.palm,
    }


def run_params(args: argparse.Namespace) -> int:
    cfg = load_config(args.config, args.overrides).model
    counts = model_counts(cfg)
    if args.json:
        print(json.dumps(counts, indent=2))
        return 0
    kind = "dense" if cfg.moe is None else f"MoE, {cfg.moe.num_experts} experts, top-{cfg.moe.top_k}"
    print(f"{args.config} ({kind})")
    for key, value in counts.items():
        print(f"  {key:<30} {value:>16,}  ({format_count(value)})")
    return 0


def run_config_show(args: argparse.Namespace) -> int:
    text = resolved_yaml(args.config, args.overrides)
    if args.comments:
        from moelab.config.docs import commented_yaml

        text = commented_yaml(text)
    print(text, end="")
    return 0


def resolved_yaml(source: str, overrides: list[str]) -> str:
    """Every key of the config ``source`` resolves to, then its study section (without base, which
    is merged in already), so the text loads back as the same config and the same study."""
    raw = apply_overrides(read_with_base(source), list(overrides))
    study = raw.pop("study", None)
    text = dump_config(build_config(raw))
    if study:
        from moelab.study.settings import parse_settings

        parse_settings(study)  # a bad --set study.* is refused here, as study would refuse it
        text += yaml.safe_dump({"study": study}, sort_keys=False)
    return text


@dataclass(frozen=True)
class TrainingBudget:
    """The tokens a run trains and its training FLOPs under each count."""

    tokens: int
    training_flops_6n: int
    training_flops_kaplan: int
    training_flops_palm: int


def training_budget(cfg: ModelConfig, tokens: int) -> TrainingBudget:
    flops = flops_per_token(cfg)
    return TrainingBudget(tokens=tokens, training_flops_6n=flops.six_n * tokens,
                          training_flops_kaplan=flops.kaplan * tokens,
                          training_flops_palm=flops.palm * tokens)


_OPTIONAL = {"omit_none": True}
"""Metadata of a key only some arms have."""


@dataclass
class MatchedArm:
    """One arm ``moelab match`` prints (``--json``: these keys, the optional ones only when
    set)."""

    model: ModelConfig
    counts: dict[str, int]
    """``model_counts``: each count under its JSON name."""
    training: TrainingBudget
    criterion: Optional[str] = field(default=None, metadata=_OPTIONAL)
    """The criterion a dense arm (or the equal-compute MoE) is matched on; None for the MoE."""
    mismatch: Optional[float] = field(default=None, metadata=_OPTIONAL)
    """(this arm - the MoE) / the MoE on the criterion; for moe_compute, of training FLOPs."""
    same_model_as: Optional[str] = field(default=None, metadata=_OPTIONAL)
    """An earlier arm with the same model and training, when there is one."""


def run_match(args: argparse.Namespace) -> int:
    config = load_config(args.config, args.overrides)
    cfg, train = config.model, config.train
    widest = cfg.moe.num_experts * cfg.moe.d_expert if cfg.moe else None
    if widest is not None and args.step > widest:  # the total-matched d_ff is about this wide
        raise MoelabError(f"--step {args.step} is invalid: allowed 1..{widest} (num_experts x "
                          f"d_expert, the widest matched FFN)")
    tokens_per_step = train.batch_size * cfg.max_seq_len
    tokens = train.max_tokens // tokens_per_step * tokens_per_step  # whole steps, as trained
    arms = {"moe": MatchedArm(cfg, model_counts(cfg), training_budget(cfg, tokens))}
    criteria = list(dict.fromkeys(args.criterion or MATCH_CRITERIA))
    if "compute" in criteria and "total" not in criteria:
        criteria.insert(criteria.index("compute"), "total")  # compute's dense arm
    for criterion in criteria:
        if criterion == "compute":
            dense = match_dense(cfg, "total", step=args.step).config
            compute_tokens = equal_compute_tokens(cfg, dense, tokens, tokens_per_step)
            moe_flops = count_params(cfg).active * compute_tokens
            dense_flops = count_params(dense).active * tokens
            arms["moe_compute"] = MatchedArm(
                cfg, model_counts(cfg), training_budget(cfg, compute_tokens), criterion,
                mismatch=(moe_flops - dense_flops) / dense_flops)
            continue
        matched = match_dense(cfg, criterion, step=args.step)
        arm = MatchedArm(matched.config, model_counts(matched.config),
                         training_budget(matched.config, tokens), criterion,
                         mismatch=matched.mismatch)
        # FLOPs per token are affine in the active parameters, so those two usually coincide.
        arm.same_model_as = next((name for name, other in arms.items()
                                  if (other.model, other.training) == (arm.model, arm.training)),
                                 None)
        arms[f"dense_{criterion}"] = arm
    if args.json:
        print(json.dumps(to_json(arms), indent=2))
    else:
        print(_side_by_side(arms))
        for name, arm in arms.items():
            if arm.same_model_as is not None:
                print(f"{name} is the same model as {arm.same_model_as}")
    return 0


def _side_by_side(arms: dict[str, MatchedArm]) -> str:
    first = next(iter(arms.values()))
    rows = [
        ("FFN", [_ffn(a.model) for a in arms.values()]),
        *[(key, [format_count(a.counts[key]) for a in arms.values()]) for key in first.counts],
        ("training tokens", [format_count(a.training.tokens) for a in arms.values()]),
        *[(key, [f"{getattr(a.training, key):.3g}" for a in arms.values()])
          for key in ("training_flops_6n", "training_flops_kaplan", "training_flops_palm")],
        ("mismatch", ["-" if a.mismatch is None else f"{a.mismatch:+.3%}" for a in arms.values()]),
    ]
    width = max(14, *(len(name) for name in arms))
    lines = [f"{'':<30}" + "".join(f"{name:>{width + 2}}" for name in arms)]
    for label, values in rows:
        lines.append(f"{label:<30}" + "".join(f"{v:>{width + 2}}" for v in values))
    return "\n".join(lines)


def _ffn(model: ModelConfig) -> str:
    if model.moe is None:
        return f"d_ff={model.d_ff}"
    return f"{model.moe.num_experts}x{model.moe.d_expert} top{model.moe.top_k}"

