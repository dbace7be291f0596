"""Data parallelism under ``torchrun``: the process group, each rank's rows, reductions.

Every rank draws the same *global* batch from the same seeded generator and trains on its
own contiguous block of rows, and DistributedDataParallel averages the gradients; so N
processes follow the loss curve of one process with the same global batch (up to float
rounding of the gradient average), and the data stream needs no per-rank seed. Drawing the
global batch on every rank costs N times the generation of a local batch, about 1% of a
step per rank for the built-in tasks (benchmarks/speed/task_throughput.py).

Without ``torchrun`` (no ``WORLD_SIZE`` above 1 in the environment) everything here is a
no-op and the trainer runs as a single process.
"""

from __future__ import annotations

import gc
import os
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist

from latentlens.tasks.base import Batch, Draws


@dataclass(frozen=True)
class DistributedContext:
    """Where this process stands: ``rank`` of ``world_size``, GPU ``local_rank``."""

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0

    @property
    def enabled(self) -> bool:
        return self.world_size > 1

    @property
    def is_main(self) -> bool:
        """Rank 0: the only process that writes the run directory and prints."""
        return self.rank == 0

    def rows(self, draws: Draws) -> Draws:
        """This rank's block of a global batch, or of its draws (every tensor whose first
        dim is the batch)."""
        if not self.enabled:
            return draws
        size = len(draws) if isinstance(draws, Batch) else len(next(iter(draws.values())))
        if size % self.world_size:
            raise ValueError(
                f"batch_size={size} cannot be split over {self.world_size} processes; "
                f"use a multiple of {self.world_size}"
            )
        local = size // self.world_size
        block = slice(self.rank * local, (self.rank + 1) * local)

        def take(tensor: torch.Tensor) -> torch.Tensor:
            return tensor[block] if tensor.ndim and tensor.shape[0] == size else tensor

        if isinstance(draws, Batch):
            return draws.map(take)
        return {name: take(tensor) for name, tensor in draws.items()}

    def mean(self, value: torch.Tensor) -> torch.Tensor:
        """The mean of a tensor over ranks (a collective: every rank must call it)."""
        if not self.enabled:
            return value
        total = value.detach().clone()
        dist.all_reduce(total, op=dist.ReduceOp.SUM)
        return total / self.world_size

    def minimum(self, value: torch.Tensor) -> torch.Tensor:
        """The minimum of a tensor over ranks (a collective)."""
        if not self.enabled:
            return value
        smallest = value.detach().clone()
        dist.all_reduce(smallest, op=dist.ReduceOp.MIN)
        return smallest

    def gather(self, value: Any) -> list[Any]:
        """Every rank's ``value``, in rank order (a collective)."""
        if not self.enabled:
            return [value]
        gathered: list[Any] = [None] * self.world_size
        dist.all_gather_object(gathered, value)
        return gathered

    def barrier(self) -> None:
        if self.enabled:
            dist.barrier()


def init_distributed(device: torch.device) -> tuple[DistributedContext, torch.device]:
    """Join the process group that ``torchrun`` describes, if any.

    Returns the context and this rank's device: on CUDA each rank takes the GPU of its
    ``LOCAL_RANK`` and the group uses NCCL; on the CPU it uses gloo.
    """
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    if world_size <= 1:
        return DistributedContext(), device
    rank = int(os.environ["RANK"])
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    if device.type == "cuda":
        device = torch.device("cuda", local_rank)
        torch.cuda.set_device(device)
    if not dist.is_initialized():
        dist.init_process_group(backend="nccl" if device.type == "cuda" else "gloo")
    return DistributedContext(rank, world_size, local_rank), device


def shutdown_distributed(finished: bool = False) -> None:
    """Leave the process group at the end of a run (no-op when there is none); after a
    ``finished`` run, only once every rank has come to its end. Unwrap the run's
    DistributedDataParallel first (:meth:`Trainer.leave_data_parallel`).

    Why: gloo's worker threads free a collective's tensors after the collective returns,
    and freeing a tensor Python made takes the GIL. The process group's destructor joins
    those threads. Python's last reference to the group, dropped here, destroys it with the
    GIL released; but a DDP reducer still alive holds the group too, and a reducer freed
    later (as the run's objects go) destroyed it *holding* the GIL, so a worker still
    freeing tensors waited for the GIL and the rank hung at exit (beside busy neighbours,
    seen in CI). So the reducer goes first (``gc.collect`` frees DDP's reference cycles)
    and this call drops the last reference. The barrier lets every rank's workers finish
    their last collective first; a run that failed leaves at once (another rank may be
    gone)."""
    if dist.is_available() and dist.is_initialized():
        gc.collect()
        if finished:
            dist.barrier()
        dist.destroy_process_group()
