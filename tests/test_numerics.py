"""Portable numerics (moelab.numerics): another machine is emulated on this one by the
environment a run starts in (torch's DEFAULT kernels instead of AVX2, MKL's SSE2 GEMM instead of
its own choice); portable runs give the same losses bit for bit, native runs do not. And the
machine record every summary carries."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch

from moelab.errors import MoelabError
from moelab.numerics import (
    NUMERICS_VARIABLES, PINNED_ENVIRONMENT, Machine, blas_version, enter_numerics, machine_bullet,
)
from moelab.sweep.folder import read_results
from moelab.sweep.tabulate import machine_fields, write_results_csv
from moelab.train.run_summary import RunSummary, parse_summary

RUN = ["data.max_train_stories=300", "train.max_tokens=10240", "train.eval_interval=2",
       "train.eval_windows=8", "train.log_interval=1", "train.sample_tokens=0",
       "train.logging.progress=false"]
"""The demo's MoE for 10 steps, evaluated every 2. Its shapes, not smaller, and that long: at
d_model 32, or in the first steps, the emulated machine's kernels happen to give the same bits."""
OTHER_MACHINES = {
    "avx2, MKL's own GEMM": {"ATEN_CPU_CAPABILITY": "avx2"},
    "no SIMD kernels, MKL's SSE2 GEMM": {"ATEN_CPU_CAPABILITY": "default",
                                        "MKL_CBWR": "COMPATIBLE"},
}

needs_avx2 = pytest.mark.skipif(
    torch.backends.cpu.get_cpu_capability() not in ("AVX2", "AVX512"),
    reason="portable numerics pin AVX2 kernels, which this CPU lacks")


def losses_of(run_dir) -> list[float]:
    """Every train and validation loss the run logged, in order."""
    events = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [event.get("loss", event.get("val_loss")) for event in events
            if event["kind"] in ("train", "eval")]


def train_in_environment(tmp_path, numerics: str, machine: str) -> list[float]:
    """Train RUN in a fresh process whose environment is that of ``machine``."""
    env = {key: value for key, value in os.environ.items() if key not in NUMERICS_VARIABLES}
    env.update(OTHER_MACHINES[machine], OMP_NUM_THREADS="1")
    out = tmp_path / f"{numerics}-{machine.split(',')[0].replace(' ', '-')}"
    overrides = [arg for item in [*RUN, f"train.numerics={numerics}"] for arg in ("--set", item)]
    subprocess.run([sys.executable, "-m", "moelab", "train", "demo", *overrides,
                    "--out", str(out)], env=env, check=True, capture_output=True, text=True)
    summary = parse_summary(json.loads((out / "summary.json").read_text()))
    assert summary.machine is not None and summary.machine.numerics == numerics
    return losses_of(out)


@needs_avx2
@pytest.mark.parametrize("numerics", ["portable", "native"])
def test_portable_numerics_give_the_same_losses_on_an_emulated_other_machine(tmp_path, numerics):
    here, there = (train_in_environment(tmp_path, numerics, machine) for machine in OTHER_MACHINES)
    assert len(here) == len(there) == 15  # 10 train losses, 5 evaluations
    if numerics == "portable":
        assert here == there  # bit for bit
    else:
        assert here != there


def test_portable_numerics_set_every_pinned_variable(monkeypatch):
    for name in NUMERICS_VARIABLES:
        monkeypatch.setenv(name, "something else")
    enter_numerics("portable")
    assert {name: os.environ[name] for name in NUMERICS_VARIABLES} == {
        "ATEN_CPU_CAPABILITY": "avx2", "MKL_CBWR": "AVX2",
        "ONEDNN_MAX_CPU_ISA": "AVX2", "DNNL_MAX_CPU_ISA": "AVX2"}
    assert PINNED_ENVIRONMENT["compatible"]["MKL_CBWR"] == "COMPATIBLE"


def test_native_numerics_leave_the_environment_alone(monkeypatch):
    monkeypatch.setenv("ATEN_CPU_CAPABILITY", "default")
    monkeypatch.delenv("MKL_CBWR", raising=False)
    enter_numerics("native")
    assert os.environ["ATEN_CPU_CAPABILITY"] == "default" and "MKL_CBWR" not in os.environ


def test_an_unknown_numerics_mode_is_one_line():
    with pytest.raises(MoelabError, match=r"train.numerics='fast' is invalid: allowed "
                                          r"portable, compatible, native"):
        enter_numerics("fast")


def test_the_blas_version_is_read_from_torchs_build_text():
    mkl = ("  - Intel(R) oneAPI Math Kernel Library Version 2024.2-Product Build 20240605 for "
           "Intel(R) 64 architecture applications\n  - Build settings: BLAS_INFO=mkl, X=1")
    assert blas_version(mkl) == "MKL 2024.2"
    assert blas_version("  - Build settings: BLAS_INFO=open, LAPACK_INFO=open") == "open"
    assert blas_version("nothing here") == ""


def test_two_machines_name_only_what_differs():
    here = Machine(cpu="AMD EPYC", capability="AVX2", torch="2.13.0", blas="MKL 2024.2",
                   threads=1, numerics="portable", environment={"MKL_CBWR": "AVX2"})
    there = Machine(cpu="Intel Xeon", capability="AVX2", torch="2.13.0", blas="MKL 2024.2",
                    threads=4, numerics="portable", environment={})
    assert here.differences(there) == ["cpu: AMD EPYC vs Intel Xeon", "threads: 1 vs 4",
                                       "environment: MKL_CBWR=AVX2 vs (none)"]
    assert here.differences(here) == []


def test_a_summary_without_a_machine_still_reads():
    summary = parse_summary({"status": "complete", "best_val_loss": 3.5, "schema_version": 2})
    assert summary.machine is None


MACHINE = Machine(cpu="AMD EPYC", capability="AVX2", torch="2.13.0+cpu", blas="MKL 2024.2",
                  threads=2, numerics="portable", environment={"MKL_CBWR": "AVX2"})


def test_report_line_counts_the_runs_of_each_machine_and_the_older_ones():
    older = Machine(**{**vars(MACHINE), "threads": 1, "numerics": "native"})
    line = machine_bullet([MACHINE, MACHINE, older, None])
    assert line == (
        "- Machine: AMD EPYC, torch kernels AVX2, torch 2.13.0+cpu, MKL 2024.2, 2 threads, "
        "numerics portable (2 runs); AMD EPYC, torch kernels AVX2, torch 2.13.0+cpu, MKL 2024.2,"
        " 1 thread, numerics native (1 run); not recorded (1 older run).\n")
    assert machine_bullet([None, None]) == ""  # an older folder's report is unchanged


def test_a_sweeps_results_csv_carries_the_machine_columns_only_when_a_run_recorded_them(
        tmp_path):
    rows = [{"run": "runs/a/seed0", "size": "s0", "budget": "D100", "seed": 0, "N_total": 10,
             "N_active": 5, "D": 100, "C": 3000, "S": 0.5, "E": 2, "best_val_loss": 3.0,
             **machine_fields(RunSummary(machine=MACHINE))},
            {"run": "runs/a/seed1", "size": "s0", "budget": "D100", "seed": 1, "N_total": 10,
             "N_active": 5, "D": 100, "C": 3000, "S": 0.5, "E": 2, "best_val_loss": 3.1,
             **machine_fields(RunSummary())}]
    write_results_csv(tmp_path / "results.csv", rows)
    header = (tmp_path / "results.csv").read_text().splitlines()[0].split(",")
    assert header[-6:] == ["cpu", "cpu_capability", "torch_version", "blas", "threads",
                           "numerics"]
    recorded, older = read_results(tmp_path).rows
    assert recorded.machine == Machine(**{**vars(MACHINE), "environment": {}})
    assert older.machine is None and older.cpu == ""
    write_results_csv(tmp_path / "results.csv", rows[1:])
    assert "numerics" not in (tmp_path / "results.csv").read_text()
