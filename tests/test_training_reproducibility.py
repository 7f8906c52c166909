"""CPU training is bit-identical at any thread count: the deterministic-kernels context."""

from __future__ import annotations

import torch

from nepcore.training.reproducibility import deterministic_kernels


def _indexing_gradients(repeats: int) -> list[torch.Tensor]:
    """The gradient of ``x[idx]`` (an index_put_ accumulation in float32), several times."""
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(2000, generator=generator, requires_grad=True)
    index = torch.randint(0, 2000, (200_000,), generator=generator)
    upstream = torch.randn(200_000, generator=generator)
    grads = []
    for _ in range(repeats):
        x.grad = None
        x[index].backward(upstream)
        grads.append(x.grad.clone())
    return grads


def test_cpu_context_makes_indexing_backward_reproducible_on_two_threads() -> None:
    threads = torch.get_num_threads()
    torch.set_num_threads(2)  # the atomics path needs more than one thread
    try:
        with deterministic_kernels(torch.device("cpu")):
            assert torch.are_deterministic_algorithms_enabled()
            grads = _indexing_gradients(10)
        assert all(torch.equal(grads[0], g) for g in grads[1:])
        # the same sums as the serial order on one thread
        torch.set_num_threads(1)
        assert torch.equal(grads[0], _indexing_gradients(1)[0])
    finally:
        torch.set_num_threads(threads)
    assert not torch.are_deterministic_algorithms_enabled()  # restored after the stage


def test_cuda_devices_keep_the_fast_kernels() -> None:
    with deterministic_kernels(torch.device("cuda")):  # only the device type is looked at
        assert not torch.are_deterministic_algorithms_enabled()
