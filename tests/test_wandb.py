"""W&B against the real wandb, offline: a run is named by its config (project, entity, group,
name, tags), a study or sweep names each of its runs (group = the folder, name = arm/seed,
tags = its labels), and the W&B run id kept in the run folder makes ``--resume`` continue the
same W&B run. Checked on the run records wandb writes (``run-ID.wandb``)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
import yaml

wandb = pytest.importorskip("wandb")

from wandb.proto import wandb_internal_pb2  # noqa: E402

import moelab.train.loop as loop  # noqa: E402
from moelab.cli import main  # noqa: E402
from moelab.config import load_config  # noqa: E402
from moelab.train import train  # noqa: E402
from tiny_overrides import TINY_MOE_RUN  # noqa: E402


@pytest.fixture(autouse=True)
def offline_wandb(tmp_path, monkeypatch):
    """wandb offline, its own files under tmp_path, no project or entity from the caller."""
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    for name in ("WANDB_DIR", "WANDB_CACHE_DIR", "WANDB_CONFIG_DIR", "WANDB_DATA_DIR"):
        monkeypatch.setenv(name, str(tmp_path / "wandb-home" / name.lower()))
    for name in ("WANDB_PROJECT", "WANDB_ENTITY", "WANDB_RUN_ID", "WANDB_RESUME", "WANDB_RUN_GROUP"):
        monkeypatch.delenv(name, raising=False)


def wandb_records(path: Path):
    """The records of a ``run-ID.wandb`` file: a ``:W&B`` header (7 bytes), then LevelDB's log
    format (32 KiB blocks of records, each a 7-byte header -- crc, little-endian length, type
    -- and a piece of one serialised ``Record``; type 1 is whole, 4 the last piece)."""
    data = path.read_bytes()
    assert data[:4] == b":W&B"
    pos, block, record = 7, 32768, b""
    while pos + 7 <= len(data):
        if block - pos % block < 7:  # a block's tail too short for a header is padding
            pos += block - pos % block
            continue
        length, kind = int.from_bytes(data[pos + 4:pos + 6], "little"), data[pos + 6]
        record += data[pos + 7:pos + 7 + length]
        pos += 7 + length
        if kind in (1, 4):
            yield wandb_internal_pb2.Record.FromString(record)
            record = b""


def offline_runs(run_dir: Path) -> dict[str, dict]:
    """What each wandb session of a run folder recorded, by W&B run id: its identity and the
    steps it logged. (Two sessions of one run share the id; the later one is the one that
    logged the later steps.)"""
    sessions: dict[str, dict] = {}
    for folder in sorted((run_dir / "wandb").glob("offline-run-*")):
        (file,) = folder.glob("run-*.wandb")
        session = _session(file)
        sessions.setdefault(session["id"], []).append(session)
    return sessions


def _session(file: Path, timeout_s: float = 30) -> dict:
    """One session's records, once wandb's service has written its last (the exit record:
    ``finish`` may return before the service has flushed the file)."""
    deadline = time.monotonic() + timeout_s
    while True:
        session: dict = {"steps": []}
        for record in wandb_records(file):
            kind = record.WhichOneof("record_type")
            if kind == "run":
                run = record.run
                session.update(id=run.run_id, project=run.project, entity=run.entity,
                               group=run.run_group, name=run.display_name, tags=list(run.tags))
            elif kind == "history":
                session["steps"].append(record.history.step.num)
            elif kind == "exit":
                return session
        assert time.monotonic() < deadline, f"{file} has no exit record"
        time.sleep(0.1)


def tiny_config(*extra: str):
    return load_config("demo", [*TINY_MOE_RUN, "train.sample_tokens=0", "train.logging.wandb=true",
                                *extra])


OPTIMIZER_STEP = loop.optimizer_step


def train_stopped_at_step(config, run_dir: Path, step: int, monkeypatch) -> None:
    """Train until optimizer step ``step`` begins, then stop as a killed run does."""
    begun = []

    def step_or_stop(*args, **kwargs):
        begun.append(True)
        if len(begun) == step:
            raise KeyboardInterrupt
        return OPTIMIZER_STEP(*args, **kwargs)

    monkeypatch.setattr(loop, "optimizer_step", step_or_stop)
    with pytest.raises(KeyboardInterrupt):
        train(config, run_dir)
    monkeypatch.setattr(loop, "optimizer_step", OPTIMIZER_STEP)


@pytest.mark.slow
def test_a_resumed_run_continues_its_wandb_run(tmp_path, monkeypatch):
    config = tiny_config("train.max_tokens=1536", "train.checkpoint_interval=2",
                         "train.eval_interval=3")
    run_dir = tmp_path / "run"
    train_stopped_at_step(config, run_dir, 5, monkeypatch)  # after the checkpoint of step 4
    run_id = json.loads((run_dir / "wandb.json").read_text())["id"]
    train(config, run_dir, resume=True)

    assert json.loads((run_dir / "wandb.json").read_text())["id"] == run_id
    sessions = offline_runs(run_dir)
    assert list(sessions) == [run_id]  # one W&B run, logged by two sessions
    first, resumed = sorted(sessions[run_id], key=lambda session: session["steps"])
    for session in (first, resumed):  # a lone run: the default project, its folder's name
        assert (session["project"], session["group"], session["name"]) == ("moelab", "", "run")
    assert first["steps"] == [1, 2, 3, 4] and resumed["steps"] == [5, 6]


@pytest.mark.slow
def test_a_run_started_afresh_gets_a_new_wandb_run(tmp_path, monkeypatch):
    # No checkpoint before the stop: the run starts again from step 1, as a new W&B run.
    config = tiny_config("train.max_tokens=768")
    run_dir = tmp_path / "run"
    train_stopped_at_step(config, run_dir, 2, monkeypatch)
    train(config, run_dir, resume=True)
    second_id = json.loads((run_dir / "wandb.json").read_text())["id"]
    sessions = offline_runs(run_dir)
    assert len(sessions) == 2 and second_id in sessions  # two W&B runs
    (first_id,) = set(sessions) - {second_id}
    assert sessions[first_id][0]["steps"] == [1]
    assert sessions[second_id][0]["steps"] == [1, 2, 3]


def test_a_study_names_each_run_in_wandb(tmp_path, capsys):
    # Each run trains from the config file the plan wrote, as every launcher does: here the
    # printed command of one run, which carries the study's W&B names.
    out = tmp_path / "moe-vs-dense"
    sets = [arg for pair in [*TINY_MOE_RUN, "train.max_tokens=512", "train.sample_tokens=0",
                             "train.logging.wandb=true", "train.logging.wandb_project=lab-moe",
                             "train.logging.wandb_entity=my-lab", "train.logging.wandb_tags=[demo]"]
            for arg in ("--set", pair)]
    assert main(["study", "demo", "--seeds", "1", "--criteria", "active", *sets,
                 "--out", str(out), "--list-runs"]) == 0
    commands = capsys.readouterr().out.splitlines()
    assert len(commands) == 2 and commands[1].startswith("moelab train ")
    assert main(commands[1].split()[1:]) == 0  # dense_active/seed0
    ((session,),) = offline_runs(out / "runs" / "dense_active" / "seed0").values()
    assert {k: session[k] for k in ("project", "entity", "group", "name", "tags")} == {
        "project": "lab-moe", "entity": "my-lab", "group": "moe-vs-dense",
        "name": "dense_active/seed0", "tags": ["demo", "study", "arm=dense_active", "seed=0"]}


def run_configs(folder: Path) -> dict[str, dict]:
    """Each planned run's ``train.logging`` section, by its config file's name."""
    return {path.stem: yaml.safe_load(path.read_text())["train"]["logging"]
            for path in sorted((folder / "configs").glob("*.yaml"))}


def test_a_planned_study_may_turn_wandb_on_later(tmp_path, capsys):
    # The W&B keys say how runs are shown, not what they compute: not another study.
    out = tmp_path / "study"
    base = ["study", "demo", "--seeds", "1", "--out", str(out), "--list-runs"]
    assert main(base) == 0
    assert all(not train["wandb"] for train in run_configs(out).values())
    assert main([*base, "--set", "train.logging.wandb=true"]) == 0
    capsys.readouterr()
    trains = run_configs(out)
    assert trains["moe-seed0"]["wandb_group"] == "study"
    assert trains["moe-seed0"]["wandb_name"] == "moe/seed0"
    assert {train["wandb_name"] for train in trains.values()} == {
        "moe/seed0", "dense_active/seed0", "dense_total/seed0"}


def test_a_sweep_names_each_point_in_wandb(tmp_path, capsys):
    out = tmp_path / "sweep"
    assert main(["sweep-sparsity", "micro", "--out", str(out), "--list-runs",
                 "--set", "train.logging.wandb=true"]) == 0
    capsys.readouterr()
    plan = json.loads((out / "plan.json").read_text())
    trains = run_configs(out)
    assert len(trains) == len(plan["runs"]) == 4
    for run in plan["runs"]:
        train_section = trains[Path(run["config"]).stem]
        assert train_section["wandb_group"] == "sweep"
        assert train_section["wandb_name"] == run["name"]
        assert train_section["wandb_tags"][:2] == ["sweep-sparsity", "grid=micro"]
        assert f"sparsity={run['sparsity']}" in train_section["wandb_tags"]


def logged_keys(run_dir: Path) -> tuple[set[str], dict[str, str]]:
    """Every history key a run's W&B session logged, and its summary's keys and values."""
    (folder,) = (run_dir / "wandb").glob("offline-run-*")
    (file,) = folder.glob("run-*.wandb")
    _session(file)  # wait for the exit record
    history, summary = set(), {}
    for record in wandb_records(file):
        kind = record.WhichOneof("record_type")
        if kind == "history":
            history |= {item.key or "/".join(item.nested_key) for item in record.history.item}
        elif kind == "summary":
            summary.update({item.key or "/".join(item.nested_key): item.value_json
                            for item in record.summary.update})
    return history, summary


@pytest.mark.slow
def test_the_load_diagnostics_and_mfu_reach_wandb(tmp_path):
    config = tiny_config("train.max_tokens=512", "train.micro_batch_size=4",
                         "train.eval_interval=2")
    train(config, tmp_path / "run")
    history, summary = logged_keys(tmp_path / "run")
    for layer in (0, 1):
        for key in ("max_violation", "micro_max_violation", "load_p50", "load_p90", "load_max",
                    "dead_experts"):
            assert f"balance/layer{layer}/{key}" in history  # every logged training step
        for key in ("max_violation", "load_p90", "dead_experts"):
            assert f"routing/layer{layer}/{key}" in history  # every evaluation
    assert {"train/tokens_per_s", "train/mfu"} <= history
    assert json.loads(summary["summary/mfu"]) > 0
    assert json.loads(summary["summary/peak_flops_source"]).startswith("measured: CPU")
