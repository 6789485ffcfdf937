"""The arms of a study, each a copy of one base MoE config with its FFN or routing replaced.

Dense-vs-MoE arms (``moe``, ``dense_active``, ``dense_total``) differ only in the FFN: a dense arm
drops ``model.moe`` and takes the ``d_ff`` the matcher chose. The equal-compute criterion adds
``moe_compute``: the MoE trained on more tokens, as many as spend dense_total's training FLOPs,
and compares it with ``dense_total`` (equal total parameters and equal training FLOPs, the
comparison of Abnar et al. 2025, §2.2, and Ludziejewski et al. 2025; the others are at equal
tokens). (A study has no FLOP-matched arm: under moelab's FLOP count it is the ``dense_active``
model, see ``check_criteria``.) The routing ladder's rungs differ only in ``model.moe`` (top_k,
the auxiliary-loss coefficients, the balancing scope and mode). Everything else
-- tokenizer, data, optimizer, schedule, token budget, evaluation -- is the base config's.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Optional

from moelab.accounting import count_params, equal_compute_tokens, match_dense
from moelab.config import BalanceMode, Config, LbScope, ModelConfig, MoEConfig
from moelab.errors import ConfigError, MoelabError, short_repr

MOE_ARM = "moe"
COMPUTE_ARM = "moe_compute"
STUDY_CRITERIA = ("active", "total", "compute")
DEFAULT_CRITERIA = ("active", "total")
COMPARED_ARMS = {
    "active": (MOE_ARM, "dense_active"),
    "total": (MOE_ARM, "dense_total"),
    "compute": (COMPUTE_ARM, "dense_total"),
}
"""Criterion -> (the MoE arm, the dense arm) its comparison pairs seed by seed."""
LADDER_RUNGS = ("naive_top1", "top1_lb", "top2_lb", "top2_lb_z", "top2_global_lb_z",
                "top2_bias_z")
LADDER_DESCRIPTIONS = {
    "naive_top1": "top-1, no load balancing, no z-loss",
    "top1_lb": "top-1 + Switch load balancing",
    "top2_lb": "top-2 + Switch load balancing",
    "top2_lb_z": "top-2 + Switch load balancing + router z-loss",
    "top2_global_lb_z": "top-2 + global-batch Switch load balancing + router z-loss",
    "top2_bias_z": "top-2, aux-loss-free (bias) balancing + router z-loss",
}
# When the base config switches an auxiliary loss off, the ladder still needs it on its upper
# rungs; these are the paper's (and the config's default) coefficients.
DEFAULT_LB_COEF = 0.01
DEFAULT_Z_COEF = 0.001


@dataclass
class Arm:
    """One arm: its name, the criterion it is matched on (None for the MoE) and its config."""

    name: str
    config: Config
    criterion: Optional[str] = None
    mismatch: float = 0.0
    """Relative residual mismatch of the criterion, (dense - moe) / moe."""
    description: str = ""
    flops_of: Optional[ModelConfig] = None
    """The equal-compute arm only: the dense model whose training FLOPs every run of this arm
    spends, at the run's own token budget (``run_tokens``)."""

    def run_tokens(self, budget: Optional[int]) -> Optional[int]:
        """The tokens a run of this arm trains at the study's token ``budget`` (None: the
        config's train.max_tokens); None when that is the config's own."""
        if self.flops_of is None:
            return budget
        tokens_per_step = self.config.train.batch_size * self.config.model.max_seq_len
        dense_tokens = self.config.train.max_tokens if budget is None else budget
        return equal_compute_tokens(self.config.model, self.flops_of, dense_tokens,
                                    tokens_per_step)


def dense_arm_name(criterion: str) -> str:
    """The dense arm a criterion's comparison uses: ``dense_total`` for ``compute`` too."""
    return COMPARED_ARMS.get(criterion, (MOE_ARM, f"dense_{criterion}"))[1]


def check_criteria(criteria: list[str]) -> list[str]:
    allowed = ", ".join(STUDY_CRITERIA)
    for criterion in criteria:
        if criterion == "flops":
            # Training FLOPs per token (either count) are affine in the active parameters, with
            # the same slope in d_ff, so the matcher returns the dense_active model: training
            # it again would only repeat those runs (``moelab match`` shows it).
            raise ConfigError(
                f"criterion 'flops' is invalid for a study: matched on training FLOPs per token "
                f"the dense arm is the dense_active model; allowed {allowed}")
        if criterion not in STUDY_CRITERIA:
            raise ConfigError(f"criterion {short_repr(criterion)} is invalid: allowed {allowed}")
    return list(dict.fromkeys(criteria))  # keep order, drop repeats


def parse_criteria(text: str, key: str = "--criteria") -> list[str]:
    """``active,total`` -> the checked criteria; an empty list is refused naming ``key``."""
    criteria = [c.strip() for c in text.split(",") if c.strip()]
    if not criteria:
        raise MoelabError(f"{key} {short_repr(text)} is invalid: expected a comma-separated list from "
                          f"{','.join(STUDY_CRITERIA)}")
    return check_criteria(criteria)


def require_moe(config: Config) -> MoEConfig:
    """The base config's MoE section; a study of a dense base config is a ConfigError."""
    if config.model.moe is None:
        raise ConfigError(
            "model.moe=null is invalid for a study: the base config must be an MoE "
            "(the dense arms are derived from it)"
        )
    return config.model.moe


def study_arms(config: Config, criteria: list[str], match_step: int = 32) -> list[Arm]:
    """The MoE arm, then one matched dense arm per parameter criterion; ``compute`` adds the
    equal-compute MoE arm (and dense_total, its comparison, when ``total`` is not asked)."""
    moe = require_moe(config)
    shared = f" + {moe.num_shared_experts} shared" if moe.num_shared_experts else ""
    description = f"MoE, {moe.num_experts} experts, top-{moe.top_k}{shared}"
    criteria = check_criteria(criteria)
    arms = [Arm(MOE_ARM, config, description=description)]
    dense_criteria = [c for c in criteria if c != "compute"]
    if "compute" in criteria and "total" not in dense_criteria:
        dense_criteria.append("total")
    for criterion in dense_criteria:
        matched = match_dense(config.model, criterion, match_step)
        dense_config = with_model(config, replace(config.model, moe=None, d_ff=matched.config.d_ff))
        arms.append(
            Arm(
                dense_arm_name(criterion), dense_config, criterion, matched.mismatch,
                f"dense, d_ff={matched.config.d_ff}, matched on {criterion}",
            )
        )
    if "compute" in criteria:
        dense_total = next(arm for arm in arms if arm.name == dense_arm_name("total"))
        arms.append(equal_compute_arm(config, dense_total.config.model, description))
    return arms


def equal_compute_arm(config: Config, dense: ModelConfig, description: str) -> Arm:
    """The MoE trained on as many tokens as spend the training FLOPs of ``dense`` (6N x tokens);
    its mismatch is that of the FLOPs at the config's token budget, from whole steps."""
    arm = Arm(COMPUTE_ARM, config, "compute", flops_of=dense)
    tokens_per_step = config.train.batch_size * config.model.max_seq_len
    # What arm.run_tokens(None) gives: the MoE's tokens at dense's FLOPs at train.max_tokens.
    tokens = equal_compute_tokens(config.model, dense, config.train.max_tokens, tokens_per_step)
    dense_flops = count_params(dense).active * (config.train.max_tokens // tokens_per_step)
    moe_flops = count_params(config.model).active * (tokens // tokens_per_step)
    arm.mismatch = (moe_flops - dense_flops) / dense_flops
    arm.description = (f"{description}, {tokens:,} tokens: dense_total's "
                       "training FLOPs (6N x tokens)")
    return arm


def ladder_arms(config: Config) -> list[Arm]:
    """The routing-stability ladder: naive top-1, + Switch LB, top-2, + router z-loss, then the
    balancing variants at top-2 + z-loss: the Switch loss over the global batch, and the
    aux-loss-free bias instead of the loss."""
    base_moe = require_moe(config)
    if base_moe.num_experts < 2:
        raise ConfigError(
            f"model.moe.num_experts={base_moe.num_experts} is invalid for the routing "
            "ladder: top-2 needs at least 2 experts"
        )
    lb = base_moe.lb_coef or DEFAULT_LB_COEF
    z = base_moe.z_coef or DEFAULT_Z_COEF
    # top_k, lb_coef, z_coef, lb_scope, balance. Every rung sets all five, so a base config's
    # lb_scope or balance reaches no rung that does not name it. The bias rung has no balancing
    # loss in its objective (balance: bias), so its lb_coef is 0.
    settings: dict[str, tuple[int, float, float, LbScope, BalanceMode]] = {
        "naive_top1": (1, 0.0, 0.0, "micro_batch", "aux_loss"),
        "top1_lb": (1, lb, 0.0, "micro_batch", "aux_loss"),
        "top2_lb": (2, lb, 0.0, "micro_batch", "aux_loss"),
        "top2_lb_z": (2, lb, z, "micro_batch", "aux_loss"),
        "top2_global_lb_z": (2, lb, z, "global_batch", "aux_loss"),
        "top2_bias_z": (2, 0.0, z, "micro_batch", "bias"),
    }
    arms = []
    for name in LADDER_RUNGS:
        top_k, lb_coef, z_coef, lb_scope, balance = settings[name]
        moe = replace(base_moe, top_k=top_k, lb_coef=lb_coef, z_coef=z_coef,
                      lb_scope=lb_scope, balance=balance)
        rung_config = with_model(config, replace(config.model, moe=moe))
        arms.append(Arm(name, rung_config, description=LADDER_DESCRIPTIONS[name]))
    return arms


def with_model(config: Config, model: ModelConfig) -> Config:
    """``config`` with another model, checked as a loaded config is (the arm must train)."""
    return replace(config, model=model).validate()
