"""Process-group setup for tensor / expert parallel runs: torchrun env, gloo on CPU, NCCL/RCCL on GPUs."""

from __future__ import annotations

import os
from dataclasses import dataclass

from mmprof.errors import BadInput


@dataclass
class DistContext:
    rank: int
    world_size: int
    local_rank: int
    backend: str
    device: str
    group: object | None  # torch.distributed default group, None when world_size == 1


def init_distributed(backend: str | None = None, device: str | None = None) -> DistContext:
    """Initialise from torchrun's env (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR/PORT).

    backend: gloo (CPU), nccl (NVIDIA; on ROCm builds this is RCCL); default nccl when a GPU is present.
    Without WORLD_SIZE (plain `python`), returns a single-rank context and initialises nothing."""
    import torch
    import torch.distributed as dist

    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    local = int(os.environ.get("LOCAL_RANK", str(rank)))
    gpu = torch.cuda.is_available() and device != "cpu"
    backend = backend or ("nccl" if gpu else "gloo")
    if backend not in ("gloo", "nccl"):
        raise BadInput(f"distributed backend must be gloo or nccl (RCCL on ROCm), not {backend!r}")
    dev = device or (f"cuda:{local}" if gpu else "cpu")
    if dev == "cuda":  # a bare "cuda" means this rank's GPU (set_device needs an index)
        dev = f"cuda:{local}"
    if dev.startswith("cuda"):
        torch.cuda.set_device(torch.device(dev))
    if world == 1:
        return DistContext(0, 1, 0, backend, dev, None)
    if not dist.is_initialized():
        if "MASTER_ADDR" not in os.environ:
            raise BadInput("WORLD_SIZE > 1 but MASTER_ADDR is not set: start the ranks with torchrun")
        dist.init_process_group(backend=backend, rank=rank, world_size=world)
    return DistContext(rank, world, local, backend, dev, dist.group.WORLD)


def destroy(barrier: bool = True) -> None:
    """Tear down the process group. barrier=True (after a successful run) makes all ranks leave together;
    pass False on an error path, where a peer may be gone and a barrier would wait for its timeout."""
    import torch.distributed as dist

    if dist.is_initialized():
        if barrier:
            dist.barrier()
        dist.destroy_process_group()
