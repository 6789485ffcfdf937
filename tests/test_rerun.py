"""``moelab rerun``: a tiny run retrained from its own folder matches bit for bit; a stored run
whose numbers were changed by hand is reported, evaluation by evaluation, with the machine
fields that differ; a folder that is not a finished run is one line."""

from __future__ import annotations

import json

import pytest

from moelab.cli import main
from moelab.config import load_config
from moelab.train import train
from tiny_overrides import TINY_MOE_RUN

RUN = [*TINY_MOE_RUN, "train.max_tokens=768", "train.eval_interval=1", "train.sample_tokens=0"]
"""3 steps, each evaluated."""


@pytest.fixture(scope="module")
def stored_run(tmp_path_factory):
    run = tmp_path_factory.mktemp("stored") / "run"
    train(load_config("demo", RUN), run)
    return run


def test_a_rerun_of_a_run_matches_it_bit_for_bit(stored_run, tmp_path, capsys):
    assert main(["rerun", str(stored_run), "--out", str(tmp_path / "again")]) == 0
    out = capsys.readouterr().out
    assert "every loss matches" in out and "machines: the same record" in out
    assert (tmp_path / "again" / "summary.json").is_file()


def test_a_rerun_that_differs_names_each_evaluation_and_the_machines(stored_run, tmp_path,
                                                                     capsys):
    edited = tmp_path / "edited"
    edited.mkdir()
    for name in ("config.yaml", "tokenizer.json"):
        (edited / name).write_bytes((stored_run / name).read_bytes())
    events = [json.loads(line) for line in (stored_run / "metrics.jsonl").read_text().splitlines()]
    for event in events:
        if event["kind"] == "eval" and event["step"] == 2:
            event["val_loss"] += 0.25  # as if another machine had trained it
    (edited / "metrics.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))
    summary = json.loads((stored_run / "summary.json").read_text())
    summary["machine"]["cpu"] = "Some Other CPU"
    (edited / "summary.json").write_text(json.dumps(summary))

    assert main(["rerun", str(edited), "--out", str(tmp_path / "again")]) == 1
    lines = capsys.readouterr().out.splitlines()
    steps = [line for line in lines if line.strip().startswith("step ")]
    assert len(steps) == 3  # evaluations at steps 1, 2, 3
    assert "(+0.00e+00)" in steps[0] and "(-2.50e-01)" in steps[1] and "(+0.00e+00)" in steps[2]
    assert any(line.strip().startswith("cpu: Some Other CPU vs ") for line in lines)


def test_a_run_without_a_machine_record_is_rerun_native_and_says_so(stored_run, tmp_path,
                                                                    capsys):
    old = tmp_path / "old"
    old.mkdir()
    for name in ("config.yaml", "tokenizer.json", "metrics.jsonl"):
        (old / name).write_bytes((stored_run / name).read_bytes())
    summary = json.loads((stored_run / "summary.json").read_text())
    del summary["machine"]
    (old / "summary.json").write_text(json.dumps(summary))
    main(["rerun", str(old), "--out", str(tmp_path / "again")])
    assert "records no machine" in capsys.readouterr().out
    rerun_summary = json.loads((tmp_path / "again" / "summary.json").read_text())
    assert rerun_summary["machine"]["numerics"] == "native"


@pytest.mark.parametrize("make, message", [
    (lambda path: path.mkdir(), "is not a run folder: it has no config.yaml"),
    (lambda path: None, "is not a run folder: it has no config.yaml"),
])
def test_a_folder_that_is_not_a_run_is_one_line(tmp_path, capsys, make, message):
    make(tmp_path / "nothing")
    assert main(["rerun", str(tmp_path / "nothing"), "--out", str(tmp_path / "x")]) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "x").exists()


def test_an_unfinished_run_and_an_existing_out_are_one_line(stored_run, tmp_path, capsys):
    unfinished = tmp_path / "unfinished"
    unfinished.mkdir()
    (unfinished / "config.yaml").write_bytes((stored_run / "config.yaml").read_bytes())
    assert main(["rerun", str(unfinished), "--out", str(tmp_path / "x")]) == 2
    assert "is not a finished run" in capsys.readouterr().err
    (tmp_path / "taken").mkdir()
    assert main(["rerun", str(stored_run), "--out", str(tmp_path / "taken")]) == 2
    assert "exists: give a folder that does not exist yet" in capsys.readouterr().err
