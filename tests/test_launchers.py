"""Launchers train the same runs wherever they run: local children (pinned to GPU slots, dying
with their parent), a real local Ray cluster (retrying a killed worker) and submitit's local
executor give the numbers of an in-process run, run for run."""

from __future__ import annotations

import csv
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from moelab.cli import main
from moelab.config import load_config, override
from moelab.errors import MoelabError
from moelab.fileio import LOCK_NAME
from moelab.runs.launchers.local import LocalLauncher, gpu_slots
from moelab.study.commands import run_study
from moelab.study.settings import StudySettings
from moelab.sweep.commands import run_sweep
from moelab.sweep.grid import load_grid
from tiny_overrides import TINY_MOE_RUN


def tiny_study_config(max_tokens: int, *extra: str):
    return override(load_config("demo"), [*TINY_MOE_RUN, f"train.max_tokens={max_tokens}", *extra])


def run_curves(folder: Path) -> dict[str, list]:
    """Every run's logged (kind, step, loss) events: what "the same numbers" means."""
    curves = {}
    for metrics in sorted(folder.glob("runs/**/metrics.jsonl")):
        events = [json.loads(line) for line in metrics.read_text().splitlines() if line.strip()]
        curves[str(metrics.parent.relative_to(folder))] = [
            (e["kind"], e["step"], e.get("loss"), e.get("val_loss"))
            for e in events if e.get("kind") in ("train", "eval")]
    return curves


TIMINGS = ("tokens_per_s", "wall_time_s", "step_time_s", "peak_memory")


def results_without_timings(folder: Path) -> list[dict]:
    """results.csv less what the machine's speed decides."""
    with open(folder / "results.csv", newline="") as f:
        return [{k: v for k, v in row.items() if not k.startswith(TIMINGS)} for row in csv.DictReader(f)]


def best_losses(folder: Path) -> dict[str, float]:
    return {str(p.parent.relative_to(folder)): json.loads(p.read_text())["best_val_loss"]
            for p in sorted(folder.glob("runs/**/summary.json"))}


# --------------------------------------------------------------------------------------------
# local
# --------------------------------------------------------------------------------------------


def test_gpu_slots_spread_runs_over_gpus_before_doubling_up():
    assert gpu_slots(["0", "1"], 1) == ["0", "1"]
    assert gpu_slots(["0", "1"], 2) == ["0", "1", "0", "1"]
    assert gpu_slots(["3"], 3) == ["3", "3", "3"]


def test_more_jobs_than_gpu_slots_are_refused(tmp_path):
    launcher = LocalLauncher(jobs=3, runs_per_gpu=1, gpus=["0", "1"])
    with pytest.raises(MoelabError, match=r"--jobs 3 is invalid with 2 GPU\(s\) x --runs-per-gpu 1: allowed up to 2"):
        launcher.launch(tmp_path, [object()], lambda outcome: None, lambda line: None)


@pytest.mark.slow
def test_children_pinned_to_gpu_slots_and_submitit_local_match_an_in_process_sweep(tmp_path, monkeypatch):
    import torch

    monkeypatch.setenv("OMP_NUM_THREADS", str(torch.get_num_threads()))  # the children's threads
    grid = load_grid("micro")
    here, pinned, slurm = tmp_path / "here", tmp_path / "pinned", tmp_path / "slurm"
    run_sweep(grid, here, bootstrap_replicates=0, log=lambda _: None)

    lines = []
    run_sweep(grid, pinned, bootstrap_replicates=0, log=lines.append,
              launcher=LocalLauncher(jobs=2, gpus=["0", "1"]))
    started = [line for line in lines if ": training (" in line]
    assert len(started) == 4 and {line.split("GPU ")[1] for line in started} == {"0)", "1)"}

    from moelab.runs.launchers.slurm import SlurmLauncher

    run_sweep(grid, slurm, bootstrap_replicates=0, log=lambda _: None,
              launcher=SlurmLauncher(cluster="local", time_minutes=10,
                                     cpus_per_run=torch.get_num_threads()))
    assert len(run_curves(here)) == 4
    assert run_curves(pinned) == run_curves(here) == run_curves(slurm)
    for folder in (pinned, slurm):
        assert results_without_timings(folder) == results_without_timings(here)
    assert any((slurm / "slurm").rglob("*_log.out"))  # the job array's logs stay in the folder


@pytest.mark.slow
@pytest.mark.parametrize("threads", ["1", "2"])
def test_children_train_with_the_threads_they_are_given(tmp_path, monkeypatch, threads):
    # Children are forked from a server that read OMP_NUM_THREADS once, when it started (in
    # this test process, maybe with the other count): each child must set its own.
    monkeypatch.setenv("OMP_NUM_THREADS", threads)
    config = tiny_study_config(256 * 4)
    run_study("study", config, StudySettings(seeds=1, criteria=["active"]), tmp_path,
              log=lambda _: None, launcher=LocalLauncher(jobs=2))
    summaries = [json.loads(p.read_text()) for p in tmp_path.glob("runs/**/summary.json")]
    assert len(summaries) == 2 and {s["torch_threads"] for s in summaries} == {int(threads)}


def _alive(pid: int) -> bool:
    """A process that exists and is not a zombie (an orphan's reaper may be slow to collect)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def _study_command(out: Path, max_tokens: int, *extra: str) -> list[str]:
    sets = [arg for pair in [*TINY_MOE_RUN, f"train.max_tokens={max_tokens}"] for arg in ("--set", pair)]
    return [sys.executable, "-m", "moelab", "study", "demo", "--seeds", "1", *sets, "--out",
            str(out), *extra]


def _child_pids(out: Path, count: int, parent: subprocess.Popen, timeout: float = 120) -> list[int]:
    """The pids written in the run folders' lock files, once ``count`` runs hold theirs."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert parent.poll() is None, "the study ended before its runs could be seen"
        pids = []
        for lock in out.glob(f"runs/**/{LOCK_NAME}"):
            text = lock.read_text().strip()
            if text.isdigit() and _alive(int(text)):
                pids.append(int(text))
        if len(pids) >= count:
            return pids
        time.sleep(0.1)
    raise AssertionError("the study's runs did not start")


@pytest.mark.slow
def test_a_child_that_fails_before_it_trains_is_a_recorded_failure_that_says_so(tmp_path):
    # A script without a __main__ guard: each child re-imports it, so its runs fail in the
    # fork server's set-up, before `moelab train` prints anything of its own.
    script = tmp_path / "unguarded.py"
    script.write_text(
        "import sys\n"
        "sys.path.insert(0, %r)\n"
        "from test_launchers import tiny_study_config\n"
        "from moelab.runs.launchers.local import LocalLauncher\n"
        "from moelab.study.commands import run_study\n"
        "from moelab.study.settings import StudySettings\n"
        "run_study('study', tiny_study_config(256 * 4), StudySettings(seeds=1, criteria=['active']),\n"
        "          %r, log=lambda _: None, launcher=LocalLauncher(jobs=2))\n"
        % (str(Path(__file__).parent), str(tmp_path / "study")))
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          env={**os.environ, "OMP_NUM_THREADS": "1"}, timeout=300)
    # Every run failed, which the study reports as its error; the children's own errors (here
    # multiprocessing's, asking for the guard) went to the script's stderr.
    assert done.returncode == 1 and "every run of the study failed" in done.stderr
    assert "if __name__ == '__main__'" in done.stderr
    failures = json.loads((tmp_path / "study" / "failures.json").read_text())
    assert sorted(failures) == ["dense_active/seed0", "moe/seed0"]
    assert all("before it started" in error for error in failures.values())


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads process states in /proc")
def test_kill_9_of_a_study_parent_leaves_no_child_alive(tmp_path):
    out = tmp_path / "study"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    parent = subprocess.Popen(_study_command(out, 256 * 100_000, "--jobs", "2"), env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    children = _child_pids(out, 2, parent)
    assert parent.pid not in children
    parent.send_signal(signal.SIGKILL)
    parent.wait()
    time.sleep(5)
    assert [pid for pid in children if _alive(pid)] == []


@pytest.mark.slow
def test_a_second_study_into_a_folder_is_refused_and_the_first_ends_intact(tmp_path, capsys):
    out = tmp_path / "study"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    first = subprocess.Popen(_study_command(out, 256 * 12), env=env, stdout=subprocess.DEVNULL,
                             stderr=subprocess.PIPE, text=True)
    _child_pids(out, 1, first)  # the first study is training
    sets = [arg for pair in [*TINY_MOE_RUN, f"train.max_tokens={256 * 12}"] for arg in ("--set", pair)]
    assert main(["study", "demo", "--seeds", "1", *sets, "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert f"pid {first.pid}" in err and len(err.strip().splitlines()) == 1
    assert first.wait(timeout=300) == 0, first.stderr.read()
    assert (out / "report.md").is_file()
    for metrics in out.glob("runs/**/metrics.jsonl"):  # one writer: every step logged once
        steps = [(e["kind"], e["step"]) for e in map(json.loads, metrics.read_text().splitlines())
                 if e.get("kind") in ("train", "eval")]
        assert len(steps) == len(set(steps)) > 0


# --------------------------------------------------------------------------------------------
# ray: one real local cluster for the test session
# --------------------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def ray_cluster():
    ray = pytest.importorskip("ray")
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False,
             object_store_memory=100 * 1024**2)
    yield ray
    ray.shutdown()


@pytest.mark.slow
def test_a_study_on_ray_equals_the_local_launcher_run_for_run(tmp_path, ray_cluster):
    from moelab.runs.launchers.ray import RayLauncher

    import torch

    config = tiny_study_config(256 * 6)
    settings = StudySettings(seeds=1)
    here, on_ray = tmp_path / "here", tmp_path / "ray"
    run_study("study", config, settings, here, log=lambda _: None)
    run_study("study", config, settings, on_ray, log=lambda _: None,
              launcher=RayLauncher(cpus_per_run=torch.get_num_threads()))
    assert len(run_curves(here)) == 3
    assert run_curves(on_ray) == run_curves(here)
    assert results_without_timings(on_ray) == results_without_timings(here)


@pytest.mark.slow
def test_a_ray_worker_killed_mid_run_is_retried_and_ends_identical(tmp_path, ray_cluster):
    from moelab.runs.launchers.ray import RayLauncher

    import torch

    config = tiny_study_config(256 * 200, "train.checkpoint_interval=10", "train.eval_interval=50")
    settings = StudySettings(seeds=1, criteria=["active"])
    here, on_ray = tmp_path / "here", tmp_path / "ray"
    run_study("study", config, settings, here, log=lambda _: None)

    lines: list[str] = []
    launcher = RayLauncher(cpus_per_run=1 if torch.get_num_threads() == 1 else torch.get_num_threads())
    study = threading.Thread(target=run_study, args=("study", config, settings, on_ray),
                             kwargs={"log": lines.append, "launcher": launcher})
    study.start()
    victim = _checkpointed_worker(on_ray / "runs" / "moe" / "seed0")
    os.kill(victim, signal.SIGKILL)
    study.join(timeout=600)
    assert not study.is_alive()
    assert not any("FAILED" in line for line in lines), lines
    last_writer = (on_ray / "runs" / "moe" / "seed0" / LOCK_NAME).read_text().strip()
    assert last_writer != str(victim)  # another worker (the retry) finished the run
    assert run_curves(on_ray) == run_curves(here)
    assert best_losses(on_ray) == best_losses(here)


def _checkpointed_worker(run_dir: Path, timeout: float = 300) -> int:
    """The pid of the Ray worker training ``run_dir`` once it has saved a checkpoint, mid-run."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        lock, latest = run_dir / LOCK_NAME, run_dir / "checkpoints" / "latest.json"
        if latest.is_file() and lock.is_file() and not (run_dir / "summary.json").is_file():
            text = lock.read_text().strip()
            if text.isdigit() and text != str(os.getpid()) and _alive(int(text)):
                return int(text)
        time.sleep(0.05)
    raise AssertionError(f"{run_dir} saved no checkpoint mid-run")


# --------------------------------------------------------------------------------------------
# commands, sweep parity, options
# --------------------------------------------------------------------------------------------


def test_sweep_list_runs_prints_one_resumable_command_per_run(tmp_path, capsys):
    out = tmp_path / "sweep"
    assert main(["sweep-sparsity", "micro", "--out", str(out), "--list-runs"]) == 0
    commands = capsys.readouterr().out.strip().splitlines()
    plan = json.loads((out / "plan.json").read_text())
    assert len(commands) == len(plan["runs"]) == 4
    for command, run in zip(commands, plan["runs"]):
        assert command == f"moelab train {out / run['config']} --out {out / run['run_dir']} --resume"
        assert (out / run["config"]).is_file()


@pytest.mark.slow
def test_report_rebuilds_a_sweep_folder_byte_identically(tmp_path, capsys):
    out = tmp_path / "sweep"
    assert main(["sweep-sparsity", "micro", "--out", str(out), "--bootstrap", "4", "--starts", "50"]) == 0
    written = {p.name: p.read_bytes() for p in out.iterdir() if p.suffix in (".csv", ".md", ".json")
               and p.name not in ("failures.json",)}
    assert {"results.csv", "report.md", "grid.json"} <= set(written)
    for name in written:
        if name != "grid.json" and name != "plan.json":
            (out / name).unlink()
    assert main(["report", str(out)]) == 0  # with the --bootstrap and --starts the sweep used
    rebuilt = {name: (out / name).read_bytes() for name in written}
    assert rebuilt == written


@pytest.mark.slow
def test_an_option_of_another_launcher_is_refused_on_one_line(tmp_path, capsys):
    assert main(["study", "demo", "--out", str(tmp_path / "s"), "--ray-address", "auto"]) == 2
    err = capsys.readouterr().err
    assert "--ray-address is invalid with --launcher local: it applies to --launcher ray" in err
    assert len(err.strip().splitlines()) == 1 and not (tmp_path / "s").exists()


def test_the_cli_offers_every_launcher_the_runs_layer_has():
    from moelab.cli.launch import LAUNCHERS as OFFERED
    from moelab.runs.launchers import LAUNCHERS

    assert OFFERED == LAUNCHERS


@pytest.mark.slow
def test_a_run_asking_more_than_the_ray_cluster_has_is_refused(tmp_path, ray_cluster):
    from moelab.runs.launchers.ray import RayLauncher

    config = tiny_study_config(256 * 2)
    with pytest.raises(MoelabError, match=r"--gpus-per-run 1 is invalid: the Ray cluster has 0 GPUs"):
        run_study("study", config, StudySettings(seeds=1), tmp_path / "s", log=lambda _: None,
                  launcher=RayLauncher(gpus_per_run=1))
    with pytest.raises(MoelabError, match=r"--cpus-per-run 64 is invalid: the Ray cluster has 2 CPUs"):
        run_study("study", config, StudySettings(seeds=1), tmp_path / "s", log=lambda _: None,
                  launcher=RayLauncher(cpus_per_run=64))
