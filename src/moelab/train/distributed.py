"""Device choice and the few lines of DDP glue; the model code never sees any of it.

``torchrun --nproc_per_node=N -m moelab train ...`` sets RANK / WORLD_SIZE / LOCAL_RANK in the
environment; then every process joins one process group (gloo on CPU, nccl on GPU), trains on
its own shard of each global batch, and only rank 0 evaluates and writes files.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch
import torch.distributed as torch_dist

from moelab.config import DEVICE_CHOICES, DEVICE_NAME  # what train.device and eval --device accept
from moelab.errors import MoelabError, short_repr
from moelab.train.cuda import configure_cuda


@dataclass(frozen=True)
class Distributed:
    rank: int
    world_size: int
    device: torch.device

    @property
    def is_main(self) -> bool:
        """Rank 0 evaluates, logs and writes the run folder."""
        return self.rank == 0

    @property
    def is_ddp(self) -> bool:
        return self.world_size > 1

    def average(self, values: torch.Tensor) -> torch.Tensor:
        """The mean of ``values`` over ranks (a no-op for one process)."""
        if self.is_ddp:
            values = values.clone()
            torch_dist.all_reduce(values, op=torch_dist.ReduceOp.SUM)
            values /= self.world_size
        return values

    def sum(self, values: torch.Tensor) -> torch.Tensor:
        """The sum of ``values`` over ranks (a no-op for one process)."""
        if self.is_ddp:
            values = values.clone()
            torch_dist.all_reduce(values, op=torch_dist.ReduceOp.SUM)
        return values

    def barrier(self) -> None:
        if self.is_ddp:
            torch_dist.barrier()

    def close(self) -> None:
        if self.is_ddp and torch_dist.is_initialized():
            torch_dist.destroy_process_group()




def resolve_device(name: str, local_rank: int = 0, key: str = "train.device") -> torch.device:
    """'auto' picks the GPU of this rank when there is one, else the CPU; 'cuda' is the GPU of
    this rank (``local_rank``), 'cuda:N' GPU N. ``key`` names the setting in error messages."""
    check_device_name(name, key)
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    if name == "cpu":
        return torch.device("cpu")
    if not torch.cuda.is_available():
        raise MoelabError(f"{key}={short_repr(name)} is invalid: no CUDA device; use cpu or auto")
    index = local_rank if name == "cuda" else int(name.split(":")[1])
    count = torch.cuda.device_count()
    if index >= count:
        raise MoelabError(f"{key}={short_repr(name)} is invalid: it selects cuda:{index}, but there "
                          f"{'is' if count == 1 else 'are'} only {count} CUDA device(s)")
    return torch.device("cuda", index)


def check_device_name(name: str, key: str = "train.device") -> None:
    if not isinstance(name, str) or not DEVICE_NAME.fullmatch(name):
        raise MoelabError(f"{key}={short_repr(name)} is invalid: allowed {DEVICE_CHOICES}")


def check_device_for_ranks(name: str, world_size: int) -> None:
    """Under torchrun each rank must pick its own GPU: an explicit cuda:N would put them all on
    one (and NCCL would then hang or fail far from the cause)."""
    check_device_name(name)
    if world_size > 1 and name.startswith("cuda:"):
        raise MoelabError(
            f"train.device={short_repr(name)} is invalid under torchrun (WORLD_SIZE={world_size}): every "
            f"process would use that one GPU; allowed auto or cuda (each process takes the GPU "
            f"of its LOCAL_RANK) or cpu"
        )


def setup_distributed(device_name: str) -> Distributed:
    """Join the torchrun process group when launched by torchrun, else a single process. A GPU
    gets its fast settings (``configure_cuda``)."""
    world_size = _env_int("WORLD_SIZE", 1, minimum=1)
    check_device_for_ranks(device_name, world_size)
    if world_size == 1:
        device = resolve_device(device_name)
        configure_cuda(device)
        return Distributed(rank=0, world_size=1, device=device)
    rank = _env_int("RANK", None, minimum=0)
    if rank >= world_size:
        raise MoelabError(f"RANK={rank} is invalid: allowed 0..{world_size - 1} (WORLD_SIZE)")
    device = resolve_device(device_name, _env_int("LOCAL_RANK", 0, minimum=0))
    if device.type == "cuda":
        torch.cuda.set_device(device)
    configure_cuda(device)
    if not torch_dist.is_initialized():
        torch_dist.init_process_group(backend="nccl" if device.type == "cuda" else "gloo")
    return Distributed(rank=rank, world_size=world_size, device=device)


def _env_int(name: str, default: int | None, minimum: int) -> int:
    """A whole-number environment variable set by torchrun (a one-line error if malformed)."""
    text = os.environ.get(name)
    if text is None:
        if default is None:
            raise MoelabError(f"{name} is not set: launch with torchrun, which sets it")
        return default
    try:
        value = int(text)
    except ValueError:
        value = minimum - 1
    if value < minimum:
        raise MoelabError(f"environment variable {name}={short_repr(text)} is invalid: expected a whole "
                          f"number >= {minimum} (torchrun sets it)")
    return value
