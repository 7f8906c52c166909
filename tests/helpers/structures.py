"""Small labelled structures and datasets made on the fly for the tests."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from ase import Atoms
from ase.build import bulk, fcc111
from ase.calculators.emt import EMT
from ase.calculators.singlepoint import SinglePointCalculator
from ase.io import write

from helpers.oracle import random_structure
from nepcore.data.convert import convert

#: A triclinic cell of about 7 Å: small enough for self-images at the test cutoffs.
TRICLINIC = np.array([[7.1, 0.0, 0.0], [1.9, 6.8, 0.0], [-1.2, 1.4, 7.4]])


def emt_labelled(atoms: Atoms, config_type: str = "") -> Atoms:
    """``atoms`` with EMT energy, forces (and stress when periodic) frozen in a
    SinglePointCalculator, and ``info["config_type"]`` when given."""
    atoms.calc = EMT()
    results = {"energy": atoms.get_potential_energy(), "forces": atoms.get_forces()}
    if atoms.pbc.all():
        results["stress"] = atoms.get_stress()
    atoms.calc = SinglePointCalculator(atoms, **results)
    if config_type:
        atoms.info["config_type"] = config_type
    return atoms


def write_labelled_dataset(root: Path) -> Path:
    """structures.h5 in ``root`` with 5 train, 2 valid and 3 test frames (8-atom Cu-Pd-Ni cells,
    labels "rattled", "strained" or none; the last test frame a 4-atom cluster without a virial),
    converted from train.xyz, valid.xyz and test.xyz written beside it."""
    rng = np.random.default_rng(7)
    frames = []
    for k in range(9):
        atoms = bulk("Cu", "fcc", a=3.6, cubic=True).repeat((2, 1, 1))
        atoms.symbols = rng.choice(["Cu", "Pd", "Ni"], size=len(atoms))
        strain = np.eye(3) + 0.02 * rng.normal(size=(3, 3))
        atoms.set_cell(atoms.cell.array @ (strain + strain.T) / 2, scale_atoms=True)
        atoms.positions += rng.normal(0.0, 0.08, size=atoms.positions.shape)
        frames.append(emt_labelled(atoms, ["rattled", "strained", ""][k % 3]))
    cluster = Atoms("CuPdNiCu", positions=[[0, 0, 0], [2.5, 0, 0], [0, 2.5, 0], [0, 0, 2.5]], pbc=False)
    cluster.positions += rng.normal(0.0, 0.05, size=(4, 3))
    frames.append(emt_labelled(cluster, "cluster"))
    for name, part in (("train", frames[:5]), ("valid", frames[5:7]), ("test", frames[7:])):
        write(root / f"{name}.xyz", part, format="extxyz")
    out = root / "structures.h5"
    convert([str(root / "train.xyz")], out, valid_files=[str(root / "valid.xyz")],
            test_files=[str(root / "test.xyz")], progress=False)  # fmt: skip
    return out


def parity_structures(
    symbols: list[str],
    *,
    lattice: float,
    n_triclinic: int,
    n_cluster: int,
    seeds: tuple[int, int, int],
    min_distance: float,
    small_cell_name: str = "small_cell",
) -> dict[str, Atoms]:
    """The three geometries an oracle comparison needs, with the atoms of ``symbols``.

    ``triclinic``: random atoms in TRICLINIC; ``small_cell`` (or ``small_cell_name``): a rattled
    fcc primitive cell of lattice constant ``lattice`` Å doubled along c, much thinner than the
    cutoff (many self-images); ``cluster``: random atoms in open space.

    Args:
        symbols: the element symbols, used in turn.
        lattice: fcc lattice constant of the small cell, Å.
        n_triclinic, n_cluster: atom counts.
        seeds: (triclinic, cluster, rattle of the small cell) seeds.
        min_distance: smallest distance of the random atoms, Å.
    """
    small = bulk("Cu", "fcc", a=lattice) * (1, 1, 2)
    small.set_chemical_symbols([symbols[k % len(symbols)] for k in range(len(small))])
    small.rattle(0.05, seed=seeds[2])
    return {
        "triclinic": random_structure(symbols, n_triclinic, TRICLINIC, seed=seeds[0], min_distance=min_distance),
        small_cell_name: small,
        "cluster": random_structure(symbols, n_cluster, None, seed=seeds[1], min_distance=min_distance),
    }


def labelled_bulk(n_frames: int, seed: int = 0) -> list[Atoms]:
    """Small rattled fcc Cu/Ni/Pd cells (8 atoms, some triclinic) with random E, F, stress."""
    rng = np.random.default_rng(seed)
    frames = []
    for k in range(n_frames):
        atoms = bulk("Cu", "fcc", a=3.6, cubic=True).repeat((2, 1, 1))
        atoms.numbers[rng.choice(8, 3, replace=False)] = rng.choice([28, 46], 3)
        if k % 3 == 2:  # a sheared, triclinic cell
            atoms.set_cell(atoms.cell.array + [[0, 0, 0], [0.4, 0, 0], [0.2, 0.3, 0]], scale_atoms=True)
        atoms.rattle(0.05, seed=seed * 1000 + k)
        atoms.calc = SinglePointCalculator(
            atoms,
            energy=float(rng.normal(-30, 1)),
            forces=rng.normal(size=(8, 3)),
            stress=rng.normal(scale=0.01, size=6),
        )
        atoms.info["config_type"] = f"bulk_{k % 2}"
        frames.append(atoms)
    return frames


def mixed_frames(seed: int = 0) -> list[Atoms]:
    """Periodic (cubic and triclinic), partly periodic and open frames of Pd/Cu/Ni with
    random labels; some frames lack forces or a virial."""
    rng = np.random.default_rng(seed)
    frames = []
    for k in range(9):
        if k % 4 == 3:
            atoms = fcc111("Cu", (2, 2, 2), a=3.6)
            atoms.info.clear()  # drop ase.build's adsorbate_info (not extxyz-writable)
            atoms.cell[2] = 0.0
            atoms.pbc = (True, True, False)
        elif k % 4 == 2:
            atoms = bulk("Cu", "fcc", a=3.6, cubic=True).repeat((2, 1, 1))
            atoms.positions += 20.0
            atoms.cell[:] = 0.0
            atoms.pbc = False
        else:
            atoms = bulk("Cu", "fcc", a=3.6 + 0.05 * k, cubic=True).repeat((2, 1, 1))
            if k % 2:
                atoms.set_cell(atoms.cell.array + [[0, 0, 0], [0.5, 0, 0], [0.3, 0.2, 0]], scale_atoms=True)
        atoms.numbers[rng.choice(len(atoms), 3, replace=False)] = rng.choice([28, 46], 3)
        atoms.rattle(0.05, seed=seed * 100 + k)
        n = len(atoms)
        labels = {"energy": float(rng.normal(-3 * n, 1))}
        if k != 5:
            labels["forces"] = rng.normal(size=(n, 3))
        atoms.calc = SinglePointCalculator(atoms, **labels)
        if all(atoms.pbc) and k != 4:
            atoms.info["virial"] = rng.normal(size=(3, 3))
        atoms.info["weight"] = 1.0 + k
        frames.append(atoms)
    return frames


def write_xyz(path: Path, frames) -> str:
    """``frames`` as extxyz at ``path``; returns the path as a string (a CLI argument)."""
    write(path, frames, format="extxyz")
    return str(path)
