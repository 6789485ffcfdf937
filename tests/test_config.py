"""Config loading, overrides and validation; the CLI turns bad input into one line and exit 2."""

from __future__ import annotations

import subprocess
import sys

import pytest

from moelab.config import (
    Config, MoEConfig, dump_config, load_config, override, preset_names, read_raw, to_dict,
)
from moelab.errors import ConfigError


def write(tmp_path, text, name="cfg.yaml"):
    path = tmp_path / name
    path.write_text(text)
    return path


def test_partial_yaml_keeps_defaults(tmp_path):
    cfg = load_config(write(tmp_path, "model:\n  d_model: 64\n  n_heads: 4\n  n_kv_heads: 2\n"))
    assert cfg.model.d_model == 64 and cfg.model.n_kv_heads == 2
    assert cfg.model.n_layers == Config().model.n_layers
    assert cfg.model.moe is None
    assert cfg.train == Config().train


def test_moe_section_defaults_and_sparsity(tmp_path):
    cfg = load_config(write(tmp_path, "model:\n  moe: {num_experts: 8}\n"))
    assert cfg.model.moe == MoEConfig(num_experts=8)
    assert cfg.model.moe.sparsity == pytest.approx(0.75)


@pytest.mark.parametrize("top_k, norm_topk_prob, renormalizes",
                         [(2, None, True), (1, None, False), (1, True, True), (2, False, False)])
def test_norm_topk_prob_default_is_mixtral_for_top_k_above_1_and_switch_for_top_1(
        top_k, norm_topk_prob, renormalizes):
    moe = MoEConfig(top_k=top_k, norm_topk_prob=norm_topk_prob)
    assert moe.renormalizes_weights is renormalizes


def test_yaml_round_trip(tmp_path):
    cfg = load_config("demo", ["model.moe.top_k=1", "train.lr=1e-3"])
    again = load_config(write(tmp_path, dump_config(cfg)))
    assert again == cfg
    assert to_dict(again)["model"]["moe"]["top_k"] == 1


def test_dotted_overrides():
    cfg = load_config("demo", ["model.d_model=256", "model.moe=null", "train.max_tokens=2e6"])
    assert cfg.model.d_model == 256 and cfg.model.moe is None
    assert cfg.train.max_tokens == 2_000_000 and isinstance(cfg.train.max_tokens, int)
    moe_again = override(cfg, ["model.moe.top_k=1"])
    assert moe_again.model.moe == MoEConfig(top_k=1)


@pytest.mark.parametrize(
    "overrides, message",
    [
        (["model.d_model=0"], "model.d_model=0 is invalid: must be > 0"),
        (["model.d_model=130"], "model.d_model=130 is invalid: must be divisible by n_heads (4)"),
        (["model.n_kv_heads=3"], "model.n_kv_heads=3 is invalid: must divide n_heads (4)"),
        (["model.moe.top_k=5"], "model.moe.top_k=5 is invalid: allowed 1..num_experts (4)"),
        (["model.moe.bogus=1"], "model.moe.bogus is not a known key"),
        (["trian.lr=1"], "trian is not a known key"),
        (["model.d_model=wide"], "model.d_model='wide' is invalid: expected a whole number"),
        (["model.tie_embeddings=3"], "model.tie_embeddings=3 is invalid: expected true or false"),
        (["train.lr=-1"], "train.lr=-1.0 is invalid: must be > 0"),
        (["train.seed=-3"], "train.seed=-3 is invalid: must be >= 0"),
        (["train.lr=nan"], "train.lr=nan is invalid: must be a finite number > 0"),
        (["model.rope_theta=inf"], "model.rope_theta=inf is invalid: must be a finite number > 0"),
        (["train.grad_clip=nan"], "train.grad_clip=nan is invalid: must be a finite number >= 0"),
        (["model.d_model"], "override 'model.d_model' is invalid: expected KEY=VALUE"),
    ],
)
def test_invalid_values_name_key_value_and_rule(overrides, message):
    with pytest.raises(ConfigError) as info:
        load_config("demo", overrides)
    assert message in str(info.value)
    assert "\n" not in str(info.value)


def test_unknown_source_lists_presets():
    with pytest.raises(ConfigError, match="neither a file nor a preset"):
        read_raw("no-such-config")
    assert {"demo", "paper"} <= set(preset_names())


def test_bad_yaml_file(tmp_path):
    with pytest.raises(ConfigError, match=r"not valid YAML at line \d"):
        load_config(write(tmp_path, "model:\n  d_model: [1, \n"))
    with pytest.raises(ConfigError, match="expected a mapping"):
        load_config(write(tmp_path, "- 1\n- 2\n"))


@pytest.mark.slow
def test_cli_bad_config_exits_2_with_one_line(tmp_path):
    bad = write(tmp_path, "model:\n  n_heads: 3\n")
    proc = subprocess.run(
        [sys.executable, "-m", "moelab", "params", str(bad)], capture_output=True, text=True,
    )
    assert proc.returncode == 2
    assert proc.stderr.strip().count("\n") == 0
    assert "model.d_model=256 is invalid: must be divisible by n_heads (3)" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_a_study_preset_loads_as_its_moe_arm():
    # Its study.base is inherited and its study: section dropped (only `moelab study` reads it).
    assert load_config("paper-budgets") == load_config("paper")
    assert load_config("ablation") == load_config("paper", ["train.max_tokens=40500000"])
    with pytest.raises(ConfigError, match="study is not a known key"):
        load_config("ablation", ["study.seeds=2"])
