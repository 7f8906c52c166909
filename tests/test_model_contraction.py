"""The two forms of the per-pair contraction g_n = Σ_k c[n, k, I, J] f_k (nepcore.model.contraction):
the grouped layout's rows, and the grouped form against the gathered one in values and gradients."""

from __future__ import annotations

import pytest
import torch
from torch.fx.experimental.proxy_tensor import make_fx

from nepcore.model import contraction


def test_grouped_layout_rows_rank_pairs_in_list_order():
    # T = 2: type pairs 0..3; type pair 1 is the largest group (3 pairs), so rows = 3
    pair_type = torch.tensor([1, 3, 1, 0, 1, 3])
    row, rows = contraction.grouped_layout(pair_type, 4)
    assert rows == 3
    assert row.tolist() == [1 * 3 + 0, 3 * 3 + 0, 1 * 3 + 1, 0 * 3 + 0, 1 * 3 + 2, 3 * 3 + 1]


def test_grouped_layout_declines_heavy_padding_and_no_pairs(monkeypatch):
    # 9 type pairs, one group of 20 pairs among 22: 9 · 20 = 180 rows > 6 · 22
    dominated = torch.tensor([4] * 20 + [0, 8])
    assert contraction.grouped_layout(dominated, 9) is None
    monkeypatch.setattr(contraction, "GROUPED_PADDING", 180 / 22)
    assert contraction.grouped_layout(dominated, 9) is not None
    assert contraction.grouped_layout(torch.zeros(0, dtype=torch.long), 9) is None


def _gathered(c, pair_type, f):
    """The gathered form written out: c per pair, then Σ_k."""
    n1, k1, T, _ = c.shape
    c_pair = c.permute(2, 3, 0, 1).reshape(T * T, n1, k1)[pair_type]
    return torch.einsum("pnk,pk->pn", c_pair, f)


@pytest.mark.parametrize("n_types", [1, 2, 3, 5])
def test_grouped_form_equals_gathered_form_with_gradients(n_types):
    g = torch.Generator().manual_seed(n_types)
    n1, k1, Q = 4, 6, 300
    c = torch.randn(n1, k1, n_types, n_types, dtype=torch.float64, generator=g, requires_grad=True)
    weights = torch.tensor([3.0] + [1.0] * (n_types - 1))  # one type dominates
    types = torch.multinomial(weights, 2 * Q, replacement=True, generator=g)
    pair_type = types[:Q] * n_types + types[Q:]
    f = torch.randn(Q, k1, dtype=torch.float64, generator=g, requires_grad=True)
    df = torch.randn(Q, k1, dtype=torch.float64, generator=g)
    assert contraction.grouped_layout(pair_type, n_types**2) is not None  # the grouped form runs
    contract = contraction.pair_contraction(c, pair_type)
    got, got_d = contract(f), contract(df)
    ref, ref_d = _gathered(c, pair_type, f), _gathered(c, pair_type, df)
    torch.testing.assert_close(got, ref, rtol=1e-14, atol=1e-14)
    torch.testing.assert_close(got_d, ref_d, rtol=1e-14, atol=1e-14)
    weight = torch.randn(Q, n1, dtype=torch.float64, generator=g)
    grads = torch.autograd.grad(((got + got_d) * weight).sum(), (c, f))
    refs = torch.autograd.grad(((ref + ref_d) * weight).sum(), (c, f))
    for a, b in zip(grads, refs):
        torch.testing.assert_close(a, b, rtol=1e-13, atol=1e-13)


def test_traced_graphs_gather_without_reading_the_host():
    """make_fx traces the gathered form (no host read of the type pairs), on every batch size."""
    c = torch.randn(3, 4, 2, 2, dtype=torch.float64)
    pair_type = torch.tensor([0, 1, 2, 3, 1])
    f = torch.randn(5, 4, dtype=torch.float64)
    graph = make_fx(lambda c, p, f: contraction.pair_contraction(c, p)(f))(c, pair_type, f)
    assert not any(node.target == torch.ops.aten.bmm.default for node in graph.graph.nodes)
    torch.testing.assert_close(graph(c, pair_type, f), _gathered(c, pair_type, f), rtol=0, atol=1e-15)
