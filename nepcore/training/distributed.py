"""Multi-process (multi-GPU) training with PyTorch DDP, launched by ``torchrun``.

``torchrun --nproc_per_node N -m nepcore train ...`` starts N copies of the same command;
torchrun sets RANK, WORLD_SIZE and LOCAL_RANK, which :func:`setup` reads (those variables are
torchrun's launch contract, not nepcore switches). Every process builds the same epoch batch
order from (seed, epoch) and takes every N-th batch; DDP averages the parameter gradients
(nccl on GPUs, gloo on CPUs), ``model.join()`` absorbs the one-batch difference when the
batch count is not a multiple of N, and the epoch's error sums are summed over processes so
that b1, the metrics and early stopping are identical everywhere. Only rank 0 writes files.
Without torchrun (WORLD_SIZE unset or 1) everything reduces to the single-process path.
"""

from __future__ import annotations

import contextlib
import gc
import os
from collections.abc import Iterator
from dataclasses import dataclass

import torch
import torch.distributed as dist


@dataclass(frozen=True)
class Distributed:
    """This process's place in the job: rank, world size, local rank (GPU index)."""

    rank: int = 0
    world: int = 1
    local_rank: int = 0

    @property
    def enabled(self) -> bool:
        return self.world > 1

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    def device(self, device: torch.device) -> torch.device:
        """This process's GPU (cuda:LOCAL_RANK) when distributed on CUDA, else ``device``."""
        if self.enabled and device.type == "cuda":
            return torch.device("cuda", self.local_rank)
        return device

    def batches(self, source, batch_size: int, **options) -> Iterator:
        """This process's batches of ``source`` (every world-th of the epoch's order, starting
        at its rank; the store assembles only those). Not distributed: all batches."""
        if not self.enabled:
            return source.batches(batch_size, **options)
        return source.batches(batch_size, shard=(self.rank, self.world), **options)

    def sum(self, tensor: torch.Tensor) -> torch.Tensor:
        """Sum of ``tensor`` over all processes (itself when not distributed)."""
        if not self.enabled:
            return tensor
        out = tensor.clone()
        dist.all_reduce(out, op=dist.ReduceOp.SUM)
        return out

    def broadcast_(self, tensor: torch.Tensor) -> torch.Tensor:
        """Overwrite ``tensor`` in place with rank 0's (a no-op when not distributed); returns it."""
        if self.enabled:
            dist.broadcast(tensor, src=0)
        return tensor

    def barrier(self) -> None:
        if self.enabled:
            dist.barrier()

    def wrap(self, model: torch.nn.Module, device: torch.device) -> torch.nn.Module:
        """The model inside DistributedDataParallel (the model itself when not distributed)."""
        if not self.enabled:
            return model
        ids = [device.index] if device.type == "cuda" else None
        return torch.nn.parallel.DistributedDataParallel(model, device_ids=ids)

    def join(self, wrapped: torch.nn.Module):
        """Context for uneven batch counts across processes (DDP's join); a no-op otherwise."""
        if not self.enabled:
            return contextlib.nullcontext()
        return wrapped.join()

    def close(self, finished: bool = False) -> None:
        """Leave the process group (a no-op when not distributed).

        finished: this process completed its stage. Then it first waits at a barrier until
        every process has (rank 0 writes the stage's files after the last epoch), so that no
        process tears down its gloo connections while another still uses them; a process that
        failed does not wait for the others, which may never arrive.
        Unreachable objects are collected first: DDP's reducer holds the process group and
        can sit in a reference cycle, and one freed only at interpreter exit takes gloo's
        worker threads down at a time when they can no longer finish (a finished two-process
        test run once aborted at exit with "terminate called without an active exception").
        """
        if not (self.enabled and dist.is_initialized()):
            return
        gc.collect()
        if finished:
            dist.barrier()
        dist.destroy_process_group()


def setup(device_name: str) -> Distributed:
    """Join the torchrun process group if there is one.

    device_name: "auto", "cpu" or "cuda". Under torchrun with CUDA, each process uses GPU
    LOCAL_RANK (see :meth:`Distributed.device`) and nccl; on CPUs the gloo backend is used.
    """
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world <= 1:
        return Distributed()
    rank, local_rank = int(os.environ["RANK"]), int(os.environ.get("LOCAL_RANK", "0"))
    use_cuda = torch.cuda.is_available() and device_name in ("auto", "cuda")
    if use_cuda:
        torch.cuda.set_device(local_rank)
    if not dist.is_initialized():
        dist.init_process_group(backend="nccl" if use_cuda else "gloo")
    return Distributed(rank, world, local_rank)
