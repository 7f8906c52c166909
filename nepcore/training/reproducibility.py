"""Bit-identical training on the CPU at any thread count: :func:`deterministic_kernels`."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch


@contextlib.contextmanager
def deterministic_kernels(device: torch.device) -> Iterator[None]:
    """Deterministic torch kernels while a CPU stage runs (the previous mode restored after).

    Why: the backward of advanced indexing (``x[idx]``) accumulates with ``index_put_``, which on
    the CPU with more than one thread adds float32 values with atomics when the batch is large
    enough, so the order of the additions, and the last digit of the result, changes from run to
    run. Since the seventeenth round the core gathers with ``index_select`` (backward:
    ``index_add_``) and no longer indexes a tensor that needs a gradient; the mode stays as the
    guard for any scatter that may come back (checked with it: 8 float32 steps give the same bits
    at 1 and 2 threads).
    The deterministic mode takes the serial path (no slower measured on 2 threads) and makes a
    stage, and a resumed one, bit-identical run to run at any thread count (for a given number
    of batch parts, nepcore.training.batch_parts: their cuts change the sums). On CUDA the mode
    would slow scatter kernels down, so GPU runs keep the fast, non-deterministic ones.
    """
    if device.type != "cpu":
        yield
        return
    before = torch.are_deterministic_algorithms_enabled()
    warn_only = torch.is_deterministic_algorithms_warn_only_enabled()
    torch.use_deterministic_algorithms(True, warn_only=True)
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(before, warn_only=warn_only)
