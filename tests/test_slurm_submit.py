"""The SLURM options reach the job script sbatch is given, and a detached submit returns at
once, its runs train on without it, and ``moelab report`` collects them afterwards."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("submitit")

from moelab.cli import main
from tiny_overrides import TINY_MOE_RUN


def tiny_sets(max_tokens: int) -> list[str]:
    return [arg for pair in [*TINY_MOE_RUN, f"train.max_tokens={max_tokens}"]
            for arg in ("--set", pair)]


def fake_slurm(tmp_path, monkeypatch, sbatch: str) -> None:
    """SLURM's commands on PATH: ``sbatch`` as the shell script given, ``srun`` (which
    submitit looks for) as a stub."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, body in (("sbatch", sbatch), ("srun", "exit 1\n")):
        (bin_dir / name).write_text("#!/bin/sh\n" + body)
        (bin_dir / name).chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")


@pytest.fixture
def fake_sbatch(tmp_path, monkeypatch) -> Path:
    """An ``sbatch`` that keeps the job script it is given and answers as SLURM does; returns
    where the script lands."""
    script = tmp_path / "submitted.sh"
    fake_slurm(tmp_path, monkeypatch, f'cp "$1" {script}\necho "Submitted batch job 4242"\n')
    return script


def sbatch_options(script: Path) -> dict[str, str]:
    """The script's ``#SBATCH --key=value`` lines (``True`` for a bare ``--key``)."""
    options = {}
    for line in script.read_text().splitlines():
        if line.startswith("#SBATCH --"):
            key, _, value = line.removeprefix("#SBATCH --").partition("=")
            options[key] = value or True
    return options


def test_the_slurm_options_reach_the_job_script(tmp_path, fake_sbatch, capsys):
    out = tmp_path / "study"
    argv = ["study", "demo", "--seeds", "1", *tiny_sets(256 * 4), "--out", str(out),
            "--launcher", "slurm", "--slurm-partition", "gpu", "--slurm-time", "240",
            "--slurm-account", "lab", "--slurm-qos", "high", "--slurm-mem", "64G",
            "--slurm-max-parallel", "2", "--slurm-option", "constraint=a100",
            "--slurm-option", "exclusive", "--cpus-per-run", "4", "--gpus-per-run", "1",
            "--detach"]
    assert main(argv) == 0
    assert "submitted job 4242; watch it with squeue -j 4242" in capsys.readouterr().out
    options = sbatch_options(fake_sbatch)
    # What sbatch itself would read (https://slurm.schedmd.com/sbatch.html): 3 runs, 2 at once.
    assert {key: options.get(key) for key in (
        "partition", "time", "account", "qos", "mem", "array", "constraint", "exclusive",
        "cpus-per-task", "gpus-per-node", "nodes")} == {
        "partition": "gpu", "time": "240", "account": "lab", "qos": "high", "mem": "64G",
        "array": "0-2%2", "constraint": "a100", "exclusive": True, "cpus-per-task": "4",
        "gpus-per-node": "1", "nodes": "1"}
    assert options["signal"].endswith("@120")  # time to requeue before the kill
    assert Path(options["output"]).parent == out / "slurm"
    plan = json.loads((out / "plan.json").read_text())
    assert len(plan["runs"]) == 3
    assert not list(out.glob("runs/**/summary.json"))  # submitted, not trained here


@pytest.mark.slow
def test_without_a_max_parallel_the_array_is_not_throttled_below_its_size(tmp_path, fake_sbatch):
    assert main(["sweep-sparsity", "micro", "--out", str(tmp_path / "sweep"), "--launcher", "slurm",
                 "--detach"]) == 0
    options = sbatch_options(fake_sbatch)
    assert options["array"] == "0-3%4" and "partition" not in options and "account" not in options


def test_a_refused_submission_is_one_line_with_sbatchs_reason(tmp_path, monkeypatch, capsys):
    fake_slurm(tmp_path, monkeypatch, "echo 'sbatch: error: Invalid account or account/partition "
               "combination specified' >&2\nexit 1\n")
    assert main(["sweep-sparsity", "micro", "--out", str(tmp_path / "sweep"), "--launcher", "slurm",
                 "--slurm-account", "nope", "--detach"]) == 2
    err = capsys.readouterr().err
    assert err == ("moelab: error: --launcher slurm: the job array was not submitted: sbatch: "
                   "error: Invalid account or account/partition combination specified\n")


def test_detach_refuses_a_plan_whose_runs_branch(tmp_path, fake_sbatch, capsys):
    # A wsd budget family: the shorter budgets branch from the longest run's checkpoints.
    out = tmp_path / "study"
    argv = ["study", "demo", "--seeds", "1", *tiny_sets(256 * 8), "--set", "train.schedule=wsd",
            "--budgets", "1024,2048", "--criteria", "active", "--out", str(out),
            "--launcher", "slurm", "--detach"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "--detach cannot submit" in err and "run without --detach" in err
    assert not fake_sbatch.exists()


@pytest.mark.slow
def test_a_detached_submit_returns_and_report_collects_the_runs_later(tmp_path):
    out = tmp_path / "study"
    log = tmp_path / "submit.log"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    command = [sys.executable, "-m", "moelab", "study", "demo", "--seeds", "1",
               *tiny_sets(256 * 4), "--set", "train.sample_tokens=0", "--criteria", "active", "--out", str(out),
               "--launcher", "slurm", "--slurm-local", "--detach"]
    with open(log, "w") as output:  # not a pipe: the runs hold the submitter's output open
        done = subprocess.run(command, stdout=output, stderr=subprocess.STDOUT, env=env,
                              timeout=120)
    summaries = lambda: sorted(out.glob("runs/**/summary.json"))  # noqa: E731
    complete_at_return = len(summaries())
    assert done.returncode == 0, log.read_text()
    assert "submitted job" in log.read_text() and f"moelab report {out}" in log.read_text()

    deadline = time.monotonic() + 240
    while len(summaries()) < 2 and time.monotonic() < deadline:
        time.sleep(0.2)
    assert len(summaries()) == 2, list((out / "slurm").glob("*"))
    assert complete_at_return < 2  # the runs went on after the submitter had exited
    assert main(["report", str(out)]) == 0
    with open(out / "results.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert sorted(row["arm"] for row in rows) == ["dense_active", "moe"]
    for row in rows:  # each row is its run's own summary
        summary = json.loads((out / "runs" / row["arm"] / "seed0" / "summary.json").read_text())
        assert float(row["best_val_loss"]) == pytest.approx(summary["best_val_loss"])
