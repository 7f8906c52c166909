"""The analytical NEP4 core: one pure function (parameters, batch) -> energies, forces, virials.

Forces are closed-form: ∂E/∂q from the per-type networks, then ∂q/∂r_ij per pair through
the radial basis, the angular polynomials and the invariants (no autograd on this path), so
the whole evaluation is plain tensor algebra that ``torch.compile`` can capture as one graph
and that ``loss.backward()`` differentiates with respect to the parameters (the force term
included). There is no data-dependent Python control flow: no ``.item()``, no branches on
values; the per-type networks run for every atom and are selected with a one-hot mask.

Conventions (docs/model.md#forces-virial-and-stress): r_ij = r_j − r_i + shift @ cell; g_ij = ∂E/∂r_ij as the pair
enters atom i's descriptor (and i's half of ZBL); F_i = Σ_j g_ij − Σ_j g_ji;
W = −Σ r_ij ⊗ g_ij (eV, positive under compression); per-atom virial W_i = −Σ_j r_ij ⊗ g_ij.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from nepcore.geometry.neighbors import PairList
from nepcore.geometry.virial import VIRIAL_INDEX
from nepcore.model import contraction
from nepcore.model.basis import angular_index_tables, angular_polynomials, angular_polynomials_vjp, chebyshev_basis
from nepcore.model.batch import Batch
from nepcore.model.invariants import InvariantTables, angular_invariants, angular_invariants_backward, invariant_tables
from nepcore.model.zbl import zbl_pair_energy, zbl_pair_table
from nepcore.spec import ModelSpec


@dataclass
class CoreTables:
    """Static (non-trainable) constants of a model, on the evaluation device and dtype."""

    spec: ModelSpec
    rc_radial: torch.Tensor  # (T, T) pair cutoffs, Å
    rc_angular: torch.Tensor  # (T, T)
    angular: dict[str, torch.Tensor]
    invariants: InvariantTables
    zbl: torch.Tensor | None  # (T, T, 12) see zbl.zbl_pair_table
    backend_radial: str = "pair"  # type-pair contraction backends, see nepcore.model.contraction
    backend_angular: str = "pair"

    def to(self, device: torch.device | str, dtype: torch.dtype) -> CoreTables:
        def conv(t: torch.Tensor) -> torch.Tensor:
            return t.to(device=device, dtype=dtype if t.is_floating_point() else t.dtype)

        inv = self.invariants
        return CoreTables(
            spec=self.spec,
            rc_radial=conv(self.rc_radial),
            rc_angular=conv(self.rc_angular),
            angular={k: conv(v) for k, v in self.angular.items()},
            invariants=InvariantTables(
                inv.n_s,
                inv.n_three_body,
                inv.n_high,
                conv(inv.three_body_weight),
                conv(inv.factor_index),
                conv(inv.mono_block),
            ),
            zbl=None if self.zbl is None else conv(self.zbl),
            backend_radial=self.backend_radial,
            backend_angular=self.backend_angular,
        )


#: Atoms per Å³ used to estimate neighbour counts for the backend choice (dense metals ~0.08).
TYPICAL_DENSITY = 0.08


def build_tables(spec: ModelSpec, zbl_table: torch.Tensor | None = None, backend: str = "auto") -> CoreTables:
    """Constants of ``spec`` in float64 on the CPU (move them with :meth:`CoreTables.to`).

    backend: "auto" (= "dense"), "pair" or "type" (see nepcore.model.contraction). "auto" takes the
    radial backend from the architecture and a typical density only, never from data or
    timings, and the dense layout for the angular channel, so the choice (and so the
    rounding) is the same in every run. Within the dense layout the per-pair coefficient
    contraction's form (:func:`nepcore.model.contraction.pair_contraction`) follows from the
    batch's type pairs and device alone, so a given batch always rounds the same way.
    """
    if backend in ("auto", "dense"):
        volume = lambda rc: 4.0 / 3.0 * math.pi * rc**3
        n_r = TYPICAL_DENSITY * volume(spec.max_cutoff_radial)
        b_r = contraction.choose_backend("radial", n_r, spec.n_types, spec.n_max_radial, spec.basis_size_radial)
        # The dense angular layout was fastest in every case of benchmarks/bench_contraction.py
        # (1.2-2.9x over the other two, float32 and float64, 3 and 16 types).
        b_a = "dense"
    elif backend in contraction.BACKENDS:
        b_r = b_a = backend
    else:
        raise ValueError(f"backend must be auto, pair, type or dense, found {backend!r}")
    return CoreTables(
        spec=spec,
        rc_radial=torch.tensor(spec.pair_cutoffs("radial"), dtype=torch.float64),
        rc_angular=torch.tensor(spec.pair_cutoffs("angular"), dtype=torch.float64),
        angular=angular_index_tables(spec.l_max),
        invariants=invariant_tables(spec.l_max, spec.flags),
        zbl=None if spec.zbl is None else zbl_pair_table(spec, zbl_table),
        backend_radial=b_r,
        backend_angular=b_a,
    )


def pair_vectors(batch: Batch, channel: str) -> torch.Tensor:
    """r_ij = r_j − r_i + shift @ cell for the radial or angular pairs: (n_pairs, 3), Å."""
    i, j, shift = (getattr(batch, f"{channel}_{k}") for k in ("i", "j", "shift"))
    # Rows gathered with index_select (see contraction.pair_types); the cell term is three
    # broadcast products (shift_k · row k of the pair's cell) instead of a (P, 3, 3) gather
    # and a batched GEMM.
    cell = batch.cells.reshape(-1, 9).index_select(0, batch.atom_frame.index_select(0, i))  # (P, 9)
    offset = shift[:, 0:1] * cell[:, 0:3] + shift[:, 1:2] * cell[:, 3:6] + shift[:, 2:3] * cell[:, 6:9]
    return batch.positions.index_select(0, j) - batch.positions.index_select(0, i) + offset


def _network(params: dict[str, torch.Tensor], qh: torch.Tensor, onehot: torch.Tensor, with_grad: bool):
    """Per-type one-hidden-layer networks, branch-free: U (N,) and ∂U/∂q̂ (N, D) or None."""
    W0, b0, w1 = params["W0"], params["b0"], params["w1"]
    T, H, D = W0.shape
    W0_flat = W0.reshape(T * H, D)
    h = torch.tanh(qh @ W0_flat.T - b0.reshape(T * H)).reshape(-1, T, H)
    U = ((h * w1).sum(-1) * onehot).sum(-1) - params["b1"]
    if not with_grad:
        return U, None
    dh = (onehot[:, :, None] * w1 * (1.0 - h * h)).reshape(-1, T * H)
    return U, dh @ W0_flat


@dataclass
class PairGeometry:
    """The part of :func:`evaluate` that depends on the batch's geometry only, not on the
    parameters: the same for a frame in every epoch (nepcore.training.geometry_cache keeps it).

    Radial pairs (P): ``rv`` (P, 3) pair vectors, Å; ``r`` (P,) distances; ``pt`` (P,) flat type
    pairs (contraction.pair_types); ``f``, ``df`` (P, KR+1) Chebyshev basis and its derivative,
    1/Å (``df`` None without forces). Angular pairs (Q): ``av``, ``ra``, ``pta``, ``fa``, ``dfa``
    alike, and ``u`` (Q, 3) unit vectors. Rows follow the batch's pairs, so the pairs of one
    frame are one run of rows.
    """

    rv: torch.Tensor | None
    r: torch.Tensor | None
    pt: torch.Tensor | None
    f: torch.Tensor | None
    df: torch.Tensor | None
    av: torch.Tensor
    ra: torch.Tensor
    pta: torch.Tensor
    fa: torch.Tensor
    dfa: torch.Tensor | None
    u: torch.Tensor
    couples: RadialCouples | None = None

    #: fields over the radial pairs, then over the angular pairs
    RADIAL = ("rv", "r", "pt", "f", "df")
    ANGULAR = ("av", "ra", "pta", "fa", "dfa", "u")


@dataclass
class RadialCouples:
    """A batch's radial pairs with each pair (i, j, S) and its reverse (j, i, −S) taken once
    (Newton's third law), in place of the full list: the form the training step's geometry
    cache (nepcore.training.geometry_cache) hands :func:`evaluate` (``PairGeometry.couples``,
    whose radial fields are then None).

    A pair and its reverse have the same distance and basis to the bit, and g_ji = −g_ij in
    direction, so one kept pair carries ∂E/∂r from both centres' descriptors: its own row of
    ∂E/∂(type sums) and its reverse's. That halves the per-pair work of the forces and virials
    and their backward pass; the descriptors come from ``sums``, formed once per frame.

    sums: (N·T, KR+1) contraction.radial_type_sums over the full list (geometry only).
    i, j: (H,) atoms of each kept pair. row_ij: (H,) i·T + type_j. row_ji: (H,) j·T + type_i,
    or N·T (a zero row) for a pair the list holds one way only (``one_way``).
    rv (H, 3), r (H,), df (H, KR+1): the kept pairs' vectors, distances and basis derivatives.
    """

    sums: torch.Tensor
    i: torch.Tensor
    j: torch.Tensor
    row_ij: torch.Tensor
    row_ji: torch.Tensor
    rv: torch.Tensor
    r: torch.Tensor
    df: torch.Tensor
    one_way: bool


def radial_couples(tables: CoreTables, batch: Batch, geometry: PairGeometry) -> RadialCouples:
    """The :class:`RadialCouples` of ``batch`` from its full-list geometry (with ``df``).

    The first pair of each couple in list order is kept; a pair whose reverse is missing is
    kept alone. Matching reads the pair list to the host (nepcore.geometry.neighbors.PairList.reverse).
    """
    T, N = tables.spec.n_types, batch.positions.shape[0]
    i, j = batch.radial_i, batch.radial_j
    reverse = PairList(i.cpu().numpy(), j.cpu().numpy(), batch.radial_shift.cpu().numpy()).reverse()
    keep_np = (reverse < 0) | (reverse > np.arange(reverse.size))
    keep = torch.from_numpy(np.flatnonzero(keep_np)).to(i.device)
    one_way = torch.from_numpy(reverse[keep_np] < 0).to(i.device)
    ki, kj = i.index_select(0, keep), j.index_select(0, keep)
    types = batch.types
    row_ji = torch.where(one_way, N * T, kj * T + types.index_select(0, ki))
    sums = contraction.radial_type_sums(geometry.f, contraction.type_rows(i, geometry.pt, T), N, T)
    pick = lambda x: x.index_select(0, keep)
    return RadialCouples(
        sums, ki, kj, ki * T + types.index_select(0, kj), row_ji,
        pick(geometry.rv), pick(geometry.r), pick(geometry.df), bool(one_way.any()),
    )  # fmt: skip


def _couple_derivatives(couples: RadialCouples, d_sums: torch.Tensor) -> torch.Tensor:
    """∂E/∂r (H,) of each kept pair from ∂E/∂(type sums) (N·T, KR+1): its own term and its reverse's."""
    if couples.one_way:  # row N·T: the missing reverse adds nothing
        d_sums = torch.cat([d_sums, d_sums.new_zeros(1, d_sums.shape[1])])
    both = d_sums.index_select(0, couples.row_ij) + d_sums.index_select(0, couples.row_ji)
    return (both * couples.df).sum(1)


def pair_geometry(
    tables: CoreTables,
    batch: Batch,
    compute_forces: bool = True,
    r_radial: torch.Tensor | None = None,
    r_angular: torch.Tensor | None = None,
) -> PairGeometry:
    """The geometry of ``batch``'s pairs (see :class:`PairGeometry`; r_radial, r_angular as in
    :func:`evaluate`)."""
    spec = tables.spec
    T, types = spec.n_types, batch.types
    rv = pair_vectors(batch, "radial") if r_radial is None else r_radial
    r = torch.linalg.vector_norm(rv, dim=1)
    pt = contraction.pair_types(types, batch.radial_i, batch.radial_j, T)
    f, df = chebyshev_basis(r, tables.rc_radial.reshape(-1).index_select(0, pt), spec.basis_size_radial, compute_forces)
    av = pair_vectors(batch, "angular") if r_angular is None else r_angular
    ra = torch.linalg.vector_norm(av, dim=1)
    pta = contraction.pair_types(types, batch.angular_i, batch.angular_j, T)
    rc_a = tables.rc_angular.reshape(-1).index_select(0, pta)
    fa, dfa = chebyshev_basis(ra, rc_a, spec.basis_size_angular, compute_forces)
    return PairGeometry(rv, r, pt, f, df, av, ra, pta, fa, dfa, av / ra[:, None])


def evaluate(
    params: dict[str, torch.Tensor],
    tables: CoreTables,
    batch: Batch,
    compute_forces: bool = True,
    per_atom_virial: bool = False,
    return_descriptors: bool = False,
    r_radial: torch.Tensor | None = None,
    r_angular: torch.Tensor | None = None,
    geometry: PairGeometry | None = None,
) -> dict[str, torch.Tensor]:
    """Energies (and forces and virials) of every frame in ``batch``.

    params: see nepcore.spec (W0, b0, w1, b1, c_radial, c_angular, q_scaler).
    r_radial, r_angular: optional precomputed pair vectors (the autograd path passes leaves).
    geometry: the batch's :func:`pair_geometry`, computed before (with forces when
    compute_forces), or with :class:`RadialCouples` in place of the radial fields (the
    training step's geometry cache; not with per_atom_virial); None computes it here.
    Returns ``energy`` (F,) eV, ``atom_energy`` (N,) eV; with compute_forces also ``forces``
    (N, 3) eV/Å, ``virial`` (F, 6) eV (xx yy zz xy yz zx) and the pair gradients
    ``g_radial`` (P, 3; with couples (H, 3), both directions' terms), ``g_angular`` (Q, 3)
    eV/Å; ``atom_virial`` (N, 9) with per_atom_virial; ``descriptors`` (N, D) scaled
    (q · q_scaler) with return_descriptors.
    """
    spec = tables.spec
    T, nR, nA = spec.n_types, spec.n_max_radial, spec.n_max_angular
    L = spec.l_max
    types, N = batch.types, batch.positions.shape[0]
    dtype = batch.positions.dtype
    g = pair_geometry(tables, batch, compute_forces, r_radial, r_angular) if geometry is None else geometry

    # ---- radial descriptors -------------------------------------------------------------
    onehot = torch.nn.functional.one_hot(types, T).to(dtype)  # centre types: radial contraction, networks
    if g.couples is None:
        ri, rj, rv, r = batch.radial_i, batch.radial_j, g.rv, g.r
        c_radial = params["c_radial"]
        q_radial, ctx_r = contraction.radial_forward(tables.backend_radial, c_radial, g.f, ri, g.pt, onehot, N)
    else:
        if per_atom_virial:
            raise ValueError("per-atom virials need the full radial list (a geometry without couples)")
        ri, rj, rv, r = g.couples.i, g.couples.j, g.couples.rv, g.couples.r
        q_radial, ctx_r = contraction.radial_contract_sums(params["c_radial"], g.couples.sums, onehot)

    # ---- angular descriptors ------------------------------------------------------------
    ai, av, ra, pta, fa, dfa, u = batch.angular_i, g.av, g.ra, g.pta, g.fa, g.dfa, g.u
    Y, Y_ctx = angular_polynomials(u, L, tables.angular, with_gradient=compute_forces)
    s, ctx_a = contraction.angular_forward(
        tables.backend_angular, params["c_angular"], fa, Y, ai, pta, types, N,
        slot=batch.angular_slot, n_slots=batch.angular_slots.shape[0],
    )  # fmt: skip
    q_ang = angular_invariants(s, tables.invariants)  # (N, nA+1, num_L)
    n_blocks = q_ang.shape[2]
    q = torch.cat([q_radial, q_ang.transpose(1, 2).reshape(N, n_blocks * (nA + 1))], dim=1)

    # ---- networks and ZBL -----------------------------------------------------------------
    qh = q * params["q_scaler"]
    U, dU_dqh = _network(params, qh, onehot, with_grad=compute_forces)
    atom_energy = U
    if tables.zbl is not None:
        v, dv = zbl_pair_energy(ra, pta, tables.zbl)
        atom_energy = atom_energy + torch.zeros_like(U).index_add(0, ai, 0.5 * v)
    n_frames = batch.cells.shape[0]
    out = {
        "atom_energy": atom_energy,
        "energy": torch.zeros(n_frames, dtype=dtype, device=U.device).index_add(0, batch.atom_frame, atom_energy),
    }
    if return_descriptors:
        out["descriptors"] = qh
    if not compute_forces:
        return out

    # ---- closed-form pair gradients g_ij = ∂E/∂r_ij -------------------------------------
    dq = dU_dqh * params["q_scaler"]
    if g.couples is None:
        dE_dr_radial = contraction.radial_backward(tables.backend_radial, ctx_r, dq[:, : nR + 1], g.df, ri)
    else:
        dE_dr_radial = _couple_derivatives(g.couples, contraction.radial_sums_gradient(ctx_r, dq[:, : nR + 1]))
    g_radial = (dE_dr_radial / r)[:, None] * rv

    dq_ang = dq[:, nR + 1 :].reshape(N, n_blocks, nA + 1).transpose(1, 2)
    ds = angular_invariants_backward(s, dq_ang, tables.invariants)  # (N, nA+1, n_s)
    dE_dr, dE_dY = contraction.angular_backward(tables.backend_angular, ctx_a, ds, fa, dfa, Y, ai)
    grad_u = angular_polynomials_vjp(Y_ctx, tables.angular, dE_dY)
    tangential = (grad_u - u * (u * grad_u).sum(1, keepdim=True)) / ra[:, None]
    if tables.zbl is not None:
        dE_dr = dE_dr + 0.5 * dv
    g_angular = dE_dr[:, None] * u + tangential
    out.update(assemble_forces_virials(batch, rv, g_radial, av, g_angular, tables, per_atom_virial, (ri, rj)))
    return out


# _pair_virials forms the six entries by column products in this order
if VIRIAL_INDEX != ((0, 0), (1, 1), (2, 2), (0, 1), (1, 2), (2, 0)):
    raise ImportError("nepcore.model.potential._pair_virials assumes VIRIAL_INDEX = xx yy zz xy yz zx")


def _pair_virials(r: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
    """−r ⊗ g per pair in VIRIAL_INDEX order (xx yy zz xy yz zx): (P, 6), eV.

    Column products instead of gathering columns by index (r[:, rows]): the diagonal is r·g,
    and xy, yz, zx are r_x g_y, r_y g_z, r_z g_x, i.e. r times g rolled by one column.
    """
    return -torch.cat([r * g, r * g.roll(-1, dims=1)], dim=1)


def assemble_forces_virials(
    batch: Batch,
    r_radial: torch.Tensor,
    g_radial: torch.Tensor,
    r_angular: torch.Tensor,
    g_angular: torch.Tensor,
    tables: CoreTables,
    per_atom_virial: bool = False,
    radial_pairs: tuple[torch.Tensor, torch.Tensor] | None = None,
) -> dict[str, torch.Tensor]:
    """Forces (N, 3), frame virials (F, 6) [and per-atom virials (N, 9)] from pair gradients.

    radial_pairs: the atoms (i, j) of r_radial's pairs when they are not the batch's full
    radial list (:class:`RadialCouples`).
    """
    N, n_frames = batch.positions.shape[0], batch.cells.shape[0]
    ri, rj = (batch.radial_i, batch.radial_j) if radial_pairs is None else radial_pairs
    ai, aj = batch.angular_i, batch.angular_j
    forces = (
        torch.zeros_like(batch.positions)
        .index_add(0, ri, g_radial)
        .index_add(0, rj, -g_radial)
        .index_add(0, ai, g_angular)
        .index_add(0, aj, -g_angular)
    )
    w_radial = _pair_virials(r_radial, g_radial)  # (P, 6)
    w_angular = _pair_virials(r_angular, g_angular)
    frame = batch.atom_frame
    virial = (
        torch.zeros(n_frames, 6, dtype=forces.dtype, device=forces.device)
        .index_add(0, frame.index_select(0, ri), w_radial)
        .index_add(0, frame.index_select(0, ai), w_angular)
    )
    out = {"forces": forces, "virial": virial, "g_radial": g_radial, "g_angular": g_angular}
    if per_atom_virial:
        full_r = -(r_radial[:, :, None] * g_radial[:, None, :]).reshape(-1, 9)
        full_a = -(r_angular[:, :, None] * g_angular[:, None, :]).reshape(-1, 9)
        zeros = torch.zeros(N, 9, dtype=forces.dtype, device=forces.device)
        out["atom_virial"] = zeros.index_add(0, ri, full_r).index_add(0, ai, full_a)
    return out
