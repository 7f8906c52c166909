"""Parity with NEP_CPU on the published potentials and with GPUMD's own predictions."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from ase.build import bulk
from ase.io import read
from helpers.oracle import assert_matches_calorine
from helpers.reference_batch import collate, frame_from_atoms

from nepcore.model.nep_model import NEPModel

pytest.importorskip("calorine")


def _alloy(symbols: list[str], a: float, seed: int):
    atoms = bulk("Cu", "fcc", a=a, cubic=True) * (2, 2, 2)
    atoms.set_chemical_symbols([symbols[k % len(symbols)] for k in range(len(atoms))])
    atoms.rattle(0.15, seed=seed)
    atoms.set_cell(atoms.cell @ np.array([[1, 0.03, 0], [0, 1, 0.02], [0.01, 0, 1]]), scale_atoms=True)
    return atoms


PUBLISHED = {
    "UNEP-v1.txt": lambda: _alloy(["Pd", "Cu", "Ni", "Ag", "Au", "Pt"], 3.9, 1),
    "Si_2022_NEP4_3body.txt": lambda: _rattled(bulk("Si", "diamond", 5.43, cubic=True)),
    "Si_2022_NEP4_4body.txt": lambda: _rattled(bulk("Si", "diamond", 5.43, cubic=True)),
    "Si_2022_NEP4_5body.txt": lambda: _rattled(bulk("Si", "diamond", 5.43, cubic=True)),
    "C_2022_NEP4.txt": lambda: _rattled(bulk("C", "diamond", 3.57, cubic=True) * (2, 1, 1)),
}


def _rattled(atoms):
    atoms.rattle(0.1, seed=4)
    return atoms


@pytest.mark.parametrize("name", PUBLISHED)
def test_published_potentials_match_nep_cpu(shared_data, name):
    path = shared_data / "potentials" / name
    model = NEPModel.from_nep(path)
    assert_matches_calorine(model, path, PUBLISHED[name]())


@pytest.mark.parametrize("system", ["CrCoNi", "PdCuNiP"])
def test_gpumd_reference_files_match_nep_cpu(shared_data, system):
    path = shared_data / "gpumd-reference" / f"nep_{system}.txt"
    model = NEPModel.from_nep(path)
    for atoms in read(shared_data / "gpumd-reference" / f"{system}.xyz", ":")[:2]:
        assert_matches_calorine(model, path, atoms)


@pytest.mark.parametrize("system", ["CrCoNi", "PdCuNiP"])
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_matches_gpumd_predictions(shared_data, system, dtype):
    """GPUMD computes in float32: tolerances are its observed float32 agreement, x2
    (docs/model.md#numerical-agreement)."""
    ref = np.load(shared_data / "gpumd-reference" / f"{system}.gpumd.npz")
    model = NEPModel.from_nep(shared_data / "gpumd-reference" / f"nep_{system}.txt").to(dtype)
    frames = read(shared_data / "gpumd-reference" / f"{system}.xyz", ":")
    batch = collate([frame_from_atoms(a, model.spec, with_labels=False) for a in frames], dtype=dtype)
    out = {k: v.detach().double().numpy() for k, v in model(batch, return_descriptors=True).items()}
    n = np.array([len(a) for a in frames])
    np.testing.assert_allclose(out["energy"] / n, ref["E_per_atom"], rtol=0, atol=2e-5)
    force_error = np.abs(out["forces"] - ref["F"]) / (np.abs(ref["F"]) + 1.0)
    assert force_error.max() < 1e-4
    np.testing.assert_allclose(out["virial"] / n[:, None], ref["V_per_atom"], rtol=0, atol=1e-4)
    np.testing.assert_allclose(out["descriptors"], ref["D_per_atom"], rtol=0, atol=3e-5)
