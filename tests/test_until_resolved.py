"""``study --until-resolved``: seeds added in rounds until every comparison is decided, with a
stand-in trainer whose per-seed gaps are known; stops and run counts checked by hand."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from moelab.cli import main
from moelab.stats.sequential import t_boundaries
from moelab.study import commands as study_commands
from moelab.study.rounds import UntilResolved
from moelab.study.settings import StudySettings, load_study
from fake_runs import write_fake_run
from one_line_errors import refused_on_one_line

LOOKS = [2, 4, 6, 8, 10]  # first round 2 seeds, 2 more a round, at most 10


def moe_loss(seed: int) -> float:
    return 3.0 + 0.01 * math.sin(seed)


def arm_loss(arm: str, seed: int) -> float:
    if arm == "dense_active":  # clearly worse: resolves
        return moe_loss(seed) + 0.03 + 0.004 * math.cos(7 * seed)
    if arm == "dense_total":  # no real gap, little noise: smaller than the threshold
        return moe_loss(seed) + 0.002 * math.cos(5 * seed)
    return moe_loss(seed)


class SeedTrain:
    def __init__(self):
        self.calls: list[tuple[str, int]] = []

    def __call__(self, config, run_dir, *, resume=False):
        run_dir = Path(run_dir)
        arm, seed = run_dir.parent.name, config.train.seed
        self.calls.append((arm, seed))
        write_fake_run(run_dir, config, arm_loss(arm, seed))


@pytest.fixture(autouse=True)
def _no_data(monkeypatch):
    monkeypatch.setattr(study_commands, "prepare_shared_data", lambda config, log: None)


def expected_stop(arm: str, comparisons: int, threshold: float) -> tuple[int, str]:
    """By hand: the first look whose interval mean +- c_k sd / sqrt(n) excludes 0 or lies
    inside +- threshold (c_k the design's simulated critical values, tested elsewhere)."""
    critical = t_boundaries(LOOKS, 0.05 / comparisons)
    for k, n in enumerate(LOOKS):
        d = np.array([arm_loss(arm, s) - moe_loss(s) for s in range(n)])
        half = critical[k] * d.std(ddof=1) / math.sqrt(n)
        low, high = d.mean() - half, d.mean() + half
        if low > 0 or high < 0:
            return k, "resolved"
        if -threshold < low and high < threshold:
            return k, "smaller than threshold"
    return len(LOOKS) - 1, "undetermined at the maximum"


def _run(tmp_path, criteria):
    config, _ = load_study("demo", ["train.max_tokens=1000000"])
    train = SeedTrain()
    study_commands.run_study(
        "study", config, StudySettings(seeds=2, criteria=list(criteria)), tmp_path / "s",
        train_fn=train, log=lambda line: None,
        until_resolved=UntilResolved(max_seeds=10, threshold=0.01, round_seeds=2))
    return train


@pytest.mark.slow
def test_each_comparison_stops_where_its_interval_decides_and_the_study_with_the_last(tmp_path):
    train = _run(tmp_path, ["active", "total"])
    stops = {"active": expected_stop("dense_active", 2, 0.01),
             "total": expected_stop("dense_total", 2, 0.01)}
    assert stops["active"][1] == "resolved" and stops["total"][1] == "smaller than threshold"
    last_look = max(look for look, _ in stops.values())
    # hand count: 3 arms x the seeds of the last look any comparison needed
    assert len(train.calls) == 3 * LOOKS[last_look]
    assert {seed for _, seed in train.calls} == set(range(LOOKS[last_look]))
    record = json.loads((tmp_path / "s" / "results.json").read_text())["sequential"]
    assert record["rounds_run"] == last_look + 1 and record["looks"] == LOOKS
    for entry in record["comparisons"]:
        look, reason = stops[entry["criterion"]]
        assert (entry["stopped_at_round"], entry["reason"]) == (look + 1, reason)
    report = (tmp_path / "s" / "report.md").read_text()
    assert "## Seeds until resolved" in report and "Lan-DeMets" in report
    assert f"stopped at round {stops['active'][0] + 1}" in report


@pytest.mark.slow
def test_report_rebuilds_the_rounds_and_a_rerun_trains_nothing(tmp_path, capsys):
    _run(tmp_path, ["active"])
    folder = tmp_path / "s"
    before = json.loads((folder / "results.json").read_text())
    assert main(["report", str(folder)]) == 0
    assert json.loads((folder / "results.json").read_text()) == before
    assert _run(tmp_path, ["active"]).calls == []


@pytest.mark.slow
def test_another_design_in_the_same_folder_is_refused(tmp_path, capsys):
    _run(tmp_path, ["active"])
    out = str(tmp_path / "s")
    argv = ["study", "demo", "--set", "train.max_tokens=1000000", "--criteria", "active",
            "--seeds", "2", "--out", out, "--until-resolved", "--max-seeds", "10",
            "--round-seeds", "2", "--threshold", "0.02"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "already holds rounds with another threshold" in err
    assert len(err.strip().splitlines()) == 1


@pytest.mark.slow
@pytest.mark.parametrize("listing", [[], ["--list-runs"]])
def test_a_fixed_seed_count_on_a_rounds_folder_is_refused_and_its_record_kept(tmp_path, capsys,
                                                                             listing):
    _run(tmp_path, ["active"])
    folder = tmp_path / "s"
    before = {name: (folder / name).read_bytes() for name in ("plan.json", "results.json")}
    argv = ["study", "demo", "--set", "train.max_tokens=1000000", "--criteria", "active",
            "--seeds", "2", "--out", str(folder), *listing]
    refused_on_one_line(capsys, argv, "holds --until-resolved rounds", "--until-resolved")
    assert {name: (folder / name).read_bytes() for name in before} == before


@pytest.mark.parametrize("argv, message", [
    (["--until-resolved", "--seeds", "1"], "--seeds=1 is invalid with --until-resolved"),
    (["--until-resolved", "--seeds", "0,1,2"], "--seeds=[0, 1, 2] is invalid with --until-resolved"),
    (["--until-resolved", "--seeds", "3", "--max-seeds", "3"], "--max-seeds=3 is invalid"),
    (["--until-resolved", "--threshold", "0"], "--threshold=0 is invalid"),
    (["--until-resolved", "--threshold", "nan"], "--threshold=nan is invalid"),
    (["--until-resolved", "--round-seeds", "0"], "--round-seeds"),
    (["--max-seeds", "8"], "--max-seeds is invalid without --until-resolved"),
    (["--threshold", "0.01"], "--threshold is invalid without --until-resolved"),
    (["--until-resolved", "--list-runs"], "--until-resolved is invalid with --list-runs"),
    (["--until-resolved", "--max-seeds", "20", "--tune-lr", "0.01,0.02", "--select-seeds",
      "15,1000"], "seed 15 is also a reporting seed"),
])
def test_bad_input_is_one_line_and_exit_2(argv, message, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(["study", "demo", *argv]) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "out").exists()


@pytest.mark.slow
def test_tuned_arms_then_rounds_on_fresh_seeds(tmp_path):
    from moelab.study.tuning import LrTuning

    config, _ = load_study("demo", ["train.max_tokens=1000000"])
    train = SeedTrain()
    study_commands.run_study(
        "study", config, StudySettings(seeds=2, criteria=["active"]), tmp_path / "s",
        train_fn=train, log=lambda line: None, tuning=LrTuning([0.01, 0.02], [500, 501]),
        until_resolved=UntilResolved(max_seeds=10, threshold=0.01, round_seeds=2))
    look, _ = expected_stop("dense_active", 1, 0.01)
    # hand count: 2 lrs x 2 arms x 2 selection seeds, then 2 arms x the seeds of the stop
    assert len(train.calls) == 8 + 2 * LOOKS[look]
    assert {seed for _, seed in train.calls[:8]} == {500, 501}
    assert {seed for _, seed in train.calls[8:]} == set(range(LOOKS[look]))
    results = json.loads((tmp_path / "s" / "results.json").read_text())
    assert "lr_selection" in results and results["sequential"]["rounds_run"] == look + 1
