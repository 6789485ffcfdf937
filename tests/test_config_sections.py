"""One parser for every typed section: the config's model/data/train, the study settings and the
sweep grids share lists, literals, required keys and values with their own notation, and the
same one-line errors. Also train.device checked at load, and the study's eval_tasks reaching
every arm. Nothing trains here."""

from __future__ import annotations

import dataclasses
import re
import shutil
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Literal, Optional

import pytest
import torch
import yaml

from moelab.cli import main
from moelab.config import Parsed, from_dict, load_config
from moelab.errors import ConfigError
from moelab.sweep.grid import grid_preset_names, load_grid
from moelab.study.settings import StudySettings, load_study

REPO_ROOT = Path(__file__).resolve().parents[1]


def one_line_error(argv: list[str], capsys) -> str:
    """The CLI's stderr for ``argv``, which must exit 2 with one line and no traceback."""
    code = main(argv)
    err = capsys.readouterr().err
    assert code == 2, err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    return err


# --------------------------------------------------------------------------------------------
# The parser
# --------------------------------------------------------------------------------------------


def _doubled(value, key):
    if value == "bad":
        raise ConfigError(f"{key}={value!r} is invalid: not doubled")
    return 2 * int(value or 0)


@dataclass
class Inner:
    width: int = 1


@dataclass(kw_only=True)
class Section:
    name: str
    colour: Literal["red", "blue"] = "red"
    sizes: list[int] = field(default_factory=list)
    inners: list[Inner] = field(default_factory=list)
    doubled: Annotated[int, Parsed(_doubled)] = 0
    note: Optional[str] = None


@pytest.mark.parametrize("data, expected", [
    ({"name": "a"}, Section(name="a")),
    ({"name": "a", "sizes": [1, 2.0, "3e1"]}, Section(name="a", sizes=[1, 2, 30])),
    ({"name": "a", "sizes": "4, 5"}, Section(name="a", sizes=[4, 5])),  # --set sizes=4,5
    ({"name": "a", "inners": [{}, {"width": 3}]},
     Section(name="a", inners=[Inner(), Inner(width=3)])),
    ({"name": "a", "colour": "blue", "note": None}, Section(name="a", colour="blue")),
    # A value with its own notation gets null too: the parser decides what it means.
    ({"name": "a", "doubled": "21"}, Section(name="a", doubled=42)),
    ({"name": "a", "doubled": None}, Section(name="a", doubled=0)),
])
def test_a_section_is_built_from_its_types(data, expected):
    assert from_dict(Section, data, "s") == expected


@pytest.mark.parametrize("data, message", [
    ({}, "s.name is missing: required keys are name"),
    ({"name": "a", "colour": "green"}, "s.colour='green' is invalid: allowed red, blue"),
    ({"name": "a", "colour": 1}, "s.colour=1 is invalid: allowed red, blue"),
    ({"name": "a", "sizes": True}, "s.sizes=True is invalid: expected a list of whole numbers"),
    ({"name": "a", "sizes": [1, "x"]}, "s.sizes[1]='x' is invalid: expected a whole number"),
    ({"name": "a", "sizes": [1, 2.5]}, "s.sizes[1]=2.5 is invalid: expected a whole number"),
    ({"name": "a", "inners": [{"depth": 1}]},
     "s.inners[0].depth is not a known key: allowed width"),
    ({"name": "a", "inners": {"width": 1}},
     "s.inners={'width': 1} is invalid: expected a list of mappings"),
    ({"name": "a", "doubled": "bad"}, "s.doubled='bad' is invalid: not doubled"),
    ({"name": "a", "sizes": None}, "s.sizes=null is invalid: expected a list of whole numbers"),
])
def test_a_section_refuses_what_its_types_do_not_allow(data, message):
    with pytest.raises(ConfigError) as info:
        from_dict(Section, data, "s")
    assert str(info.value) == message


def test_a_list_of_the_config_takes_a_comma_separated_override():
    config = load_config("demo", ["train.eval_tasks=last_word, ending"])
    assert config.train.eval_tasks == ["last_word", "ending"]
    assert load_config("demo", ["train.eval_tasks=[agreement]"]).train.eval_tasks == ["agreement"]
    assert load_config("demo").train.eval_tasks == []
    with pytest.raises(ConfigError, match=r"train.eval_tasks=True is invalid: expected a list "
                                          r"of strings"):
        load_config("demo", ["train.eval_tasks=true"])


# --------------------------------------------------------------------------------------------
# train.device
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["tpu", "cuda:x", "CUDA", "cuda:", "gpu", "cuda:0:1", ""])
def test_a_malformed_device_is_refused_when_the_config_loads(name):
    with pytest.raises(ConfigError) as info:
        load_config("demo", [f"train.device='{name}'"])
    assert str(info.value) == f"train.device={name!r} is invalid: allowed auto, cpu, cuda, cuda:N"


def test_a_malformed_device_is_one_line_from_a_command_that_does_not_train(capsys):
    err = one_line_error(["params", "demo", "--set", "train.device=cuda:x"], capsys)
    assert "train.device='cuda:x' is invalid: allowed auto, cpu, cuda, cuda:N" in err


def test_a_gpu_device_loads_without_a_gpu_so_gpu_runs_can_be_planned(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert load_config("demo", ["train.device=cuda:3"]).train.device == "cuda:3"


def test_cuda_without_cuda_is_one_line_when_training_starts(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    run = tmp_path / "run"
    err = one_line_error(["train", "demo", "--out", str(run), "--set", "train.device=cuda"],
                         capsys)
    assert "train.device='cuda' is invalid: no CUDA device; use cpu or auto" in err
    assert not (run / "summary.json").exists()


# --------------------------------------------------------------------------------------------
# Study settings
# --------------------------------------------------------------------------------------------


def test_study_eval_tasks_reach_every_arms_config(tmp_path):
    config, settings = load_study("demo", ["study.eval_tasks=ending,last_word"])
    assert settings.eval_tasks == ["ending", "last_word"]
    assert config.train.eval_tasks == ["ending", "last_word"]
    out = tmp_path / "s"
    assert main(["study", "demo", "--out", str(out), "--list-runs", "--seeds", "1",
                 "--set", "study.eval_tasks=[ending, last_word]"]) == 0
    run_configs = sorted((out / "configs").glob("*.yaml"))
    assert [p.name for p in run_configs] == [
        "dense_active-seed0.yaml", "dense_total-seed0.yaml", "moe-seed0.yaml"]
    for path in run_configs:
        assert yaml.safe_load(path.read_text())["train"]["eval_tasks"] == ["ending", "last_word"]
    # study.yaml reruns the same study.
    study_yaml = yaml.safe_load((out / "study.yaml").read_text())
    assert study_yaml["study"]["eval_tasks"] == ["ending", "last_word"]
    assert load_study(out / "study.yaml")[0] == config


def test_without_study_eval_tasks_the_base_configs_own_are_kept():
    config, settings = load_study("demo", ["train.eval_tasks=[agreement]"])
    assert settings.eval_tasks == [] and config.train.eval_tasks == ["agreement"]
    assert load_study("demo")[0].train.eval_tasks == []


def test_an_unknown_eval_task_is_one_line(tmp_path, capsys):
    err = one_line_error(["study", "demo", "--out", str(tmp_path / "s"), "--list-runs",
                          "--set", "study.eval_tasks=last_word,riddles"], capsys)
    assert "study.eval_tasks[1]='riddles' is invalid: allowed last_word, ending, agreement" in err


@pytest.mark.parametrize("override, expected", [
    ("study.budgets=1M,500K", {"budgets": [500_000, 1_000_000]}),
    ("study.budgets=[40.5M, 40.5M]", {"budgets": [40_500_000]}),
    ("study.budgets=null", {"budgets": []}),
    ("study.criteria=total,active,total", {"criteria": ["total", "active"]}),
    ("study.match_step=64", {"match_step": 64}),
    ("study.seeds=[4, 2]", {"seeds": [4, 2]}),
])
def test_study_settings_from_set(override, expected):
    _, settings = load_study("demo", [override])
    assert settings == dataclasses.replace(StudySettings(seeds=6), **expected)


@pytest.mark.parametrize("override, message", [
    ("study.match_step=1.5", "study.match_step=1.5 is invalid: expected a whole number"),
    ("study.match_step=true", "study.match_step=True is invalid: expected a whole number"),
    ("study.match_step=-32", "study.match_step=-32 is invalid: must be > 0"),
    ("study.budgets=[1M, 2Q]", "study.budgets[1]: token budget '2Q' is invalid"),
    ("study.budgets={a: 1}", "study.budgets={'a': 1} is invalid: expected a list"),
    ("study.seedz=3", "study.seedz is not a known key: allowed seeds, criteria, budgets, "
                      "match_step, eval_tasks"),
])
def test_bad_study_settings_name_the_key(override, message):
    with pytest.raises(ConfigError) as info:
        load_study("demo", [override])
    assert message in str(info.value)


# --------------------------------------------------------------------------------------------
# Sweep grids
# --------------------------------------------------------------------------------------------


def test_grid_presets_are_the_yaml_files_and_keep_their_numbers():
    assert grid_preset_names() == ["cpu", "cpu-expertn", "cpu-finetune", "cpu-fixedn",
                                   "cpu-granularity", "cpu-isoflop", "cpu-prereg", "cpu-topk",
                                   "demo", "micro", "paper", "quick-law"]
    demo, cpu, paper = load_grid("demo"), load_grid("cpu"), load_grid("paper")
    assert (demo.name, demo.base, demo.flops_budgets, demo.token_budgets) == (
        "demo", "demo", [4e10, 1.2e11], [])
    assert cpu.token_budgets == [1_228_800, 2_457_600, 3_686_400]
    # quick-law (docs/guides/first-sweep.md) is cpu without its largest size, on the bundled
    # sample (no data.source override), eager.
    quick = load_grid("quick-law")
    assert quick.sizes == cpu.sizes[:3] and cpu.sizes[3]["name"] == "s3"
    assert (quick.sparsities, quick.token_budgets, quick.seeds) == (
        cpu.sparsities, cpu.token_budgets, cpu.seeds)
    assert not any(item.startswith(("data.source=", "train.compile=")) for item in quick.overrides)
    assert all(type(tokens) is int for tokens in cpu.token_budgets)
    assert paper.flops_budgets == [1e16, 1e17, 3e17, 1e18]
    assert paper.sparsities == [0.0, 0.5, 0.75, 0.875, 0.9375] and paper.top_k == 2
    assert paper.sizes[-1] == {"name": "m768", "d_model": 768, "n_layers": 8, "n_heads": 12,
                               "n_kv_heads": 12, "d_ff": 3072}


def test_a_copied_preset_is_the_same_grid_under_the_files_name(tmp_path):
    mine = tmp_path / "mine.yaml"
    shutil.copyfile(REPO_ROOT / "src/moelab/presets/sweeps/micro.yaml", mine)
    assert load_grid(mine) == dataclasses.replace(load_grid("micro"), name="mine")


def test_grid_token_budgets_take_suffixes_and_overrides_apply(tmp_path):
    path = tmp_path / "g.yaml"
    path.write_text("base: demo\nsizes: [{name: a, d_ff: 64}]\nsparsities: [0]\n"
                    "token_budgets: [409.6K, 1.2288M, 4096]\n")
    assert load_grid(path).token_budgets == [409_600, 1_228_800, 4_096]
    grid = load_grid("micro", ["top_k=2", "sparsities=0,0.5", "token_budgets=[1K]"])
    assert (grid.top_k, grid.sparsities, grid.token_budgets) == (2, [0.0, 0.5], [1_000])
    with pytest.raises(ConfigError, match=r"sweep grid 'micro': mode='both' is invalid: allowed "
                                          r"fixed_total, fixed_expert"):
        load_grid("micro", ["mode=both"])


def test_every_shipped_preset_is_package_data():
    if sys.version_info < (3, 11):
        pytest.skip("tomllib")
    import tomllib

    patterns = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())[
        "tool"]["setuptools"]["package-data"]["moelab"]
    package = REPO_ROOT / "src" / "moelab"
    shipped = [str(p.relative_to(package)) for p in (package / "presets").rglob("*.yaml")]
    assert "presets/sweeps/cpu.yaml" in shipped and "presets/demo.yaml" in shipped
    for name in shipped:
        # setuptools' * stays within one folder (fnmatch's would not)
        assert any(re.fullmatch(re.escape(p).replace(r"\*", "[^/]*"), name) for p in patterns), name
