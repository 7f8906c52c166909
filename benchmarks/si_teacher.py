"""A silicon training set labelled by a published GPUMD potential: held-out data for the recipe.

Every teacher-labelled set in ../shared/data comes from one teacher (UNEP-v1, metals). This one
is labelled by ``potentials/Si_2022_NEP4_4body.txt`` through nepcore's ASE calculator, and is
unlike them: one covalent element, a liquid, a surface slab, a vacancy, strained and rattled
crystals. No default was chosen on it (``bench_accuracy.py --datasets Si_teacher``).

    python benchmarks/si_teacher.py Si_teacher.xyz   # 158 frames, 10,736 atoms, about a minute
"""

from __future__ import annotations

import sys
import warnings
from pathlib import Path

import numpy as np

POTENTIAL = Path(__file__).resolve().parents[2] / "shared" / "data" / "potentials" / "Si_2022_NEP4_4body.txt"


def make_si_teacher(path: Path, seed: int = 0) -> int:
    """Write the labelled frames to ``path`` (extxyz with energy, forces, stress).

    Args:
        path: output file.
        seed: seeds the velocities, thermostat noise, strains and rattles.

    Returns:
        The number of frames: 48 crystal MD snapshots (300-1500 K, 64 atoms), 24 liquid (3000 K),
        30 strained (up to 5 % per component), 16 with a vacancy (800 K), 20 of a (001) slab
        with 10 Å of vacuum (800 K), 20 rattled by 0.1-0.2 Å.
    """
    from ase import units
    from ase.build import bulk
    from ase.calculators.singlepoint import SinglePointCalculator
    from ase.io import write
    from ase.md.langevin import Langevin
    from ase.md.velocitydistribution import MaxwellBoltzmannDistribution

    from nepcore.calculator import NEP

    rng = np.random.default_rng(seed)
    teacher = NEP(POTENTIAL)
    frames = []

    def label(atoms, kind: str) -> None:
        work = atoms.copy()
        work.calc = teacher
        energy, forces, stress = work.get_potential_energy(), work.get_forces(), work.get_stress()
        frame = atoms.copy()
        frame.calc = SinglePointCalculator(frame, energy=energy, forces=forces, stress=stress)
        frame.info["config_type"] = kind
        frames.append(frame)

    def md(start, kelvin: float, snapshots: int, kind: str, every: int = 25, equilibrate: int = 100) -> None:
        atoms = start.copy()
        atoms.calc = teacher
        # ASE 3.28 deprecates these two calls; their replacements draw other frames than the
        # ones the sixteenth round measured, so the calls stay and their warnings are silenced
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=".*(thermalize_momenta|fixcm).*")
            MaxwellBoltzmannDistribution(atoms, temperature_K=kelvin, rng=rng)
            dynamics = Langevin(atoms, 1.0 * units.fs, temperature_K=kelvin, friction=0.02, rng=rng)
        dynamics.run(equilibrate)
        for _ in range(snapshots):
            dynamics.run(every)
            label(atoms, kind)

    crystal = bulk("Si", "diamond", 5.43, cubic=True) * (2, 2, 2)
    for kelvin in (300, 700, 1100, 1500):
        md(crystal, kelvin, 12, f"md{kelvin}")
    hot = crystal.copy()
    hot.rattle(0.3, seed=1)
    md(hot, 3000, 24, "liquid", every=30, equilibrate=300)
    for _ in range(30):
        strained = crystal.copy()
        strain = rng.uniform(-0.05, 0.05, (3, 3))
        strained.set_cell(strained.cell.array @ (np.eye(3) + (strain + strain.T) / 2), scale_atoms=True)
        strained.rattle(0.05, seed=int(rng.integers(1 << 30)))
        label(strained, "strained")
    vacancy = crystal.copy()
    del vacancy[0]
    md(vacancy, 800, 16, "vacancy")
    slab = bulk("Si", "diamond", 5.43, cubic=True) * (2, 2, 3)
    slab.center(vacuum=5.0, axis=2)
    md(slab, 800, 20, "surface")
    for _ in range(20):
        rattled = crystal.copy()
        rattled.rattle(float(rng.uniform(0.1, 0.2)), seed=int(rng.integers(1 << 30)))
        label(rattled, "rattled")
    write(path, frames, format="extxyz")
    return len(frames)


if __name__ == "__main__":
    print(make_si_teacher(Path(sys.argv[1])), "frames written to", sys.argv[1])
