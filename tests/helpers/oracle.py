"""The NEP_CPU (calorine) oracle: random models written with our writer, small random
structures, and our model's and calorine's energies, forces and virials on them."""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
from ase import Atoms

from helpers.reference_batch import collate, frame_from_atoms
from nepcore.geometry.virial import VIRIAL_INDEX
from nepcore.io.nep_txt import write_nep
from nepcore.model.nep_model import NEPModel, init_parameters
from nepcore.spec import ModelSpec


def random_params(spec: ModelSpec, seed: int = 0) -> dict[str, np.ndarray]:
    """Random parameters of realistic size, with a positive q_scaler (and a ZBL table)."""
    rng = np.random.default_rng(seed)
    params = init_parameters(spec.replace(zbl=None) if _flexible(spec) else spec, seed)
    params["b0"] = rng.normal(0.0, 0.5, size=params["b0"].shape)
    params["b1"] = np.asarray(rng.normal())
    params["q_scaler"] = rng.uniform(0.2, 2.0, size=spec.dim)
    if _flexible(spec):
        T = spec.n_types
        rows = []
        for _ in range(T * (T + 1) // 2):
            r_in = rng.uniform(0.8, 1.2)
            phi = np.array([0.18175, 3.1998, 0.50986, 0.94229, 0.28022, 0.4029, 0.02817, 0.20162])
            rows.append(np.concatenate([[r_in, r_in + rng.uniform(0.8, 1.5)], phi * rng.uniform(0.8, 1.2, 8)]))
        params["zbl_table"] = np.array(rows)
    return params


def _flexible(spec: ModelSpec) -> bool:
    return spec.zbl is not None and spec.zbl.kind == "flexible"


def random_structure(
    symbols: list[str], n_atoms: int, cell: np.ndarray | None, seed: int, min_distance: float = 1.0
) -> Atoms:
    """Random atoms in ``cell`` (periodic) or in a 6 Å cube (cluster, cell None), >= min_distance apart."""
    rng = np.random.default_rng(seed)
    positions: list[np.ndarray] = []
    box = np.eye(3) * 6.0 if cell is None else np.asarray(cell)
    while len(positions) < n_atoms:
        p = rng.uniform(0, 1, 3) @ box
        trial = Atoms("H" * (len(positions) + 1), positions=positions + [p], cell=box, pbc=cell is not None)
        others = range(len(positions))
        if not positions or trial.get_distances(len(positions), others, mic=cell is not None).min() > min_distance:
            positions.append(p)
    chem = [symbols[k % len(symbols)] for k in range(n_atoms)]
    rng.shuffle(chem)
    if cell is None:
        return Atoms(chem, positions=positions, pbc=False)
    return Atoms(chem, positions=positions, cell=cell, pbc=True)


def ours(model: NEPModel, atoms: Atoms, force_path: str = "analytical") -> dict[str, np.ndarray]:
    batch = collate([frame_from_atoms(atoms, model.spec, with_labels=False)], dtype=model.W0.dtype)
    out = model(batch, force_path=force_path, per_atom_virial=True, return_descriptors=force_path == "analytical")
    return {k: v.detach().cpu().numpy() for k, v in out.items()}


def calorine_reference(path: Path, atoms: Atoms) -> dict[str, np.ndarray]:
    """Energy (eV), forces (eV/Å), virial (6,) eV and scaled descriptors from NEP_CPU."""
    from calorine.calculators import CPUNEP
    from calorine.nep import get_descriptors

    a = atoms.copy()
    if not a.pbc.any():  # NEP_CPU needs a cell; 100 Å of vacuum has no images within any cutoff
        a.set_cell(np.eye(3) * 100.0)
        a.center()  # a translation: energies, forces and descriptors are unchanged
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        a.calc = CPUNEP(str(path))
        energy = a.get_potential_energy()
        forces = a.get_forces()
        W = -a.get_stress(voigt=False) * a.get_volume()
        descriptors = get_descriptors(a, str(path))
    return {
        "energy": energy,
        "forces": forces,
        "virial": np.array([W[r, c] for r, c in VIRIAL_INDEX]),
        "descriptors": descriptors,
    }


def assert_matches_calorine(model: NEPModel, path: Path, atoms: Atoms) -> None:
    """float64 parity: |ΔE| <= 1e-9 eV/atom, |ΔF| <= 1e-8 eV/Å, |ΔW| <= 1e-8 eV, |ΔD| <= 1e-10."""
    ref = calorine_reference(path, atoms)
    got = ours(model, atoms)
    n = len(atoms)
    np.testing.assert_allclose(got["energy"][0] / n, ref["energy"] / n, rtol=0, atol=1e-9)
    np.testing.assert_allclose(got["forces"], ref["forces"], rtol=0, atol=1e-8)
    np.testing.assert_allclose(got["virial"][0], ref["virial"], rtol=0, atol=1e-8)
    np.testing.assert_allclose(got["descriptors"], ref["descriptors"], rtol=0, atol=1e-10)


def model_and_file(spec: ModelSpec, tmp_path: Path, seed: int = 0, contraction: str = "auto") -> tuple[NEPModel, Path]:
    """A random model, written with our writer and read back (so both sides see the file)."""
    path = tmp_path / f"nep_{seed}.txt"
    write_nep(path, spec, random_params(spec, seed))
    return NEPModel.from_nep(path, contraction=contraction), path
