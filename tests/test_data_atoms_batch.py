"""batch_from_atoms: the one ase.Atoms -> Batch path reads the labels exactly as ``convert`` does."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from ase.build import bulk
from ase.calculators.singlepoint import SinglePointCalculator
from ase.io import read, write
from helpers import specs

from nepcore.data.atoms_batch import batch_from_atoms
from nepcore.data.checks import StructureError
from nepcore.data.convert import convert
from nepcore.data.store import StreamDataStore

SPEC = specs.LABELS

# GPUMD's own extxyz: a ``force`` column (not ``forces``), a 9-number row-major ``virial``
# whose off-diagonal pairs differ (GPUMD keeps yx, zy, zx), a ``weight``.
CUBE = 'Lattice="3.6 0 0 0 3.6 0 0 0 3.6"'
PROPERTIES = "Properties=species:S:1:pos:R:3:force:R:3"
GPUMD_XYZ = f"""2
{CUBE} energy=-7.5 virial="1 2 3 4 5 6 7 8 9" weight=2.5 {PROPERTIES}
Ni 0 0 0 0.1 0.2 0.3
Cu 1.8 1.8 0 -0.1 -0.2 -0.3
2
{CUBE} energy=-7.0 {PROPERTIES}
Ni 0.1 0 0 0.5 0.0 0.0
Cu 1.8 1.7 0 -0.5 0.0 0.0
"""

LABELS = ("energy", "has_energy", "forces", "has_forces", "virial", "has_virial", "weight")


def labelled_frames(tmp_path: Path) -> tuple[Path, list]:
    gpumd = tmp_path / "gpumd.xyz"
    gpumd.write_text(GPUMD_XYZ)
    frames = read(gpumd, ":", format="extxyz")
    stressed = bulk("Cu", "fcc", a=3.6, cubic=True) * (1, 1, 1)
    stressed.symbols[0] = "Ni"
    stressed.rattle(0.05, seed=1)
    stressed.calc = SinglePointCalculator(
        stressed,
        energy=-14.0,
        forces=np.arange(12.0).reshape(4, 3) / 10,
        stress=np.array([0.01, 0.02, 0.03, 0.004, 0.005, 0.006]),
    )  # ASE's forces and stress (no virial): virial = -stress * volume
    unlabelled = bulk("Ni", "fcc", a=3.5, cubic=True)
    return gpumd, frames + [stressed, unlabelled]


def test_batch_from_atoms_gives_converts_labels(tmp_path: Path) -> None:
    gpumd, frames = labelled_frames(tmp_path)
    mixed = tmp_path / "mixed.xyz"
    write(mixed, frames[2:], format="extxyz")
    convert([str(gpumd), str(mixed)], tmp_path / "s.h5", types=SPEC.elements, fractions=(1, 0, 0), progress=False)
    via_convert = StreamDataStore.from_hdf5(tmp_path / "s.h5", SPEC, split="train", dtype=torch.float64)
    converted = via_convert.batch(np.arange(len(via_convert)))
    assert converted.frame_index.tolist() == [0, 1, 2, 3]

    direct = batch_from_atoms(read(gpumd, ":") + read(mixed, ":"), SPEC, source_format="extxyz")
    for name in LABELS + ("positions", "types", "cells", "radial_j", "angular_j"):
        torch.testing.assert_close(getattr(direct, name), getattr(converted, name), rtol=0, atol=0, msg=name)

    # and the values are GPUMD's reading, not merely the same in both
    np.testing.assert_array_equal(direct.forces[:2].numpy(), [[0.1, 0.2, 0.3], [-0.1, -0.2, -0.3]])
    np.testing.assert_array_equal(direct.virial[0].numpy(), [1, 5, 9, 4, 8, 7])
    assert direct.weight.tolist() == [2.5, 1.0, 1.0, 1.0]
    assert direct.has_virial.tolist() == [True, False, True, False]
    assert direct.has_energy.tolist() == [True, True, True, False]
    assert direct.has_forces.tolist() == [True, True, True, False]
    s = frames[2].get_stress(voigt=False)
    np.testing.assert_allclose(
        direct.virial[2].numpy(), -s[[0, 1, 2, 1, 2, 2], [0, 1, 2, 0, 1, 0]] * frames[2].get_volume(), rtol=1e-14
    )


def test_in_memory_atoms_and_options(tmp_path: Path) -> None:
    _, frames = labelled_frames(tmp_path)
    one = batch_from_atoms(frames[2], SPEC, dtype=torch.float32, with_labels=False)
    assert one.positions.dtype == torch.float32 and one.n_frames == 1
    assert not one.has_energy.any() and not one.has_forces.any() and not one.has_virial.any()
    with pytest.raises(StructureError, match="frame 0: species: Pt not among the types Ni Cu"):
        batch_from_atoms([bulk("Pt")], SPEC)
