"""Radial Chebyshev basis and angular polynomials of NEP4, with closed-form derivatives.

Everything here is a pure function of tensors (no data-dependent Python control flow; loops
run over static sizes only), so ``torch.compile`` can capture it in one graph.

Radial (docs/model.md#radial-descriptors), for a pair distance r < rc (Å):
    fc(r)  = ½ [1 + cos(π r / rc)]
    x(r)   = 2 (r/rc − 1)² − 1
    f_k(r) = ½ [T_k(x) + 1] fc(r),   k = 0 … K

Angular (docs/model.md#angular-descriptors), for a unit vector u = (x, y, z): the real polynomials
    Y_{l,0} = P̃_l0(z),  Y_{l,m,c} = P̃_lm(z) Re (x+iy)^m,  Y_{l,m,s} = P̃_lm(z) Im (x+iy)^m
in GPUMD's flat order k(l,0) = l²−1, k(l,m,c) = l²+2m−2, k(l,m,s) = l²+2m−1.
"""

from __future__ import annotations

import math

import torch

#: P̃_lm(z) coefficients by power of z (GPUMD's Z_COEFFICIENT_l tables, row m), l = 1 … 8.
Z_COEFFICIENTS: dict[int, list[list[float]]] = {
    1: [[0, 1], [1]],
    2: [[-1, 0, 3], [0, 1], [1]],
    3: [[0, -3, 0, 5], [-1, 0, 5], [0, 1], [1]],
    4: [[3, 0, -30, 0, 35], [0, -3, 0, 7], [-1, 0, 7], [0, 1], [1]],
    5: [[0, 15, 0, -70, 0, 63], [1, 0, -14, 0, 21], [0, -1, 0, 3], [-1, 0, 9], [0, 1], [1]],
    6: [
        [-5, 0, 105, 0, -315, 0, 231],
        [0, 5, 0, -30, 0, 33],
        [1, 0, -18, 0, 33],
        [0, -3, 0, 11],
        [-1, 0, 11],
        [0, 1],
        [1],
    ],
    7: [
        [0, -35, 0, 315, 0, -693, 0, 429],
        [-5, 0, 135, 0, -495, 0, 429],
        [0, 15, 0, -110, 0, 143],
        [3, 0, -66, 0, 143],
        [0, -3, 0, 13],
        [-1, 0, 13],
        [0, 1],
        [1],
    ],
    8: [
        [35, 0, -1260, 0, 6930, 0, -12012, 0, 6435],
        [0, -35, 0, 385, 0, -1001, 0, 715],
        [-1, 0, 33, 0, -143, 0, 143],
        [0, 3, 0, -26, 0, 39],
        [1, 0, -26, 0, 65],
        [0, -1, 0, 5],
        [-1, 0, 15],
        [0, 1],
        [1],
    ],
}


def cutoff_function(r: torch.Tensor, rc: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """fc(r) and dfc/dr for distances r (n,) and cutoffs rc (n,), Å; zero at and beyond rc."""
    inside = r < rc
    arg = math.pi * r / rc
    fc = torch.where(inside, 0.5 * (1.0 + torch.cos(arg)), torch.zeros_like(r))
    dfc = torch.where(inside, -0.5 * math.pi / rc * torch.sin(arg), torch.zeros_like(r))
    return fc, dfc


def chebyshev_basis(
    r: torch.Tensor, rc: torch.Tensor, k_max: int, with_derivative: bool = True
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """f_k(r) and df_k/dr for k = 0 … k_max: two (n, k_max + 1) tensors (df in 1/Å).

    with_derivative=False (energies only) returns (f, None) and skips the U recurrence.
    """
    fc, dfc = cutoff_function(r, rc)
    t = r / rc - 1.0
    x = 2.0 * t * t - 1.0
    two_x = 2.0 * x
    half_fc = 0.5 * fc
    # T_k by the three-term recurrence, and dT_k/dx = k U_{k-1} with the Chebyshev polynomials
    # of the second kind (same recurrence, U_1 = 2x). Every operation runs on contiguous (n,)
    # vectors and the k_max+1 columns are stacked once at the end: on CPUs an elementwise op
    # that broadcasts an (n, 1) factor over the columns, or a recurrence on stacked (2, n)
    # rows, costs several times a contiguous pass (1.3x faster than that form on 50,000 pairs,
    # the same bits).
    T = [torch.ones_like(r), x]
    for _ in range(2, k_max + 1):
        T.append(two_x * T[-1] - T[-2])
    T1 = [Tk + 1.0 for Tk in T[: k_max + 1]]
    f = torch.stack([T1k * half_fc for T1k in T1], dim=1)
    if not with_derivative:
        return f, None
    dx = 4.0 * t / rc
    half_dfc, half_dx_fc = 0.5 * dfc, 0.5 * dx * fc
    U_prev = [torch.zeros_like(r), torch.ones_like(r), two_x]  # U_{k-1}: U_{-1} = 0, U_0 = 1, U_1 = 2x
    for _ in range(3, k_max + 1):
        U_prev.append(two_x * U_prev[-1] - U_prev[-2])
    df = torch.stack([torch.addcmul(T1[k] * half_dfc, U_prev[k], half_dx_fc * k) for k in range(k_max + 1)], dim=1)
    return f, df


def angular_index_tables(l_max: int) -> dict[str, torch.Tensor]:
    """Static index/coefficient tables for :func:`angular_polynomials` (CPU, float64).

    Returns ``zcoef`` ((l_max+1), n_lm) mapping z powers to P̃_lm, ``dzcoef`` its z derivative,
    and for each flat component k: ``lm`` (column of P̃), ``trig`` (column of [Re, Im] of
    (x+iy)^m), ``degree_l`` (its l).
    """
    columns = [(l, m) for l in range(1, l_max + 1) for m in range(l + 1)]
    zcoef = torch.zeros(l_max + 1, len(columns), dtype=torch.float64)
    for c, (l, m) in enumerate(columns):
        for p, value in enumerate(Z_COEFFICIENTS[l][m]):
            zcoef[p, c] = value
    dzcoef = zcoef[1:] * torch.arange(1, l_max + 1, dtype=torch.float64)[:, None]
    lm, trig, degree_l = [], [], []
    for l in range(1, l_max + 1):
        for m in range(l + 1):
            col = columns.index((l, m))
            parts = [m] if m == 0 else [m, l_max + 1 + m]  # cos (Re) then sin (Im)
            for part in parts:
                lm.append(col)
                trig.append(part)
                degree_l.append(l)
    # Column gathers as GEMMs with 0/1 (or ±m) selection matrices: a (n, 10) @ (10, 24) GEMM
    # is several times faster on CPUs than advanced indexing along dim 1, and exact (one
    # non-zero term per output). Re/Im columns: Re_m at m, Im_m at l_max + 1 + m.
    n_k, L1 = len(lm), l_max + 1
    trig_sel = torch.zeros(2 * L1, n_k, dtype=torch.float64)
    trig_sel[torch.tensor(trig), torch.arange(n_k)] = 1.0
    # with prev = [0, Re_0 … Re_{L-1}, 0, Im_0 … Im_{L-1}] (column m holds index m - 1):
    # d Re_m/dx = m Re_{m-1}, d Re_m/dy = -m Im_{m-1}, d Im_m/dx = m Im_{m-1}, d Im_m/dy = m Re_{m-1}
    dx_sel = torch.zeros(2 * L1, n_k, dtype=torch.float64)
    dy_sel = torch.zeros(2 * L1, n_k, dtype=torch.float64)
    for k, col in enumerate(trig):
        m, is_im = (col, False) if col < L1 else (col - L1, True)
        dx_sel[L1 * is_im + m, k] = m
        dy_sel[L1 * (not is_im) + m, k] = m if is_im else -m
    return {
        "zcoef": zcoef,
        "dzcoef": dzcoef,
        "lm": torch.tensor(lm),
        "trig": torch.tensor(trig),
        "degree_l": torch.tensor(degree_l),
        "zcoef_sel": zcoef[:, lm].contiguous(),
        "dzcoef_sel": dzcoef[:, lm].contiguous(),
        "trig_sel": trig_sel,
        # the x and y selections side by side and transposed, so the gradient takes one GEMM for both
        "dxy_sel_t": torch.cat([dx_sel, dy_sel], dim=0).T.contiguous(),
    }


def angular_polynomials(
    u: torch.Tensor, l_max: int, tables: dict[str, torch.Tensor], with_gradient: bool = True
) -> tuple[torch.Tensor, tuple | None]:
    """Y_k(u) for unit vectors u (n, 3): (n, (l_max+1)² − 1); and a context for
    :func:`angular_polynomials_vjp` (None without gradient).

    The gradient is the plain partial derivative of the polynomial in (x, y, z); the chain
    rule through u = r/|r| (projection onto the tangent plane) is applied by the caller.
    """
    x, y, z = u[:, 0:1], u[:, 1:2], u[:, 2:3]
    n = u.shape[0]
    zpow = torch.cat([torch.ones_like(z), z.expand(n, l_max)], dim=1).cumprod(dim=1)  # z^0 … z^L
    P = zpow @ tables["zcoef_sel"].to(u.dtype)  # P̃_lm(z) of each component
    # Re/Im of (x + i y)^m by recurrence, m = 0 … l_max
    re, im = [torch.ones_like(x)], [torch.zeros_like(x)]
    for _ in range(l_max):
        re_prev, im_prev = re[-1], im[-1]
        re.append(x * re_prev - y * im_prev)
        im.append(x * im_prev + y * re_prev)
    trig = torch.cat(re + im, dim=1)  # (n, 2 (l_max + 1))
    C = trig @ tables["trig_sel"].to(u.dtype)  # Re or Im (x+iy)^m of each component
    Y = P * C
    if not with_gradient:
        return Y, None
    zero = torch.zeros_like(x)
    prev = torch.cat([zero, trig[:, :l_max], zero, trig[:, l_max + 1 : 2 * l_max + 1]], dim=1)
    return Y, (zpow, P, C, prev)


def angular_polynomials_vjp(ctx: tuple, tables: dict[str, torch.Tensor], dE_dY: torch.Tensor) -> torch.Tensor:
    """Σ_k ∂E/∂Y_k ∂Y_k/∂(x, y, z): (n, 3), without forming the (n, 3, n_k) Jacobian.

    ∂Y_k/∂x = P_k (prev @ dx_sel)_k, so Σ_k a_k ∂Y_k/∂x = Σ_c prev_c ((a·P) @ dx_selᵀ)_c, and
    alike for y; for z, Σ_k a_k C_k P'_k = Σ_p z^p ((a·C) @ dzcoef_selᵀ)_p.
    """
    zpow, P, C, prev = ctx
    aP, aC = dE_dY * P, dE_dY * C
    dtype = dE_dY.dtype
    dxy = aP @ tables["dxy_sel_t"].to(dtype)  # (n, 2 · 2(l_max+1)): the x columns, then the y ones
    n_prev = prev.shape[1]
    gx = (prev * dxy[:, :n_prev]).sum(1)
    gy = (prev * dxy[:, n_prev:]).sum(1)
    gz = (zpow[:, :-1] * (aC @ tables["dzcoef_sel"].to(dtype).T)).sum(1)
    return torch.stack([gx, gy, gz], dim=1)
