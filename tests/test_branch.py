"""Cooldown branches of a wsd budget family, against separate runs.

The issue's bar: a branch's losses equal a separate wsd run to that budget bit for bit on a CPU
(every logged train loss and eval, the summary's val losses and the final weights). The
separate runs are configured by hand from the tiny run's overrides, not by the family code.
One branch goes through ``moelab train --branch-from`` in a subprocess that SIGKILLs itself
mid-cooldown and is finished by rerunning the same command. Also here: the optimizer steps the
family actually takes (counted, against the hand count of the plan), kept checkpoints and
their integrity and confinement, and the one-line refusals.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import moelab.train.loop as loop
from moelab.codec import to_json
from moelab.config import load_config, save_config
from moelab.train import branch_run, load_run, train, wsd_budget_family
from moelab.train.run_folder import RunFolder
from one_line_errors import refused_on_one_line
from tiny_overrides import TIMING_KEYS, TINY_MOE_RUN

STEP = 256  # tokens per step of the tiny run: batch 8 x context 32
BUDGETS = [10 * STEP, 16 * STEP, 24 * STEP]  # decay starts after 8, 12 and 18 steps
COMMON = ["train.eval_interval=3", "train.sample_tokens=4", "train.decay_fraction=0.25"]

KILLED_AT_BRANCH_STEP_3 = """
import os, signal, sys
import moelab.train.loop as loop
from moelab.cli import main

real_optimizer_step, steps_begun = loop.optimizer_step, []

def optimizer_step_or_die(*args, **kwargs):
    steps_begun.append(True)
    if len(steps_begun) == 3:
        os.kill(os.getpid(), signal.SIGKILL)
    return real_optimizer_step(*args, **kwargs)

loop.optimizer_step = optimizer_step_or_die
sys.exit(main(sys.argv[1:]))
"""


def separate_wsd_run_config(budget: int):
    """A wsd run to ``budget`` written out by hand: the 4-step warmup, the last quarter decaying."""
    return load_config(None, TINY_MOE_RUN + COMMON + [
        f"train.max_tokens={budget}", "train.schedule=wsd", "train.warmup_steps=4"])


@pytest.fixture(scope="module")
def family_runs(tmp_path_factory):
    """The family trained in process (steps counted), and one separate run per smaller budget."""
    root = tmp_path_factory.mktemp("family")
    base = load_config(None, TINY_MOE_RUN + COMMON + ["train.schedule=wsd",
                                                      "train.warmup_steps=4"])
    family = wsd_budget_family(base, BUDGETS)
    steps_taken = []
    real_optimizer_step = loop.optimizer_step

    def counted(*args, **kwargs):
        steps_taken.append(True)
        return real_optimizer_step(*args, **kwargs)

    with pytest.MonkeyPatch.context() as patch:  # the session's cache, as conftest sets it
        patch.setenv("MOELAB_CACHE", str(tmp_path_factory.getbasetemp() / "moelab-cache"))
        patch.setattr(loop, "optimizer_step", counted)
        full_dir = root / f"family{family.full.budget}"
        train(family.full.config, full_dir)
        for member in family.branches:
            branch_run(full_dir, member.decay_start_step, member.config,
                       root / f"family{member.budget}")
        family_steps = len(steps_taken)
        for budget in BUDGETS[:2]:
            train(separate_wsd_run_config(budget), root / f"separate{budget}")
    return root, family, family_steps


def events_without_timings(run_dir: Path) -> list[dict]:
    return [{k: v for k, v in e.items() if k not in TIMING_KEYS}
            for e in RunFolder(run_dir).read_metrics()]


def assert_same_run(branch_dir: Path, separate_dir: Path) -> None:
    """Every logged event, the summary's results and the final weights, exactly."""
    branch_events, separate_events = events_without_timings(branch_dir), events_without_timings(separate_dir)
    assert [e["step"] for e in branch_events if e["kind"] == "eval"] == \
        [e["step"] for e in separate_events if e["kind"] == "eval"]
    assert branch_events == separate_events  # floats included
    branch, separate = RunFolder(branch_dir).read_summary(), RunFolder(separate_dir).read_summary()
    for key in ("best_val_loss", "best_val_step", "final_val_loss", "final_val_bpb", "tokens",
                "steps", "routing"):
        assert branch[key] == separate[key], key
    branch_model, _ = load_run(branch_dir)
    separate_model, _ = load_run(separate_dir)
    separate_state = separate_model.state_dict()
    for name, tensor in branch_model.state_dict().items():
        assert torch.equal(tensor, separate_state[name]), name
    assert (branch_dir / "samples.txt").read_text() == (separate_dir / "samples.txt").read_text()


@pytest.mark.slow
@pytest.mark.parametrize("budget", BUDGETS[:2])
def test_a_branch_equals_a_separate_wsd_run_bit_for_bit(family_runs, budget):
    root, _, _ = family_runs
    assert_same_run(root / f"family{budget}", root / f"separate{budget}")


@pytest.mark.slow
def test_the_family_trains_the_largest_budget_plus_the_cooldowns(family_runs):
    _, family, family_steps = family_runs
    # Hand count: 24 steps of the full run, then 10 - 8 and 16 - 12 cooldown steps.
    assert family_steps == 24 + 2 + 4
    assert family_steps * STEP <= BUDGETS[-1] + (2 + 4) * STEP


@pytest.mark.slow
def test_the_full_run_keeps_a_checkpoint_at_each_decay_start(family_runs):
    root, _, _ = family_runs
    checkpoints = root / f"family{BUDGETS[-1]}" / "checkpoints"
    assert sorted(p.name for p in checkpoints.glob("step_*")) == [
        "step_00000008", "step_00000012", "step_00000024"]
    assert json.loads((checkpoints / "latest.json").read_text())["step"] == 24
    assert sorted(json.loads((checkpoints / "kept.json").read_text())) == [
        "step_00000008", "step_00000012"]
    # A branch keeps none: its copy of the step-8 checkpoint rotated away at its own end.
    branch_checkpoints = root / f"family{BUDGETS[0]}" / "checkpoints"
    assert [p.name for p in branch_checkpoints.glob("step_*")] == ["step_00000010"]
    origin = json.loads((root / f"family{BUDGETS[0]}" / "branch.json").read_text())
    assert origin["step"] == 8 and origin["source"] == str((root / f"family{BUDGETS[-1]}").resolve())


@pytest.mark.slow
def test_a_killed_branch_resumes_by_rerunning_the_same_command(family_runs, tmp_path):
    root, family, _ = family_runs
    member = family.branches[1]  # 16 steps, branched at 12
    config_file = save_config(member.config, tmp_path / "branch.yaml")
    branch_dir = tmp_path / "branch"
    command = ["train", str(config_file), "--out", str(branch_dir),
               "--branch-from", str(root / f"family{BUDGETS[-1]}"), "--branch-step", "12",
               "--set", "train.checkpoint_interval=2"]  # a checkpoint at 14 to resume from
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    killed = subprocess.run([sys.executable, "-c", KILLED_AT_BRANCH_STEP_3, *command], env=env,
                            capture_output=True, text=True)
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    assert json.loads((branch_dir / "checkpoints" / "latest.json").read_text())["step"] == 14
    finished = subprocess.run([sys.executable, "-m", "moelab", *command], env=env,
                              capture_output=True, text=True)
    assert finished.returncode == 0, finished.stderr
    assert_same_run(branch_dir, root / f"separate{BUDGETS[1]}")


@pytest.mark.slow
def test_rerunning_a_finished_branch_returns_its_summary(family_runs):
    root, family, _ = family_runs
    member = family.branches[0]
    summary = branch_run(root / f"family{BUDGETS[-1]}", 8, member.config, root / f"family{BUDGETS[0]}")
    assert to_json(summary) == RunFolder(root / f"family{BUDGETS[0]}").read_summary()


# --------------------------------------------------------------------------------------------
# Refusals
# --------------------------------------------------------------------------------------------


def branch_args(config_file: Path, out: Path, source: Path, step: str, *sets: str) -> list[str]:
    args = ["train", str(config_file), "--out", str(out), "--branch-from", str(source),
            "--branch-step", step]
    return args + [arg for item in sets for arg in ("--set", item)]


@pytest.fixture
def branch_config_file(family_runs, tmp_path):
    _, family, _ = family_runs
    return save_config(family.branches[0].config, tmp_path / "branch.yaml")


@pytest.mark.slow
@pytest.mark.parametrize("step, sets, message", [
    ("9", [], "kept no checkpoint at step 9 (kept: 8, 12)"),
    ("8", ["model.d_ff=128"], "its config differs at model.d_ff (64 in the source, 128 given)"),
    ("8", ["train.seed=1"], "its config differs at train.seed"),
    ("8", ["train.warmup_steps=3"], "the lr schedules differ at step 1"),
    # 16 steps decaying over the last 8: its decay starts with step 9, before step 12 (and
    # its first decay step's lr, floor + 1.0 * (peak - floor), is the peak only to rounding).
    ("12", ["train.max_tokens=4096", "train.decay_fraction=0.5"],
     "the lr schedules differ at step 9"),
    ("12", ["train.max_tokens=2816"], "--branch-step 12 is invalid: allowed 1..10"),
])
def test_a_branch_that_would_not_be_a_separate_run_is_refused(
        family_runs, branch_config_file, tmp_path, capsys, step, sets, message):
    root, _, _ = family_runs
    source = root / f"family{BUDGETS[-1]}"
    refused_on_one_line(capsys, branch_args(branch_config_file, tmp_path / "out", source, step,
                                            *sets), message)
    assert not (tmp_path / "out" / "checkpoints").exists()


@pytest.mark.slow
def test_branch_from_needs_a_step_and_a_run(family_runs, branch_config_file, tmp_path, capsys):
    root, _, _ = family_runs
    refused_on_one_line(capsys, ["train", str(branch_config_file), "--out", str(tmp_path / "o"),
                                 "--branch-from", str(root / f"family{BUDGETS[-1]}")],
                        "--branch-from and --branch-step go together")
    refused_on_one_line(capsys, branch_args(branch_config_file, tmp_path / "o", tmp_path, "8"),
                        "kept no checkpoint at step 8 (kept: none)")


@pytest.mark.slow
def test_a_folder_holding_another_run_or_branch_is_refused(family_runs, branch_config_file,
                                                           capsys):
    root, _, _ = family_runs
    source = root / f"family{BUDGETS[-1]}"
    refused_on_one_line(capsys, branch_args(branch_config_file, root / f"separate{BUDGETS[0]}",
                                            source, "8"), "holds a run that is not a branch")
    refused_on_one_line(capsys, branch_args(branch_config_file, root / f"family{BUDGETS[1]}",
                                            source, "8"), "is the branch of", "at step 12")


@pytest.mark.slow
def test_a_damaged_kept_checkpoint_is_refused(family_runs, branch_config_file, tmp_path, capsys):
    root, _, _ = family_runs
    source = tmp_path / "source"
    shutil.copytree(root / f"family{BUDGETS[-1]}", source)
    state_file = source / "checkpoints" / "step_00000008" / "trainer_state.json"
    state_file.write_text(state_file.read_text().replace('"step": 8', '"step":  8'))
    refused_on_one_line(capsys, branch_args(branch_config_file, tmp_path / "out", source, "8"),
                        f"checkpoint file {state_file} is corrupt", "kept.json")
    weights = source / "checkpoints" / "step_00000012" / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[-1] ^= 1
    weights.write_bytes(bytes(data))
    refused_on_one_line(capsys, branch_args(branch_config_file, tmp_path / "out", source, "12",
                                            "train.max_tokens=4096"),
                        f"checkpoint file {weights} is corrupt")
    (source / "checkpoints" / "kept.json").write_text('{"step_00000012": 5}')
    refused_on_one_line(capsys, branch_args(branch_config_file, tmp_path / "out", source, "8"),
                        "kept.json is corrupt")


@pytest.mark.slow
def test_a_kept_checkpoint_outside_its_run_is_refused(family_runs, branch_config_file, tmp_path,
                                                      capsys):
    root, _, _ = family_runs
    source = tmp_path / "source"
    shutil.copytree(root / f"family{BUDGETS[-1]}", source)
    kept = source / "checkpoints" / "step_00000008"
    elsewhere = tmp_path / "elsewhere"
    shutil.move(kept, elsewhere)
    kept.symlink_to(elsewhere, target_is_directory=True)
    refused_on_one_line(capsys, branch_args(branch_config_file, tmp_path / "out", source, "8"),
                        "outside its run folder", "refused")
