"""Closed-form forces and virials against autograd and finite differences; symmetries."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from helpers import specs
from helpers.oracle import ours, random_params, random_structure
from scipy.spatial.transform import Rotation

from nepcore.model.nep_model import NEPModel

SPEC = specs.ALL_TERMS
CELL = np.array([[6.9, 0.0, 0.0], [1.3, 6.6, 0.0], [-0.7, 0.9, 7.2]])


@pytest.fixture(scope="module")
def model() -> NEPModel:
    return NEPModel(SPEC, random_params(SPEC, seed=11))


@pytest.fixture(scope="module")
def atoms():
    a = random_structure(["Cu", "Pd", "Ni"], 12, CELL, seed=5, min_distance=1.5)
    a.set_cell(a.cell * 0.9, scale_atoms=True)  # some pairs inside the ZBL range
    return a


def test_analytical_equals_autograd(model, atoms):
    a, b = ours(model, atoms, "analytical"), ours(model, atoms, "autograd")
    for key in ("energy", "forces", "virial", "atom_virial"):
        scale = np.abs(b[key]).max()
        np.testing.assert_allclose(a[key], b[key], rtol=0, atol=1e-10 * scale, err_msg=key)


def test_forces_are_minus_energy_gradient(model, atoms):
    out = ours(model, atoms)
    h, rng = 1e-5, np.random.default_rng(0)
    for atom in rng.choice(len(atoms), 4, replace=False):
        for d in range(3):
            plus, minus = atoms.copy(), atoms.copy()
            plus.positions[atom, d] += h
            minus.positions[atom, d] -= h
            fd = -(ours(model, plus)["energy"][0] - ours(model, minus)["energy"][0]) / (2 * h)
            assert abs(fd - out["forces"][atom, d]) < 1e-6 * (1 + abs(fd))


def test_virial_is_minus_strain_derivative(model, atoms):
    """W_ab = -dE/dε_ab at ε = 0 (homogeneous deformation of cell and positions)."""
    out = ours(model, atoms)
    h = 1e-6
    for k, (a, b) in enumerate([(0, 0), (1, 1), (2, 2), (0, 1), (1, 2), (2, 0)]):
        energies = []
        for sign in (1, -1):
            strain = np.eye(3)
            strain[a, b] += sign * h
            deformed = atoms.copy()
            deformed.set_cell(atoms.cell.array @ strain, scale_atoms=False)
            deformed.positions = atoms.positions @ strain
            energies.append(ours(model, deformed)["energy"][0])
        fd = -(energies[0] - energies[1]) / (2 * h)
        assert abs(fd - out["virial"][0, k]) < 1e-5 * (1 + abs(fd)), k


def test_invariances(model, atoms):
    ref = ours(model, atoms)
    moved = atoms.copy()
    moved.positions += np.array([0.37, -1.2, 2.9])
    rotation = Rotation.from_euler("xyz", [0.3, -1.1, 2.0]).as_matrix()
    rotated = atoms.copy()
    rotated.set_cell(atoms.cell.array @ rotation.T, scale_atoms=False)
    rotated.positions = atoms.positions @ rotation.T
    perm = np.arange(len(atoms))
    same = [k for k, s in enumerate(atoms.get_chemical_symbols()) if s == "Cu"]
    perm[same] = same[::-1]
    permuted = atoms[perm]
    for other in (moved, rotated, permuted):
        assert abs(ours(model, other)["energy"][0] - ref["energy"][0]) < 1e-10 * abs(ref["energy"][0])
    np.testing.assert_allclose(ours(model, rotated)["forces"], ref["forces"] @ rotation.T, atol=1e-10)
    np.testing.assert_allclose(ours(model, permuted)["forces"], ref["forces"][perm], atol=1e-10)


def test_parameter_gradients_flow_through_forces(model, atoms):
    """loss.backward() reaches every trainable parameter through the analytical force term."""
    from helpers.reference_batch import collate, frame_from_atoms

    batch = collate([frame_from_atoms(atoms, SPEC, with_labels=False)])
    grads = {}
    for path in ("analytical", "autograd"):
        model.zero_grad()
        out = model(batch, force_path=path)
        (out["forces"] ** 2).sum().backward()
        grads[path] = {k: p.grad for k, p in model.named_parameters() if k != "b1"}
    # b1 does not enter the forces (its .grad stays None); every other parameter does
    for name, g in grads["analytical"].items():
        assert g is not None and g.abs().max() > 0, name
        torch.testing.assert_close(g, grads["autograd"][name], rtol=1e-9, atol=1e-12)
