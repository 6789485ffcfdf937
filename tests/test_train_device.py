"""Device strings: a bad one is a one-line MoelabError, and under torchrun every rank gets its
own GPU. No GPU needed: CUDA's presence is faked, and nothing touches a device."""

from __future__ import annotations

import pytest
import torch

from moelab.cli import main
from moelab.errors import MoelabError
from moelab.train.distributed import resolve_device, setup_distributed


@pytest.fixture
def two_fake_gpus(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)


@pytest.mark.parametrize("name", ["cuda:x", "cuda:", "gpu", "CUDA", "cuda:0:1", "cuda:-1", ""])
def test_a_malformed_device_is_a_clear_error(two_fake_gpus, name):
    allowed = "allowed auto, cpu, cuda, cuda:N"
    with pytest.raises(MoelabError, match=rf"train.device={name!r} is invalid: {allowed}"):
        resolve_device(name)


def test_well_formed_devices_resolve_to_the_gpu_they_name(two_fake_gpus):
    assert resolve_device("cpu") == torch.device("cpu")
    assert resolve_device("cuda:1") == torch.device("cuda", 1)
    assert resolve_device("cuda", local_rank=1) == torch.device("cuda", 1)
    assert resolve_device("auto", local_rank=1) == torch.device("cuda", 1)
    with pytest.raises(MoelabError, match=r"'cuda:2' is invalid: it selects cuda:2, but there "
                                          r"are only 2"):
        resolve_device("cuda:2")


def test_without_cuda_a_gpu_device_is_refused_and_auto_is_the_cpu(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert resolve_device("auto") == torch.device("cpu")
    with pytest.raises(MoelabError, match="'cuda:0' is invalid: no CUDA device"):
        resolve_device("cuda:0")


@pytest.mark.slow
@pytest.mark.parametrize("name", ["cuda:0", "cuda:1"])
def test_under_torchrun_an_explicit_gpu_is_refused_before_joining_the_group(
        two_fake_gpus, monkeypatch, name):
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("LOCAL_RANK", "1")
    joined = []
    monkeypatch.setattr(torch.distributed, "init_process_group", lambda **kw: joined.append(kw))
    monkeypatch.setattr(torch.cuda, "set_device", lambda device: joined.append(device))
    with pytest.raises(MoelabError, match=rf"train.device={name!r} is invalid under torchrun "
                                          r"\(WORLD_SIZE=2\).*allowed auto or cuda"):
        setup_distributed(name)
    assert joined == []


@pytest.mark.slow
def test_under_torchrun_cuda_gives_each_rank_its_local_gpu(two_fake_gpus, monkeypatch):
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("LOCAL_RANK", "1")
    calls = []
    monkeypatch.setattr(torch.distributed, "is_initialized", lambda: False)
    monkeypatch.setattr(torch.distributed, "init_process_group", lambda **kw: calls.append(kw))
    monkeypatch.setattr(torch.cuda, "set_device", lambda device: calls.append(device))
    dist = setup_distributed("cuda")
    assert dist.device == torch.device("cuda", 1) and dist.rank == 1
    assert calls == [torch.device("cuda", 1), {"backend": "nccl"}]


def test_the_cli_reports_a_bad_device_on_one_line(tmp_path, capsys):
    code = main(["train", "demo", "--out", str(tmp_path / "r"), "--set", "train.device=cuda:x"])
    err = capsys.readouterr().err
    assert code == 2 and "train.device='cuda:x' is invalid" in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1
