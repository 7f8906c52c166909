"""Angular invariants: the closed-form derivative against autograd, and the row-gather layout
against the plain last-dimension gather it replaced (the same bits, so models trained before
the change are reproduced exactly)."""

from __future__ import annotations

import pytest
import torch

from nepcore.model import invariants
from nepcore.model.invariants import angular_invariants, angular_invariants_backward, invariant_tables

ALL_FLAGS = (True, True, True, True, True, True)  # q222, q1111, q112, q123, q233, q134


def _s(n_atoms: int, n1: int, l_max: int, dtype: torch.dtype, seed: int) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    return torch.randn(n_atoms, n1, (l_max + 1) ** 2 - 1, dtype=dtype, generator=generator)


@pytest.mark.parametrize("flags", [ALL_FLAGS, (True, False, False, False, False, False), (False,) * 6])
def test_invariant_derivative_equals_autograd(flags):
    tab = invariant_tables(4, flags)
    s = _s(5, 3, 4, torch.float64, 0).requires_grad_(True)
    q = angular_invariants(s, tab)
    assert q.shape == (5, 3, 4 + sum(flags))
    dq = torch.randn(q.shape, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    (auto,) = torch.autograd.grad((q * dq).sum(), s)
    # the caller passes dq as a transposed view; the result must not depend on the layout
    dq_view = dq.transpose(1, 2).contiguous().transpose(1, 2)
    torch.testing.assert_close(angular_invariants_backward(s.detach(), dq_view, tab), auto, rtol=1e-13, atol=1e-13)


@pytest.mark.parametrize("flags", [ALL_FLAGS, (True, False, False, False, False, False)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_row_gather_gives_the_bits_of_the_last_dimension_gather(dtype, flags, monkeypatch):
    """Values, closed-form derivative and the training gradient through both (autograd, as
    loss.backward() forms it, with respect to s and to ∂E/∂q) are equal to the bit, not merely
    close. The reference is the module's own last-dimension form (the earlier versions' code,
    which traced graphs still use), forced in eager by patching :func:`_row_layout`."""
    tab = invariant_tables(4, flags)
    base = _s(300, 7, 4, dtype, 2)
    dq = torch.randn(300, 4 + tab.n_high, 7, dtype=dtype, generator=torch.Generator().manual_seed(3)).transpose(1, 2)
    weights = torch.randn(base.shape, dtype=dtype, generator=torch.Generator().manual_seed(4))
    results = []
    for rows in (True, False):
        monkeypatch.setattr(invariants, "_row_layout", lambda rows=rows: rows)
        s = base.clone().requires_grad_(True)
        dq_leaf = dq.detach().requires_grad_(True)  # in training dq depends on the parameters
        q = angular_invariants(s, tab)
        ds = angular_invariants_backward(s, dq_leaf, tab)
        grads = torch.autograd.grad((q * dq).sum() + (ds * weights).sum(), (s, dq_leaf))
        results.append((q.detach(), ds.detach(), *grads))
    for new, old in zip(*results):
        assert torch.equal(new, old)
