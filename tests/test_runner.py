"""The study runner's file handling: damaged plan files are one-line errors, a run is complete
by one rule (RunFolder.is_complete), and one nested-dict diff serves runs and studies."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from moelab.cli import main
from moelab import runs as runner
from moelab.train.run_folder import RunFolder, first_difference


@pytest.fixture
def planned_study(tmp_path, monkeypatch) -> Path:
    """A demo study folder with its plan written (no training)."""
    monkeypatch.chdir(tmp_path)
    assert main(["study", "demo", "--out", "s", "--list-runs"]) == 0
    return tmp_path / "s"


@pytest.mark.slow
@pytest.mark.parametrize("name, damage", [
    ("plan.json", '{"kind": "stu'),
    ("plan.json", "[1, 2]"),
    ("study.yaml", "model: [unclosed"),
    ("study.yaml", "- just\n- a list\n"),
    ("study.yaml", ""),
    ("configs/moe-seed0.yaml", "model: {d_model: 64\n"),
])
def test_a_damaged_plan_file_is_a_one_line_error_naming_it(planned_study, capsys, name, damage):
    (planned_study / name).write_text(damage)
    capsys.readouterr()
    assert main(["study", "demo", "--out", "s", "--list-runs"]) == 2
    err = capsys.readouterr().err
    assert f"{Path('s') / name} is corrupt" in err and "delete it" in err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("content, complete", [
    (None, False),
    ('{"status": "complete"}', True),
    ('{"status": "failed"}', False),
    ('{"status": "comp', False),     # torn
    ("[1, 2]", False),               # not an object
    ('"complete"', False),
])
def test_a_run_is_complete_only_when_its_summary_says_so(tmp_path, content, complete):
    if content is not None:
        (tmp_path / "summary.json").write_text(content)
    assert RunFolder(tmp_path).is_complete() is complete
    assert runner.is_complete(tmp_path) is complete


def test_first_difference_names_the_dotted_key_and_both_values():
    old = {"model": {"d_model": 64, "moe": {"top_k": 2}}, "train": {"lr": 0.01}}
    assert first_difference(old, json.loads(json.dumps(old))) is None
    assert first_difference(old, {**old, "train": {"lr": 0.02}}) == ("train.lr", 0.01, 0.02)
    deeper = {"model": {"d_model": 64, "moe": {"top_k": 1}}, "train": {"lr": 0.01}}
    assert first_difference(old, deeper) == ("model.moe.top_k", 2, 1)
    added = {**old, "data": {"source": "sample"}}
    assert first_difference(old, added) == ("data", None, {"source": "sample"})
    assert first_difference({"a": {"b": 1}}, {"a": None}) == ("a", {"b": 1}, None)


@pytest.mark.slow
def test_a_study_planned_before_a_config_key_existed_is_the_same_study(planned_study, capsys):
    """A key added to the config since (here train.eval_tasks, at its default) is no difference;
    a changed value still is."""
    import yaml

    for path in [planned_study / "study.yaml", *sorted((planned_study / "configs").glob("*.yaml"))]:
        planned = yaml.safe_load(path.read_text())
        assert planned["train"].pop("eval_tasks") == []
        path.write_text(yaml.safe_dump(planned, sort_keys=False))
    assert main(["study", "demo", "--out", "s", "--list-runs"]) == 0
    capsys.readouterr()
    assert main(["study", "demo", "--out", "s", "--list-runs", "--set", "train.lr=0.02"]) == 2
    assert "train.lr=" in capsys.readouterr().err
