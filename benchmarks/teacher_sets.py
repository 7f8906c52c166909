"""Training sets labelled by published GPUMD potentials: held-out data for the recipe.

Every teacher-labelled set in ../shared/data comes from one teacher (UNEP-v1, metals). These
are labelled by other potentials in ``../shared/data/potentials`` and ``gpumd-reference``
through nepcore's ASE calculator, and are unlike them: one covalent element, a metallic glass
with a metalloid, a high-entropy alloy; hot and liquid phases, surfaces, defects, strained and
rattled crystals. No default was chosen on them (``bench_accuracy.py --datasets Si_teacher
C_teacher PdCuNiP_teacher CrCoNi_teacher``).

    python benchmarks/teacher_sets.py Si Si_teacher.xyz   # 158 frames, 10,736 atoms, about a minute
    python benchmarks/teacher_sets.py C C_teacher.xyz     # 160 frames, 9,728 atoms, about a minute
    python benchmarks/teacher_sets.py PdCuNiP PdCuNiP_teacher.xyz   # 108 frames, 11,664 atoms, under a minute
    python benchmarks/teacher_sets.py CrCoNi CrCoNi_teacher.xyz     # 116 frames, 12,516 atoms, under a minute
"""

from __future__ import annotations

import sys
import warnings
from pathlib import Path

import numpy as np

POTENTIALS = Path(__file__).resolve().parents[2] / "shared" / "data" / "potentials"
SI_POTENTIAL = POTENTIALS / "Si_2022_NEP4_4body.txt"
C_POTENTIAL = POTENTIALS / "C_2022_NEP4.txt"
PDCUNIP_POTENTIAL = POTENTIALS.parent / "gpumd-reference" / "nep_PdCuNiP.txt"
CRCONI_POTENTIAL = POTENTIALS.parent / "gpumd-reference" / "nep_CrCoNi.txt"


class Labeller:
    """Frames labelled by one teacher potential: single points and Langevin MD snapshots.

    Args:
        potential: the teacher's nep.txt.
        rng: seeds the velocities and the thermostat noise (and the caller's strains and rattles).
    """

    def __init__(self, potential: Path, rng: np.random.Generator) -> None:
        from nepcore.calculator import NEP

        self.teacher, self.rng, self.frames = NEP(potential), rng, []

    def label(self, atoms, kind: str) -> None:
        """Append ``atoms`` with the teacher's energy (eV), forces (eV/Å) and stress (eV/Å³)."""
        from ase.calculators.singlepoint import SinglePointCalculator

        work = atoms.copy()
        work.calc = self.teacher
        energy, forces, stress = work.get_potential_energy(), work.get_forces(), work.get_stress()
        frame = atoms.copy()
        frame.calc = SinglePointCalculator(frame, energy=energy, forces=forces, stress=stress)
        frame.info["config_type"] = kind
        self.frames.append(frame)

    def md(
        self, start, kelvin: float, snapshots: int, kind: str, every: int = 25, equilibrate: int = 100, fs: float = 1.0
    ) -> None:
        """Label ``snapshots`` frames of Langevin MD (steps of ``fs`` fs) at ``kelvin``, ``every`` steps apart."""
        from ase import units
        from ase.md.langevin import Langevin
        from ase.md.velocitydistribution import MaxwellBoltzmannDistribution

        atoms = start.copy()
        atoms.calc = self.teacher
        # ASE 3.28 deprecates these two calls; their replacements draw other frames than the
        # ones the sixteenth round measured, so the calls stay and their warnings are silenced
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=".*(thermalize_momenta|fixcm).*")
            MaxwellBoltzmannDistribution(atoms, temperature_K=kelvin, rng=self.rng)
            dynamics = Langevin(atoms, fs * units.fs, temperature_K=kelvin, friction=0.02, rng=self.rng)
        dynamics.run(equilibrate)
        for _ in range(snapshots):
            dynamics.run(every)
            self.label(atoms, kind)

    def strained(self, crystal, count: int, largest: float, rattle: float, kind: str = "strained") -> None:
        """Label ``count`` copies of ``crystal`` under random symmetric strains up to ``largest``
        per component, each rattled by ``rattle`` Å."""
        for _ in range(count):
            atoms = crystal.copy()
            strain = self.rng.uniform(-largest, largest, (3, 3))
            atoms.set_cell(atoms.cell.array @ (np.eye(3) + (strain + strain.T) / 2), scale_atoms=True)
            atoms.rattle(rattle, seed=int(self.rng.integers(1 << 30)))
            self.label(atoms, kind)

    def rattled(self, crystal, count: int, low: float, high: float) -> None:
        """Label ``count`` copies of ``crystal`` rattled by a random amplitude in [low, high) Å."""
        for _ in range(count):
            atoms = crystal.copy()
            atoms.rattle(float(self.rng.uniform(low, high)), seed=int(self.rng.integers(1 << 30)))
            self.label(atoms, "rattled")

    def write(self, path: Path) -> int:
        """Write the frames to ``path`` (extxyz); returns their number."""
        from ase.io import write

        write(path, self.frames, format="extxyz")
        return len(self.frames)


def make_si_teacher(path: Path, seed: int = 0) -> int:
    """Write the silicon frames to ``path`` (extxyz with energy, forces, stress).

    Args:
        path: output file.
        seed: seeds the velocities, thermostat noise, strains and rattles.

    Returns:
        The number of frames: 48 crystal MD snapshots (300-1500 K, 64 atoms), 24 liquid (3000 K),
        30 strained (up to 5 % per component), 16 with a vacancy (800 K), 20 of a (001) slab
        with 10 Å of vacuum (800 K), 20 rattled by 0.1-0.2 Å.
    """
    from ase.build import bulk

    labeller = Labeller(SI_POTENTIAL, np.random.default_rng(seed))
    crystal = bulk("Si", "diamond", 5.43, cubic=True) * (2, 2, 2)
    for kelvin in (300, 700, 1100, 1500):
        labeller.md(crystal, kelvin, 12, f"md{kelvin}")
    hot = crystal.copy()
    hot.rattle(0.3, seed=1)
    labeller.md(hot, 3000, 24, "liquid", every=30, equilibrate=300)
    labeller.strained(crystal, 30, 0.05, 0.05)
    vacancy = crystal.copy()
    del vacancy[0]
    labeller.md(vacancy, 800, 16, "vacancy")
    slab = bulk("Si", "diamond", 5.43, cubic=True) * (2, 2, 3)
    slab.center(vacuum=5.0, axis=2)
    labeller.md(slab, 800, 20, "surface")
    labeller.rattled(crystal, 20, 0.1, 0.2)
    return labeller.write(path)


def _graphite(cells: int, layers: int):
    """AB-stacked graphite, ``cells`` x ``cells`` in-plane cells, ``layers`` layers (3.35 Å apart)."""
    from ase.build import graphene

    sheet = graphene(formula="C2", a=2.46, size=(cells, cells, 1), vacuum=None)
    a1, a2 = sheet.cell.array[0] / cells, sheet.cell.array[1] / cells
    atoms = sheet.copy()
    for layer in range(1, layers):
        stacked = sheet.copy()
        stacked.translate((a1 + a2) / 3 * (layer % 2) + np.array([0.0, 0.0, 3.35 * layer]))
        atoms += stacked
    atoms.set_cell([sheet.cell.array[0], sheet.cell.array[1], [0.0, 0.0, 3.35 * layers]])
    atoms.pbc = True
    return atoms


def make_c_teacher(path: Path, seed: int = 0) -> int:
    """Write the carbon frames to ``path`` (extxyz with energy, forces, stress), labelled by
    ``potentials/C_2022_NEP4.txt``.

    Args:
        path: output file.
        seed: seeds the velocities, thermostat noise, strains and rattles.

    Returns:
        The number of frames: 36 diamond MD snapshots (300-2100 K, 64 atoms), 24 of graphite
        (64 atoms, 300-1500 K), 24 of diamond and graphite at 3000 K, 20
        strained diamond (up to 4 % per component), 16 of a graphene sheet with 10 Å of vacuum
        (1000 K, 32 atoms), 20 rattled diamond by 0.03-0.08 Å, 20 strained graphite (up to 3 %).
    """
    from ase.build import bulk

    labeller = Labeller(C_POTENTIAL, np.random.default_rng(seed))
    diamond = bulk("C", "diamond", 3.567, cubic=True) * (2, 2, 2)
    for kelvin in (300, 1200, 2100):
        labeller.md(diamond, kelvin, 12, f"diamond{kelvin}")
    graphite = _graphite(4, 2)
    for kelvin in (300, 1500):
        labeller.md(graphite, kelvin, 12, f"graphite{kelvin}")
    # no liquid: the teacher has no short-range repulsion (no ZBL), and in liquid MD at 5000-6000 K
    # (2.3 and 3.5 g/cm³) two atoms fused within a few hundred steps; half-femtosecond steps
    # for the hot, light atoms
    labeller.md(diamond, 3000, 12, "diamond3000", every=60, equilibrate=200, fs=0.5)
    labeller.md(graphite, 3000, 12, "graphite3000", every=60, equilibrate=200, fs=0.5)
    labeller.strained(diamond, 20, 0.04, 0.03)
    sheet = _graphite(4, 1)
    sheet.set_cell([sheet.cell.array[0], sheet.cell.array[1], [0.0, 0.0, 10.0]])
    labeller.md(sheet, 1000, 16, "graphene")
    labeller.rattled(diamond, 20, 0.03, 0.08)
    labeller.strained(graphite, 20, 0.03, 0.03, kind="graphite_strained")
    return labeller.write(path)


def _random_fcc(lattice: float, symbols: list[str], counts: list[int], rng: np.random.Generator):
    """A 3 x 3 x 3 cubic fcc cell (108 atoms) with ``counts`` atoms of each of ``symbols`` on random sites."""
    from ase.build import bulk

    crystal = bulk("Cu", "fcc", lattice, cubic=True) * (3, 3, 3)
    crystal.set_chemical_symbols(rng.permutation(np.repeat(symbols, counts)).tolist())
    return crystal


def _slab(atoms, vacuum: float):
    """``atoms`` with ``vacuum`` Å of empty space added along z (two free surfaces)."""
    slab = atoms.copy()
    slab.wrap()
    slab.cell[2, 2] += vacuum
    return slab


def make_pdcunip_teacher(path: Path, seed: int = 0) -> int:
    """Write Pd40Cu30Ni10P20 metallic-glass frames to ``path``, labelled by
    ``gpumd-reference/nep_PdCuNiP.txt`` (with its ZBL).

    Args:
        path: output file.
        seed: seeds the sites, velocities, thermostat noise, strains and rattles.

    Returns:
        The number of frames (108 atoms each): 16 liquid (1500 K), 16 supercooled
        (900 K) and 16 glass (400 K) snapshots, each phase started from the last one; 12 of a
        glass slab with 10 Å of vacuum (600 K); 24 of an fcc Pd50Cu35Ni15 solid solution (no P,
        300 and 900 K); 12 strained crystals (up to 4 % per component); 12 rattled glasses
        (0.05-0.15 Å).
    """
    labeller = Labeller(PDCUNIP_POTENTIAL, np.random.default_rng(seed))
    # 3.84 Å: 4 % above the teacher's lowest-energy lattice for this composition on random fcc
    # sites (3.70), so that the liquid and glass at fixed volume are not held at 20-40 GPa
    melt = _random_fcc(3.84, ["Pd", "Cu", "Ni", "P"], [43, 32, 11, 22], labeller.rng)
    melt.rattle(0.3, seed=1)
    labeller.md(melt, 1500, 16, "liquid", every=30, equilibrate=300)
    labeller.md(labeller.frames[-1], 900, 16, "supercooled", every=30, equilibrate=200)
    labeller.md(labeller.frames[-1], 400, 16, "glass", every=30, equilibrate=200)
    glass = labeller.frames[-1].copy()
    labeller.md(_slab(glass, 10.0), 600, 12, "glass_surface")
    crystal = _random_fcc(3.78, ["Pd", "Cu", "Ni"], [54, 38, 16], labeller.rng)
    for kelvin in (300, 900):
        labeller.md(crystal, kelvin, 12, f"fcc{kelvin}")
    labeller.strained(crystal, 12, 0.04, 0.03)
    labeller.rattled(glass, 12, 0.05, 0.15)
    return labeller.write(path)


def make_crconi_teacher(path: Path, seed: int = 0) -> int:
    """Write equiatomic CrCoNi frames to ``path``, labelled by ``gpumd-reference/nep_CrCoNi.txt``
    (with its typewise ZBL).

    Args:
        path: output file.
        seed: seeds the sites, velocities, thermostat noise, strains and rattles.

    Returns:
        The number of frames (108 atoms each but the vacancy's 107): 36 fcc MD snapshots (300, 800
        and 1300 K), 16 liquid (2000 K), 12 with a vacancy (1000 K), 12 of a (001) slab with 10 Å
        of vacuum (800 K), 16 strained (up to 5 % per component), 12 compressed to 85-95 % of the
        volume, 12 rattled by 0.1-0.2 Å.
    """
    labeller = Labeller(CRCONI_POTENTIAL, np.random.default_rng(seed))
    # 3.53 Å: the teacher's lowest energy on random fcc sites
    crystal = _random_fcc(3.53, ["Cr", "Co", "Ni"], [36, 36, 36], labeller.rng)
    for kelvin in (300, 800, 1300):
        labeller.md(crystal, kelvin, 12, f"md{kelvin}")
    # the liquid 4 % wider than the crystal (as for PdCuNiP), else it is held near 30 GPa
    hot = crystal.copy()
    hot.set_cell(crystal.cell.array * 1.04, scale_atoms=True)
    hot.rattle(0.3, seed=1)
    labeller.md(hot, 2000, 16, "liquid", every=30, equilibrate=300)
    vacancy = crystal.copy()
    del vacancy[0]
    labeller.md(vacancy, 1000, 12, "vacancy")
    labeller.md(_slab(crystal, 10.0), 800, 12, "surface")
    labeller.strained(crystal, 16, 0.05, 0.05)
    for _ in range(12):
        compressed = crystal.copy()
        scale = float(labeller.rng.uniform(0.85, 0.95)) ** (1 / 3)
        compressed.set_cell(crystal.cell.array * scale, scale_atoms=True)
        compressed.rattle(0.05, seed=int(labeller.rng.integers(1 << 30)))
        labeller.label(compressed, "compressed")
    labeller.rattled(crystal, 12, 0.1, 0.2)
    return labeller.write(path)


SETS = {"Si": make_si_teacher, "C": make_c_teacher, "PdCuNiP": make_pdcunip_teacher, "CrCoNi": make_crconi_teacher}

if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[1] not in SETS:
        raise SystemExit(f"usage: teacher_sets.py {{{','.join(SETS)}}} OUT.xyz")
    print(SETS[sys.argv[1]](Path(sys.argv[2])), "frames written to", sys.argv[2])
