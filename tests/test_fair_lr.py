"""``--tune-lr``: each arm's lr chosen on selection seeds that never report (moelab.runs.lr_grid,
moelab.study.tuning), checked against hand counts and hand-chosen lrs with a stand-in trainer."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from moelab.cli import main
from moelab.errors import MoelabError
from moelab.runs.lr_grid import choose_lr, parse_lr_grid
from moelab.study import commands as study_commands
from moelab.study.settings import StudySettings, load_study
from moelab.study.tuning import LrTuning
from fake_runs import write_fake_run

GRID = [0.005, 0.01, 0.02]
SELECT = [500, 501]
REPORT = [0, 1]
# The lr each arm does best at on the selection seeds; on the reporting seeds the MoE would
# do best at 0.01 instead, so a choice made on them would show.
BEST_LR_SELECTING = {"moe": 0.02, "dense_active": 0.01, "dense_total": 0.005}
BEST_LR_REPORTING = {"moe": 0.01, "dense_active": 0.01, "dense_total": 0.005}
ARM_LOSS = {"moe": 3.0, "dense_active": 3.1, "dense_total": 2.95, "moe_compute": 2.9}


def fake_loss(arm: str, lr: float, seed: int) -> float:
    best = (BEST_LR_SELECTING if seed in SELECT else BEST_LR_REPORTING).get(arm, 0.01)
    return ARM_LOSS[arm] + 0.1 * math.log(lr / best) ** 2 + 0.001 * (seed % 3)


class LrTrain:
    """Stands in for moelab.train.train: the loss is a function of arm, lr and seed."""

    def __init__(self, fail=()):
        self.calls: list[tuple[str, float, int]] = []
        self.fail = fail
        """(arm, lr) pairs whose runs raise."""

    def __call__(self, config, run_dir, *, resume=False):
        run_dir = Path(run_dir)
        arm, seed, lr = run_dir.parent.name, config.train.seed, config.train.lr
        self.calls.append((run_dir.as_posix(), lr, seed))
        if (arm, lr) in self.fail:
            raise MoelabError(f"train.lr={lr} is invalid: fake divergence")
        write_fake_run(run_dir, config, fake_loss(arm, lr, seed))


@pytest.fixture(autouse=True)
def _no_data(monkeypatch):
    monkeypatch.setattr(study_commands, "prepare_shared_data", lambda config, log: None)


def _tuned_study(tmp_path, criteria=("active", "total"), train=None):
    config, _ = load_study("demo", ["train.max_tokens=1000000"])
    train = train or LrTrain()
    settings = StudySettings(seeds=list(REPORT), criteria=list(criteria))
    results = study_commands.run_study(
        "study", config, settings, tmp_path / "s", train_fn=train, log=lambda line: None,
        tuning=LrTuning(list(GRID), list(SELECT)))
    return results, train


# --------------------------------------------------------------------------------------------
# The choice
# --------------------------------------------------------------------------------------------


def test_choice_is_the_lowest_mean_and_a_failed_lr_cannot_win():
    losses = {0.005: {1: 3.0, 2: 3.2}, 0.01: {1: 3.05, 2: 3.05}, 0.02: {1: 2.0, 2: None}}
    choice = choose_lr("moe", [0.02, 0.005, 0.01], [1, 2], losses)
    # means by hand: 3.1 and 3.05; 0.02 lost a seed, so its 2.0 cannot count
    assert choice.lr == 0.01 and choice.edge is None
    assert choice.means[0.005] == pytest.approx(3.1) and choice.means[0.02] is None
    edge = choose_lr("moe", [0.005, 0.01], [1], {0.005: {1: 1.0}, 0.01: {1: 1.0}})
    assert edge.lr == 0.005 and edge.edge == "lowest"  # a tie goes to the smaller lr
    top = choose_lr("moe", [0.005, 0.01], [1], {0.005: {1: 2.0}, 0.01: {1: 1.0}})
    assert top.edge == "highest"
    assert choose_lr("moe", [0.005, 0.01], [1], {0.005: {1: None}}).lr is None


def test_grid_is_sorted_and_bad_grids_are_named():
    assert parse_lr_grid("0.02, 0.005,1e-2") == [0.005, 0.01, 0.02]
    for text, why in [("0.01", "1 lrs"), ("0.01,x", "'x' is not a number"),
                      ("0.01,-1", "not positive"), ("0.01,0.010", "listed twice"),
                      ("0.01,inf", "not positive and finite")]:
        with pytest.raises(MoelabError, match=why):
            parse_lr_grid(text)


# --------------------------------------------------------------------------------------------
# The study
# --------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_each_arm_reports_at_the_lr_its_selection_seeds_chose(tmp_path):
    results, train = _tuned_study(tmp_path)
    # hand count: 3 lrs x 3 arms x 2 selection seeds, then 3 arms x 2 reporting seeds
    selection = [c for c in train.calls if "/select/" in c[0]]
    reporting = [c for c in train.calls if "/select/" not in c[0]]
    assert len(selection) == 18 and len(reporting) == 6
    assert {seed for _, _, seed in selection} == set(SELECT)
    assert {seed for _, _, seed in reporting} == set(REPORT)  # the reporting seeds never chose
    for path, lr, _ in reporting:
        assert lr == BEST_LR_SELECTING[Path(path).parent.name], path
    folder = tmp_path / "s"
    assert (folder / "select" / "lr0.02" / "runs" / "moe" / "seed500" / "summary.json").is_file()
    record = json.loads((folder / "results.json").read_text())["lr_selection"]
    assert record["selection_seeds"] == SELECT and record["reporting_seeds"] == REPORT
    assert {arm: r["lr"] for arm, r in record["arms"].items()} == {
        arm: BEST_LR_SELECTING[arm] for arm in ("moe", "dense_active", "dense_total")}
    assert record["arms"]["moe"]["edge"] == "highest"
    assert record["arms"]["dense_total"]["edge"] == "lowest"
    assert record["arms"]["dense_active"]["edge"] is None
    moe_means = record["arms"]["moe"]["mean_loss"]
    assert moe_means["0.01"] == pytest.approx(
        sum(fake_loss("moe", 0.01, s) for s in SELECT) / 2)
    report = (folder / "report.md").read_text()
    assert "## Learning rate per arm" in report and "seed 500" in report
    assert "at the grid's highest lr" in report and "at the grid's lowest lr" in report
    assert "peak lr per arm" in report


@pytest.mark.slow
def test_report_rebuilds_the_selection_from_the_run_folders(tmp_path, capsys):
    _tuned_study(tmp_path)
    folder = tmp_path / "s"
    before = json.loads((folder / "results.json").read_text())
    (folder / "results.json").unlink()
    assert main(["report", str(folder)]) == 0
    assert json.loads((folder / "results.json").read_text()) == before


@pytest.mark.slow
def test_the_equal_compute_arm_takes_the_moes_lr_and_is_not_tuned(tmp_path):
    _, train = _tuned_study(tmp_path, criteria=("compute",))
    # arms moe, dense_total, moe_compute; moe_compute is not selected: 3 lrs x 2 arms x 2 seeds
    selection = [c for c in train.calls if "/select/" in c[0]]
    assert len(selection) == 12
    assert not any("moe_compute" in path for path, _, _ in selection)
    compute = [lr for path, lr, _ in train.calls if "/moe_compute/" in path]
    assert compute == [BEST_LR_SELECTING["moe"]] * 2
    report = (tmp_path / "s" / "report.md").read_text()
    assert "moe_compute: not tuned, it takes moe's lr" in report


@pytest.mark.slow
def test_an_lr_whose_runs_fail_is_not_chosen(tmp_path):
    results, _ = _tuned_study(tmp_path, train=LrTrain(fail={("moe", 0.02)}))
    record = json.loads((tmp_path / "s" / "results.json").read_text())["lr_selection"]
    assert record["arms"]["moe"]["lr"] == 0.01
    assert record["arms"]["moe"]["losses"]["0.02"] == {"500": None, "501": None}


@pytest.mark.slow
def test_a_rerun_trains_nothing_again(tmp_path):
    _, first = _tuned_study(tmp_path)
    _, again = _tuned_study(tmp_path)
    assert len(first.calls) == 24 and again.calls == []


@pytest.mark.parametrize("argv, message", [
    (["--tune-lr", "0.01"], "--tune-lr '0.01' is invalid: 1 lrs"),
    (["--tune-lr", "0.01,fast"], "'fast' is not a number"),
    (["--tune-lr", "0.01,0.02", "--seeds", "3", "--select-seeds", "2,7"],
     "--select-seeds=2,7 is invalid: seed 2 is also a reporting seed"),
    (["--tune-lr", "0.01,0.02", "--select-seeds", "0"], "--select-seeds=0 is invalid"),
    (["--select-seeds", "5"], "--select-seeds is invalid without --tune-lr"),
    (["--tune-lr", "0.01,0.02", "--list-runs"], "--tune-lr is invalid with --list-runs"),
])
def test_bad_tuning_input_is_one_line_and_exit_2(argv, message, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(["study", "demo", *argv]) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "out").exists()  # refused before anything was written


# --------------------------------------------------------------------------------------------
# compare --tune-lr
# --------------------------------------------------------------------------------------------

ARM_LOSS.update({"A": 3.0, "B": 3.05})
BEST_LR_SELECTING.update({"A": 0.005, "B": 0.02})


def test_compare_tunes_each_side_on_the_selection_seeds(tmp_path, monkeypatch):
    from moelab.runs.launchers.local import LocalLauncher
    from moelab.study import compare as compare_module

    monkeypatch.setattr(compare_module, "prepare_shared_data", lambda config, log: None)
    config, _ = load_study("demo", ["train.max_tokens=1000000"])
    train = LrTrain()
    result = compare_module.run_comparison(
        {"A": config, "B": config}, {"A": "demo", "B": "demo"}, list(REPORT), tmp_path / "c",
        launcher=LocalLauncher(train_fn=train), log=lambda line: None,
        tuning=LrTuning(list(GRID), list(SELECT)))
    # hand count: 3 lrs x 2 sides x 2 selection seeds, then 2 sides x 2 reporting seeds
    assert len(train.calls) == 16
    reporting = [(Path(path).parent.name, lr, seed) for path, lr, seed in train.calls
                 if "/select/" not in path]
    assert sorted(reporting) == [("A", 0.005, 0), ("A", 0.005, 1), ("B", 0.02, 0), ("B", 0.02, 1)]
    record = json.loads((tmp_path / "c" / "compare.json").read_text())["lr_selection"]
    assert list(record) == ["grid", "selection_seeds", "reporting_seeds", "sides"]
    assert list(record["sides"]["A"]) == ["unit", "grid", "seeds", "lr", "edge", "mean_loss",
                                          "losses"]
    assert list(record["sides"]["A"]["mean_loss"]) == [f"{lr:g}" for lr in sorted(GRID)]
    assert record["selection_seeds"] == SELECT and record["reporting_seeds"] == REPORT
    assert record["sides"]["A"]["edge"] == "lowest" and record["sides"]["B"]["edge"] == "highest"
    assert result.losses["A"][0] == pytest.approx(fake_loss("A", 0.005, 0))


def test_compare_refuses_selection_seeds_that_report(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(["compare", "demo", "demo", "--seeds", "0,1", "--tune-lr", "0.01,0.02",
                 "--select-seeds", "1,2"]) == 2
    err = capsys.readouterr().err
    assert "--select-seeds=1,2 is invalid: seed 1 is also a reporting seed" in err
    assert len(err.strip().splitlines()) == 1 and not (tmp_path / "out").exists()
