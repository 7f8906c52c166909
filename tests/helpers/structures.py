"""Small labelled structures and datasets made on the fly for the tests."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from ase import Atoms
from ase.build import bulk
from ase.calculators.emt import EMT
from ase.calculators.singlepoint import SinglePointCalculator
from ase.io import write

from nepcore.data.convert import convert


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
