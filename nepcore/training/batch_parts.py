"""Frame-parallel CPU steps: each minibatch evaluated as parts of whole frames on several threads.

At the default batch (~500 atoms) torch's own threads barely help on the CPU: most kernels are
too small to split, and the scatters run serially under the deterministic mode, so a step took
as long on two threads as on one, or longer (sweep_k4: 0.98-1.45x the one-thread wall time,
``benchmarks/bench_parts.py``). The frames of a
batch are independent until the loss, though, so :class:`BatchParts` cuts each batch into
``batch_parts`` runs of whole frames (:func:`nepcore.model.batch.frame_bounds`, about equal atoms)
and evaluates them on a pool of threads (torch releases the GIL in its kernels):

1. each part's energies, forces and virials, concurrently;
2. the error sums and the loss of the *whole* batch from the joined outputs (the per-batch
   energy shift stays the batch's), and the loss's gradient with respect to those outputs;
3. each part's backward from that gradient to the parameters, concurrently; the parts'
   gradients are added in part order.

The result is the whole batch's loss and gradient: the outputs of a frame are computed from the
same rows as in the whole batch, and only the order in which the parameter gradient is summed
differs (rounding). The cuts depend on the batch and the number of parts alone, so with a
number a stage is bit-identical at any thread count (``auto`` takes one part per thread, so the
same bits on the same thread count); one part is the unsplit step, to the bit.

Parts have a fixed cost each (their own kernel launches and Python work, which the GIL
serialises), so ``auto`` cuts a batch only into parts of at least :data:`MIN_PART_ATOMS` atoms
and evaluates a smaller batch whole, on one of torch's threads (its kernels are too small for
two).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

import torch

from nepcore.model.batch import Batch, frame_bounds, split_frames
from nepcore.training.config import MIN_PART_ATOMS  # auto's smallest part (measured there)
from nepcore.training.loss import SUM_KEYS, error_sums

T = TypeVar("T")
R = TypeVar("R")
#: The model outputs the loss reads, joined over the parts in frame order.
OUTPUTS = ("energy", "forces", "virial")


class BatchParts:
    """The parts a CPU minibatch is cut into and the threads that evaluate them.

    Args:
        parts: runs of whole frames per batch (a batch with fewer frames is cut into fewer).
        workers: threads evaluating parts at once (1 evaluates them one after the other, in
            the calling thread, with the same cuts and so the same numbers).
        min_part_atoms: a batch is cut into at most (its atoms // this) parts, so a batch of
            fewer than twice as many atoms stays whole (0: always ``parts``).
    """

    def __init__(self, parts: int, workers: int, min_part_atoms: int = 0) -> None:
        if parts < 1 or workers < 1 or min_part_atoms < 0:
            found = f"{parts}, {workers}, {min_part_atoms}"
            raise ValueError(f"parts and workers must be >= 1 and min_part_atoms >= 0, found {found}")
        self.parts, self.workers, self.min_part_atoms = parts, workers, min_part_atoms
        self._pool = None
        if workers > 1:
            # torch's intra-op thread count is per OS thread (OpenMP's setting): each worker sets
            # its own share, or every worker would start the full count and oversubscribe the cores
            share = max(1, torch.get_num_threads() // workers)
            self._pool = ThreadPoolExecutor(
                workers, thread_name_prefix="nepcore-part", initializer=torch.set_num_threads, initargs=(share,)
            )

    def split(self, batch: Batch) -> list[Batch]:
        """The parts of ``batch`` (the batch itself when it holds one frame, or too few atoms
        for two parts of ``min_part_atoms``)."""
        parts = self.parts if not self.min_part_atoms else min(self.parts, batch.n_atoms // self.min_part_atoms)
        if parts <= 1:
            return [batch]
        bounds = frame_bounds(batch.atoms_per_frame.tolist(), parts)
        return [batch] if len(bounds) == 2 else split_frames(batch, bounds)

    def map(self, work: Callable[[T], R], items: Sequence[T]) -> list[R]:
        """``[work(x) for x in items]``, on the pool's threads when there is more than one.

        Grad mode is per thread in torch, so the caller's is set in each worker.
        """
        if self._pool is None or len(items) == 1:
            return [work(x) for x in items]
        grad = torch.is_grad_enabled()

        def run(x: T) -> R:
            with torch.set_grad_enabled(grad):
                return work(x)

        return list(self._pool.map(run, items))

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None

    @contextlib.contextmanager
    def threads(self) -> Iterator[None]:
        """Torch's intra-op threads divided among the workers while the stage runs (restored
        after, and the pool shut down): two workers on two threads run their kernels on one
        thread each."""
        before = torch.get_num_threads()
        torch.set_num_threads(max(1, before // self.workers))
        try:
            yield
        finally:
            torch.set_num_threads(before)
            self.close()


def batch_parts_for(
    parts: int | str, device: torch.device, compiled: bool, processes: int, frames_per_batch: int | None = None
) -> tuple[BatchParts | None, str]:
    """The stage's :class:`BatchParts`, or None, and the reason (for the log and status.json).

    Args:
        parts: the ``batch_parts`` setting: a number, or "auto" (one part per torch thread).
        device: the training device (parts are for the CPU: a GPU kernel already fills the device).
        compiled: whether the step is compiled (its graph takes the whole batch).
        processes: the stage's torchrun processes (DDP reduces the gradient of one backward).
        frames_per_batch: the stage's batch size; a batch is cut into at most that many parts
            (one frame each), so no more workers are started, and the threads left over go to
            the workers' kernels.
    Returns:
        (runner, reason). The workers are min(parts, torch's threads); with fewer threads than
        parts the parts take turns, with the same cuts and so the same numbers.
    """
    threads = torch.get_num_threads()
    count = threads if parts == "auto" else int(parts)
    if frames_per_batch is not None:
        count = min(count, max(1, frames_per_batch))  # what frame_bounds would cut anyway
    said = f"{parts}: " if parts == "auto" else ""
    if device.type != "cpu":
        return None, "off: not a CPU stage"
    if compiled:
        return None, "off: the compiled step evaluates the batch as one graph"
    if processes > 1:
        return None, "off: a torchrun process (DDP reduces the gradient of one backward pass)"
    if count <= 1:
        if parts != "auto" and int(parts) <= 1:
            return None, "off: one part per batch"
        why = "one frame per batch" if frames_per_batch is not None and frames_per_batch < 2 else "one thread"
        return None, f"off: {said}one part per batch ({why})"
    workers = min(count, threads)
    plural = "s" * (workers > 1)
    if parts != "auto":
        return BatchParts(count, workers), f"{count} parts per batch on {workers} thread{plural}"
    return BatchParts(count, workers, MIN_PART_ATOMS), (
        f"{said}up to {count} parts per batch of at least {MIN_PART_ATOMS} atoms each, on {workers} "
        f"thread{plural} (a smaller batch whole, on one thread)"
    )


def joined_outputs(outputs: list[dict[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
    """The parts' energies (F,), forces (N, 3) and virials (F, 6) joined in frame order."""
    return {key: torch.cat([out[key] for out in outputs]) for key in OUTPUTS}


def part_gradients(
    evaluate: Callable[[Batch], dict[str, torch.Tensor]],
    runner: BatchParts,
    batch: Batch,
    objective: Callable[[torch.Tensor], torch.Tensor],
    params: list[torch.Tensor],
    weights,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The whole batch's objective and its gradient, the parts evaluated on ``runner``'s threads.

    Args:
        evaluate: a part's model outputs (``energy``, ``forces``, ``virial``), with the graph.
        runner: the parts and threads.
        batch: the whole minibatch (its labels are the loss's).
        objective: the scalar to differentiate, from the batch's stacked error sums
            (len(SUM_KEYS),), e.g. the λ-weighted data loss.
        params: the parameters; each one's gradient is *added* to its ``.grad`` (None counts
            as zero), as ``objective.backward()`` would.
        weights: the loss weights (force_delta and type_weight weight the force sum).
    Returns:
        (objective (), error sums (len(SUM_KEYS),)), both detached.
    """
    parts = runner.split(batch)
    outputs = runner.map(evaluate, parts)
    joined = joined_outputs(outputs)
    leaves = {key: value.detach().requires_grad_() for key, value in joined.items()}
    sums = error_sums(leaves, batch, weights)
    stacked = torch.stack([sums[k] for k in SUM_KEYS])
    value = objective(stacked)
    grads = torch.autograd.grad(value, [leaves[key] for key in OUTPUTS], allow_unused=True)
    # an output the objective does not read (its λ is 0) has no gradient: no backward through it
    upstream = {key: g for key, g in zip(OUTPUTS, grads) if g is not None}
    atom_ends, frame_ends = [0], [0]
    for part in parts:
        atom_ends.append(atom_ends[-1] + part.n_atoms)
        frame_ends.append(frame_ends[-1] + part.n_frames)

    def backward(k: int) -> tuple[torch.Tensor | None, ...]:
        frames, atoms = slice(frame_ends[k], frame_ends[k + 1]), slice(atom_ends[k], atom_ends[k + 1])
        rows = {"energy": frames, "forces": atoms, "virial": frames}
        keys = list(upstream)
        return torch.autograd.grad(
            [outputs[k][key] for key in keys], params, [upstream[key][rows[key]] for key in keys], allow_unused=True
        )

    part_grads = runner.map(backward, list(range(len(parts))))
    for i, p in enumerate(params):
        total = p.grad
        for grads in part_grads:
            if grads[i] is not None:
                total = grads[i] if total is None else total + grads[i]
        if total is not None and total.stride() != p.stride():
            # the gradient in the parameter's own layout, as autograd accumulates it (Adam's and
            # a later backward's additions run on matching strides)
            total = torch.empty_like(p).copy_(total)
        p.grad = total
    return value.detach(), stacked.detach()


__all__ = ["OUTPUTS", "BatchParts", "batch_parts_for", "joined_outputs", "part_gradients"]
