"""Type-pair contraction backends: how the coefficients c[n][k][I][J] meet the pair basis.

The radial descriptor q_n(i) = Σ_j Σ_k c[n,k,I,J] f_k(r_ij) and the angular s-sums
s_{n,k'}(i) = Σ_j Σ_k c[n,k,I,J] f_k(r_ij) Y_k'(r̂_ij) can be contracted in two orders:

* ``"pair"``: gather c per pair, form g_n(r_ij) per pair, then sum over pairs.
  Cost ∝ pairs · (n+1)(k+1).
* ``"type"``: first sum the basis over the neighbours of each type J (one scatter into
  (atoms · T) rows), then contract with c per atom. Cost ∝ pairs · (k+1) + atoms · T (k+1)(n+1).
  (The radial channel does the per-atom step as one GEMM for every centre type and keeps the
  atom's own type by a mask: T times the multiplications, but a GEMM's speed.)

* ``"dense"`` (angular only; the default): g_n(r_ij) per pair as in ``"pair"``, but the
  neighbours of each atom are laid out in a dense (atoms, slots) block so that the sum over
  neighbours, s = Σ_j g ⊗ Y, and its two backward products are batched GEMMs (``bmm``)
  instead of (pairs, n+1, n_s) outer products followed by a scatter and a gather. Those
  intermediates dominate the other two backends on CPUs; the dense blocks are only
  atoms · slots · (n+1 + n_s). The slot of each pair and the slot count come with the batch
  (computed on the host at collate time), so there is no host sync and the layout is a
  static shape for torch.compile.

In the dense backend, the per-pair g_n (and its derivative's g'_n) come from one of two
equal forms, chosen per batch from the batch alone (:func:`pair_contraction`): eager runs on
the CPU group the pairs by type pair, padded to the largest group, and multiply each group by
its (k+1, n+1) block of c as one batched GEMM; traced graphs (torch.compile, make_fx), CUDA
and batches whose padding would be more than :data:`GROUPED_PADDING` times the pairs gather c
per pair and form the (pairs, n+1, k+1) broadcast product.

All give the same numbers up to rounding. For the radial channel :func:`choose_backend`
picks the cheaper of "pair" and "type" from the sizes alone; the angular channel uses
"dense" by default (fastest in every case of benchmarks/bench_contraction.py). Both rules
are deterministic, so runs and resumes are bit-reproducible.
Each backend has a forward (descriptor) and a backward (per-pair derivative) function;
all are branch-free tensor algebra.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch

BACKENDS = ("pair", "type")


def choose_backend(channel: str, n_pairs_per_atom: float, n_types: int, n_max: int, basis: int, n_s: int = 1) -> str:
    """The backend with the smaller operation count for one channel ("radial"/"angular")."""
    n1, k1 = n_max + 1, basis + 1
    if channel == "radial":
        pair = n_pairs_per_atom * n1 * k1 * 2
        typed = n_pairs_per_atom * k1 * 2 + n_types * k1 * n1 * 2
    else:
        pair = n_pairs_per_atom * (n1 * k1 * 2 + n1 * n_s * 4)
        typed = n_pairs_per_atom * k1 * n_s * 4 + n_types * k1 * n1 * n_s * 2
    return "type" if typed < pair else "pair"


def pair_types(types: torch.Tensor, i: torch.Tensor, j: torch.Tensor, n_types: int) -> torch.Tensor:
    """Flat type-pair index I·T + J of each pair (i, j): (P,), int64.

    Row gathers here and in nepcore.model.potential use index_select rather than x[idx]:
    on CPUs it is several times faster, and its backward is an index_add instead of an
    accumulating index_put.
    """
    return types.index_select(0, i) * n_types + types.index_select(0, j)


def _pair_coefficients(c: torch.Tensor, pair_type: torch.Tensor) -> torch.Tensor:
    """c[n][k][I][J] gathered per pair: (n_pairs, n+1, k+1)."""
    n1, k1, T, _ = c.shape
    return c.permute(2, 3, 0, 1).reshape(T * T, n1 * k1).index_select(0, pair_type).view(-1, n1, k1)


def _atom_coefficients(c: torch.Tensor, types: torch.Tensor) -> torch.Tensor:
    """c[n][k][I][J] gathered per centre atom as (N, T·(k+1), n+1), rows ordered (J, k)."""
    n1, k1, T, _ = c.shape
    return c.permute(2, 3, 1, 0).reshape(T, T * k1 * n1).index_select(0, types).view(-1, T * k1, n1)


def _all_centre_coefficients(c: torch.Tensor) -> torch.Tensor:
    """c[n][k][I][J] as one (T·(k+1), T·(n+1)) matrix, rows ordered (J, k), columns (I, n).

    The radial "type" backend multiplies every atom's per-type basis sums by this matrix (one
    GEMM, every centre type at once) and keeps its own type's columns (by the one-hot of the
    centre types), rather than gathering an (N, T·(k+1), n+1) block of coefficients per atom:
    that block made the contraction and its backward products batched GEMMs with an inner size
    of 1 or n+1. With backward and double backward, 481 atoms, one thread: 1.4-4.5 ms before,
    0.3-0.9 ms after, for T = 2-8.
    """
    n1, k1, T, _ = c.shape
    return c.permute(3, 1, 2, 0).reshape(T * k1, T * n1)


#: The grouped form of :func:`pair_contraction` is used while the padded layout holds at most
#: this many times as many rows as there are pairs (a batch dominated by one type pair pads the
#: others to its size). Its time over the gathered form's, for 10,000 pairs, g and g' and their
#: backward to c, the layout included, one thread (``benchmarks/bench_contraction.py --pairs``):
#: 0.33-0.44 padded by 1.0-1.2 (T = 1-8 types of equal shares), 0.66 by 1.4 (T = 16), 0.44 by
#: 2.6, 0.61 by 4.0, 0.74 by 5.2, 1.4 by 8.0 and 2.3 by 11.7 (one type four times as common).
#: In default stage-1 runs a bound of 3 was no faster than 6 on sweep_k2, k4 or k8 (README).
GROUPED_PADDING = 6.0


def grouped_layout(pair_type: torch.Tensor, n_pair_types: int) -> tuple[torch.Tensor, int] | None:
    """Each pair's row in a layout grouped by type pair: row p·rows + (rank of the pair among
    the pairs of type pair p, in list order), and ``rows``, the largest group's size.

    Computed on the host (pair_type on the CPU, outside traced graphs); a stable radix sort
    of the type pairs, ~0.1 ms for 10,000 pairs.

    Args:
        pair_type: (P,) int64 flat type pair of each pair (:func:`pair_types`).
        n_pair_types: T².
    Returns:
        (row (P,) int64, rows), or None when the padded layout (T² · rows) would exceed
        :data:`GROUPED_PADDING` times the pairs, or there are no pairs.
    """
    p = pair_type.numpy()
    counts = np.bincount(p, minlength=n_pair_types)
    rows = int(counts.max(initial=0))
    if rows == 0 or n_pair_types * rows > GROUPED_PADDING * p.size:
        return None
    key = p.astype(np.int16 if n_pair_types <= np.iinfo(np.int16).max else np.int32)
    order = np.argsort(key, kind="stable")  # radix sort for small integer keys
    start = np.cumsum(counts) - counts
    rank = np.empty_like(p)
    rank[order] = np.arange(p.size) - start[p[order]]
    return torch.from_numpy(p * rows + rank), rows


def pair_contraction(c: torch.Tensor, pair_type: torch.Tensor) -> Callable[[torch.Tensor], torch.Tensor]:
    """g_n = Σ_k c[n, k, I, J] f_k per pair of type pair (I, J), as a function of f (P, k+1) -> (P, n+1).

    Two forms with the same numbers up to rounding (module docstring): grouped by type pair
    (eager CPU runs, :func:`grouped_layout`) or c gathered per pair (:func:`_contract_pairs`).
    The returned function is called for the basis and again for its derivative, sharing the
    layout or the gathered coefficients.
    """
    n1, k1, T, _ = c.shape
    layout = None
    if pair_type.device.type == "cpu" and not _traced():
        layout = grouped_layout(pair_type, T * T)
    if layout is None:
        c_pair = _pair_coefficients(c, pair_type)
        return lambda f: _contract_pairs(c_pair, f)
    row, rows = layout
    c_typed = c.permute(2, 3, 1, 0).reshape(T * T, k1, n1)  # block (k+1, n+1) per type pair

    def grouped(f: torch.Tensor) -> torch.Tensor:
        padded = f.new_zeros(T * T * rows, k1).index_copy(0, row, f).view(T * T, rows, k1)
        return torch.bmm(padded, c_typed).view(T * T * rows, n1).index_select(0, row)

    return grouped


def _traced() -> bool:
    """Whether this runs inside torch.compile's or make_fx's tracing (no host reads there)."""
    from torch.fx.experimental.proxy_tensor import get_proxy_mode

    return torch.compiler.is_compiling() or get_proxy_mode() is not None


def _contract_pairs(c_pair: torch.Tensor, f: torch.Tensor) -> torch.Tensor:
    """g_n = Σ_k c_pair[:, n, k] f[:, k] per pair: (P, n+1).

    A broadcast product and a sum, not einsum: einsum runs this as a batched GEMM of
    (n+1) x (k+1) matrices, and its backward (the gradient of c_pair) as a batched GEMM with
    an inner size of 1, which on CPUs took ~6 ms per 14,000 angular pairs against well under
    1 ms for the broadcast product that autograd forms here.
    """
    return (c_pair * f[:, None, :]).sum(2)


# ---- radial -----------------------------------------------------------------------------
def radial_forward(backend: str, c, f, i, pair_type, centre_onehot, n_atoms):
    """q_radial (N, n+1) and the context for :func:`radial_backward`.

    pair_type: each pair's flat type pair I·T + J (:func:`pair_types`, formed once by the caller).
    centre_onehot: (N, T) one-hot of the atoms' types, in f's dtype (the caller's, which the
    networks use too).
    """
    T = c.shape[2]
    if backend == "pair":
        c_pair = _pair_coefficients(c, pair_type)
        g = _contract_pairs(c_pair, f)
        q = torch.zeros(n_atoms, c.shape[0], dtype=f.dtype, device=f.device).index_add(0, i, g)
        return q, (c_pair,)
    row = type_rows(i, pair_type, T)
    q, ctx = radial_contract_sums(c, radial_type_sums(f, row, n_atoms, T), centre_onehot)
    return q, (row, *ctx)


def radial_backward(backend: str, ctx, dq, df, i):
    """∂E/∂r per radial pair (P,) from ∂E/∂q_radial (N, n+1) and df_k/dr (P, k+1)."""
    if backend == "pair":
        (c_pair,) = ctx
        return (dq.index_select(0, i) * _contract_pairs(c_pair, df)).sum(1)
    row, c_all, centre = ctx
    return (radial_sums_gradient((c_all, centre), dq).index_select(0, row) * df).sum(1)


def type_rows(i: torch.Tensor, pair_type: torch.Tensor, n_types: int) -> torch.Tensor:
    """Row i·T + J of each pair (i, j) in the "type" backend's per-atom, per-type sums: (P,)."""
    return i * n_types + pair_type.remainder(n_types)


def radial_type_sums(f: torch.Tensor, row: torch.Tensor, n_atoms: int, n_types: int) -> torch.Tensor:
    """Σ_{j of type J} f_k(r_ij) per atom i and type J: (N·T, k+1), row i·T + J (:func:`type_rows`).

    Geometry only (no parameter), so nepcore.training.geometry_cache keeps it per frame; each
    row adds its pairs in list order, so a frame's rows have the same bits alone or in a batch.
    """
    return torch.zeros(n_atoms * n_types, f.shape[1], dtype=f.dtype, device=f.device).index_add(0, row, f)


def radial_contract_sums(c: torch.Tensor, sums: torch.Tensor, centre_onehot: torch.Tensor):
    """q_radial (N, n+1) from :func:`radial_type_sums` and the context for :func:`radial_sums_gradient`."""
    n_atoms, T = centre_onehot.shape
    c_all = _all_centre_coefficients(c)
    q = ((sums.reshape(n_atoms, -1) @ c_all).view(n_atoms, T, -1) * centre_onehot[:, :, None]).sum(1)
    return q, (c_all, centre_onehot)


def radial_sums_gradient(ctx, dq: torch.Tensor) -> torch.Tensor:
    """∂E/∂(radial_type_sums) (N·T, k+1) from ∂E/∂q_radial (N, n+1): row i·T + J holds
    Σ_n ∂E/∂q_n(i) c[n, k, type_i, J]."""
    c_all, centre = ctx
    n_atoms, T = centre.shape
    dq_typed = (dq[:, None, :] * centre[:, :, None]).view(n_atoms, -1)  # (N, T·(n+1)), zero off its type
    return (dq_typed @ c_all.t()).reshape(n_atoms * T, -1)


# ---- angular ----------------------------------------------------------------------------
def _to_dense(x: torch.Tensor, row: torch.Tensor, n_atoms: int, M: int) -> torch.Tensor:
    out = x.new_zeros(n_atoms * M, x.shape[1]).index_copy(0, row, x)
    return out.view(n_atoms, M, x.shape[1])


def angular_forward(backend: str, c, f, Y, i, pair_type, types, n_atoms, slot=None, n_slots: int = 1):
    """s-sums (N, n+1, n_s) and the context for :func:`angular_backward`.

    pair_type: each pair's flat type pair I·T + J (:func:`pair_types`, formed once by the caller).
    slot, n_slots: each pair's slot in its atom's list and the slot count (dense backend;
    from the batch, so the layout is a static shape, not a value read from the device).
    """
    T, n1, n_s = c.shape[2], c.shape[0], Y.shape[1]
    if backend == "dense":
        # g_n(r_am) per pair, then s = Σ_m g ⊗ Y over each atom's slots as one batched GEMM
        M, row = n_slots, i * n_slots + slot
        contract = pair_contraction(c, pair_type)
        Gd = _to_dense(contract(f), row, n_atoms, M)
        Yd = _to_dense(Y, row, n_atoms, M)
        return torch.bmm(Gd.transpose(1, 2), Yd), (M, row, Gd, Yd, contract)
    if backend == "pair":
        c_pair = _pair_coefficients(c, pair_type)
        G = _contract_pairs(c_pair, f)
        s = torch.zeros(n_atoms, n1, n_s, dtype=f.dtype, device=f.device)
        s = s.index_add(0, i, G[:, :, None] * Y[:, None, :])
        return s, (c_pair, G)
    row = type_rows(i, pair_type, T)
    acc = torch.zeros(n_atoms * T, f.shape[1], n_s, dtype=f.dtype, device=f.device)
    acc = acc.index_add(0, row, f[:, :, None] * Y[:, None, :])
    c_atom = _atom_coefficients(c, types)
    s = torch.einsum("nmo,nms->nos", c_atom, acc.reshape(n_atoms, -1, n_s))
    return s, (row, c_atom)


def angular_backward(backend: str, ctx, ds, f, df, Y, i):
    """(∂E/∂r along r̂ (Q,), ∂E/∂Y (Q, n_s)) per angular pair from ∂E/∂s (N, n+1, n_s)."""
    if backend == "dense":
        M, row, Gd, Yd, contract = ctx
        n_atoms = ds.shape[0]
        dE_dG = torch.bmm(Yd, ds.transpose(1, 2)).view(n_atoms * M, -1).index_select(0, row)  # (Q, n+1)
        dE_dY = torch.bmm(Gd, ds).view(n_atoms * M, -1).index_select(0, row)  # (Q, n_s)
        return (dE_dG * contract(df)).sum(1), dE_dY
    if backend == "pair":
        c_pair, G = ctx
        ds_pair = ds.index_select(0, i)  # (Q, n+1, n_s)
        dG = _contract_pairs(c_pair, df)
        along = ((ds_pair * Y[:, None, :]).sum(2) * dG).sum(1)
        return along, (ds_pair * G[:, :, None]).sum(1)
    row, c_atom = ctx
    k1, n_s = f.shape[1], Y.shape[1]
    d_acc = torch.einsum("nmo,nos->nms", c_atom, ds).reshape(-1, k1, n_s).index_select(0, row)  # (Q, k+1, n_s)
    along = ((d_acc * Y[:, None, :]).sum(2) * df).sum(1)
    return along, (d_acc * f[:, :, None]).sum(1)
