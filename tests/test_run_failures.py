"""The line failures.json records for each way a run fails, and the record a local child
process hands its parent."""

from __future__ import annotations

from moelab.errors import MoelabError
from moelab.runs.failures import ChildFailure, child_error_line, raised_error_line


def test_a_run_raising_here_is_recorded_as_type_and_first_line():
    assert raised_error_line(MoelabError("train.lr=-1 is invalid\nmore")) == \
        "MoelabError: train.lr=-1 is invalid"
    assert raised_error_line(RuntimeError()) == "RuntimeError:"


def test_a_child_records_the_line_moelab_train_ends_with():
    assert child_error_line(MoelabError("cannot resume runs/x")) == \
        "moelab: error: cannot resume runs/x"
    assert child_error_line(FileNotFoundError(2, "No such file or directory", "/no/file")) == \
        "moelab: error: cannot access /no/file: No such file or directory"
    assert child_error_line(ValueError("a bug\nits last line")) == "its last line"
    assert child_error_line(KeyError("x")) == "KeyError: 'x'"
    assert child_error_line(KeyboardInterrupt()) == "moelab: interrupted"


def test_a_child_failure_record_round_trips_and_an_empty_one_is_none(tmp_path):
    path = tmp_path / "failure.json"
    path.write_text("")  # the parent's file, before the child wrote to it
    assert ChildFailure.read(path) is None
    ChildFailure("moelab: error: x").write(path)
    assert ChildFailure.read(path) == ChildFailure("moelab: error: x")
    assert ChildFailure.read(tmp_path / "missing.json") is None
