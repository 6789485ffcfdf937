"""Study settings from ``--set``: a study section that is not a mapping, and an overridden base,
are one-line ConfigErrors rather than a TypeError or a silently ignored key."""

from __future__ import annotations

import pytest

from moelab.cli import main
from moelab.config import load_config
from moelab.errors import ConfigError
from moelab.study.settings import load_study


@pytest.mark.parametrize("value", ["3", "[1, 2]", "abc"])
def test_a_study_section_that_is_not_a_mapping_is_refused(value):
    with pytest.raises(ConfigError, match=r"study=.* is invalid: expected a mapping"):
        load_study("demo", [f"study={value}"])


def test_a_null_study_section_means_the_defaults():
    _, with_null = load_study("demo", ["study=null"])
    _, plain = load_study("demo")
    assert with_null.seeds == 3  # StudySettings' documented default
    assert plain.seeds == 6  # the demo preset's own study section


def test_overriding_the_base_is_refused_not_ignored(tmp_path):
    path = tmp_path / "mine.yaml"
    path.write_text("study:\n  base: demo\n  seeds: 2\n")
    # The file's own base works: its config is demo's.
    config, _ = load_study(path)
    assert config == load_config("demo")
    for override in ("study.base=paper", "study={base: paper}"):
        with pytest.raises(ConfigError, match=r"study.base='paper' cannot be set with --set"):
            load_study(path, [override])


def test_the_cli_reports_a_bad_study_section_on_one_line(tmp_path, capsys):
    code = main(["study", "demo", "--out", str(tmp_path / "s"), "--set", "study=3", "--list-runs"])
    err = capsys.readouterr().err
    assert code == 2
    assert "study=3 is invalid" in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1
