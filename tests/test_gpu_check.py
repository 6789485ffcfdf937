"""benchmarks/gpu_check.sh and gpu_check.py on a CPU: the measuring script's arguments, a
``--device cpu --tiny`` dry run of its measurement, the goals, the merge into one JSON, the
shell script's phases and limits, and the dispatch benchmark's new device/dtype plumbing. What
only a GPU can say (the numbers) is the check's job on a GPU machine."""

from __future__ import annotations

import argparse
import importlib.util
import json
import re
import subprocess
import sys

import pytest

from moelab.accounting import flops_per_token
from moelab.config import load_config
from conftest import REPO_ROOT

BENCHMARKS = REPO_ROOT / "benchmarks"
SCRIPT = BENCHMARKS / "gpu_check.sh"


def _load(name: str):
    spec = importlib.util.spec_from_file_location(name, BENCHMARKS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


gpu_check = _load("gpu_check")


def test_arguments_default_to_the_h200_measurement(monkeypatch):
    monkeypatch.delenv("OUT", raising=False)
    args = gpu_check.parse_args(["train"])
    assert (args.device, args.tiny, args.compile_backend) == ("cuda", False, "inductor")
    assert args.peak_tflops == 989.0
    assert args.arms.split(",") == ["dense_active", "moe", "dense_total"]
    assert args.modes.split(",") == ["eager", "compiled"]
    assert args.out == BENCHMARKS / "results"


def test_out_follows_the_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("OUT", str(tmp_path))
    assert gpu_check.parse_args(["env"]).out == tmp_path


def test_no_phase_is_a_cpu_dry_run_that_writes_nothing():
    args = gpu_check.parse_args([])
    assert (args.phase, args.device, args.tiny, args.out) == ("train", "cpu", True, None)


@pytest.mark.parametrize("argv", [["train", "--arms", "dense"], ["train", "--modes", "fast"],
                                  ["measure"]])
def test_bad_arguments_exit_2(argv, capsys):
    with pytest.raises(SystemExit) as exit_info:
        gpu_check.parse_args(argv)
    assert exit_info.value.code == 2
    assert "Traceback" not in capsys.readouterr().err


def test_dry_run_measures_every_arm_and_mode_with_the_documented_mfu(tmp_path):
    gpu_check.main(["train", "--device", "cpu", "--tiny", "--compile-backend", "eager",
                    "--out", str(tmp_path)])
    results = json.loads((tmp_path / "gpu_check_train.json").read_text())
    arms = gpu_check.paper_arms(tiny=True)
    assert set(results["arms"]) == {"dense_active", "moe", "dense_total"}
    for name, modes in results["arms"].items():
        assert set(modes) == {"eager", "compiled"}
        for row in modes.values():
            assert "error" not in row, row
            # MFU = tokens/s x the accounting's full FLOPs per token / 989 TFLOP/s.
            assert row["flops_per_token_full"] == flops_per_token(arms[name].model).full
            assert row["mfu"] == pytest.approx(row["tokens_per_s"] * row["flops_per_token_full"]
                                               / 989e12)
            assert row["tokens_per_s"] > 0 and row["batch"] == 2
            assert row["experts"] == ("sorted" if name == "moe" else None)  # a CPU: sorted
    summary = results["summary"]
    assert summary["moe_over_dense_active_compiled"] == pytest.approx(
        results["arms"]["moe"]["compiled"]["tokens_per_s"]
        / results["arms"]["dense_active"]["compiled"]["tokens_per_s"])


def test_the_paper_arms_are_the_studys():
    from moelab.study.arms import study_arms

    config = load_config("paper")
    ours = gpu_check.paper_arms(tiny=False)
    for arm in study_arms(config, ["active", "total"]):
        assert ours[arm.name].model == arm.config.model


@pytest.mark.parametrize("moe_tokens,mfu,met", [(86.0, 0.31, (True, True)),
                                                 (84.0, 0.29, (False, False))])
def test_goals_from_hand_made_measurements(moe_tokens, mfu, met):
    arms = {"dense_active": {"compiled": {"tokens_per_s": 100.0, "mfu": mfu}},
            "moe": {"compiled": {"tokens_per_s": moe_tokens}}}
    goals = gpu_check.summarize(arms)["goals"]
    assert goals["dense_active_mfu_compiled"] == {"goal": 0.30, "measured": mfu, "met": met[0]}
    assert goals["moe_over_dense_active_compiled"]["measured"] == pytest.approx(moe_tokens / 100)
    assert goals["moe_over_dense_active_compiled"]["met"] == met[1]


def test_merge_makes_one_json_of_the_phases(tmp_path):
    parts = tmp_path / "gpu_check_parts"
    parts.mkdir()
    (parts / "phase_train.json").write_text('{"rc": 124, "timed_out": true}')
    (parts / "gpu_check_train.json").write_text('{"arms": {}}')
    (parts / "broken.json").write_text("{")
    (parts / "train.log").write_text("x" * 5000 + "the end")
    (parts / "tests.xml").write_text('<testsuites><testsuite tests="7" failures="1" errors="0" '
                                     'skipped="2"/></testsuites>')
    gpu_check.merge(tmp_path)
    merged = json.loads((tmp_path / "gpu_check.json").read_text())
    assert merged["phase_train"] == {"rc": 124, "timed_out": True}
    assert merged["gpu_check_train"] == {"arms": {}}
    assert "unreadable" in merged["broken"]["error"]
    assert merged["log_tails"]["train"].endswith("the end") and len(merged["log_tails"]["train"]) == 3000
    assert merged["tests"] == {"tests": 7, "failures": 1, "errors": 0, "skipped": 2}


def test_the_shell_script_times_every_phase_within_six_minutes():
    text = SCRIPT.read_text()
    phases = re.findall(r'^phase (\w+) "?\$?\{?(?:\w+_S:-)?(\d+)\}?"? ', text, flags=re.M)
    assert [name for name, _ in phases] == ["env", "tests", "train", "dispatch"]
    # with 5 s to kill each and the merge: within 6 minutes
    assert sum(int(limit) + 5 for _, limit in phases) <= 360 - 10
    assert 'timeout --kill-after=5 "$limit"' in text
    assert "-m cuda tests/test_cuda.py" in text
    assert "--experts" not in text  # the benchmark's default: E = 4, 8, 16, 32, 64
    assert "/work" not in text and "pip install" not in text  # runs from any checkout, offline
    subprocess.run(["bash", "-n", str(SCRIPT)], check=True)


def test_the_dispatch_defaults_are_the_checks_expert_counts():
    assert "default=[4, 8, 16, 32, 64]" in (BENCHMARKS / "moe_dispatch.py").read_text()


def test_dispatch_benchmark_runs_a_bf16_row():
    # The options the GPU check passes (--dtype bfloat16; --device stays cpu here), one small E.
    moe_dispatch = _load("moe_dispatch")
    args = argparse.Namespace(d_model=16, d_expert=24, top_k=2, batch=2, seq_len=8, repeats=1,
                              warmup=0, device="cpu", dtype="bfloat16")
    row = moe_dispatch.bench_one(4, args)
    assert {"dense", "moelab", "expert_gemms"} <= set(row["median_ms"])


def test_shell_script_runs_end_to_end_and_writes_one_json(tmp_path):
    # Without a GPU every phase still runs and reports: tests skipped, measurements failing with
    # their error recorded, one JSON at the end.
    env = {"OUT": str(tmp_path), "PYTHON": sys.executable, "PATH": "/usr/bin:/bin",
           "OMP_NUM_THREADS": "1", "TRAIN_S": "60", "HOME": str(tmp_path)}
    subprocess.run(["bash", str(SCRIPT)], env=env, cwd=tmp_path, check=True,
                   capture_output=True, timeout=300)
    merged = json.loads((tmp_path / "gpu_check.json").read_text())
    for name in ("env", "tests", "train", "dispatch"):
        assert {"rc", "seconds", "limit_s", "timed_out"} <= set(merged[f"phase_{name}"])
    assert merged["gpu_check_env"]["torch"]
    assert merged["tests"]["tests"] == merged["tests"]["skipped"] > 0  # no GPU: all skipped
    assert set(merged["gpu_check_train"]["arms"]) == {"dense_active", "moe", "dense_total"}
