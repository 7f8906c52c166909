"""The autograd force path: forces and virials from ∂E/∂r_ij computed by autograd.

The energy is the analytical core's forward pass evaluated on pair vectors that are
autograd leaves; ``torch.autograd.grad`` gives g_ij = ∂E/∂r_ij, which is assembled into
forces and virials exactly as the analytical path does. With ``create_graph=True`` the
result stays differentiable in the parameters (double backward), which is what training
through this path needs. It serves as the independent check of the closed-form derivatives.
"""

from __future__ import annotations

import torch

from nepcore.model.batch import Batch
from nepcore.model.potential import CoreTables, assemble_forces_virials, evaluate, pair_vectors


def evaluate_autograd(
    params: dict[str, torch.Tensor],
    tables: CoreTables,
    batch: Batch,
    create_graph: bool = True,
    per_atom_virial: bool = False,
) -> dict[str, torch.Tensor]:
    """Same outputs as :func:`nepcore.model.potential.evaluate`, forces by autograd."""
    r_radial = pair_vectors(batch, "radial").detach().requires_grad_(True)
    r_angular = pair_vectors(batch, "angular").detach().requires_grad_(True)
    with torch.enable_grad():
        out = evaluate(params, tables, batch, compute_forces=False, r_radial=r_radial, r_angular=r_angular)
        g_radial, g_angular = torch.autograd.grad(out["energy"].sum(), (r_radial, r_angular), create_graph=create_graph)
    out.update(
        assemble_forces_virials(
            batch, r_radial.detach(), g_radial, r_angular.detach(), g_angular, tables, per_atom_virial
        )
    )
    return out


def _energy_forces(params: dict[str, torch.Tensor], tensors: dict[str, torch.Tensor], tables: CoreTables):
    """(frame energies, atom energies, forces, virials) with ∂E/∂r_ij by ``torch.func.vjp``.

    torch.func.vjp, not autograd.grad: make_fx records functorch's backward as ops that stay
    differentiable in the parameters (autograd.grad's saved outputs would be traced as
    detached constants).
    """
    batch = Batch(**tensors)
    r_radial, r_angular = pair_vectors(batch, "radial"), pair_vectors(batch, "angular")

    def energy(rr: torch.Tensor, ra: torch.Tensor):
        out = evaluate(params, tables, batch, compute_forces=False, r_radial=rr, r_angular=ra)
        return out["energy"].sum(), (out["energy"], out["atom_energy"])

    _, vjp_fn, (frame_energy, atom_energy) = torch.func.vjp(energy, r_radial, r_angular, has_aux=True)
    g_radial, g_angular = vjp_fn(torch.ones((), dtype=r_radial.dtype, device=r_radial.device))
    out = assemble_forces_virials(batch, r_radial, g_radial, r_angular, g_angular, tables)
    return frame_energy, atom_energy, out["forces"], out["virial"]


class TracedAutogradForces:
    """The autograd force path traced by ``make_fx`` into one plain FX graph.

    Tracing records the forward pass *and* the vjp that yields ∂E/∂r_ij as ordinary aten ops,
    so the double backward of training (loss on forces -> parameters) becomes a first-order
    backward through plain graph ops, and the graph can be handed to ``torch.compile``
    (nepcore.training.compiled_step does, with inductor). Shapes are traced symbolically, so
    one trace serves every batch size; the trace is made lazily on the first call.
    """

    def __init__(self, tables: CoreTables) -> None:
        self.tables = tables
        self.graph: torch.fx.GraphModule | None = None

    def trace(self, params: dict[str, torch.Tensor], tensors: dict[str, torch.Tensor]) -> torch.fx.GraphModule:
        """The graph (params, batch tensors) -> (energy (F,), atom_energy (N,), forces (N, 3), virial (F, 6))."""
        if self.graph is None:
            import torch.fx.experimental._config as fx_config
            from torch.fx.experimental.proxy_tensor import make_fx

            tables = self.tables
            # The tables are constants of the model, not inputs: allow them as real tensors.
            # Every size is a symbol here (even the 3 of a vector); equal sizes get their own.
            with fx_config.patch(use_duck_shape=False):
                self.graph = make_fx(
                    lambda p, t: _energy_forces(p, t, tables), tracing_mode="symbolic", _allow_non_fake_inputs=True
                )(params, tensors)
        return self.graph

    def __call__(self, params: dict[str, torch.Tensor], batch: Batch) -> dict[str, torch.Tensor]:
        from dataclasses import fields

        tensors = {f.name: getattr(batch, f.name) for f in fields(batch)}
        energy, atom_energy, forces, virial = self.trace(params, tensors)(params, tensors)
        return {"energy": energy, "atom_energy": atom_energy, "forces": forces, "virial": virial}
