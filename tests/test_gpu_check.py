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
import torch

from moelab.accounting import flops_per_token
from moelab.config import load_config
from conftest import REPO_ROOT

BENCHMARKS = REPO_ROOT / "benchmarks"
SCRIPT = BENCHMARKS / "gpu_check.sh"


def _load(name: str):
    if str(BENCHMARKS) not in sys.path:  # as running the script does: its siblings (common.py)
        sys.path.insert(0, str(BENCHMARKS))
    spec = importlib.util.spec_from_file_location(name, BENCHMARKS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


gpu_check = _load("gpu_check")


def test_arguments_default_to_the_gpu_measurement(monkeypatch):
    monkeypatch.delenv("OUT", raising=False)
    args = gpu_check.parse_args(["train"])
    assert (args.device, args.tiny, args.compile_backend) == ("cuda", False, "inductor")
    assert args.peak_tflops is None  # the peak of the GPU found
    assert args.arms.split(",") == ["dense_active", "moe", "dense_total"]
    assert args.modes.split(",") == ["compiled", "eager"]  # the goals' mode first
    assert args.out == BENCHMARKS / "results"


@pytest.mark.parametrize("name,power_w,tflops,model", [
    ("NVIDIA H200", 700.0, 989.0, "H200"),  # SXM
    ("NVIDIA H200", None, 989.0, "H200"),  # no power limit known: the name alone
    ("NVIDIA H200", 600.0, 835.0, "H200 NVL"),  # an NVL card not named so: its 600 W limit
    ("NVIDIA H200 NVL", 600.0, 835.0, "H200 NVL"),
    ("NVIDIA H100 80GB HBM3", 700.0, 989.0, "H100"),
    ("NVIDIA H100 PCIe", 350.0, 756.0, "H100 PCIe"),
])
def test_the_peak_is_the_spec_sheets_for_the_gpu_found(name, power_w, tflops, model):
    peak = gpu_check.peak_bf16(name, power_w)
    assert (peak["tflops"], peak["model"]) == (tflops, model)
    assert peak["source"]


def test_an_unknown_gpu_is_measured_against_the_h200_sxm_saying_so():
    peak = gpu_check.peak_bf16("Some Future GPU", None)
    assert peak["tflops"] == 989.0 and "assumed" in peak["model"]
    assert "Some Future GPU" in peak["source"]


def test_the_c_compiler_is_found_and_its_version_recorded(monkeypatch):
    # $CC first: the interpreter stands in for a compiler ("Python 3.x.y" on --version).
    monkeypatch.setenv("CC", sys.executable)
    found = gpu_check.c_compiler()
    assert found["path"] == sys.executable and found["version"].startswith("Python 3.")
    monkeypatch.setenv("CC", "no-such-compiler")
    monkeypatch.setenv("PATH", "")
    assert gpu_check.c_compiler() == {"path": None, "version": None}


def test_the_environment_names_the_compiler_and_the_peak():
    env = gpu_check.environment()
    assert {"c_compiler", "peak_bf16", "power_limit_w", "device"} <= set(env)
    assert "triton" in gpu_check.MODULES


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
    assert gpu_check.main(["train", "--device", "cpu", "--tiny", "--compile-backend", "eager",
                           "--out", str(tmp_path)]) == 0
    results = json.loads((tmp_path / "gpu_check_train.json").read_text())
    arms = gpu_check.paper_arms(tiny=True)
    assert set(results["arms"]) == {"dense_active", "moe", "dense_total"}
    assert results["peak"]["tflops"] == results["peak_tflops"] == 989.0  # no GPU: assumed
    for name, modes in results["arms"].items():
        assert set(modes) == {"eager", "compiled"}
        model = arms[name].model
        # PaLM / nanoGPT count attention as 12 L T d; moelab's kaplan count as 6 L T d.
        attention_6 = 6 * model.n_layers * model.max_seq_len * model.d_model
        for row in modes.values():
            assert "error" not in row, row
            kaplan = flops_per_token(model).kaplan
            assert row["flops_per_token"] == {"full_6LTd": kaplan, "palm_12LTd": kaplan + attention_6}
            for convention, flops in row["flops_per_token"].items():
                assert row["mfu"][convention] == pytest.approx(row["tokens_per_s"] * flops / 989e12)
            assert row["tokens_per_s"] > 0 and row["batch"] == 2
            assert 0 < row["first_step_s"] <= row["warmup_s"]
            assert row["experts"] == ("sorted" if name == "moe" else None)  # a CPU: sorted
    summary = results["summary"]
    assert summary["moe_over_dense_active_compiled"] == pytest.approx(
        results["arms"]["moe"]["compiled"]["tokens_per_s"]
        / results["arms"]["dense_active"]["compiled"]["tokens_per_s"])


def test_a_failing_arm_makes_the_phase_exit_1_and_is_recorded(tmp_path):
    argv = ["train", "--device", "cpu", "--tiny", "--arms", "dense_active", "--modes", "compiled",
            "--compile-backend", "no_such_backend", "--out", str(tmp_path)]
    assert gpu_check.main(argv) == 1
    row = json.loads((tmp_path / "gpu_check_train.json").read_text())["arms"]["dense_active"]
    assert "no_such_backend" in row["compiled"]["error"]


def test_the_paper_arms_are_the_studys():
    from moelab.study.arms import study_arms

    config = load_config("paper")
    ours = gpu_check.paper_arms(tiny=False)
    for arm in study_arms(config, ["active", "total"]):
        assert ours[arm.name].model == arm.config.model


@pytest.mark.parametrize("moe_tokens,mfu,met", [(86.0, 0.31, (True, True)),
                                                 (84.0, 0.29, (False, False))])
def test_goals_from_hand_made_measurements(moe_tokens, mfu, met):
    arms = {"dense_active": {"compiled": {"tokens_per_s": 100.0,
                                          "mfu": {"full_6LTd": mfu, "palm_12LTd": mfu + 0.02}}},
            "moe": {"compiled": {"tokens_per_s": moe_tokens}}}
    summary = gpu_check.summarize(arms)
    assert summary["dense_active_mfu_palm_12LTd_compiled"] == mfu + 0.02
    goals = summary["goals"]
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
    assert gpu_check.main(["merge", "--out", str(tmp_path)]) == 1  # a phase failed
    merged = json.loads((tmp_path / "gpu_check.json").read_text())
    assert merged["failed_phases"] == ["train"]
    assert merged["phase_train"] == {"rc": 124, "timed_out": True}
    assert merged["gpu_check_train"] == {"arms": {}}
    assert "unreadable" in merged["broken"]["error"]
    assert merged["log_tails"]["train"].endswith("the end") and len(merged["log_tails"]["train"]) == 3000
    assert merged["tests"] == {"tests": 7, "failures": 1, "errors": 0, "skipped": 2}


def _phase_limits(text: str) -> list[tuple[str, int]]:
    return [(name, int(limit)) for name, limit in
            re.findall(r'^\s*phase (\w+) "?\$?\{?(?:\w+_S:-)?(\d+)\}?"? ', text, flags=re.M)]


@pytest.mark.slow
def test_the_shell_script_times_every_phase_within_six_minutes_and_quick_within_two():
    text = SCRIPT.read_text()
    quick, full = text.split("\nelse\n")
    quick_phases, full_phases = _phase_limits(quick), _phase_limits(full)
    assert [name for name, _ in full_phases] == ["env", "tests", "train", "dispatch", "resume"]
    assert [name for name, _ in quick_phases] == ["env", "tests", "train", "dispatch"]
    # with 5 s to kill each and the merge
    assert sum(limit + 5 for _, limit in full_phases) <= 360 - 10
    assert sum(limit + 5 for _, limit in quick_phases) <= 120 - 5
    # three compiled paper arms and three eager ones fit the train phase's limit (BENCHMARKS.md)
    assert dict(full_phases)["train"] >= 180
    assert 'timeout --kill-after=5 "$limit"' in text
    assert "tests/test_cuda.py tests/test_host_syncs.py" in text and "-m cuda" in text
    assert "--experts" not in full  # the benchmark's default: E = 4, 8, 16, 32, 64
    assert "/work" not in text and "pip install" not in text  # runs from any checkout, offline
    # its exit status is the merge's: 1 when a phase failed
    assert text.rstrip().splitlines()[-1].startswith('"$PY" benchmarks/gpu_check.py merge')
    subprocess.run(["bash", "-n", str(SCRIPT)], check=True)


@pytest.mark.slow
def test_the_shell_script_refuses_an_unknown_mode(tmp_path):
    done = subprocess.run(["bash", str(SCRIPT), "--fast"], capture_output=True, text=True,
                          env={"OUT": str(tmp_path), "PATH": "/usr/bin:/bin"})
    assert done.returncode == 2 and "--fast is invalid" in done.stderr
    assert list(tmp_path.iterdir()) == []  # nothing written


def test_the_dispatch_defaults_are_the_checks_expert_counts():
    assert "default=[4, 8, 16, 32, 64]" in (BENCHMARKS / "moe_dispatch.py").read_text()


def test_dispatch_benchmark_runs_a_bf16_row():
    # The options the GPU check passes (--dtype bfloat16; --device stays cpu here), one small E.
    moe_dispatch = _load("moe_dispatch")
    args = argparse.Namespace(d_model=16, d_expert=24, top_k=2, batch=2, seq_len=8, repeats=1,
                              warmup=0, device="cpu", dtype="bfloat16")
    row = moe_dispatch.bench_one(4, args)
    assert {"dense", "moelab", "expert_gemms"} <= set(row["median_ms"])


def test_the_dispatch_breakdowns_gemms_run_in_the_layers_dtype(monkeypatch):
    moe_dispatch = _load("moe_dispatch")
    seen = []
    real = moe_dispatch.segment_matmul
    monkeypatch.setattr(moe_dispatch, "segment_matmul",
                        lambda rows, *rest: seen.append(rows.dtype) or real(rows, *rest))
    moe_dispatch.gemms_only(16, 8, 12, torch.tensor([10, 6]), dtype=torch.bfloat16)()
    assert seen and set(seen) == {torch.bfloat16}


def test_the_dispatch_benchmark_goes_on_without_a_usable_transformers(monkeypatch, capsys):
    # transformers 4.x keeps one module per expert: the hf entry is left out, with a line.
    moe_dispatch = _load("moe_dispatch")

    def old_layout(*args):
        raise AttributeError("'ModuleList' object has no attribute 'gate_up_proj'")

    monkeypatch.setattr(moe_dispatch, "_hf_layer", old_layout)
    args = argparse.Namespace(d_model=16, d_expert=24, top_k=2, device="cpu")
    layers = moe_dispatch.build_layers(4, args)
    assert set(layers) == {"dense", "moelab"}
    assert "no hf entry" in capsys.readouterr().out


@pytest.mark.slow
def test_the_dry_run_runs_every_phase_on_the_cpu_and_exits_0(tmp_path):
    # The whole check's plumbing without a GPU: the cuda tests (skipped), the arms at toy sizes
    # (eager backend), the dispatch benchmark in bf16, the resume drift, one JSON at the end.
    env = {"OUT": str(tmp_path), "PYTHON": sys.executable, "PATH": "/usr/bin:/bin",
           "OMP_NUM_THREADS": "1", "HOME": str(tmp_path)}
    done = subprocess.run(["bash", str(SCRIPT), "--dry-run"], env=env, cwd=tmp_path,
                          capture_output=True, text=True, timeout=900)
    merged = json.loads((tmp_path / "gpu_check.json").read_text())
    assert done.returncode == 0, (merged["failed_phases"], done.stdout[-3000:])
    assert merged["failed_phases"] == []
    for name in ("env", "tests", "train", "dispatch", "resume"):
        assert {"rc", "seconds", "limit_s", "timed_out"} <= set(merged[f"phase_{name}"])
    assert merged["gpu_check_env"]["torch"] and "c_compiler" in merged["gpu_check_env"]
    assert merged["tests"]["tests"] == merged["tests"]["skipped"] > 0  # no GPU: all skipped
    assert set(merged["gpu_check_train"]["arms"]) == {"dense_active", "moe", "dense_total"}
    assert merged["moe_dispatch_cuda"]["runs"][0]["dtype"] == "bfloat16"
    resume = merged["gpu_check_resume"]
    # On a CPU a rerun and a resumed run are the uninterrupted one bit for bit.
    assert resume["again_bit_exact"] and resume["resumed_bit_exact"]
    assert resume["resumed_max_abs_loss_diff"] == 0.0
    assert len(resume["losses"]["resumed"]) == resume["steps"] == 20
