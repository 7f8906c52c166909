"""The core is capturable as ONE graph; the autograd path traces into plain ops (make_fx)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from ase.build import bulk
from helpers import specs
from helpers.oracle import random_params
from helpers.reference_batch import collate, frame_from_atoms

from nepcore.model import potential as core
from nepcore.model.nep_model import NEPModel

SPEC = specs.COMPILE


def _batch(repeat: tuple[int, int, int], seed: int):
    frames = []
    for k in range(2):
        atoms = bulk("Cu", "fcc", 3.6, cubic=True) * repeat
        atoms.rattle(0.1, seed=seed + k)
        atoms.symbols[: 3 + k] = "Pd"
        frames.append(frame_from_atoms(atoms, SPEC, with_labels=False))
    return collate(frames)


@pytest.mark.parametrize("contraction", ["pair", "type", "dense"])
def test_analytical_core_is_one_graph(contraction):
    """fullgraph=True raises on any graph break (data-dependent control flow, .item(), ...)."""
    torch._dynamo.reset()
    model = NEPModel(SPEC, random_params(SPEC, 3), contraction=contraction)
    tables = model.tables(torch.device("cpu"), torch.float64)
    params = model.parameter_dict()

    def energy_forces(p, batch):
        return core.evaluate(p, tables, batch)

    compiled = torch.compile(energy_forces, fullgraph=True, backend="eager")
    batch = _batch((1, 1, 1), 0)
    got, ref = compiled(params, batch), energy_forces(params, batch)
    for key in ("energy", "forces", "virial"):
        torch.testing.assert_close(got[key], ref[key], rtol=0, atol=0)


def test_traced_autograd_path_matches_and_trains():
    model = NEPModel(SPEC, random_params(SPEC, 4))
    small, large = _batch((1, 1, 1), 0), _batch((2, 1, 1), 5)
    for batch in (small, large):  # one symbolic trace serves both sizes
        traced = model(batch, force_path="autograd-traced")
        eager = model(batch, force_path="analytical")
        for key in ("energy", "forces", "virial"):
            torch.testing.assert_close(traced[key], eager[key], rtol=1e-10, atol=1e-10)
    graph = next(iter(model._traced.values())).graph
    assert "autograd" not in str(graph.code)  # plain aten ops only
    model.zero_grad()
    (model(large, force_path="autograd-traced")["forces"] ** 2).sum().backward()
    traced_grad = model.W0.grad.clone()
    model.zero_grad()
    (model(large, force_path="analytical")["forces"] ** 2).sum().backward()
    np.testing.assert_allclose(traced_grad.numpy(), model.W0.grad.numpy(), rtol=1e-9, atol=1e-12)
