"""The load diagnostics peer tools report (MaxVio, load percentiles, dead experts, micro- against
global-batch balance) and throughput in their units (tokens/s, MFU), checked against hand
counts on fixed routings and against the run's own size and speed."""

from __future__ import annotations

import json
import math

import pytest
import torch

from moelab.accounting import count_params
from moelab.config import load_config
from moelab.moe.routing import count_slots, load_balance, max_violation
from moelab.train import train
from moelab.train.step import StepLoads, step_balance
from moelab.train.peak import gpu_peak, measured_cpu_peak, mfu, peak_flops, PeakFlops
from moelab.train.run_folder import RunFolder
from tiny_overrides import TINY_MOE_RUN

BALANCE_KEYS = {"max_violation", "load_p50", "load_p90", "load_max", "dead_experts"}


@pytest.mark.parametrize("counts, expected", [
    # balanced: every load equals the mean
    ([5, 5, 5, 5], dict(max_violation=0.0, load_p50=1.0, load_p90=1.0, load_max=1.0, dead=0)),
    # collapsed on one of 4 experts: max load 4x the mean, three dead
    ([0, 12, 0, 0], dict(max_violation=3.0, load_p50=0.0, load_p90=4 * 0.7, load_max=4.0, dead=3)),
    # 8 experts, mean 10: sorted loads / mean 0, .5, .5, 1, 1, 1.5, 1.5, 2 (positions of the
    # quantiles: 0.5 * 7 = 3.5 -> 1, 0.9 * 7 = 6.3 -> 1.5 + 0.3 * 0.5)
    ([10, 5, 20, 15, 0, 10, 5, 15],
     dict(max_violation=1.0, load_p50=1.0, load_p90=1.65, load_max=2.0, dead=1)),
])
def test_load_balance_by_hand(counts, expected):
    balance = load_balance(torch.tensor(counts))
    assert balance.max_violation == pytest.approx(expected["max_violation"])
    assert balance.load_p50 == pytest.approx(expected["load_p50"])
    assert balance.load_p90 == pytest.approx(expected["load_p90"])
    assert balance.load_max == pytest.approx(expected["load_max"])
    assert balance.dead_experts == expected["dead"]


def test_max_violation_per_layer_from_a_fixed_routing():
    # 6 tokens, top-2 of 3 experts: slots per expert (layer 0) 6, 4, 2 -> mean 4, MaxVio 0.5
    experts_TK = torch.tensor([[0, 1], [0, 1], [0, 2], [0, 1], [0, 2], [0, 1]])
    layer0_E = count_slots(experts_TK, 3)
    assert layer0_E.tolist() == [6, 4, 2]
    layer1_E = torch.tensor([4, 4, 4])
    assert max_violation(torch.stack([layer0_E, layer1_E])).tolist() == pytest.approx([0.5, 0.0])


class OneProcess:
    """``Distributed`` of a single process: sums and means over one rank are the values."""

    def sum(self, values):
        return values

    def average(self, values):
        return values


def test_micro_batches_against_the_global_batch_by_hand():
    # Two micro batches of one layer, each collapsed on another expert: each micro batch's
    # MaxVio is 3 (loads 8, 0, 0, 0 over the mean 2), the step's loads 8, 8, 0, 0 give 1.
    micro_LE = [torch.tensor([[8, 0, 0, 0]]), torch.tensor([[0, 8, 0, 0]])]
    loads = StepLoads(slot_counts_LE=micro_LE[0] + micro_LE[1],
                      micro_max_violation_sum_L=sum(max_violation(c) for c in micro_LE),
                      micro_batches=2)
    (row,) = step_balance(loads, OneProcess(), splits_step=True)
    assert row["micro_max_violation"] == pytest.approx(3.0)
    assert row["max_violation"] == pytest.approx(1.0)
    assert row["dead_experts"] == 2
    (unsplit,) = step_balance(loads, OneProcess(), splits_step=False)
    assert set(unsplit) == BALANCE_KEYS  # one micro batch per step: nothing to compare
    assert step_balance(None, OneProcess(), splits_step=True) == []  # a dense model


def test_gpu_peaks_from_the_data_sheets():
    assert gpu_peak("NVIDIA H100 80GB HBM3").flops_per_s == 989e12
    assert gpu_peak("NVIDIA H100 PCIe").flops_per_s == 756e12  # not the SXM part's
    assert gpu_peak("NVIDIA A100-SXM4-40GB").flops_per_s == 312e12
    assert gpu_peak("Some Future Accelerator") is None


def test_a_cpu_peak_is_measured_and_named_so():
    peak = peak_flops(torch.device("cpu"), torch.float32, None)
    assert peak.source.startswith("measured: CPU") and peak.flops_per_s > 0
    assert peak.clock == "cpu" and "CPU-second" in peak.convention
    assert measured_cpu_peak(torch.float32, torch.get_num_threads()) == peak  # once
    given = peak_flops(torch.device("cpu"), torch.float32, 2e9)
    assert (given.flops_per_s, given.source) == (2e9, "given (train.peak_flops)")
    # a GPU's MFU reads wall tokens/s, a CPU's tokens per CPU-second: 1000 * 600 / 1.2e6
    assert mfu(1000.0, 3000.0, 6 * 100, PeakFlops(1.2e6, "given")) == pytest.approx(0.5)
    assert mfu(1000.0, 3000.0, 600, PeakFlops(1.2e6, "given", "cpu")) == pytest.approx(1.5)
    assert mfu(1000.0, None, 600, PeakFlops(1.2e6, "given", "cpu")) is None
    assert mfu(1000.0, 3000.0, 600, PeakFlops(None, "unknown GPU")) is None


@pytest.mark.slow
def test_a_run_logs_balance_at_every_step_and_mfu_in_its_summary(tmp_path):
    # 2 micro batches a step (gradient accumulation), a given peak of 1 GFLOP/s
    config = load_config(None, TINY_MOE_RUN + [
        "train.max_tokens=768", "train.micro_batch_size=4", "train.sample_tokens=0",
        "train.eval_interval=3", "train.peak_flops=1e9"])
    summary = train(config, tmp_path / "run")
    events = RunFolder(tmp_path / "run").read_metrics()
    train_events = [e for e in events if e["kind"] == "train"]
    assert [e["step"] for e in train_events] == [1, 2, 3]
    for event in train_events:
        assert len(event["balance"]) == config.model.n_layers
        for layer in event["balance"]:
            assert set(layer) == BALANCE_KEYS | {"micro_max_violation"}
            # equal micro batches: max(sum) <= sum(max), so the step is at least as balanced
            assert layer["max_violation"] <= layer["micro_max_violation"] + 1e-9
            assert layer["load_p50"] <= layer["load_p90"] <= layer["load_max"]
            assert layer["load_max"] == pytest.approx(layer["max_violation"] + 1)
        six_n = 6 * count_params(config.model).active
        # on a CPU, MFU counts tokens per CPU-second (the given peak is per CPU-second)
        assert event["mfu"] == pytest.approx(event["tokens_per_cpu_s"] * six_n / 1e9)
    (last_eval,) = [e for e in events if e["kind"] == "eval"]
    for layer in last_eval["routing"]:
        loads = layer["expert_load"]  # shares of the slots: the percentiles follow from them
        assert layer["max_violation"] == pytest.approx(max(loads) * len(loads) - 1)
    assert summary.peak_flops_per_s == 1e9 and summary.peak_flops_source.startswith("given")
    assert summary.tokens_per_cpu_s == pytest.approx(summary.tokens / summary.train_cpu_time_s)
    assert summary.mfu == pytest.approx(summary.tokens_per_cpu_s * 6 * summary.active_params / 1e9)
    assert summary.mfu_convention.startswith("6 * N_active * tokens per CPU-second")
    recorded = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert recorded["mfu"] == pytest.approx(summary.mfu)
    assert math.isfinite(recorded["tokens_per_s"])
