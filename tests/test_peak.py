"""The CPU peak MFU divides by: its FLOP count, its stopping rule, its cache per machine, and
the CPU-time clock a run's tokens per CPU-second come from. Clocks are faked: no test here
depends on how fast anything runs."""

from __future__ import annotations

import itertools
import json

import pytest
import torch

import moelab.train.peak as peak_module
from moelab.config import load_config
from moelab.train import train
from moelab.train.peak import (
    PEAK_CACHE_FILE, matmul_flops, measure_cpu_peak, measured_cpu_peak, peak_cache_key,
)
from moelab.train.state import Clock
from tiny_overrides import TINY_MOE_RUN


def test_a_matmul_counts_a_multiply_and_an_add_per_term():
    # by hand: (2 x 3) @ (3 x 4) has 2 * 4 outputs of 3 terms each: 24 multiplies, 24 adds
    assert matmul_flops(2, 3, 4) == 48
    a, b = torch.arange(6.0).reshape(2, 3), torch.arange(12.0).reshape(3, 4)
    multiplies = sum(1 for i in range(2) for j in range(4) for _ in range(3))
    assert matmul_flops(*a.shape, b.shape[1]) == 2 * multiplies


def fake_clock(durations: list[float]):
    """A clock whose successive (start, end) readings are ``durations`` seconds apart."""
    readings = itertools.accumulate(d for duration in durations for d in (0.0, duration))
    return lambda: next(readings)


def test_the_rate_is_flops_per_clock_second_and_sizes_grow_while_it_does():
    # every call of 1 s CPU time spends more than MEASURE_CPU_S: one call per size
    rates = measure_cpu_peak(torch.float32, sizes=(4, 8, 16), clock=fake_clock([1.0, 1.0, 1.0]),
                             always_up_to=4)
    assert rates == {4: 2 * 4**3, 8: 2 * 8**3, 16: 2 * 16**3}
    # size 8 takes 8x longer than size 4: the same rate, so size 16 is never tried
    rates = measure_cpu_peak(torch.float32, sizes=(4, 8, 16), clock=fake_clock([1.0, 8.0]),
                             always_up_to=4)
    assert rates == {4: 128.0, 8: 128.0}
    # ... unless the sizes up to always_up_to are all measured: 8 and 16 alike
    rates = measure_cpu_peak(torch.float32, sizes=(4, 8, 16), clock=fake_clock([1.0, 8.0, 64.0]),
                             always_up_to=16)
    assert rates == {4: 128.0, 8: 128.0, 16: 128.0}


def test_the_best_of_several_calls_counts():
    # calls of 0.1-0.2 s CPU at one size, until MEASURE_CPU_S is spent: the fastest counts
    rates = measure_cpu_peak(torch.float32, sizes=(8,), clock=fake_clock([0.2, 0.1, 0.15, 0.2]))
    assert rates[8] == pytest.approx(2 * 8**3 / 0.1) and list(rates) == [8]


def test_the_cache_key_names_the_cpu_torch_threads_and_dtype():
    assert (peak_cache_key(torch.float32, 1, cpu="Some CPU", torch_version="2.9.0")
            == "Some CPU | torch 2.9.0 | 1 thread | float32")
    assert (peak_cache_key(torch.bfloat16, 2, cpu="Some CPU", torch_version="2.9.0")
            == "Some CPU | torch 2.9.0 | 2 threads | bfloat16")


@pytest.fixture
def counted_measurements(monkeypatch, tmp_path):
    """A cache root of its own and a measurement that counts its calls (rate 1e9 per call)."""
    monkeypatch.setenv("MOELAB_CACHE", str(tmp_path))
    calls = []

    def measure(dtype):
        calls.append(dtype)
        return {256: 5e8, 512: 1e9}

    monkeypatch.setattr(peak_module, "measure_cpu_peak", measure)
    measured_cpu_peak.cache_clear()
    yield calls
    measured_cpu_peak.cache_clear()


def test_a_peak_is_the_best_of_three_processes_readings_then_read_back(counted_measurements,
                                                                       monkeypatch, tmp_path):
    readings = iter([8e8, 1e9, 9e8])
    monkeypatch.setattr(peak_module, "measure_cpu_peak",
                        lambda dtype: counted_measurements.append(dtype) or {512: next(readings)})
    seen = []
    for _ in range(4):  # four processes on one machine, one after the other
        measured_cpu_peak.cache_clear()
        seen.append(measured_cpu_peak(torch.float32, 1).flops_per_s)
    assert seen == [8e8, 1e9, 1e9, 1e9] and len(counted_measurements) == 3
    key = peak_cache_key(torch.float32, 1)
    peak = measured_cpu_peak(torch.float32, 1)
    assert key in peak.source and "3 of 3 readings" in peak.source and peak.clock == "cpu"
    stored = json.loads((tmp_path / PEAK_CACHE_FILE).read_text())[key]
    assert stored["flops_per_cpu_s"] == 1e9
    assert [r["flops_per_cpu_s"] for r in stored["readings"]] == [8e8, 1e9, 9e8]


def test_another_torch_thread_count_or_dtype_is_measured_afresh(counted_measurements,
                                                                 monkeypatch, tmp_path):
    measured_cpu_peak(torch.float32, 1)
    measured_cpu_peak(torch.float32, 2)
    measured_cpu_peak(torch.bfloat16, 1)
    measured_cpu_peak.cache_clear()  # a new process with another torch on the same machine
    monkeypatch.setattr(torch, "__version__", "0.0.1-other")
    measured_cpu_peak(torch.float32, 1)
    assert len(counted_measurements) == 4  # one reading of each key so far
    assert len(json.loads((tmp_path / PEAK_CACHE_FILE).read_text())) == 4  # all kept


@pytest.mark.parametrize("damage", ["{not json", "[1, 2]", '{"KEY": "fast"}',
                                    '{"KEY": {"readings": [{"flops_per_cpu_s": "fast"}]}}'])
def test_a_damaged_cache_is_measured_again_not_an_error(counted_measurements, tmp_path, damage):
    key = json.dumps(peak_cache_key(torch.float32, 1))[1:-1]
    (tmp_path / PEAK_CACHE_FILE).write_text(damage.replace("KEY", key))
    assert measured_cpu_peak(torch.float32, 1).flops_per_s == 1e9
    assert len(counted_measurements) == 1


def test_the_clock_leaves_paused_cpu_time_out(monkeypatch):
    cpu = iter([10.0, 11.0, 15.0, 17.0])  # start; pause from 11 to 15; read at 17
    with monkeypatch.context() as patched:
        patched.setattr("moelab.train.state.time.process_time", lambda: next(cpu))
        clock = Clock(prior_train_s=2.0, prior_wall_s=3.0, prior_cpu_s=1.5)
        with clock.paused():
            pass
        assert clock.train_cpu_s == pytest.approx(1.5 + (17 - 10) - (15 - 11))
    assert clock.counts_all_cpu
    assert not Clock(prior_train_s=2.0, prior_cpu_s=0.0).counts_all_cpu  # an older checkpoint


@pytest.mark.slow
def test_a_cpu_run_names_its_peak_and_reports_tokens_per_cpu_second(tmp_path):
    config = load_config(None, TINY_MOE_RUN + ["train.max_tokens=256", "train.sample_tokens=0"])
    summary = train(config, tmp_path / "run")
    assert summary.tokens_per_cpu_s == pytest.approx(summary.tokens / summary.train_cpu_time_s)
    assert peak_cache_key(torch.float32, summary.torch_threads) in summary.peak_flops_source
    assert summary.mfu == pytest.approx(summary.tokens_per_cpu_s * summary.flops_per_token_6n
                                        / summary.peak_flops_per_s)
    assert "CPU-second" in summary.mfu_convention and "6 * N_active" in summary.mfu_convention
