"""Angular invariants of NEP4 from the per-atom s-sums, with closed-form derivatives.

For one atom and one n, ``s`` is the flat vector of docs/model.md#angular-descriptors (``(L+1)² − 1`` sums
Σ_j G_n(r_ij) Y_k(r̂_ij)). The descriptor blocks are

* 3-body, l = 1 … L:  q_l = Σ_{k in block l} w_k s_k²  (w = C3B(l,0), 2 C3B(l,m) for m > 0)
* higher order (q222, q1111, q112, q123, q233, q134): polynomials of degree 3 or 4 in s,
  each stored as a sparse list of monomials ``coefficient · s_a s_b s_c [s_d]``.

Both are evaluated branch-free: the 3-body part is one matmul of s², the higher-order part
gathers the monomials' factors (padded to 4 with a constant 1) and contracts their products
with a (monomial x block) coefficient matrix. The derivative ∂q/∂s uses the same tables
(leave-one-out products), so no autograd is needed on the force path. The factors are gathered
with one ``index_select`` of whole rows of s transposed to (n_s + 1, atoms·(nA+1)), laid out
factor-major (a, b, c and d each a block of M rows), and multiplied explicitly: 1.2-1.9x faster
on CPUs (the invariants, their closed-form derivative and the training backward through both,
650 atoms) than advanced indexing into an (…, M, 4) tensor and ``prod``, whose backwards are an
accumulating ``index_put`` and prod's general product rule; and the row gather made an L-BFGS
evaluation of PbTe's frames (6,250 atoms, one thread) 0.73-0.75 of its time with the same gather
along the last dimension (``benchmarks/bench_step.py --modes lbfgs``, README "How it works"), to
the same bits (tests/test_model_invariants.py).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

# C3B(l, m) for l = 1 … 8, m = 0 … l (GPUMD's C3B, one value per (l, m)).
C3B: dict[int, list[float]] = {
    1: [0.238732414637843, 0.119366207318922],
    2: [0.099471839432435, 0.596831036594608, 0.149207759148652],
    3: [0.139260575205408, 0.104445431404056, 1.044454314040563, 0.174075719006761],
    4: [0.011190581936149, 0.223811638722978, 0.111905819361489, 1.566681471060845, 0.195835183882606],
    5: [0.013677377921960, 0.102580334414698, 2.872249363611549, 0.119677056817148,
        2.154187022708661, 0.215418702270866],
    6: [0.004041043476943, 0.169723826031592, 0.106077391269745, 0.424309565078979,
        0.127292869523694, 2.800443129521260, 0.233370260793438],
    7: [0.004662742473395, 0.004079899664221, 0.024479397985326, 0.012239698992663,
        0.538546755677165, 0.134636688919291, 3.500553911901575, 0.250039565135827],
    8: [0.000082569397966, 0.005944996653579, 0.104037441437634, 0.762941237209318,
        0.114441185581398, 5.950941650232678, 0.141689086910302, 4.250672607309055,
        0.265667037956816],
}  # fmt: skip

# Higher-order invariants: {name: (constants, terms)}; a term is "sign c<i> a.b.c[.d]",
# meaning sign * constant[i] * s_a s_b s_c [s_d] (docs/model.md#higher-order-invariants; GPUMD's polynomials, expanded).
_C4B = [-0.007499480826664, -0.134990654879954, 0.067495327439977, 0.404971964639861, -0.809943929279723]
_C5B = [0.026596810706114, 0.053193621412227, 0.026596810706114]
_C4B2 = [0.027493550848847, 0.164961305093080, -0.013746775424423, 0.041240326273270, 0.082480652546540]
_C4B_123 = [-0.008418146349617, -0.016836292699234, -0.033672585398469, -0.042090731748086,
            -0.067345170796937, -0.084181463496172, -0.168362926992344]  # fmt: skip
_C4B_233 = [0.008572620635186, 0.009644198214584, 0.019288396429168, 0.025717861905558,
            0.026789439484956, 0.032147327381947, 0.038576792858337, 0.128589309527790,
            0.192883964291685, 0.321473273819474]  # fmt: skip
_C4B_134 = [0.003645164295772, 0.004860219061029, 0.006075273826286, 0.018225821478859,
            0.024301095305146, 0.036451642957719, 0.042526916784005, 0.072903285915437,
            0.085053833568010, 0.255161500704030]  # fmt: skip

HIGHER_ORDER: dict[str, tuple[list[float], str]] = {
    "q222": (_C4B, """+c0 3.3.3  +c1 3.4.4 +c1 3.5.5  +c2 3.6.6 +c2 3.7.7  +c3 6.5.5 -c3 6.4.4  +c4 4.5.7"""),
    "q1111": (_C5B, """+c0 0.0.0.0  +c1 0.0.1.1 +c1 0.0.2.2  +c2 1.1.1.1 +c2 2.2.2.2 +c2 1.1.2.2 +c2 1.1.2.2"""),
    "q112": (_C4B2, """+c0 0.0.3  +c1 0.1.4 +c1 0.2.5  +c2 3.1.1 +c2 3.2.2  +c3 6.1.1 -c3 6.2.2  +c4 1.2.7"""),
    "q123": (
        _C4B_123,
        """
        +c6 12.2.4 -c6 11.2.5 +c6 1.11.4 +c6 1.12.5
        +c5 0.11.6 +c5 0.12.7
        +c3 14.2.6 -c3 13.2.7 +c3 1.13.6 +c3 1.14.7
        +c4 10.0.5 +c4 0.4.9
        +c1 10.2.3 +c1 0.3.8 +c1 1.3.9
        +c0 10.2.6 -c0 10.1.7 -c0 2.7.9 -c0 1.6.9
        -c2 2.5.8 -c2 1.4.8""",
    ),
    "q233": (
        _C4B_233,
        """
        +c0 3.8.8
        +c1 3.9.9 +c1 3.10.10
        +c2 6.9.9 -c2 6.10.10
        +c3 4.8.9 +c3 5.8.10
        -c4 3.13.13 -c4 3.14.14
        -c5 7.9.14 -c5 6.9.13 -c5 6.10.14 +c5 7.10.13
        +c6 7.9.10
        -c7 8.6.11 -c7 8.7.12
        +c8 4.9.11 +c8 5.9.12 +c8 4.10.12 -c8 5.10.11
        +c9 4.12.14 +c9 5.11.14 +c9 4.11.13 -c9 5.12.13""",
    ),
    "q134": (
        _C4B_134,
        """
        -c0 15.2.10 -c0 15.1.9
        +c1 0.8.15
        -c2 1.13.18 -c2 1.14.19 -c2 2.14.18 +c2 2.13.19
        -c3 2.10.18 +c3 1.10.19 +c3 1.9.18 +c3 2.9.19
        +c4 8.1.16 +c4 8.2.17
        +c5 0.10.17 +c5 0.9.16 -c5 1.11.16 -c5 1.12.17 -c5 2.12.16 +c5 2.11.17
        +c6 1.13.22 +c6 1.14.23 -c6 2.14.22 +c6 2.13.23
        +c7 0.11.18 +c7 0.12.19
        +c8 0.13.20 +c8 0.14.21
        +c9 1.11.20 +c9 1.12.21 -c9 2.12.20 +c9 2.11.21""",
    ),
}


def _parse_terms(constants: list[float], text: str) -> list[tuple[float, tuple[int, ...]]]:
    terms = []
    for token_sign_const, token_idx in zip(text.split()[0::2], text.split()[1::2]):
        sign = -1.0 if token_sign_const[0] == "-" else 1.0
        value = constants[int(token_sign_const[2:])]
        terms.append((sign * value, tuple(int(a) for a in token_idx.split("."))))
    return terms


@dataclass
class InvariantTables:
    """Static tables for one (L, flags) choice; tensors on the CPU in float64.

    three_body_weight: (n_s, L) weight of s_k² in 3-body block l.
    factor_index: (4 M,) index into s extended by a constant 1 at index n_s of factor p of
        monomial m at p·M + m (degree-3 monomials take that 1 as their 4th factor).
    mono_block: (M, n_high) coefficient of each monomial in each higher-order block.
    """

    n_s: int
    n_three_body: int
    n_high: int
    three_body_weight: torch.Tensor
    factor_index: torch.Tensor
    mono_block: torch.Tensor


def invariant_tables(l_max: int, flags: tuple[bool, ...]) -> InvariantTables:
    from nepcore.spec import FLAG_NAMES

    n_s = (l_max + 1) ** 2 - 1
    w3 = torch.zeros(n_s, l_max, dtype=torch.float64)
    for l in range(1, l_max + 1):
        start = l * l - 1
        w3[start, l - 1] = C3B[l][0]
        for m in range(1, l + 1):
            w3[start + 2 * m - 1, l - 1] = 2.0 * C3B[l][m]
            w3[start + 2 * m, l - 1] = 2.0 * C3B[l][m]
    enabled = [name for name, on in zip(FLAG_NAMES, flags) if on]
    rows, coef = [], []
    for b, name in enumerate(enabled):
        for value, idx in _parse_terms(*HIGHER_ORDER[name]):
            rows.append(idx + (n_s,) * (4 - len(idx)))
            coef.append((b, value))
    factor_index = torch.tensor(rows, dtype=torch.long).reshape(-1, 4).t().flatten()
    mono_block = torch.zeros(len(rows), len(enabled), dtype=torch.float64)
    for m, (b, value) in enumerate(coef):
        mono_block[m, b] = value
    return InvariantTables(n_s, l_max, len(enabled), w3, factor_index, mono_block)


def _monomial_factors(s: torch.Tensor, tab: InvariantTables, rows: bool) -> tuple[torch.Tensor, ...]:
    """The four factors a, b, c, d of every monomial: each (M, N·(nA+1)) with ``rows``, else
    each (N, nA+1, M).

    rows: gather from s transposed to (n_s + 1, N·(nA+1)), copying whole rows. On CPUs an
    eager ``index_select`` along the last dimension of (N, nA+1, n_s + 1) costs 20x as much
    (6.5 ms against 0.3 ms for 4,000 atoms); the copy, the products and the backward's
    index_add give the same bits in either layout. Compiled graphs keep the last-dimension
    gather (:func:`_row_layout`).
    """
    if rows:
        flat = s.reshape(-1, s.shape[-1]).t()  # (n_s, N·(nA+1)), a view
        s_ext = torch.cat([flat, torch.ones_like(flat[:1])], dim=0)
        return s_ext.index_select(0, tab.factor_index).unflatten(0, (4, -1)).unbind(dim=0)
    s_ext = torch.cat([s, torch.ones_like(s[..., :1])], dim=-1)
    return s_ext.index_select(-1, tab.factor_index).unflatten(-1, (4, -1)).unbind(dim=-2)


def _row_layout() -> bool:
    """Whether the monomials are gathered as rows: in eager runs. Traced graphs (torch.compile,
    and make_fx for the autograd force path) keep the last-dimension form: inductor generates
    its own loop for the gather, and the row form's transposes made the compiled training step
    specialise on the atom count."""
    from torch.fx.experimental.proxy_tensor import get_proxy_mode

    return not torch.compiler.is_compiling() and get_proxy_mode() is None


def angular_invariants(s: torch.Tensor, tab: InvariantTables) -> torch.Tensor:
    """Angular descriptor blocks from s (N, nA+1, n_s) -> (N, nA+1, L + n_high)."""
    q3 = (s * s) @ tab.three_body_weight.to(s.dtype)
    if tab.n_high == 0:
        return q3
    rows = _row_layout()
    a, b, c, d = _monomial_factors(s, tab, rows)
    products = a * b * c * d
    if rows:
        products = products.t().contiguous().view(*s.shape[:-1], -1)  # (N, nA+1, M)
    q_high = products @ tab.mono_block.to(s.dtype)
    return torch.cat([q3, q_high], dim=-1)


def angular_invariants_backward(s: torch.Tensor, dq: torch.Tensor, tab: InvariantTables) -> torch.Tensor:
    """∂E/∂s (N, nA+1, n_s) from s and ∂E/∂q (N, nA+1, L + n_high), in closed form."""
    ds = 2.0 * s * (dq[..., : tab.n_three_body] @ tab.three_body_weight.to(s.dtype).T)
    if tab.n_high == 0:
        return ds
    rows = _row_layout()
    a, b, c, d = _monomial_factors(s, tab, rows)
    ab, cd = a * b, c * d
    weight = dq[..., tab.n_three_body :] @ tab.mono_block.to(s.dtype).T  # (N, n, M)
    if rows:
        weight = weight.reshape(-1, weight.shape[-1]).t()  # (M, N·n), as the factors
    # ∂(abcd)/∂ each factor, weighted, in factor_index's order (p·M + m), added back to its s_k
    terms = [weight * (b * cd), weight * (a * cd), weight * (ab * d), weight * (ab * c)]
    if rows:
        contrib = torch.cat(terms, dim=0)  # (4M, N·n)
        ds_ext = ds.new_zeros(tab.n_s + 1, contrib.shape[1]).index_add_(0, tab.factor_index, contrib)
        return ds + ds_ext[: tab.n_s].t().reshape(ds.shape)
    contrib = torch.cat(terms, dim=-1)
    ds_ext = ds.new_zeros(*ds.shape[:-1], tab.n_s + 1).index_add_(-1, tab.factor_index, contrib)
    return ds + ds_ext[..., : tab.n_s]
