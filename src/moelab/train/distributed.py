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

from moelab.errors import MoelabError


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

    def barrier(self) -> None:
        if self.is_ddp:
            torch_dist.barrier()

    def close(self) -> None:
        if self.is_ddp and torch_dist.is_initialized():
            torch_dist.destroy_process_group()


def resolve_device(name: str, local_rank: int = 0) -> torch.device:
    """'auto' picks the GPU of this rank when there is one, else the CPU."""
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    if name.startswith("cuda"):
        if not torch.cuda.is_available():
            raise MoelabError(f"train.device={name!r} is invalid: no CUDA device; use cpu or auto")
        if name == "cuda":
            name = f"cuda:{local_rank}"
    elif name != "cpu":
        raise MoelabError(f"train.device={name!r} is invalid: allowed auto, cpu, cuda, cuda:N")
    return torch.device(name)


def setup_distributed(device_name: str) -> Distributed:
    """Join the torchrun process group when launched by torchrun, else a single process."""
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    if world_size == 1:
        return Distributed(rank=0, world_size=1, device=resolve_device(device_name))
    rank = int(os.environ["RANK"])
    device = resolve_device(device_name, int(os.environ.get("LOCAL_RANK", "0")))
    if device.type == "cuda":
        torch.cuda.set_device(device)
    if not torch_dist.is_initialized():
        torch_dist.init_process_group(backend="nccl" if device.type == "cuda" else "gloo")
    return Distributed(rank=rank, world_size=world_size, device=device)
