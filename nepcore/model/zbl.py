"""ZBL short-range repulsion of NEP4 (docs/model.md#zbl-repulsion), per ordered pair with its derivative.

    V(r) = K Z_I Z_J / r · φ(r / a) · fcZ(r),   1/a = 2.134563 (Z_I^0.23 + Z_J^0.23)
    φ(x) = Σ_p A_p exp(−B_p x)         (universal A, B or the flexible per-pair table)
    fcZ  = 1 below r_in, ½[1 + cos(π (r − r_in)/(r_out − r_in))] up to r_out, 0 beyond

Atom i carries ½ V(r_ij) per angular neighbour j. All per-type-pair constants are packed
into one (T, T, 12) table once per model, so evaluation is a gather plus elementwise math.
"""

from __future__ import annotations

import math

import torch

from nepcore.elements import COVALENT_RADIUS, atomic_number
from nepcore.spec import ModelSpec

K_COULOMB = 14.399645  # eV Å (GPUMD's constant)
INV_A_FACTOR = 2.134563  # 1/Å, = 1/0.46848
UNIVERSAL_PHI = (0.18175, 3.1998, 0.50986, 0.94229, 0.28022, 0.4029, 0.02817, 0.20162)


def zbl_pair_table(spec: ModelSpec, zbl_table: torch.Tensor | None = None) -> torch.Tensor:
    """(T, T, 12) float64: [K Z_I Z_J, 1/a, r_in, r_out, A1, B1, …, A4, B4] per ordered type pair.

    zbl_table: the flexible-ZBL parameter (T(T+1)/2, 10) = r_in, r_out, a1 … a8 per unordered
    pair, required when ``spec.zbl.kind == "flexible"``.
    """
    assert spec.zbl is not None
    T = spec.n_types
    Z = [atomic_number(s) for s in spec.elements]
    table = torch.zeros(T, T, 12, dtype=torch.float64)
    for I in range(T):
        for J in range(T):
            table[I, J, 0] = K_COULOMB * Z[I] * Z[J]
            table[I, J, 1] = INV_A_FACTOR * (Z[I] ** 0.23 + Z[J] ** 0.23)
            if spec.zbl.kind == "flexible":
                lo, hi = min(I, J), max(I, J)
                row = zbl_table[lo * T - lo * (lo - 1) // 2 + (hi - lo)].to(torch.float64)
                table[I, J, 2:4] = row[:2]
                table[I, J, 4:] = row[2:]
            else:
                r_in, r_out = spec.zbl.r_inner, spec.zbl.r_outer
                if spec.zbl.kind == "typewise":
                    rcov = COVALENT_RADIUS[Z[I] - 1] + COVALENT_RADIUS[Z[J] - 1]
                    r_in, r_out = 0.0, min(spec.zbl.typewise_factor * rcov, r_out)
                table[I, J, 2] = r_in
                table[I, J, 3] = r_out
                table[I, J, 4:] = torch.tensor(UNIVERSAL_PHI, dtype=torch.float64)
    return table


def zbl_pair_energy(r: torch.Tensor, pair_type: torch.Tensor, table: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """V(r) and dV/dr (eV, eV/Å) for distances r (n,) Å, flat pair types I·T + J (n,)."""
    p = table.reshape(-1, 12).index_select(0, pair_type)
    zz, inv_a, r_in, r_out = p[:, 0], p[:, 1], p[:, 2], p[:, 3]
    x = r * inv_a
    phi = torch.zeros_like(r)
    dphi = torch.zeros_like(r)
    for q in range(4):
        amp, rate = p[:, 4 + 2 * q], p[:, 5 + 2 * q]
        e = amp * torch.exp(-rate * x)
        phi = phi + e
        dphi = dphi - rate * e
    width = r_out - r_in
    arg = math.pi * (r - r_in) / width
    fc = torch.where(r < r_in, torch.ones_like(r), 0.5 * (1.0 + torch.cos(arg)))
    dfc = torch.where(r < r_in, torch.zeros_like(r), -0.5 * math.pi / width * torch.sin(arg))
    outside = r >= r_out
    fc = torch.where(outside, torch.zeros_like(r), fc)
    dfc = torch.where(outside, torch.zeros_like(r), dfc)
    inv_r = 1.0 / r
    v = zz * inv_r * phi * fc
    dv = zz * inv_r * (-inv_r * phi * fc + dphi * inv_a * fc + phi * dfc)
    return v, dv
