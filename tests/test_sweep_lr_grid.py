"""``sweep-sparsity --lr-grid``: every sweep cell at its own lr, chosen on selection seeds that
no result uses (moelab.sweep.tuning); the plan and the dry-run cost against hand counts."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import yaml

from moelab.accounting import flops_per_token
from moelab.cli import main
from moelab.config import to_dict
from moelab.runs.launchers.local import LocalLauncher
from moelab.sweep import commands as sweep_commands
from moelab.sweep.grid import load_sweep_grid
from moelab.sweep.plan import plan_sweep
from moelab.sweep.tuning import SweepLrGrid, selection_specs

GRID = [0.005, 0.01, 0.02]
SELECT = [70, 71]
# the lr each cell does best at on the selection seeds (the reporting seed would prefer 0.01)
BEST = {"D256/a/S0.000-E1k1": 0.005, "D256/a/S0.500-E2k1": 0.01,
        "D256/b/S0.000-E1k1": 0.02, "D256/b/S0.500-E2k1": 0.01}


def cell_of_run(run_dir: Path) -> str:
    return "/".join(run_dir.parts[-4:-1])


class CellTrain:
    def __init__(self):
        self.calls: list[tuple[str, float, int]] = []

    def __call__(self, config, run_dir, *, resume=False):
        run_dir = Path(run_dir)
        seed, lr = config.train.seed, config.train.lr
        self.calls.append((run_dir.as_posix(), lr, seed))
        best = BEST[cell_of_run(run_dir)] if seed in SELECT else 0.01
        loss = 5.0 + 0.1 * math.log(lr / best) ** 2 + 0.001 * seed
        run_dir.mkdir(parents=True, exist_ok=True)
        (run_dir / "config.yaml").write_text(yaml.safe_dump(to_dict(config)))
        (run_dir / "summary.json").write_text(json.dumps({
            "status": "complete", "best_val_loss": loss, "final_val_loss": loss, "seed": seed}))


def test_the_selection_plans_every_cell_at_every_lr_on_the_selection_seeds_only():
    grid = load_sweep_grid("micro", [])
    specs_by_lr = selection_specs(grid, SweepLrGrid(GRID, SELECT))
    # hand count: 2 sizes x 2 sparsities x 1 budget = 4 cells, each at 3 lrs on 2 seeds
    assert sorted(specs_by_lr) == GRID
    for lr, specs in specs_by_lr.items():
        assert len(specs) == 8
        assert {spec.config.train.seed for spec in specs} == set(SELECT)
        assert {spec.config.train.lr for spec in specs} == {lr}


def test_each_cell_is_planned_at_the_lr_its_selection_seeds_chose(tmp_path, monkeypatch):
    monkeypatch.setattr(sweep_commands, "prepare_shared_data", lambda config, log: None)
    grid = load_sweep_grid("micro", [])
    train = CellTrain()
    adjust, extra = sweep_commands.choose_cell_lrs(
        grid, tmp_path, SweepLrGrid(GRID, SELECT), LocalLauncher(train_fn=train), lambda _: None)
    assert len(train.calls) == 24 and {seed for _, _, seed in train.calls} == set(SELECT)
    points, specs = sweep_commands._plan_folder(grid, tmp_path, 0, None, adjust, extra)
    assert len(specs) == 4 and {spec.config.train.seed for spec in specs} == {0}
    for spec in specs:
        cell = "/".join(spec.name.split("/")[:-1])
        assert spec.config.train.lr == BEST[cell], cell
        planned = yaml.safe_load((tmp_path / spec.config_path).read_text())
        assert planned["train"]["lr"] == BEST[cell]
    record = json.loads((tmp_path / "plan.json").read_text())["lr_selection"]
    assert record["seeds"] == SELECT and record["grid"] == GRID
    assert (tmp_path / "select" / "lr0.02" / "runs" / "D256" / "b").is_dir()
    from moelab.runs.lr_grid import read_choices
    from moelab.sweep.analyses.lr_selection import lr_selection_text

    text = lr_selection_text(record, read_choices(tmp_path, record))
    assert "## Learning rate per cell" in text and "lowest edge" in text and "highest edge" in text


def test_a_wsd_budget_family_shares_one_lr_chosen_over_its_budgets(tmp_path, monkeypatch):
    monkeypatch.setattr(sweep_commands, "prepare_shared_data", lambda config, log: None)
    grid = load_sweep_grid("micro", ["train.schedule=wsd", "token_budgets=[256,512]"])
    specs_by_lr = selection_specs(grid, SweepLrGrid(GRID, SELECT))
    # 4 cells x 2 budgets x 2 seeds per lr; the 256-token run branches from the 512-token one
    assert all(len(specs) == 16 for specs in specs_by_lr.values())
    assert sum(spec.branch is not None for spec in specs_by_lr[0.01]) == 8
    record = sweep_commands.sweep_tuning.sweep_selection_record(
        grid, SweepLrGrid(GRID, SELECT), specs_by_lr)
    assert record["per"] == "budget family"
    assert {run["unit"] for run in record["runs"]} == {"a/S0.000-E1k1", "a/S0.500-E2k1",
                                                      "b/S0.000-E1k1", "b/S0.500-E2k1"}


def test_dry_run_cost_equals_a_hand_count(capsys):
    grid = load_sweep_grid("micro", [])
    points = plan_sweep(grid)
    sweep_flops = sum(flops_per_token(p.config.model).six_n * 256 for p in points)
    assert main(["sweep-sparsity", "micro", "--dry-run", "--lr-grid", "0.005,0.01,0.02",
                 "--select-seeds", "70,71"]) == 0
    out = capsys.readouterr().out
    # selection: 4 cells x 3 lrs x 2 seeds = 24 runs of 256 tokens; the sweep: 4 runs
    assert "4 cells (per budget) x 3 lrs (0.005, 0.01, 0.02) x 2 selection seeds (70, 71): " \
        f"24 runs, 6.14K tokens, {6 * sweep_flops:.3g} training FLOPs" in out
    assert f"then the sweep at each cell's lr: 4 runs, 1.02K tokens, {sweep_flops:.3g}" in out
    assert "total: 28 runs" in out and "(6.0x the sweep's own for the selection)" in out


def test_a_folder_planned_without_the_lr_grid_is_refused(tmp_path, monkeypatch):
    monkeypatch.setattr(sweep_commands, "prepare_shared_data", lambda config, log: None)
    grid = load_sweep_grid("micro", [])
    sweep_commands._plan_folder(grid, tmp_path, 0, None)
    with pytest.raises(Exception, match="planned with no --lr-grid"):
        sweep_commands.choose_cell_lrs(grid, tmp_path, SweepLrGrid(GRID, SELECT),
                                       LocalLauncher(train_fn=CellTrain()), lambda _: None)


def test_a_folder_planned_with_the_lr_grid_is_refused_without_it(tmp_path, monkeypatch):
    monkeypatch.setattr(sweep_commands, "prepare_shared_data", lambda config, log: None)
    grid = load_sweep_grid("micro", [])
    adjust, extra = sweep_commands.choose_cell_lrs(
        grid, tmp_path, SweepLrGrid(GRID, SELECT), LocalLauncher(train_fn=CellTrain()),
        lambda _: None)
    sweep_commands._plan_folder(grid, tmp_path, 0, None, adjust, extra)
    with pytest.raises(Exception, match="planned with --lr-grid 0.005,0.01,0.02 on selection "
                                        "seeds 70,71"):
        sweep_commands._plan_folder(grid, tmp_path, 0, None)
    with pytest.raises(Exception, match="planned with --lr-grid"):
        sweep_commands.choose_cell_lrs(grid, tmp_path, SweepLrGrid([0.01, 0.02], SELECT),
                                       LocalLauncher(train_fn=CellTrain()), lambda _: None)


@pytest.mark.parametrize("argv, message", [
    (["--lr-grid", "0.01"], "--lr-grid '0.01' is invalid: 1 lrs"),
    (["--lr-grid", "0.01,0"], "lr 0 is not positive"),
    (["--lr-grid", "0.01,0.02", "--select-seeds", "0,9"], "seed 0 is also a reporting seed"),
    (["--select-seeds", "3"], "--select-seeds is invalid without --lr-grid"),
    (["--lr-grid", "0.01,0.02", "--list-runs"], "--lr-grid is invalid with --list-runs"),
])
def test_bad_input_is_one_line_and_exit_2(argv, message, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(["sweep-sparsity", "micro", *argv]) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "out").exists()
