"""Housekeeping of run folders: a failed first start leaves the folder reusable, outputs get the
user's umask, a non-empty folder that is not a run is refused, stale temporaries are removed.

Modes are checked against ``stat`` of the files on disk and the umask the test sets itself.
"""

from __future__ import annotations

import os
import stat

import pytest

import moelab.train.loop as loop
from moelab import fileio
from moelab.cli import main
from moelab.config import load_config
from moelab.errors import MoelabError
from moelab.train import train
from moelab.train.run_folder import RunFolder
from tiny_overrides import TINY_MOE_RUN

TWO_STEPS = TINY_MOE_RUN + ["train.max_tokens=512", "train.sample_tokens=0",
                            "train.checkpoint_interval=1"]


@pytest.fixture
def umask():
    """Set a umask for the test and restore the previous one after it."""
    previous = os.umask(0o022)
    os.umask(previous)

    def set_mask(mask: int) -> None:
        os.umask(mask)

    yield set_mask
    os.umask(previous)


def _mode(path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


@pytest.mark.slow
def test_a_failed_first_start_leaves_the_folder_reusable(tmp_path, monkeypatch):
    def no_data(*args, **kwargs):
        raise MoelabError("the data source is gone")

    with monkeypatch.context() as patch:
        patch.setattr(loop, "prepare_data", no_data)
        with pytest.raises(MoelabError, match="data source is gone"):
            train(load_config(None, TWO_STEPS), tmp_path / "run")
    run = RunFolder(tmp_path / "run")
    assert run.config_path.is_file() and not run.has_progress()  # what blocked it before

    summary = train(load_config(None, TWO_STEPS), run.path)  # a plain rerun
    assert summary.status == "complete" and summary.steps == 2


@pytest.mark.slow
def test_resume_of_a_failed_first_start_takes_another_config(tmp_path, monkeypatch):
    def no_data(*args, **kwargs):
        raise MoelabError("the data source is gone")

    with monkeypatch.context() as patch:
        patch.setattr(loop, "prepare_data", no_data)
        with pytest.raises(MoelabError):
            train(load_config(None, TWO_STEPS + ["train.lr=0.5"]), tmp_path / "run")
    fixed = load_config(None, TWO_STEPS)  # the corrected config: nothing was trained to keep
    assert train(fixed, tmp_path / "run", resume=True).status == "complete"
    assert RunFolder(tmp_path / "run").read_config().train.lr == 0.01


@pytest.mark.slow
def test_a_run_with_a_checkpoint_still_needs_resume_and_the_same_config(tmp_path):
    config = load_config(None, TWO_STEPS)
    train(config, tmp_path / "run")
    with pytest.raises(MoelabError, match="already holds a run"):
        train(config, tmp_path / "run")
    with pytest.raises(MoelabError, match="differs at train.lr"):
        train(load_config(None, TWO_STEPS + ["train.lr=0.5"]), tmp_path / "run", resume=True)


@pytest.mark.slow
@pytest.mark.parametrize("resume", [False, True])
def test_a_non_empty_folder_that_is_not_a_run_is_refused_and_left_alone(tmp_path, resume):
    folder = tmp_path / "thesis"
    folder.mkdir()
    (folder / "chapter1.tex").write_text("my work")
    with pytest.raises(MoelabError, match=r"is not empty and holds no run .*chapter1.tex"):
        train(load_config(None, TWO_STEPS), folder, resume=resume)
    assert sorted(p.name for p in folder.iterdir()) == ["chapter1.tex"]


@pytest.mark.slow
def test_an_empty_folder_or_one_with_stale_temporaries_is_used(tmp_path):
    folder = tmp_path / "run"
    folder.mkdir()
    stale = folder / ".config.yaml.abc123.tmp"  # what a kill during the first write leaves
    stale.write_text("half a conf")
    train(load_config(None, TWO_STEPS), folder)
    assert not stale.exists()
    assert RunFolder(folder).is_complete()


@pytest.mark.slow
def test_stale_temporaries_in_checkpoints_are_removed_on_resume(tmp_path):
    config = load_config(None, TWO_STEPS)
    train(config, tmp_path / "run")
    run = RunFolder(tmp_path / "run")
    run.summary_path.unlink()
    stale = run.checkpoints_dir / "step_00000002" / ".model.safetensors.x1y2.tmp"
    stale.write_bytes(b"torn")
    train(config, run.path, resume=True)
    assert not stale.exists()


@pytest.mark.parametrize("mask, file_mode, folder_mode", [
    (0o022, 0o644, 0o755), (0o027, 0o640, 0o750), (0o077, 0o600, 0o700)])
def test_atomic_writes_follow_the_umask(tmp_path, umask, mask, file_mode, folder_mode):
    umask(mask)
    path = fileio.atomic_write_text(tmp_path / "new" / "report.md", "text")
    assert _mode(path) == file_mode
    assert _mode(path.parent) == folder_mode


@pytest.mark.slow
def test_every_file_and_folder_of_a_run_follows_the_umask(tmp_path, umask):
    umask(0o022)
    train(load_config(None, TWO_STEPS + ["train.sample_tokens=4"]), tmp_path / "run")
    paths = [tmp_path / "run", *(tmp_path / "run").rglob("*")]
    modes = {str(p.relative_to(tmp_path)): _mode(p) for p in paths}
    assert modes == {name: 0o755 if (tmp_path / name).is_dir() else 0o644 for name in modes}


@pytest.mark.slow
def test_an_exported_folder_follows_the_umask(tmp_path, umask):
    pytest.importorskip("transformers")
    from moelab.train.export import export_hf

    umask(0o022)
    train(load_config(None, TWO_STEPS), tmp_path / "run")
    out = export_hf(tmp_path / "run", tmp_path / "hf")
    assert _mode(out) == 0o755
    assert {_mode(p) for p in out.iterdir()} == {0o644}


@pytest.mark.slow
def test_a_sweep_removes_the_temporaries_a_killed_write_left(tmp_path):
    out = tmp_path / "sweep"
    (out / "configs").mkdir(parents=True)
    stale = [out / ".results.csv.abc123.tmp", out / "configs" / ".x.yaml.def456.tmp"]
    for path in stale:
        path.write_text("torn")
    kept = out / "notes.tmp"  # not one of atomic_write's names: someone's file
    kept.write_text("mine")
    assert main(["sweep-sparsity", "micro", "--out", str(out), "--bootstrap", "0"]) == 0
    assert not any(path.exists() for path in stale) and kept.read_text() == "mine"
