"""Graceful preemption: SIGTERM or SIGUSR1 stop a run at the next step boundary with a
checkpoint (even with the default ``checkpoint_interval: 0``) and exit ``EXIT_PREEMPTED``;
``--resume`` then ends bit for bit where an uninterrupted run ends.

A run signals itself as a chosen step begins (a real signal, delivered by the kernel), so where
it stops does not depend on the machine's speed; one test signals a ``moelab train``
subprocess from outside, another a study whose runs train in child processes.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
import torch

import moelab.train.loop as loop
from moelab.cli import main
from moelab.errors import EXIT_PREEMPTED
from moelab.train import load_run
from moelab.train.run_folder import RunFolder
from tiny_overrides import TIMING_KEYS, TINY_MOE_RUN

STEPS = 16
TINY_RUN = TINY_MOE_RUN + [f"train.max_tokens={STEPS * 256}", "train.eval_interval=4",
                           "train.sample_tokens=4"]


def settings(*pairs: str) -> list[str]:
    return [arg for pair in pairs for arg in ("--set", pair)]


def train_args(run_dir: Path, *extra: str) -> list[str]:
    return ["train", "demo", *settings(*TINY_RUN), "--out", str(run_dir), *extra]


REAL_OPTIMIZER_STEP = loop.optimizer_step


@pytest.fixture
def unhandled_signals_fail():
    """A preemption signal that reaches this test process unhandled fails the test instead of
    ending pytest."""
    def unhandled(number, frame):
        raise AssertionError(f"{signal.Signals(number).name} was not handled")

    previous = {number: signal.signal(number, unhandled)
                for number in (signal.SIGTERM, signal.SIGUSR1)}
    yield unhandled
    for number, handler in previous.items():
        signal.signal(number, handler)


def signal_at(monkeypatch, step: int, number: int) -> None:
    """This process sends itself ``number`` as training step ``step`` begins."""
    def step_then_signal(session, *args, **kwargs):
        if session.state.step + 1 == step:
            os.kill(os.getpid(), number)
        return REAL_OPTIMIZER_STEP(session, *args, **kwargs)

    monkeypatch.setattr(loop, "optimizer_step", step_then_signal)


def without_timings(events: list[dict]) -> list[dict]:
    return [{k: v for k, v in e.items() if k not in TIMING_KEYS} for e in events]


def assert_same_run(run: Path, reference: Path) -> None:
    """Same events (floats exactly), summary, samples and final weights."""
    assert without_timings(RunFolder(run).read_metrics()) == \
        without_timings(RunFolder(reference).read_metrics())
    summary, expected = RunFolder(run).read_summary(), RunFolder(reference).read_summary()
    for key in ("final_val_loss", "best_val_loss", "best_val_step", "tokens", "steps", "routing"):
        assert summary[key] == expected[key]
    assert (run / "samples.txt").read_text() == (reference / "samples.txt").read_text()
    weights, expected_weights = (load_run(path)[0].state_dict() for path in (run, reference))
    assert all(torch.equal(weights[name], expected_weights[name]) for name in expected_weights)


def test_preempted_early_mid_and_at_the_end_resumes_bit_for_bit(
        tmp_path, capsys, monkeypatch, unhandled_signals_fail):
    reference = tmp_path / "uninterrupted"
    assert main(train_args(reference)) == 0
    run = tmp_path / "preempted"
    # Early, mid-way (SLURM's warning signal), and at the last step, before the write-up.
    for step, number in ((1, signal.SIGTERM), (9, signal.SIGUSR1), (STEPS, signal.SIGTERM)):
        signal_at(monkeypatch, step, number)
        capsys.readouterr()
        assert main(train_args(run, "--resume")) == EXIT_PREEMPTED
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and signal.Signals(number).name in err and "--resume" in err
        assert f"after step {step} of {STEPS}" in err
        assert json.loads((run / "checkpoints" / "latest.json").read_text())["step"] == step
        assert not (run / "summary.json").exists()
        assert max(e["step"] for e in RunFolder(run).read_metrics()) == step
    monkeypatch.setattr(loop, "optimizer_step", REAL_OPTIMIZER_STEP)
    assert main(train_args(run, "--resume")) == 0
    assert_same_run(run, reference)
    # The process's own handlers are back once a run ends.
    assert signal.getsignal(signal.SIGTERM) is unhandled_signals_fail


SLOW_TRAIN = """
import sys, time
import moelab.train.loop as loop
from moelab.cli import main

real_step = loop.optimizer_step

def slow_step(*args, **kwargs):
    time.sleep(0.2)  # a window for the test's signal; the numbers do not change
    return real_step(*args, **kwargs)

loop.optimizer_step = slow_step
sys.exit(main(sys.argv[1:]))
"""


def train_steps(run: Path) -> list[int]:
    path = run / "metrics.jsonl"
    if not path.is_file():
        return []
    return [e["step"] for e in RunFolder(run).read_metrics() if e["kind"] == "train"]


@pytest.mark.slow
def test_a_sigterm_from_outside_stops_a_training_process_at_a_checkpoint(tmp_path):
    run = tmp_path / "run"
    process = subprocess.Popen([sys.executable, "-c", SLOW_TRAIN, *train_args(run)],
                               env={**os.environ, "OMP_NUM_THREADS": "1"},
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while len(train_steps(run)) < 3:
        assert process.poll() is None and time.monotonic() < deadline, process.communicate()
        time.sleep(0.05)
    process.send_signal(signal.SIGTERM)
    _, err = process.communicate(timeout=120)
    assert process.returncode == EXIT_PREEMPTED, err
    assert err.count("\n") == 1 and "SIGTERM" in err and "Traceback" not in err
    saved = json.loads((run / "checkpoints" / "latest.json").read_text())["step"]
    assert 3 <= saved < STEPS and train_steps(run) == list(range(1, saved + 1))
    assert main(train_args(run, "--resume")) == 0
    assert train_steps(run) == list(range(1, STEPS + 1))


# Every interpreter started with this folder on its path (the study and the fork server its
# runs are forked from) trains slowly: the runs are still training when the test signals.
SLOW_SITE = """
import time
import moelab.train.loop as loop

real_step = loop.optimizer_step

def slow_step(*args, **kwargs):
    time.sleep(0.2)
    return real_step(*args, **kwargs)

loop.optimizer_step = slow_step
"""


def study_args(study: Path, *extra: str) -> list[str]:
    return ["study", "demo", "--seeds", "1", "--criteria", "active",
            *settings(*TINY_RUN), "--out", str(study), *extra]


def start_slow_study(tmp_path: Path, study: Path) -> tuple[subprocess.Popen, Path]:
    """A study of two runs, each in a child process, with its own $TMPDIR."""
    site = tmp_path / "site"
    site.mkdir()
    # A short $TMPDIR, as a user's: under pytest's deep one the fork server's socket path would
    # be too long to move into the scratch folder, and the test would check less.
    temp = Path(tempfile.mkdtemp(prefix="moelab-test-"))
    (site / "sitecustomize.py").write_text(SLOW_SITE)
    path = os.pathsep.join([str(site), *filter(None, [os.environ.get("PYTHONPATH")])])
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": path, "TMPDIR": str(temp)}
    process = subprocess.Popen([sys.executable, "-m", "moelab", *study_args(study, "--jobs", "2")],
                               env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    runs = [study / "runs" / arm / "seed0" for arm in ("moe", "dense_active")]
    deadline = time.monotonic() + 180
    while not all(len(train_steps(r)) >= 2 for r in runs):
        assert process.poll() is None and time.monotonic() < deadline, process.communicate()
        time.sleep(0.05)
    return process, temp


@pytest.mark.slow
def test_a_preempted_study_stops_its_runs_at_checkpoints_and_leaves_nothing_behind(
        tmp_path, capsys, request):
    study = tmp_path / "study"
    process, temp = start_slow_study(tmp_path, study)
    request.addfinalizer(lambda: shutil.rmtree(temp, ignore_errors=True))
    process.send_signal(signal.SIGTERM)
    _, err = process.communicate(timeout=180)
    assert process.returncode == EXIT_PREEMPTED, err
    assert err.strip().splitlines()[-1].startswith("moelab: stopped by SIGTERM")
    assert "resource_tracker" not in err and "Traceback" not in err
    assert list(temp.iterdir()) == [] or [p.name for p in temp.iterdir()] == ["torchinductor_root"]
    failures = study / "failures.json"
    assert not failures.exists() or json.loads(failures.read_text()) == {}  # none was blamed
    for arm in ("moe", "dense_active"):
        run = study / "runs" / arm / "seed0"
        saved = json.loads((run / "checkpoints" / "latest.json").read_text())["step"]
        assert 2 <= saved < STEPS and max(train_steps(run)) == saved
    # The rerun resumes both (here, one at a time in this process) and reports.
    assert main(study_args(study)) == 0
    assert "resuming from its checkpoint" in capsys.readouterr().out
    reference = tmp_path / "reference"
    torch_threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as the study's children trained
    try:
        assert main(["train", str(study / "configs" / "moe-seed0.yaml"), "--out",
                     str(reference)]) == 0
    finally:
        torch.set_num_threads(torch_threads)
    assert_same_run(study / "runs" / "moe" / "seed0", reference)


def test_a_study_training_in_this_process_says_to_rerun_the_same_command(
        tmp_path, capsys, monkeypatch, unhandled_signals_fail):
    """With --jobs 1 the runs train in the study's own process: the line it stops with names
    what works for a study (rerunning it), not train's --resume, which study does not have."""
    study = tmp_path / "study"
    signal_at(monkeypatch, 3, signal.SIGTERM)
    capsys.readouterr()
    assert main(study_args(study, "--jobs", "1")) == EXIT_PREEMPTED
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "rerun the same command" in err, err
    assert "--resume" not in err
    monkeypatch.setattr(loop, "optimizer_step", REAL_OPTIMIZER_STEP)
    assert main(study_args(study, "--jobs", "1")) == 0  # and rerunning it does resume
    assert "resuming from its checkpoint" in capsys.readouterr().out
