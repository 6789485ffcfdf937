"""Seeds as a count or a list: ``--seeds``, ``study.seeds`` in YAML and ``--set``; bad input is a
one-line error; a run's config depends only on its arm and its seed; study.yaml reruns lists.
Planning only (``--list-runs``): nothing trains here."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from moelab.cli import main
from moelab.errors import ConfigError
from moelab.study.settings import StudySettings, check_seeds, load_study


def plan_study(folder: Path, *args: str) -> list[str]:
    """Plan a demo study in ``folder`` and return its run names."""
    assert main(["study", "demo", "--out", str(folder), "--list-runs", *args]) == 0
    return [run["name"] for run in json.loads((folder / "plan.json").read_text())["runs"]]


@pytest.mark.parametrize("value, seeds", [
    (3, 3), ("3", 3), ("10,11,12", [10, 11, 12]), (" 12, 10 ", [12, 10]), ("[11]", [11]),
    ([0, 7], [0, 7]),
])
def test_a_count_or_a_list(value, seeds):
    assert check_seeds(value) == seeds


def test_a_count_starts_at_train_seed_and_a_list_is_taken_as_it_is():
    assert StudySettings(seeds=3).seed_list(10) == [10, 11, 12]
    assert StudySettings(seeds=[12, 10]).seed_list(10) == [12, 10]


@pytest.mark.parametrize("args, shown, why", [
    (["--seeds", "-1"], "--seeds=-1", "a seed count must be at least 1"),
    (["--seeds", "10,-1"], "--seeds=10,-1", "seed -1 is negative"),
    (["--seeds", "10,11,10"], "--seeds=10,11,10", "seed 10 is listed twice"),
    (["--seeds", ""], "--seeds=", "it is empty"),
    (["--seeds", "[]"], "--seeds=[]", "the list is empty"),
    (["--seeds", "10,,11"], "--seeds=10,,11", "an item is empty"),
    (["--seeds", "three"], "--seeds=three", "'three' is not a whole number"),
    (["--seeds", "1.5"], "--seeds=1.5", "'1.5' is not a whole number"),
    (["--set", "study.seeds=[]"], "study.seeds=[]", "the list is empty"),
    (["--set", "study.seeds=true"], "study.seeds=True", "not a whole number or a list"),
    (["--set", "study.seeds=[10, true]"], "study.seeds=[10, True]", "True is not a whole number"),
    (["--set", "study.seeds=[10, 1.5]"], "study.seeds=[10, 1.5]", "1.5 is not a whole number"),
    (["--set", "study.seeds=2.0"], "study.seeds=2.0", "not a whole number or a list"),
    (["--set", "study.seeds=[3, 3]"], "study.seeds=[3, 3]", "seed 3 is listed twice"),
])
def test_bad_seeds_are_one_line_and_exit_2(args, shown, why, tmp_path, capsys):
    code = main(["study", "demo", "--out", str(tmp_path / "s"), "--list-runs", *args])
    err = capsys.readouterr().err
    assert code == 2
    assert f"{shown} is invalid: {why}; allowed a count N" in err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err


def test_the_yaml_study_section_takes_a_list(tmp_path):
    path = tmp_path / "mine.yaml"
    path.write_text("study:\n  base: demo\n  seeds: [10, 11, 12]\n")
    assert load_study(path)[1].seeds == [10, 11, 12]
    assert load_study(path, ["study.seeds=4,5"])[1].seeds == [4, 5]
    path.write_text("study:\n  base: demo\n  seeds: [10, 10]\n")
    with pytest.raises(ConfigError, match=r"study.seeds=\[10, 10\] is invalid: seed 10 is listed twice"):
        load_study(path)


@pytest.mark.slow
def test_run_folders_are_named_by_the_seed(tmp_path):
    assert plan_study(tmp_path / "s", "--seeds", "10,12") == [
        "moe/seed10", "dense_active/seed10", "dense_total/seed10",
        "moe/seed12", "dense_active/seed12", "dense_total/seed12"]


@pytest.mark.slow
def test_a_runs_config_depends_only_on_its_arm_and_seed(tmp_path):
    ways = {
        "count from 10": ["--seeds", "3", "--set", "train.seed=10"],
        "count from 0": ["--seeds", "12"],
        "list": ["--seeds", "10,11,12"],
        "one-seed list": ["--set", "study.seeds=[11]"],
        "list, another base seed": ["--seeds", "11,10", "--set", "train.seed=5"],
    }
    configs = {}
    for way, args in ways.items():
        folder = tmp_path / way.replace(" ", "_").replace(",", "")
        assert "moe/seed11" in plan_study(folder, *args)
        configs[way] = (folder / "configs/moe-seed11.yaml").read_text()
    reference = configs.pop("list")
    assert yaml.safe_load(reference)["train"]["seed"] == 11
    for way, text in configs.items():
        assert text == reference, way


@pytest.mark.slow
def test_a_folder_planned_with_a_count_takes_the_same_seeds_as_a_list(tmp_path):
    folder = tmp_path / "s"
    plan_study(folder, "--seeds", "2", "--set", "train.seed=10")
    # Only the base train.seed differs, and it only started the count: the same runs, and more.
    names = plan_study(folder, "--seeds", "10,11,12")
    assert names[-3:] == ["moe/seed12", "dense_active/seed12", "dense_total/seed12"]


def test_study_yaml_reruns_a_seed_list(tmp_path):
    folder = tmp_path / "s"
    names = plan_study(folder, "--seeds", "12,10", "--budgets", "100K")
    study_yaml = yaml.safe_load((folder / "study.yaml").read_text())
    assert study_yaml["study"]["seeds"] == [12, 10]
    config, settings = load_study(folder / "study.yaml")
    assert (settings.seeds, settings.budgets) == ([12, 10], [100_000])
    assert main(["study", str(folder / "study.yaml"), "--out", str(folder), "--list-runs"]) == 0
    assert [run["name"] for run in json.loads((folder / "plan.json").read_text())["runs"]] == names


def test_ablate_routing_takes_a_seed_list(tmp_path, capsys):
    out = tmp_path / "a"
    assert main(["ablate-routing", "demo", "--seeds", "4,2", "--out", str(out), "--list-runs"]) == 0
    commands = capsys.readouterr().out.splitlines()
    assert [c.split("--out ")[1].split()[0][len(str(out)) + 1:] for c in commands[:7]] == [
        "runs/naive_top1/seed4", "runs/top1_lb/seed4", "runs/top2_lb/seed4", "runs/top2_lb_z/seed4",
        "runs/top2_global_lb_z/seed4", "runs/top2_bias_z/seed4", "runs/naive_top1/seed2"]
    assert yaml.safe_load((out / "study.yaml").read_text())["study"]["seeds"] == [4, 2]
