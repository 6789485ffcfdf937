"""The arms of a study, each a copy of one base MoE config with its FFN or routing replaced.

Dense-vs-MoE arms (``moe``, ``dense_active``, ``dense_total``) differ only in the FFN: a dense arm
drops ``model.moe`` and takes the ``d_ff`` the matcher chose. (A study has no FLOP-matched arm:
under moelab's FLOP count it is the ``dense_active`` model, see ``check_criteria``.) The routing ladder's
rungs differ only in ``model.moe`` (top_k, the auxiliary-loss coefficients, the balancing
scope and mode). Everything else
-- tokenizer, data, optimizer, schedule, token budget, evaluation -- is the base config's.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Optional

from moelab.accounting import match_dense
from moelab.config import Config, ModelConfig
from moelab.errors import ConfigError, MoelabError, short_repr

MOE_ARM = "moe"
STUDY_CRITERIA = ("active", "total")
DEFAULT_CRITERIA = STUDY_CRITERIA
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


def dense_arm_name(criterion: str) -> str:
    return f"dense_{criterion}"


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


def require_moe(config: Config) -> None:
    if config.model.moe is None:
        raise ConfigError(
            "model.moe=null is invalid for a study: the base config must be an MoE "
            "(the dense arms are derived from it)"
        )


def study_arms(config: Config, criteria: list[str], match_step: int = 32) -> list[Arm]:
    """The MoE arm, then one matched dense arm per criterion."""
    require_moe(config)
    moe = config.model.moe
    shared = f" + {moe.num_shared_experts} shared" if moe.num_shared_experts else ""
    arms = [Arm(MOE_ARM, config,
                description=f"MoE, {moe.num_experts} experts, top-{moe.top_k}{shared}")]
    for criterion in check_criteria(criteria):
        matched = match_dense(config.model, criterion, match_step)
        dense_config = with_model(config, replace(config.model, moe=None, d_ff=matched.config.d_ff))
        arms.append(
            Arm(
                dense_arm_name(criterion), dense_config, criterion, matched.mismatch,
                f"dense, d_ff={matched.config.d_ff}, matched on {criterion}",
            )
        )
    return arms


def ladder_arms(config: Config) -> list[Arm]:
    """The routing-stability ladder: naive top-1, + Switch LB, top-2, + router z-loss, then the
    balancing variants at top-2 + z-loss: the Switch loss over the global batch, and the
    aux-loss-free bias instead of the loss."""
    require_moe(config)
    if config.model.moe.num_experts < 2:
        raise ConfigError(
            f"model.moe.num_experts={config.model.moe.num_experts} is invalid for the routing "
            "ladder: top-2 needs at least 2 experts"
        )
    lb = config.model.moe.lb_coef or DEFAULT_LB_COEF
    z = config.model.moe.z_coef or DEFAULT_Z_COEF
    # top_k, lb_coef, z_coef, lb_scope, balance. Every rung sets all five, so a base config's
    # lb_scope or balance reaches no rung that does not name it. The bias rung has no balancing
    # loss in its objective (balance: bias), so its lb_coef is 0.
    settings = {
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
        moe = replace(config.model.moe, top_k=top_k, lb_coef=lb_coef, z_coef=z_coef,
                      lb_scope=lb_scope, balance=balance)
        rung_config = with_model(config, replace(config.model, moe=moe))
        arms.append(Arm(name, rung_config, description=LADDER_DESCRIPTIONS[name]))
    return arms


def with_model(config: Config, model: ModelConfig) -> Config:
    """``config`` with another model, checked as a loaded config is (the arm must train)."""
    return replace(config, model=model).validate()
