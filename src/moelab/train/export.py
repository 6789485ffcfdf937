"""Export a run to a Hugging Face folder: ``LlamaForCausalLM`` (dense) or ``MixtralForCausalLM``.

The one weight mapping of the project lives here (``to_hf_state_dict``); tests that port moelab
weights into ``transformers`` use it too. It writes Hugging Face's on-disk checkpoint names
(Mixtral experts one by one, ``block_sparse_moe.experts.{e}.w1``), which every transformers
version loads, whatever layout it uses in memory. No tensor needs permuting: moelab's RoPE is
the rotate-half convention of ``transformers`` and its expert slices are laid out like
``nn.Linear`` weights.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError
from safetensors.torch import save_file

from moelab.config import ModelConfig
from moelab.data import EOT_TEXT
from moelab.errors import MoelabError, short_repr
from moelab.fileio import current_umask, read_json
from moelab.train.trained_run import load_run

# moelab name -> Hugging Face name, for everything but the stacked experts.
_RENAMES = [
    (r"tok_embeddings\.weight", "model.embed_tokens.weight"),
    (r"norm\.weight", "model.norm.weight"),
    (r"output\.weight", "lm_head.weight"),
    (r"layers\.(\d+)\.attention\.wq\.weight", r"model.layers.\1.self_attn.q_proj.weight"),
    (r"layers\.(\d+)\.attention\.wk\.weight", r"model.layers.\1.self_attn.k_proj.weight"),
    (r"layers\.(\d+)\.attention\.wv\.weight", r"model.layers.\1.self_attn.v_proj.weight"),
    (r"layers\.(\d+)\.attention\.wo\.weight", r"model.layers.\1.self_attn.o_proj.weight"),
    (r"layers\.(\d+)\.attention_norm\.weight", r"model.layers.\1.input_layernorm.weight"),
    (r"layers\.(\d+)\.ffn_norm\.weight", r"model.layers.\1.post_attention_layernorm.weight"),
    # dense SwiGLU: w1 = gate, w3 = up, w2 = down
    (r"layers\.(\d+)\.feed_forward\.w1\.weight", r"model.layers.\1.mlp.gate_proj.weight"),
    (r"layers\.(\d+)\.feed_forward\.w3\.weight", r"model.layers.\1.mlp.up_proj.weight"),
    (r"layers\.(\d+)\.feed_forward\.w2\.weight", r"model.layers.\1.mlp.down_proj.weight"),
    # MoE router
    (r"layers\.(\d+)\.feed_forward\.router\.weight", r"model.layers.\1.block_sparse_moe.gate.weight"),
]
_STACKED_EXPERTS = re.compile(r"layers\.(\d+)\.feed_forward\.(w[123])")


def to_hf_state_dict(state_dict: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """moelab weights under Hugging Face's checkpoint names (Llama / Mixtral)."""
    hf: dict[str, torch.Tensor] = {}
    for name, tensor in state_dict.items():
        stacked = _STACKED_EXPERTS.fullmatch(name)
        if stacked:  # (E, ...) -> one tensor per expert
            layer, which = stacked.groups()
            for expert, weight in enumerate(tensor.unbind(0)):
                hf[f"model.layers.{layer}.block_sparse_moe.experts.{expert}.{which}.weight"] = weight
            continue
        for pattern, replacement in _RENAMES:
            if re.fullmatch(pattern, name):
                hf[re.sub(pattern, replacement, name)] = tensor
                break
        else:
            raise MoelabError(f"cannot export parameter {short_repr(name)}: no Hugging Face name for it")
    return {name: tensor.detach().cpu().contiguous() for name, tensor in hf.items()}


def with_logit_scale_folded(model) -> dict[str, torch.Tensor]:
    """The model's weights with ``logit_scale`` folded into the final norm's weight: Hugging
    Face has no logit multiplier, and scaling the normed hidden state scales the logits of a
    tied head and an untied one alike."""
    state_dict = dict(model.state_dict())
    if model.cfg.logit_scale != 1.0:
        state_dict["norm.weight"] = state_dict["norm.weight"] * model.cfg.logit_scale
    return state_dict


_EXPERT_BIAS = re.compile(r"layers\.(\d+)\.feed_forward\.expert_bias")


def without_expert_bias(state_dict: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The state dict without the aux-loss-free balancing biases, which must all be zero:
    Mixtral chooses the top-k experts by the probabilities it weights them with and has no
    bias on the choice alone, so a nonzero one is refused (a zero one routes exactly as
    Mixtral does)."""
    kept = {}
    for name, tensor in state_dict.items():
        biased = _EXPERT_BIAS.fullmatch(name)
        if biased is None:
            kept[name] = tensor
        elif bool(tensor.any()):
            raise MoelabError(
                f"model.moe.balance with a nonzero expert bias (layer {biased.group(1)}, "
                f"largest |b| {float(tensor.abs().max()):.3g}) cannot be exported: Mixtral has no "
                f"routing bias on the top-k choice; allowed: balance aux_loss")
    return kept


def hf_config(cfg: ModelConfig, eot_id: int):
    """The ``LlamaConfig`` (dense) or ``MixtralConfig`` (MoE) of ``cfg``."""
    # transformers is optional (moelab[hf]) and slow to import: only an export needs it.
    from transformers import LlamaConfig, MixtralConfig

    common: dict[str, Any] = dict(
        vocab_size=cfg.vocab_size, hidden_size=cfg.d_model, num_hidden_layers=cfg.n_layers,
        num_attention_heads=cfg.n_heads, num_key_value_heads=cfg.n_kv_heads,
        head_dim=cfg.head_dim, max_position_embeddings=cfg.max_seq_len,
        rms_norm_eps=cfg.norm_eps, rope_theta=cfg.rope_theta,
        tie_word_embeddings=cfg.tie_embeddings, hidden_act="silu",
        initializer_range=cfg.init_std, bos_token_id=eot_id, eos_token_id=eot_id,
    )
    if cfg.moe is None:
        return LlamaConfig(intermediate_size=cfg.d_ff, attention_bias=False, mlp_bias=False,
                           **common)
    if cfg.moe.num_shared_experts:  # Mixtral has none; Qwen2-MoE's shared expert is gated
        raise MoelabError(
            f"model.moe.num_shared_experts={cfg.moe.num_shared_experts} cannot be exported: "
            "Mixtral has no shared experts; allowed: 0")
    if not cfg.moe.renormalizes_weights:  # Mixtral always renormalises the top-k weights
        setting = {None: "null", True: "true", False: "false"}[cfg.moe.norm_topk_prob]
        raise MoelabError(
            f"model.moe.norm_topk_prob={setting} (top_k={cfg.moe.top_k}) cannot be "
            "exported: Mixtral renormalises the top-k routing weights; allowed: norm_topk_prob "
            "true, or null with top_k > 1")
    return MixtralConfig(intermediate_size=cfg.moe.d_expert,
                         num_local_experts=cfg.moe.num_experts,
                         num_experts_per_tok=cfg.moe.top_k,
                         router_aux_loss_coef=cfg.moe.lb_coef, sliding_window=None, **common)


def write_legacy_rope_theta(config_json: Path, rope_theta: float) -> None:
    """Also name the RoPE base as top-level ``rope_theta``: transformers 5 writes only
    ``rope_parameters``, and a 4.x reader without the key would load its default base (1e6
    for Mixtral) and compute other logits without a word."""
    hf_config_dict = read_json(config_json)
    hf_config_dict["rope_theta"] = rope_theta
    config_json.write_text(json.dumps(hf_config_dict, indent=2, sort_keys=True) + "\n", "utf-8")


def export_hf(run_dir: str | Path, out_dir: str | Path) -> Path:
    """Write ``out_dir`` so that ``AutoModelForCausalLM`` and ``AutoTokenizer`` load the run.

    The folder is assembled beside ``out_dir`` and renamed into place, so it is never seen
    half written; an existing non-empty ``out_dir`` is refused rather than overwritten.
    """
    try:  # optional (moelab[hf]): only an export needs it
        from transformers import PreTrainedTokenizerFast
    except ImportError:
        raise MoelabError("export-hf needs the transformers package: pip install transformers") from None
    out_dir = Path(out_dir)
    if out_dir.exists() and (not out_dir.is_dir() or any(out_dir.iterdir())):
        raise MoelabError(f"cannot export to {out_dir}: it exists and is not an empty folder")
    model, tokenizer = load_run(run_dir)
    config = hf_config(model.cfg, tokenizer.eot_id)  # refuses what Hugging Face cannot hold
    state_dict = without_expert_bias(with_logit_scale_folded(model))  # and refuses a bias
    try:
        out_dir.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.", dir=out_dir.parent))
        os.chmod(staging, 0o777 & ~current_umask())  # mkdtemp's 0700 would hide it from others
    except OSError as exc:
        raise MoelabError(f"cannot write {out_dir}: {exc.strerror or exc}") from None
    try:
        config.save_pretrained(staging)
        write_legacy_rope_theta(staging / "config.json", model.cfg.rope_theta)
        save_file(to_hf_state_dict(state_dict), staging / "model.safetensors",
                  metadata={"format": "pt"})
        PreTrainedTokenizerFast(
            tokenizer_file=str(tokenizer.path), bos_token=EOT_TEXT, eos_token=EOT_TEXT,
            unk_token=EOT_TEXT, pad_token=EOT_TEXT, model_max_length=model.cfg.max_seq_len,
        ).save_pretrained(staging)
        for path in staging.iterdir():  # safetensors writes 0600 whatever the umask
            os.chmod(path, 0o666 & ~current_umask())
        if out_dir.is_dir():
            out_dir.rmdir()  # empty (checked above)
        os.replace(staging, out_dir)
    except (OSError, SafetensorError) as exc:  # a full disk, a folder we may not write
        shutil.rmtree(staging, ignore_errors=True)
        raise MoelabError(f"cannot write {out_dir}: {getattr(exc, 'strerror', None) or exc}") from None
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return out_dir
