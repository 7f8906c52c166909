"""Closed-form derivatives of the radial basis and the angular polynomials against autograd."""

from __future__ import annotations

import pytest
import torch

from nepcore.model.basis import angular_index_tables, angular_polynomials, angular_polynomials_vjp, chebyshev_basis


@pytest.mark.parametrize("k_max", [0, 1, 2, 8, 16])
def test_chebyshev_derivative_equals_autograd(k_max):
    r = torch.linspace(0.3, 6.2, 64, dtype=torch.float64).requires_grad_(True)  # some beyond rc
    rc = torch.full_like(r, 6.0)
    f, df = chebyshev_basis(r, rc, k_max)
    assert f.shape == (64, k_max + 1)
    auto = torch.stack([torch.autograd.grad(f[:, k].sum(), r, retain_graph=True)[0] for k in range(k_max + 1)], 1)
    torch.testing.assert_close(df, auto, rtol=0, atol=1e-13)
    assert torch.all(f[r.detach() >= 6.0] == 0) and torch.all(df[r.detach() >= 6.0] == 0)
    f_only, none = chebyshev_basis(r, rc, k_max, with_derivative=False)
    assert none is None and torch.equal(f_only, f)


@pytest.mark.parametrize("l_max", [1, 4, 8])
def test_angular_vjp_equals_autograd(l_max):
    generator = torch.Generator().manual_seed(l_max)
    u = torch.randn(40, 3, dtype=torch.float64, generator=generator)
    u = (u / u.norm(dim=1, keepdim=True)).requires_grad_(True)
    tables = angular_index_tables(l_max)
    Y, ctx = angular_polynomials(u, l_max, tables)
    weights = torch.randn(Y.shape, dtype=torch.float64, generator=generator)
    (auto,) = torch.autograd.grad((Y * weights).sum(), u)
    # l = 8 polynomials reach ~1e4, so compare relative to the magnitude (agreement is ~1e-14)
    torch.testing.assert_close(angular_polynomials_vjp(ctx, tables, weights), auto, rtol=1e-12, atol=1e-12)
    assert Y.shape == (40, (l_max + 1) ** 2 - 1)
