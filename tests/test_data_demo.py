"""The built-in EMT demo dataset: deterministic, labelled, and the labels are consistent."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from ase.calculators.emt import EMT
from ase.io import read

from nepcore.cli import main as cli_main
from nepcore.data.demo import DEMO_ELEMENTS, make_demo_dataset, write_demo_dataset


def test_same_seed_same_bytes_other_seed_differs(tmp_path: Path) -> None:
    a, b, c = tmp_path / "a.xyz", tmp_path / "b.xyz", tmp_path / "c.xyz"
    assert write_demo_dataset(a, seed=3, n_frames=12) == 12
    write_demo_dataset(b, seed=3, n_frames=12)
    write_demo_dataset(c, seed=4, n_frames=12)
    assert a.read_bytes() == b.read_bytes()
    assert a.read_bytes() != c.read_bytes()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.xyz", "b.xyz", "c.xyz"]  # no temp left


def test_cli_writes_labelled_extxyz(tmp_path: Path) -> None:
    out = tmp_path / "raw" / "demo.xyz"
    assert cli_main(["demo-data", "-o", str(out), "--seed", "1", "--n-frames", "20"]) == 0
    frames = read(out, ":")
    assert len(frames) == 20
    assert {f.info["config_type"] for f in frames} == {"rattled", "strained", "vacancy", "md"}
    for atoms in frames:
        assert set(atoms.get_chemical_symbols()) <= set(DEMO_ELEMENTS)
        assert 7 <= len(atoms) <= 32 and atoms.pbc.all()
        assert np.isfinite(atoms.get_potential_energy())
        assert atoms.get_forces().shape == (len(atoms), 3)
        assert atoms.get_stress(voigt=False).shape == (3, 3)
    # the dataset is not trivial: forces and energies spread
    forces = np.concatenate([f.get_forces() for f in frames])
    assert forces.std() > 0.1
    assert len({len(f) for f in frames}) > 1


def test_cli_rejects_zero_frames(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        cli_main(["demo-data", "-o", str(tmp_path / "x.xyz"), "--n-frames", "0"])
    assert exit_.value.code == 2
    assert "argument --n-frames: must be >= 1, found 0" in capsys.readouterr().err


def test_labels_are_consistent_with_positions_and_cell() -> None:
    """forces = -dE/dx and stress = (1/V) dE/dstrain by central finite differences."""
    frames = make_demo_dataset(seed=0, n_frames=12)
    atoms = next(f for f in frames if f.info["config_type"] == "md")
    forces = atoms.get_forces()
    stress = atoms.get_stress(voigt=False)
    probe = atoms.copy()
    probe.calc = EMT()
    h = 1e-4
    for i, k in [(0, 0), (1, 2), (len(atoms) - 1, 1)]:
        e = []
        for sign in (1, -1):
            p = probe.copy()
            p.calc = EMT()
            p.positions[i, k] += sign * h
            e.append(p.get_potential_energy())
        assert forces[i, k] == pytest.approx(-(e[0] - e[1]) / (2 * h), abs=1e-5)
    volume = atoms.get_volume()
    for a, b in [(0, 0), (0, 1), (2, 2)]:
        e = []
        for sign in (1, -1):
            eps = np.zeros((3, 3))
            eps[a, b] += sign * h / 2
            eps[b, a] += sign * h / 2
            p = probe.copy()
            p.calc = EMT()
            p.set_cell(probe.cell.array @ (np.eye(3) + eps), scale_atoms=True)
            e.append(p.get_potential_energy())
        assert stress[a, b] == pytest.approx((e[0] - e[1]) / (2 * h) / volume, abs=1e-6)


def test_bad_arguments() -> None:
    with pytest.raises(ValueError, match="n_frames"):
        make_demo_dataset(n_frames=0)
    with pytest.raises(ValueError, match="lattice constant"):
        make_demo_dataset(elements=("Cu", "Fe"))
