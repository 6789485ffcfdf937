"""The command line's conventions: ``--version``, ``config show`` (its YAML loads back as the
same config and study), help texts built from the code that runs, default output folders."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
import yaml

from moelab.cli import build_parser, main
from moelab.config import load_config
from moelab.study.arms import ladder_arms
from moelab.study.settings import load_study
from moelab.version import __version__

ROOT = Path(__file__).resolve().parents[1]


def test_version_exits_0_and_prints_the_packages_version(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["--version"])
    assert exit_info.value.code == 0
    assert capsys.readouterr().out.strip() == f"moelab {__version__}"
    # The build reads the same attribute (pyproject's dynamic version), so pip agrees.
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert pyproject["tool"]["setuptools"]["dynamic"]["version"]["attr"] == "moelab.version.__version__"


def _params(config: str, overrides: list[str], capsys) -> dict:
    capsys.readouterr()
    assert main(["params", config, "--json", *sum((["--set", o] for o in overrides), [])]) == 0
    return json.loads(capsys.readouterr().out)


def _show(config: str, overrides: list[str], capsys) -> str:
    capsys.readouterr()
    assert main(["config", "show", config, *sum((["--set", o] for o in overrides), [])]) == 0
    return capsys.readouterr().out


@pytest.mark.parametrize("preset, overrides", [
    ("demo", []),
    ("cpu-budgets", []),  # a study preset over a base: the base is merged into the YAML
    ("cpu-replication", ["model.d_model=96", "model.moe.num_experts=8", "study.seeds=2"]),
    ("paper", []),
])
def test_config_show_round_trips_into_params_and_study(preset, overrides, tmp_path, capsys):
    text = _show(preset, overrides, capsys)
    copy = tmp_path / "copy.yaml"
    copy.write_text(text)
    config_overrides = [o for o in overrides if not o.startswith("study.")]
    assert _params(str(copy), [], capsys) == _params(preset, config_overrides, capsys)
    assert load_config(copy) == load_config(preset, config_overrides)
    assert load_study(copy) == load_study(preset, overrides)
    shown = yaml.safe_load(text)
    assert "base" not in (shown.get("study") or {})  # merged in, so the copy stands alone
    for key, value in (o.split("=", 1) for o in overrides if o.startswith("model.d_model")):
        assert shown["model"]["d_model"] == int(value)


def test_config_show_refuses_a_bad_override_in_one_line(capsys):
    assert main(["config", "show", "demo", "--set", "model.d_model=-4"]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and len(captured.err.strip().splitlines()) == 1
    assert "model.d_model" in captured.err


def test_ablate_routing_help_lists_every_rung_the_ladder_trains(capsys):
    rungs = [arm.name for arm in ladder_arms(load_config("demo"))]
    with pytest.raises(SystemExit):
        main(["ablate-routing", "--help"])
    help_text = " ".join(capsys.readouterr().out.split())
    assert len(rungs) == 6
    assert f"the {len(rungs)} rungs" in help_text
    for rung in rungs:
        assert rung in help_text


def _subcommands(parser: argparse.ArgumentParser):
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield name, sub
                for inner, subsub in _subcommands(sub):
                    yield f"{name} {inner}", subsub


def test_every_argument_of_the_results_tools_has_help():
    commands = dict(_subcommands(build_parser()))
    for name in ("fit", "isoflop", "optimal", "compare", "config show"):
        for action in commands[name]._actions:
            assert action.help, f"moelab {name} {action.dest} has no help"


@pytest.mark.slow
def test_harness_help_is_plain_text():
    result = subprocess.run([sys.executable, "-m", "moelab.tasks.harness", "--help"],
                            capture_output=True, text=True, check=True)
    assert "``" not in result.stdout and "TASKS_DIR" in result.stdout
    assert result.stdout.startswith("usage: python -m moelab.tasks.harness")


def test_default_folders_are_out_name_kind(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(["sweep-sparsity", "micro", "--list-runs"]) == 0
    assert (tmp_path / "out" / "micro-sweep" / "plan.json").is_file()
    assert " --out out/micro-sweep/runs/" in capsys.readouterr().out
    assert main(["study", "demo", "--seeds", "1", "--list-runs"]) == 0
    assert (tmp_path / "out" / "demo-study" / "plan.json").is_file()
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["demo-study", "micro-sweep"]
