"""Progress bars draw only on a terminal: with stderr a log file (here a captured stream, which
is no TTY) an error is a line of its own, not glued onto a bar's leftovers (which end in a
carriage return, no newline)."""

from __future__ import annotations

from pathlib import Path

import pytest

import moelab.data.cache as cache
import moelab.train.loop as loop
from moelab.cli import main
from moelab.errors import MoelabError
from tiny_overrides import TINY_MOE_RUN

FAILURE = "the test's failure"


def _sets(overrides: list[str]) -> list[str]:
    return [arg for override in overrides for arg in ("--set", override)]


def _error_lines_stand_alone(err: str) -> None:
    # Split on newlines only: a bar's leftover before the error would start its line.
    lines = [line for line in err.split("\n") if FAILURE in line]
    assert lines == [f"moelab: error: {FAILURE}"], repr(err)
    assert "%|" not in err and "\r" not in err, repr(err)


def test_an_error_while_encoding_is_a_line_of_its_own(tmp_path: Path, capsys, monkeypatch):
    real = cache.encode_batches

    def fail_on_valid(tokenizer, batches, dtype):
        for batch in real(tokenizer, batches, dtype):
            yield batch
            if calls["n"] == 2:  # the validation split, its bar drawn and one batch counted
                raise MoelabError(FAILURE)

    calls = {"n": 0}

    def counted(tokenizer, batches, dtype):
        calls["n"] += 1
        return fail_on_valid(tokenizer, batches, dtype)

    monkeypatch.setattr(cache, "encode_batches", counted)
    code = main(["prepare-data", "--source", "sample", "--max-train-stories", "300",
                 "--vocab-size", "512", "--out", str(tmp_path / "cache")])
    assert code == 2 and calls["n"] == 2
    _error_lines_stand_alone(capsys.readouterr().err)


def test_an_error_while_training_is_a_line_of_its_own(tmp_path: Path, capsys, monkeypatch):
    real = loop.optimizer_step
    steps = {"n": 0}

    def fail_at_step_3(*args, **kwargs):
        steps["n"] += 1
        if steps["n"] == 3:  # the bar has drawn two steps by now
            raise MoelabError(FAILURE)
        return real(*args, **kwargs)

    monkeypatch.setattr(loop, "optimizer_step", fail_at_step_3)
    overrides = [*TINY_MOE_RUN, "train.max_tokens=1024", "train.eval_interval=100",
                 "train.logging.progress=true"]
    assert main(["train", "demo", "--out", str(tmp_path / "run"), *_sets(overrides)]) == 2
    assert steps["n"] == 3
    _error_lines_stand_alone(capsys.readouterr().err)


@pytest.mark.parametrize("shown", [True, False])
def test_the_bar_draws_on_a_terminal_when_asked(shown: bool, monkeypatch, capsys):
    # The other side: tqdm's disable=None draws when stderr says it is a terminal.
    import sys

    monkeypatch.setattr(sys.stderr, "isatty", lambda: True)
    from tqdm import tqdm

    with tqdm(total=2, disable=None if shown else True) as bar:
        bar.update(2)
    assert ("2/2" in capsys.readouterr().err) == shown
