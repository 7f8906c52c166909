"""The built-in demo dataset: small labelled Cu-Pd-Ni alloy frames from ASE's EMT calculator.

With no data configured, the workflow's ``demo_data`` rule calls :func:`write_demo_dataset`
(through ``nepcore demo-data``) so that a fresh clone trains end to end in minutes on a CPU.

Every frame is a random fcc alloy of the three elements with a composition drawn per frame,
a lattice constant from Vegard's law and one of four kinds of perturbation, recorded in
``atoms.info["config_type"]``:

==============  =======================================================================
config_type     what
==============  =======================================================================
``rattled``     equilibrium lattice, every atom displaced by Gaussian noise (0.03-0.15 Å)
``strained``    random symmetric strain (up to ±4 % per component) plus a small rattle
``vacancy``     one atom removed from a rattled, slightly strained cell
``md``          snapshots of a short NVE run started at 300-1500 K (VelocityVerlet, 2 fs)
==============  =======================================================================

Cells are the 8-atom primitive-fcc 2x2x2 supercell (triclinic), the 27-atom 3x3x3 one, or the
32-atom cubic 2x2x2 one. Labels are EMT's: energy (eV), forces (eV/Å) and stress (eV/Å^3, ASE's
sign convention, stress = (1/V) dE/dstrain), stored through a ``SinglePointCalculator`` so
``ase.io.write(..., format="extxyz")`` writes them as ``energy``, ``forces`` and ``stress``.

Everything is drawn from one ``numpy.random.Generator`` seeded by ``seed``, so the same
``(seed, n_frames)`` gives byte-identical files.
"""

from __future__ import annotations

import os

import numpy as np
from ase import Atoms
from ase.build import bulk
from ase.calculators.emt import EMT
from ase.calculators.singlepoint import SinglePointCalculator
from ase.md.verlet import VelocityVerlet
from ase.units import fs, kB

from nepcore._utils import atomic_path
from nepcore.errors import SettingError

#: Elements of the demo alloy, in the type order the default config uses.
DEMO_ELEMENTS: tuple[str, ...] = ("Cu", "Pd", "Ni")
#: EMT-ish fcc lattice constants (Å) for Vegard's law.
LATTICE_CONSTANTS: dict[str, float] = {"Cu": 3.61, "Pd": 3.89, "Ni": 3.52}
#: Fraction of frames of each kind (the rest of the rounding goes to ``md``).
KIND_FRACTIONS: dict[str, float] = {"rattled": 0.25, "strained": 0.25, "vacancy": 0.1, "md": 0.4}
#: MD snapshots taken per trajectory and the steps between them.
MD_SNAPSHOTS = 3
MD_STRIDE = 8


def _random_cell(rng: np.random.Generator, elements: tuple[str, ...]) -> Atoms:
    """A random fcc alloy cell (8, 27 or 32 atoms) at its Vegard lattice constant."""
    shape = int(rng.integers(3))
    composition = rng.dirichlet(np.ones(len(elements)))
    a = float(sum(x * LATTICE_CONSTANTS[e] for x, e in zip(composition, elements)))
    if shape == 0:
        atoms = bulk("Cu", "fcc", a=a).repeat((2, 2, 2))
    elif shape == 1:
        atoms = bulk("Cu", "fcc", a=a).repeat((3, 3, 3))
    else:
        atoms = bulk("Cu", "fcc", a=a, cubic=True).repeat((2, 2, 2))
    symbols = rng.choice(np.array(elements), size=len(atoms), p=composition)
    atoms.set_chemical_symbols(list(symbols))
    return atoms


def _strain(atoms: Atoms, rng: np.random.Generator, amplitude: float) -> None:
    """Apply a random symmetric strain (each component uniform in ±amplitude), in place."""
    eps = rng.uniform(-amplitude, amplitude, size=(3, 3))
    eps = 0.5 * (eps + eps.T)
    atoms.set_cell(atoms.cell.array @ (np.eye(3) + eps), scale_atoms=True)


def _rattle(atoms: Atoms, rng: np.random.Generator, sigma: float) -> None:
    """Displace every atom by Gaussian noise of standard deviation ``sigma`` (Å), in place."""
    atoms.positions += rng.normal(scale=sigma, size=atoms.positions.shape)


def _label(atoms: Atoms, config_type: str) -> Atoms:
    """A copy of ``atoms`` with EMT energy, forces and stress frozen in a SinglePointCalculator."""
    atoms = atoms.copy()
    atoms.calc = EMT()
    energy = atoms.get_potential_energy()
    forces = atoms.get_forces()
    stress = atoms.get_stress(voigt=False)
    atoms.calc = SinglePointCalculator(atoms, energy=energy, forces=forces, stress=stress)
    atoms.info["config_type"] = config_type
    return atoms


def _frame_counts(n_frames: int) -> dict[str, int]:
    """How many frames of each kind make up ``n_frames`` (``md`` takes the remainder)."""
    counts = {k: int(n_frames * f) for k, f in KIND_FRACTIONS.items() if k != "md"}
    counts["md"] = n_frames - sum(counts.values())
    return counts


def _md_snapshots(rng: np.random.Generator, elements: tuple[str, ...], n_snapshots: int) -> list[Atoms]:
    """Snapshots of one short NVE run from a random, slightly rattled cell."""
    atoms = _random_cell(rng, elements)
    _strain(atoms, rng, 0.02)
    _rattle(atoms, rng, 0.02)
    atoms.calc = EMT()
    # Maxwell-Boltzmann momenta drawn here (not via ase.md, whose API moved in ASE 3.29)
    kt = kB * float(rng.uniform(300, 1500))
    masses = atoms.get_masses()[:, None]
    atoms.set_momenta(np.sqrt(masses * kt) * rng.normal(size=(len(atoms), 3)))
    dyn = VelocityVerlet(atoms, timestep=2.0 * fs)
    frames = []
    for _ in range(n_snapshots):
        dyn.run(MD_STRIDE)
        frames.append(_label(atoms, "md"))
    return frames


def make_demo_dataset(seed: int = 0, n_frames: int = 60, elements: tuple[str, ...] = DEMO_ELEMENTS) -> list[Atoms]:
    """Generate ``n_frames`` labelled alloy frames, deterministically from ``seed``.

    seed: seeds the single random generator everything is drawn from.
    n_frames: number of frames (>= 1); ~25 % rattled, ~25 % strained, ~10 % with a vacancy,
        the rest MD snapshots (see the module docstring).
    elements: symbols EMT supports (Al Cu Ag Au Ni Pd Pt) with an entry in
        ``LATTICE_CONSTANTS``.

    Returns a list of ``Atoms`` with a ``SinglePointCalculator`` (energy eV, forces eV/Å,
    stress eV/Å^3) and ``info["config_type"]``.
    """
    if n_frames < 1:
        raise SettingError(f"n_frames must be >= 1, found {n_frames}")
    missing = [e for e in elements if e not in LATTICE_CONSTANTS]
    if missing:
        raise SettingError(f"no demo lattice constant for {missing}; known: {sorted(LATTICE_CONSTANTS)}")
    rng = np.random.default_rng(seed)
    counts = _frame_counts(n_frames)
    frames: list[Atoms] = []
    for _ in range(counts["rattled"]):
        atoms = _random_cell(rng, elements)
        _rattle(atoms, rng, float(rng.uniform(0.03, 0.15)))
        frames.append(_label(atoms, "rattled"))
    for _ in range(counts["strained"]):
        atoms = _random_cell(rng, elements)
        _strain(atoms, rng, 0.04)
        _rattle(atoms, rng, 0.03)
        frames.append(_label(atoms, "strained"))
    for _ in range(counts["vacancy"]):
        atoms = _random_cell(rng, elements)
        del atoms[int(rng.integers(len(atoms)))]
        _strain(atoms, rng, 0.01)
        _rattle(atoms, rng, 0.05)
        frames.append(_label(atoms, "vacancy"))
    remaining = counts["md"]
    while remaining > 0:
        snapshots = _md_snapshots(rng, elements, min(MD_SNAPSHOTS, remaining))
        frames.extend(snapshots)
        remaining -= len(snapshots)
    return frames


def write_demo_dataset(path: str | os.PathLike, seed: int = 0, n_frames: int = 60) -> int:
    """Write :func:`make_demo_dataset` frames to ``path`` as extxyz, atomically.

    The file is written to a temporary file in the same directory and then ``os.replace``d,
    so an interrupted run leaves nothing half-written. Returns the number of frames.
    """
    from ase.io import write

    frames = make_demo_dataset(seed=seed, n_frames=n_frames)
    with atomic_path(path) as tmp:
        write(tmp, frames, format="extxyz")
    return len(frames)
