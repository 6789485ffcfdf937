"""Confinement: a path read back from a run, study or sweep file stays inside its folder.

Each case hand-edits a file of a real (tiny) run the way a copied folder or a crafted one would
look, and checks that the command refuses on one line and that nothing outside the run was
read into it or written.
"""

from __future__ import annotations

import json
import shutil

import pytest
import yaml

from moelab.cli import main
from moelab.config import load_config
from moelab.errors import ConfigError
from moelab.train import train
from moelab.train.run_folder import RunFolder
from one_line_errors import refused_on_one_line
from tiny_overrides import TINY_MOE_RUN

TWO_STEPS = TINY_MOE_RUN + ["train.max_tokens=512", "train.sample_tokens=0"]


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory):
    """Two finished tiny runs of different seeds: "victim" and "other"."""
    root = tmp_path_factory.mktemp("confinement")
    with pytest.MonkeyPatch.context() as patch:  # the session's cache, as conftest sets it
        patch.setenv("MOELAB_CACHE", str(tmp_path_factory.getbasetemp() / "moelab-cache"))
        for name, seed in (("victim", 0), ("other", 1)):
            train(load_config(None, TWO_STEPS + [f"train.seed={seed}"]), root / name)
    return root


@pytest.fixture
def victim(two_runs, tmp_path):
    """A copy of the victim run (each test damages its own), beside the untouched other run."""
    shutil.copytree(two_runs / "victim", tmp_path / "victim")
    shutil.copytree(two_runs / "other", tmp_path / "other")
    return RunFolder(tmp_path / "victim")


def _point_latest_at(run: RunFolder, folder: str) -> None:
    pointer = run.checkpoints_dir / "latest.json"
    record = json.loads(pointer.read_text())
    pointer.write_text(json.dumps({**record, "folder": folder}))


@pytest.mark.slow
@pytest.mark.parametrize("folder", ["{other}/checkpoints/step_00000002",
                                    "../../other/checkpoints/step_00000002",
                                    "step_00000002/../../../other/checkpoints/step_00000002",
                                    "", 7])
def test_a_latest_pointer_out_of_the_run_is_refused_by_eval_generate_export(victim, capsys,
                                                                            folder):
    other = victim.path.parent / "other"
    _point_latest_at(victim, folder.format(other=other) if isinstance(folder, str) else folder)
    for args in (["eval", str(victim.path)],
                 ["generate", str(victim.path), "--prompt", "Once", "--max-new-tokens", "1"],
                 ["export-hf", str(victim.path), str(victim.path.parent / "hf")]):
        refused_on_one_line(capsys, args, "latest.json names folder", "step_NNNNNNNN")
    assert not (victim.path.parent / "hf").exists()


@pytest.mark.slow
def test_a_symlinked_checkpoint_folder_is_refused(victim, capsys):
    """The pointer names a plain step folder, but the folder is a link into another run."""
    step = victim.checkpoints_dir / "step_00000002"
    shutil.rmtree(step)
    step.symlink_to(victim.path.parent / "other" / "checkpoints" / "step_00000002")
    refused_on_one_line(capsys, ["eval", str(victim.path)], "outside its run folder", "refused")


@pytest.mark.slow
def test_resume_refuses_another_runs_checkpoint_and_does_not_mark_the_run_complete(victim, capsys):
    victim.summary_path.unlink()  # as if killed after its last checkpoint
    metrics = victim.metrics_path.read_bytes()
    _point_latest_at(victim, str(victim.path.parent / "other" / "checkpoints" / "step_00000002"))
    config_file = victim.path.parent / "tiny.yaml"
    config_file.write_text("{}\n")
    sets = [arg for item in TWO_STEPS for arg in ("--set", item)]
    refused_on_one_line(capsys, ["train", str(config_file), "--out", str(victim.path), "--resume",
                             *sets], "latest.json names folder")
    assert not victim.summary_path.exists()
    assert victim.metrics_path.read_bytes() == metrics


def _set_cache_dir(run: RunFolder, cache_dir: str) -> None:
    raw = yaml.safe_load(run.config_path.read_text())
    raw["data"]["cache_dir"] = cache_dir
    run.config_path.write_text(yaml.safe_dump(raw))


@pytest.mark.slow
def test_eval_refuses_a_cache_dir_outside_the_run_and_the_cache_root(victim, capsys):
    elsewhere = victim.path.parent / "system-folder"
    _set_cache_dir(victim, str(elsewhere))
    refused_on_one_line(capsys, ["eval", str(victim.path)], f"data.cache_dir={elsewhere}",
                    "refused", "--cache-dir")
    assert not elsewhere.exists()  # no token cache was written there
    _set_cache_dir(victim, str(victim.path / "cache" / ".." / ".." / "system-folder"))
    refused_on_one_line(capsys, ["eval", str(victim.path)], "refused")
    assert not elsewhere.exists()


@pytest.mark.slow
def test_eval_uses_a_cache_dir_inside_the_run_or_given_explicitly(victim, capsys):
    capsys.readouterr()
    assert main(["eval", str(victim.path), "--json"]) == 0
    reference = json.loads(capsys.readouterr().out)["val_loss"]

    _set_cache_dir(victim, str(victim.path / "cache"))
    assert main(["eval", str(victim.path), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["val_loss"] == reference
    assert (victim.path / "cache").is_dir()

    _set_cache_dir(victim, "/no/such/system/folder")
    chosen = victim.path.parent / "my-cache"
    assert main(["eval", str(victim.path), "--json", "--cache-dir", str(chosen)]) == 0
    assert json.loads(capsys.readouterr().out)["val_loss"] == reference
    assert chosen.is_dir()


@pytest.mark.parametrize("name", ["../../x", "a/b", "..", ".hidden", "", "x" * 65, "/abs"])
def test_sweep_size_names_that_are_not_one_plain_folder_name_are_refused(tmp_path, name):
    from moelab.sweep.grid import load_grid

    grid = tmp_path / "grid.yaml"
    grid.write_text(yaml.safe_dump({
        "name": "g", "base": "demo", "sizes": [{"name": name, "d_ff": 64}],
        "sparsities": [0], "token_budgets": [256]}))
    with pytest.raises(ConfigError, match="size name .* is invalid"):
        load_grid(str(grid))


def test_a_sweep_grid_name_that_climbs_out_needs_an_explicit_out(tmp_path, capsys,
                                                                 monkeypatch):
    grid = tmp_path / "grid.yaml"
    grid.write_text(yaml.safe_dump({
        "name": "../../x", "base": "demo", "sizes": [{"name": "a", "d_ff": 64}],
        "sparsities": [0], "token_budgets": [256]}))
    monkeypatch.chdir(tmp_path)
    refused_on_one_line(capsys, ["sweep-sparsity", str(grid)], "grid name '../../x'", "--out")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["grid.yaml"]
