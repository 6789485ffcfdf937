"""One writer per folder: a second train, study, sweep or report writer is refused at once."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from moelab.cli import main
from moelab.fileio import LOCK_NAME, writer_lock
from tiny_overrides import TINY_MOE_RUN

HOLD = ("import sys, time\n"
        "from moelab.fileio import writer_lock\n"
        "with writer_lock(sys.argv[1]):\n"
        "    print('held', flush=True)\n"
        "    time.sleep(60)\n")


def hold_lock(folder: Path) -> subprocess.Popen:
    """Another process holding the folder's writer lock, until it is killed."""
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(folder)], stdout=subprocess.PIPE,
                              text=True)
    assert holder.stdout.readline().strip() == "held"
    return holder


def settings(*pairs: str) -> list[str]:
    return [arg for pair in pairs for arg in ("--set", pair)]


@pytest.fixture
def holder_of(tmp_path):
    holders = []

    def start(folder):
        holders.append(hold_lock(folder))
        return holders[-1]

    yield start
    for holder in holders:
        holder.kill()
        holder.wait()


@pytest.mark.slow
@pytest.mark.parametrize("command", [
    ["train", "demo", *settings(*TINY_MOE_RUN, "train.max_tokens=512"), "--out", "{folder}"],
    ["study", "demo", "--seeds", "1", "--out", "{folder}"],
    ["sweep-sparsity", "micro", "--out", "{folder}"],
])
def test_a_second_writer_is_refused_naming_the_holder(tmp_path, capsys, holder_of, command):
    folder = tmp_path / "busy"
    holder = holder_of(folder)
    args = [part.replace("{folder}", str(folder)) for part in command]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"(pid {holder.pid})" in err and str(folder) in err
    # Nothing was written beside the lock.
    assert sorted(p.name for p in folder.iterdir()) == [LOCK_NAME]


@pytest.mark.slow
def test_report_is_refused_while_its_study_is_written(tmp_path, capsys, holder_of):
    study = tmp_path / "study"
    assert main(["study", "demo", "--seeds", "1", "--budgets", "2048",
                 *settings(*TINY_MOE_RUN), "--out", str(study)]) == 0
    before = {p: p.read_bytes() for p in study.rglob("*") if p.is_file()}
    holder = holder_of(study)
    capsys.readouterr()
    assert main(["report", str(study)]) == 2
    assert f"(pid {holder.pid})" in capsys.readouterr().err
    assert {p: p.read_bytes() for p in study.rglob("*") if p.is_file() and p.name != LOCK_NAME} \
        == {p: b for p, b in before.items() if p.name != LOCK_NAME}


@pytest.mark.slow
def test_the_kernel_releases_a_killed_writers_lock(tmp_path, holder_of):
    folder = tmp_path / "run"
    holder = holder_of(folder)
    holder.send_signal(signal.SIGKILL)
    holder.wait()
    with writer_lock(folder):  # no stale lock: kill -9 released it
        assert (folder / LOCK_NAME).read_text().strip() == str(os.getpid())


@pytest.mark.slow
def test_two_train_resume_on_one_folder_leave_one_clean_run(tmp_path):
    """The real race: the second `train --resume` exits 2 while the first trains on, and the
    first's metrics have every step once."""
    run = tmp_path / "run"
    command = [sys.executable, "-m", "moelab", "train", "demo",
               *settings(*TINY_MOE_RUN, "train.max_tokens=163840", "train.eval_interval=160"),
               "--out", str(run), "--resume"]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    first = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True)
    deadline = time.monotonic() + 120
    while not (run / "metrics.jsonl").is_file():  # the first holds the lock once it logs
        assert first.poll() is None and time.monotonic() < deadline
        time.sleep(0.05)
    second = subprocess.run(command, env=env, capture_output=True, text=True)
    assert first.poll() is None  # the second ran while the first trained
    assert first.wait(timeout=300) == 0, first.stderr.read()
    assert second.returncode == 2, second.stderr
    assert f"(pid {first.pid})" in second.stderr and "Traceback" not in second.stderr
    steps = [json.loads(line)["step"] for line in (run / "metrics.jsonl").read_text().splitlines()
             if json.loads(line)["kind"] == "train"]
    assert steps == sorted(set(steps)) and steps[-1] == 163840 // 256


@pytest.mark.slow
def test_a_folder_holding_only_the_lock_is_an_empty_run_folder(tmp_path):
    folder = tmp_path / "run"
    with writer_lock(folder):
        pass
    assert main(["train", "demo", *settings(*TINY_MOE_RUN, "train.max_tokens=512"),
                 "--out", str(folder)]) == 0
    assert (folder / "summary.json").is_file()

