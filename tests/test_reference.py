"""docs/reference/ is generated from the code (the argparse parsers, the config dataclasses)
and cannot drift from it; every config key is documented; `config show --comments` loads back
as the same config."""

import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from moelab.cli import main
from moelab.cli.model import resolved_yaml
from moelab.cli.reference import render, stale
from moelab.config.docs import commented_yaml, keys

ROOT = Path(__file__).resolve().parents[1]


def test_committed_reference_equals_a_fresh_render():
    assert stale(ROOT / "docs" / "reference") == [], "run `python -m moelab.cli.reference`"


@pytest.mark.slow
def test_check_names_a_drifted_page(tmp_path):
    for name, text in render().items():
        (tmp_path / name).write_text(text.replace("| `--json` |", "| `--jsn` |", 1))
    result = subprocess.run([sys.executable, "-m", "moelab.cli.reference", "--out", str(tmp_path),
                             "--check"], capture_output=True, text=True)
    assert result.returncode == 1 and "cli.md differs" in result.stderr


def test_every_config_key_is_documented_with_its_default():
    documented = keys()
    assert all(doc.doc for doc in documented), [d.key for d in documented if not d.doc]
    table = render()["config.md"]
    for doc in documented:
        assert f"| `{doc.key}` |" in table
    # a hand-picked key against the schema's own default
    assert "| `model.moe.top_k` | int | `2` |" in table


def test_every_command_of_the_help_is_in_the_reference(capsys):
    with pytest.raises(SystemExit):
        main(["--help"])
    listed = re.findall(r"^    (\S[\w-]+)\s", capsys.readouterr().out, flags=re.M)
    assert len(listed) > 15
    cli = render()["cli.md"]
    for command in listed:
        assert f"## `moelab {command}" in cli


@pytest.mark.parametrize("preset", ["demo", "paper", "cpu-ablation"])
def test_commented_yaml_loads_back_as_the_same_config(preset):
    plain = resolved_yaml(preset, [])
    commented = commented_yaml(plain)
    assert yaml.safe_load(commented) == yaml.safe_load(plain)
    assert "# Weight of the Switch load-balancing loss" in commented
    assert commented.count("\n#") + commented.count("  #") > 40


def test_config_show_comments(capsys):
    assert main(["config", "show", "demo", "--comments"]) == 0
    out = capsys.readouterr().out
    assert "    # Experts each token is sent to (k); sparsity S = (E - k) / E.\n    top_k: 2" in out
