"""The autograd force path: forces and virials from ∂E/∂r_ij computed by autograd.

The energy is the analytical core's forward pass evaluated on pair vectors that are
autograd leaves; ``torch.autograd.grad`` gives g_ij = ∂E/∂r_ij, which is assembled into
forces and virials exactly as the analytical path does. With ``create_graph=True`` the
result stays differentiable in the parameters (double backward), which is what training
through this path needs. It serves as the independent check of the closed-form derivatives.
"""

from __future__ import annotations

import torch

from .batch import Batch
from .core import CoreTables, assemble_forces_virials, evaluate, pair_vectors


def evaluate_autograd(
    params: dict[str, torch.Tensor],
    tables: CoreTables,
    batch: Batch,
    create_graph: bool = True,
    per_atom_virial: bool = False,
) -> dict[str, torch.Tensor]:
    """Same outputs as :func:`nepcore.core.evaluate`, forces by autograd."""
    r_radial = pair_vectors(batch, "radial").detach().requires_grad_(True)
    r_angular = pair_vectors(batch, "angular").detach().requires_grad_(True)
    with torch.enable_grad():
        out = evaluate(params, tables, batch, compute_forces=False, r_radial=r_radial, r_angular=r_angular)
        g_radial, g_angular = torch.autograd.grad(
            out["energy"].sum(), (r_radial, r_angular), create_graph=create_graph
        )
    out.update(
        assemble_forces_virials(batch, r_radial.detach(), g_radial, r_angular.detach(), g_angular, tables, per_atom_virial)
    )
    return out
