"""Checkpoint integrity: every file's sha256 is recorded when written and checked when loaded.

The reference hashes are computed here with hashlib from the bytes on disk. A damaged file is
damaged the way a disk error or a hand edit would leave it: still a valid file (one float of
the weights changed, one JSON field edited), so only the hash can tell.
"""

from __future__ import annotations

import hashlib
import json
import shutil

import pytest

import moelab.train.loop as loop
from moelab.codec import to_json
from moelab.config import load_config
from moelab.train import train
from moelab.train.run_folder import RunFolder
from one_line_errors import refused_on_one_line
from tiny_overrides import TIMING_KEYS, TINY_MOE_RUN

# 6 steps of 256 tokens, a checkpoint every 2 steps.
SIX_STEPS = TINY_MOE_RUN + ["train.max_tokens=1536", "train.checkpoint_interval=2",
                            "train.eval_interval=2", "train.sample_tokens=4"]


class _Stop(Exception):
    """Raised by the patched step to stop a run as a kill would, after a checkpoint."""


def _train_until_step(config, run_dir, last_step: int, monkeypatch) -> None:
    """Train, stopping as step ``last_step + 1`` begins (its metrics then end at last_step)."""
    real_step, begun = loop.optimizer_step, []

    def step_or_stop(*args, **kwargs):
        begun.append(True)
        if len(begun) == last_step + 1:
            raise _Stop
        return real_step(*args, **kwargs)

    with monkeypatch.context() as patch:
        patch.setattr(loop, "optimizer_step", step_or_stop)
        with pytest.raises(_Stop):
            train(config, run_dir)


@pytest.fixture(scope="module")
def interrupted(tmp_path_factory):
    """A run stopped after its step-4 checkpoint (as if killed at step 5), kept pristine."""
    folder = tmp_path_factory.mktemp("integrity") / "run"
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("MOELAB_CACHE", str(tmp_path_factory.getbasetemp() / "moelab-cache"))
        _train_until_step(load_config(None, SIX_STEPS), folder, 4, patch)
    return folder


@pytest.fixture
def run(interrupted, tmp_path):
    shutil.copytree(interrupted, tmp_path / "run")
    return RunFolder(tmp_path / "run")


def _files(folder) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*"))
            if p.is_file()}


def _sha256(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.mark.slow
def test_the_state_records_the_sha256_of_every_file_and_the_pointer_that_of_the_state(run):
    step = run.checkpoints_dir / "step_00000004"
    state = json.loads((step / "trainer_state.json").read_text())
    assert state["sha256"] == {name: _sha256(step / name) for name in
                               ("model.safetensors", "trainer_state.safetensors", "config.yaml")}
    pointer = json.loads((run.checkpoints_dir / "latest.json").read_text())
    assert pointer == {"step": 4, "folder": "step_00000004",
                       "sha256": _sha256(step / "trainer_state.json")}


def _change_last_float(path) -> None:
    """Flip a bit of the file's last byte: the last element of the last tensor changes value,
    the file stays a valid safetensors file."""
    data = bytearray(path.read_bytes())
    data[-1] ^= 0x01
    path.write_bytes(bytes(data))


def _resume_args(run: RunFolder) -> list[str]:
    config_file = run.path.parent / "tiny.yaml"
    config_file.write_text("{}\n")
    return ["train", str(config_file), "--out", str(run.path), "--resume",
            *[arg for item in SIX_STEPS for arg in ("--set", item)]]


@pytest.mark.slow
@pytest.mark.parametrize("name", ["model.safetensors", "trainer_state.safetensors",
                                  "config.yaml"])
def test_a_changed_file_is_refused_naming_it_and_nothing_is_overwritten(run, capsys, name):
    path = run.checkpoints_dir / "step_00000004" / name
    if name == "config.yaml":
        path.write_text(path.read_text().replace("lr: 0.01", "lr: 0.02"))
    else:
        _change_last_float(path)
    before = _files(run.path)
    refused_on_one_line(capsys, _resume_args(run), f"step_00000004/{name} is corrupt",
                         "sha256 does not match")
    assert _files(run.path) == before  # metrics.jsonl, checkpoint, config: all as they were
    if name == "model.safetensors":  # the weights are read by eval and generate too
        refused_on_one_line(capsys, ["eval", str(run.path)], f"{name} is corrupt")
        refused_on_one_line(capsys, ["generate", str(run.path), "--prompt", "Once"],
                             f"{name} is corrupt")


@pytest.mark.slow
@pytest.mark.parametrize("edit, problem", [
    ({"step": -5}, "sha256 does not match"),
    ({"tokens": "many"}, "sha256 does not match"),
])
def test_an_edited_state_is_refused_by_its_hash_and_metrics_are_kept(run, capsys, edit, problem):
    path = run.checkpoints_dir / "step_00000004" / "trainer_state.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), **edit}))
    before = _files(run.path)
    refused_on_one_line(capsys, _resume_args(run), "trainer_state.json is corrupt", problem)
    assert _files(run.path) == before


def _strip_hashes(run: RunFolder) -> None:
    """The layout of a checkpoint written before hashes existed."""
    for path, key in ((run.checkpoints_dir / "step_00000004" / "trainer_state.json", "sha256"),
                      (run.checkpoints_dir / "latest.json", "sha256")):
        record = json.loads(path.read_text())
        del record[key]
        path.write_text(json.dumps(record))


@pytest.mark.slow
@pytest.mark.parametrize("edit, problem", [
    ({"step": -5}, "step=-5 is invalid: expected 4"),
    ({"step": 40}, "step=40 is invalid: expected 4"),
    ({"tokens": "many"}, "tokens='many' is invalid"),
    ({"best_val_loss": "low"}, "best_val_loss='low' is invalid"),
    ({"data": None}, "data=None is invalid"),
    ({"train_time_s": -1.0}, "train_time_s=-1.0 is invalid"),
])
def test_an_unhashed_state_is_still_checked_field_by_field(run, capsys, edit, problem):
    _strip_hashes(run)
    path = run.checkpoints_dir / "step_00000004" / "trainer_state.json"
    state = json.loads(path.read_text())
    state.update(edit)
    path.write_text(json.dumps(state))
    before = _files(run.path)
    refused_on_one_line(capsys, _resume_args(run), "trainer_state.json is corrupt", problem)
    assert _files(run.path) == before


@pytest.mark.slow
def test_a_missing_data_entry_is_a_one_line_error(run, capsys):
    _strip_hashes(run)
    path = run.checkpoints_dir / "step_00000004" / "trainer_state.json"
    state = json.loads(path.read_text())
    del state["data"]
    path.write_text(json.dumps(state))
    refused_on_one_line(capsys, _resume_args(run), "trainer_state.json is corrupt",
                         "no 'data' entry")


def _without_timings(event: dict) -> dict:
    return {k: v for k, v in event.items() if k not in TIMING_KEYS}


@pytest.mark.slow
@pytest.mark.parametrize("legacy", [False, True], ids=["hashed", "unhashed"])
def test_resume_is_exact_with_and_without_hashes(run, tmp_path, legacy):
    """Checking (or, for an old checkpoint, skipping) the hashes changes nothing resumed."""
    config = load_config(None, SIX_STEPS)
    if legacy:
        _strip_hashes(run)
    resumed = train(config, run.path, resume=True)
    reference = train(config, tmp_path / "uninterrupted")
    assert ([_without_timings(e) for e in run.read_metrics()]
            == [_without_timings(e) for e in RunFolder(tmp_path / "uninterrupted").read_metrics()])
    assert _without_timings(to_json(resumed)) == _without_timings(to_json(reference))
    assert run.samples_path.read_text() == (tmp_path / "uninterrupted" / "samples.txt").read_text()



def test_trainer_state_json_keeps_its_keys_and_order():
    # trainer_state.json as checkpoints have always written it (less the optimizer and hashes
    # save_checkpoint adds), typed field by field and written back unchanged.
    from moelab.codec import from_json
    from moelab.train.evaluation import EvalResult
    from moelab.train.state import TrainState

    written = {"step": 4, "tokens": 1024, "best_val_loss": 5.5, "best_val_step": 2,
               "best_val_bpb": 2.25,
               "last_eval": {"step": 4, "val_loss": 5.75, "bits_per_byte": 2.5,
                             "routing": [{"busiest_fraction": 0.5}]},
               "train_time_s": 1.5, "wall_time_s": 2.0, "train_cpu_time_s": 1.25,
               "data": {"position": 7}}
    state = from_json(TrainState, written)
    assert (state.last_eval.step, state.last_eval.val_loss, state.data) == (4, 5.75, {"position": 7})
    assert json.dumps(to_json(state)) == json.dumps(written)
    # a checkpoint written before the CPU time was kept reads as none counted
    older = {k: v for k, v in written.items() if k != "train_cpu_time_s"}
    assert from_json(TrainState, older).train_cpu_time_s == 0.0
    fresh = TrainState()
    fresh.record_eval(EvalResult(val_loss=6.0, bits_per_byte=3.0), step=2)
    assert list(to_json(fresh)["last_eval"]) == ["step", "val_loss", "bits_per_byte", "routing"]
    assert to_json(TrainState())["last_eval"] is None
