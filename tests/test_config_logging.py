"""The config's choices among names (``Literal`` types) and its ``train.logging`` section.

A choice outside its names is refused in one line naming the key, the value and the names
allowed (exit 2 from the CLI). The logging keys moved from flat ``train`` keys into
``train.logging``: the flat spelling still loads, with one note per key, and folders planned or
trained before the move (the house fixtures, written by an earlier moelab) still resume without
training anything again.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml

import moelab.config.legacy as legacy
from moelab.cli import main
from moelab.config import load_config, to_dict
from moelab.errors import ConfigError
from one_line_errors import refused_on_one_line

HOUSE = Path(__file__).parent / "fixtures" / "house"

NOTE = "moelab: note: train.{0} is deprecated: use train.logging.{0}"


@pytest.fixture(autouse=True)
def fresh_notes(monkeypatch):
    """Each test starts as a new process would: no flat key noted yet."""
    monkeypatch.setattr(legacy, "_noted", set())


# --------------------------------------------------------------------------------------------
# Choices among names
# --------------------------------------------------------------------------------------------

CHOICES = [  # (override, the message, spelt out by hand)
    ("model.moe.balance=aux", "model.moe.balance='aux' is invalid: allowed aux_loss, bias, both"),
    ("model.moe.lb_scope=global",
     "model.moe.lb_scope='global' is invalid: allowed micro_batch, global_batch"),
    ("train.schedule=linear", "train.schedule='linear' is invalid: allowed cosine, wsd"),
    ("train.decay_shape=cosine", "train.decay_shape='cosine' is invalid: allowed linear, sqrt"),
    ("train.dtype=float16", "train.dtype='float16' is invalid: allowed float32, bfloat16"),
    ("train.dtype=null", "train.dtype=null is invalid: allowed float32, bfloat16"),
    ("train.schedule=1", "train.schedule=1 is invalid: allowed cosine, wsd"),  # not the text '1'
]


@pytest.mark.parametrize("override, message", CHOICES)
def test_a_choice_outside_its_names_is_one_line_naming_them(override, message, capsys):
    err = refused_on_one_line(capsys, ["params", "demo", "--set", override], message)
    assert err == f"moelab: error: {message}\n"


@pytest.mark.parametrize("key, names", [
    ("model.moe.balance", ["aux_loss", "bias", "both"]),
    ("model.moe.lb_scope", ["micro_batch", "global_batch"]),
    ("train.schedule", ["cosine", "wsd"]),
    ("train.decay_shape", ["linear", "sqrt"]),
    ("train.dtype", ["float32", "bfloat16"]),
])
def test_every_named_choice_loads(key, names):
    section, name = key.rsplit(".", 1)
    for value in names:
        node = to_dict(load_config("demo", [f"{key}={value}"]))
        for part in section.split("."):
            node = node[part]
        assert node[name] == value


def test_a_choice_in_a_config_file_is_checked_too(tmp_path, capsys):
    path = tmp_path / "bad.yaml"
    path.write_text("model:\n  moe:\n    balance: Bias\n")
    refused_on_one_line(capsys, ["params", str(path)],
                        "model.moe.balance='Bias' is invalid: allowed aux_loss, bias, both")


# --------------------------------------------------------------------------------------------
# train.logging and its flat keys
# --------------------------------------------------------------------------------------------


def test_the_logging_keys_live_in_their_section():
    config = load_config("demo", ["train.logging.progress=false", "train.logging.wandb_tags=a,b"])
    assert config.train.logging.progress is False
    assert config.train.logging.wandb_tags == ["a", "b"]
    written = to_dict(config)["train"]
    assert "progress" not in written and written["logging"]["progress"] is False


def test_a_flat_override_loads_with_one_note_per_key(capsys):
    config = load_config("demo", ["train.progress=false", "train.wandb_group=g",
                                  "train.wandb_group=h"])
    assert config.train.logging.progress is False
    assert config.train.logging.wandb_group == "h"  # the last given wins, as for any key
    assert capsys.readouterr().err.splitlines() == [NOTE.format("progress"),
                                                    NOTE.format("wandb_group")]


def test_the_cli_notes_a_flat_key_and_goes_on(capsys):
    assert main(["params", "demo", "--set", "train.tensorboard=false"]) == 0
    assert capsys.readouterr().err == NOTE.format("tensorboard") + "\n"


def test_a_flat_config_file_loads_as_its_section(tmp_path, capsys):
    path = tmp_path / "old.yaml"
    path.write_text("train:\n  lr: 0.002\n  progress: false\n  wandb_tags: [x]\n")
    config = load_config(str(path))
    assert (config.train.lr, config.train.logging.progress) == (0.002, False)
    assert config.train.logging.wandb_tags == ["x"]
    assert capsys.readouterr().err.splitlines() == [NOTE.format("progress"),
                                                    NOTE.format("wandb_tags")]


def test_a_flat_override_beats_the_section_a_file_gives(tmp_path):
    path = tmp_path / "new.yaml"
    path.write_text("train:\n  logging:\n    progress: true\n")
    assert load_config(str(path), ["train.progress=false"]).train.logging.progress is False
    path.write_text("train:\n  progress: true\n")
    assert load_config(str(path), ["train.logging.progress=false"]).train.logging.progress is False


def test_a_key_given_both_ways_with_two_values_is_refused(tmp_path, capsys):
    path = tmp_path / "both.yaml"
    path.write_text("train:\n  progress: false\n  logging:\n    progress: true\n")
    refused_on_one_line(capsys, ["params", str(path)], "train.progress=False and "
                        "train.logging.progress=True are both given: keep train.logging.progress")


@pytest.mark.parametrize("section", ["5", "[1]", "on"])
def test_a_logging_section_that_is_no_mapping_is_named_beside_a_flat_key(tmp_path, capsys,
                                                                          section):
    path = tmp_path / "bad.yaml"
    path.write_text(f"train:\n  logging: {section}\n  progress: false\n")
    refused_on_one_line(capsys, ["config", "show", str(path)],
                        "train.logging=", "is invalid: expected a mapping of keys")


def test_a_bad_logging_value_names_its_section_key(capsys):
    refused_on_one_line(capsys, ["params", "demo", "--set", "train.logging.wandb=maybe"],
                        "train.logging.wandb='maybe' is invalid: expected true or false")
    with pytest.raises(ConfigError, match=r"^train\.logging\.wandb_name='a\\nb' is invalid"):
        load_config("demo", ['train.wandb_name="a\\nb"'])  # the flat key, checked as its new one


# --------------------------------------------------------------------------------------------
# Folders written before the move
# --------------------------------------------------------------------------------------------


def tree(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*"))
            if p.is_file()}


def test_the_fixtures_spell_the_keys_flat():
    """What the two tests below rely on: the folders were written before train.logging."""
    run_config = yaml.safe_load((HOUSE / "study/runs/moe/seed0/config.yaml").read_text())
    assert run_config["train"]["progress"] is False and "logging" not in run_config["train"]
    grid = (HOUSE / "sweep-tokens/grid.json").read_text()
    assert '"train.progress=false"' in grid


def test_a_stored_sweep_folder_reports_without_the_note(tmp_path, capsys):
    """Its grid.json is a record moelab wrote, its flat key spelt as then: no note to the user."""
    folder = tmp_path / "sweep-tokens"
    shutil.copytree(HOUSE / "sweep-tokens", folder)
    assert "train.progress=false" in (folder / "grid.json").read_text()
    capsys.readouterr()
    assert main(["report", str(folder)]) == 0
    assert "deprecated" not in capsys.readouterr().err


@pytest.mark.slow
def test_a_study_planned_before_the_move_resumes_without_training(tmp_path, capsys):
    folder = tmp_path / "study"
    shutil.copytree(HOUSE / "study", folder)
    runs_before = tree(folder / "runs")
    argv = ["study", "demo", "--seeds", "2", "--out", str(folder)]
    for item in ["model.vocab_size=320", "model.d_model=32", "model.n_layers=2",
                 "model.n_heads=2", "model.n_kv_heads=2", "model.max_seq_len=32",
                 "model.d_ff=64", "model.moe.d_expert=32", "train.batch_size=8",
                 "train.max_tokens=1536", "train.eval_interval=3", "train.eval_windows=4",
                 "train.log_interval=3", "train.logging.progress=false",
                 "data.max_train_stories=300"]:
        argv += ["--set", item]
    # Planned before train.numerics too: its runs trained native, and today's default
    # (portable) is another config, refused with the fix named rather than mixed in.
    refused_on_one_line(capsys, argv, "train.numerics='native' (now 'portable')",
                        "resume with --set train.numerics=native")
    assert tree(folder / "runs") == runs_before
    assert main([*argv, "--set", "train.numerics=native"]) == 0, capsys.readouterr().err
    assert tree(folder / "runs") == runs_before  # nothing trained, nothing rewritten
    assert "deprecated" not in capsys.readouterr().err  # its own records load silently


@pytest.mark.slow
def test_a_sweep_planned_before_the_move_resumes_without_training(tmp_path, capsys):
    folder = tmp_path / "sweep-tokens"
    shutil.copytree(HOUSE / "sweep-tokens", folder)
    runs_before = tree(folder / "runs")
    grid = yaml.safe_load((folder / "grid.json").read_text())  # JSON is YAML
    assert "train.progress=false" in grid["overrides"]
    grid["overrides"] = [item.replace("train.progress", "train.logging.progress")
                         for item in grid["overrides"]]
    grid_file = tmp_path / "house-tokens.yaml"
    grid_file.write_text(yaml.safe_dump(grid))
    args = ["sweep-sparsity", str(grid_file), "--out", str(folder), "--bootstrap", "16",
            "--starts", "8"]
    refused_on_one_line(capsys, args, "planned before train.numerics existed",
                        "resume with --set train.numerics=native")
    assert tree(folder / "runs") == runs_before
    args += ["--set", "train.numerics=native"]
    assert main(args) == 0, capsys.readouterr().err
    assert tree(folder / "runs") == runs_before
    # Another value of the key is another grid, as it was before the move.
    grid_file.write_text(yaml.safe_dump({**grid, "overrides": [
        item.replace("progress=false", "progress=true") for item in grid["overrides"]]}))
    refused_on_one_line(capsys, args, "already holds another sweep grid")
