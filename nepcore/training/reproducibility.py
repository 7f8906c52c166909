"""Bit-identical training on the CPU at any thread count: :func:`deterministic_kernels`."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch


@contextlib.contextmanager
def deterministic_kernels(device: torch.device) -> Iterator[None]:
    """Deterministic torch kernels while a CPU stage runs (the previous mode restored after).

    Why: the backward of advanced indexing (``x[idx]``; in the core, since the core's row
    gathers use ``index_select``, the higher-order invariants' monomial gathers) accumulates
    with ``index_put_``, which on the CPU with more than one thread adds float32 values with
    atomics when the batch is large enough, so the order of the additions, and the last digit
    of the result, changes from run to run.
    The deterministic mode takes the serial path (no slower measured on 2 threads) and makes a
    stage, and a resumed one, bit-identical run to run at any thread count. On CUDA the mode
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
