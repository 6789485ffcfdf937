"""Every script in benchmarks/ runs in its smoke mode (``--smoke``: tiny shapes, one repeat),
each in its own interpreter, writing into a temporary folder: an API change breaks a test
here, not a benchmark found broken months later. Nothing is timed; the committed results in
benchmarks/results/ are left as they were."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO_ROOT

BENCHMARKS = REPO_ROOT / "benchmarks"
RESULTS = BENCHMARKS / "results"
SMOKED = ("bootstrap_polish", "cli_start", "compile_start", "data_pipeline", "fit_speed",
          "head_loss", "long_word", "moe_dispatch", "numerics_cost", "peak_clock", "preset_times",
          "run_start", "train_step")
"""The scripts run here with ``--smoke --out FILE``."""
ELSEWHERE = {"gpu_check": "tests/test_gpu_check.py runs its CPU dry run (and gpu_check.sh's)",
             "common": "not a script: what the scripts share"}


def _fingerprint(folder: Path) -> dict[str, str]:
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def test_every_script_is_smoked_here_or_named_where_it_is():
    scripts = {path.stem for path in BENCHMARKS.glob("*.py")}
    assert scripts == set(SMOKED) | set(ELSEWHERE)


def run_script(name: str, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO_ROOT / "src"), *sys.path]),
           "OMP_NUM_THREADS": "1"}
    return subprocess.run([sys.executable, str(BENCHMARKS / f"{name}.py"), *args], env=env,
                          cwd=REPO_ROOT, capture_output=True, text=True, timeout=900)


@pytest.fixture(scope="module")
def smoke_results(tmp_path_factory):
    """Each script's smoke results, run once on first use: {name: the JSON it wrote}."""
    done: dict[str, object] = {}

    def results(name: str):
        if name not in done:
            out = tmp_path_factory.mktemp(name) / f"{name}.json"
            before = _fingerprint(RESULTS)
            ran = run_script(name, "--smoke", "--out", str(out))
            assert ran.returncode == 0, ran.stdout[-2000:] + ran.stderr[-4000:]
            assert _fingerprint(RESULTS) == before  # the committed results untouched
            done[name] = json.loads(out.read_text())
        return done[name]

    return results


@pytest.mark.slow
@pytest.mark.parametrize("name", SMOKED)
def test_the_script_runs_in_its_smoke_mode(name, smoke_results):
    assert smoke_results(name)  # something was measured and written where asked


@pytest.mark.slow
def test_a_smoke_run_refuses_to_write_into_the_committed_results(tmp_path):
    done = run_script("fit_speed", "--smoke")
    assert done.returncode == 2 and "outside benchmarks/results/" in done.stderr


@pytest.mark.slow
def test_train_steps_hf_rows_are_measured_beside_moelabs(smoke_results):
    """The rows every comparison in BENCHMARKS.md divides by: moelab and Hugging Face, each arm."""
    (entry,) = smoke_results("train_step").values()
    assert entry["errors"] == {}
    rows = {(row["impl"], row["arm"]) for row in entry["rows"]}
    assert rows == {(impl, arm) for impl in ("moelab", "hf")
                    for arm in ("dense_active", "moe", "dense_total")}
    for row in entry["rows"]:  # tokens per CPU-second: the step's tokens over its CPU time
        assert row["tokens_per_cpu_s"] == pytest.approx(
            entry["tokens_per_step"] / row["best_step_cpu_s"])
    assert entry["cpu"] and entry["torch"] and len(entry["load_average"]) == 3
