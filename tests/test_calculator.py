"""The ASE calculator: parity with NEP_CPU, the skin neighbour list, and a short NVE run."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch
from ase import units
from ase.build import bulk
from ase.calculators.calculator import PropertyNotImplementedError
from ase.md.verlet import VelocityVerlet
from helpers import specs
from helpers.oracle import model_and_file, ours
from helpers.structures import parity_structures

from nepcore.calculator import NEP
from nepcore.errors import SettingError

SPECS = {
    "uniform": specs.SMALL_ZBL.replace(elements=("Cu", "Pd"), cutoff_radial=4.5, cutoff_angular=3.5),
    "per_type": specs.PER_TYPE_FLEXIBLE_ZBL,
}


@pytest.fixture(scope="module", params=list(SPECS))
def model_file(request, tmp_path_factory):
    spec = SPECS[request.param]
    return model_and_file(spec, tmp_path_factory.mktemp(request.param), seed=3)


def _structures(symbols: list[str]):
    """A triclinic cell, a cell much thinner than the cutoff and an open cluster."""
    return parity_structures(
        symbols, lattice=3.0, n_triclinic=12, n_cluster=8, seeds=(4, 5, 1), min_distance=1.7, small_cell_name="tiny"
    )


def test_matches_calorine(model_file):
    from calorine.calculators import CPUNEP

    model, path = model_file
    for name, atoms in _structures(list(model.spec.elements)).items():
        ref = atoms.copy()
        if not ref.pbc.any():  # NEP_CPU needs a cell; 100 Å of vacuum is an open cluster
            ref.set_cell(np.eye(3) * 100.0)
            ref.center()
            atoms = ref.copy()
            atoms.pbc = False
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ref.calc = CPUNEP(str(path))
            e_ref, f_ref, s_ref = ref.get_potential_energy(), ref.get_forces(), ref.get_stress()
        atoms.calc = NEP(path)
        assert abs(atoms.get_potential_energy() - e_ref) < 1e-8 * len(atoms), name
        np.testing.assert_allclose(atoms.get_forces(), f_ref, rtol=0, atol=1e-8, err_msg=name)
        assert atoms.get_potential_energies().sum() == pytest.approx(e_ref, abs=1e-8)
        assert atoms.get_potential_energy(force_consistent=True) == atoms.get_potential_energy()
        if atoms.pbc.all():
            np.testing.assert_allclose(atoms.get_stress(), s_ref, rtol=0, atol=1e-8, err_msg=name)
            np.testing.assert_allclose(atoms.get_stresses().sum(0), atoms.get_stress(), rtol=0, atol=1e-10)
        else:
            with pytest.raises(PropertyNotImplementedError):
                atoms.get_stress()


def test_skin_list_equals_fresh_list(model_file):
    """Positions moved within skin/2 reuse the list; results equal a fresh search to 1e-12."""
    model, path = model_file
    rng = np.random.default_rng(0)
    for name, atoms in _structures(list(model.spec.elements)).items():
        atoms.calc = NEP(path, skin=0.8)
        atoms.get_forces()
        start = atoms.get_positions()
        for _ in range(3):
            step = rng.normal(size=(len(atoms), 3))
            step *= 0.39 / np.linalg.norm(step, axis=1).max()  # < skin / 2 from the build: no rebuild
            atoms.positions = start + step
            got = {"energy": atoms.get_potential_energy(), "forces": atoms.get_forces()}
            fresh = ours(model, atoms)
            assert got["energy"] == pytest.approx(fresh["energy"][0], rel=0, abs=1e-12 * len(atoms)), name
            np.testing.assert_allclose(got["forces"], fresh["forces"], rtol=0, atol=1e-12, err_msg=name)
            if atoms.pbc.all():
                W = fresh["virial"][0]
                expected = -np.array([W[0], W[1], W[2], W[4], W[5], W[3]]) / atoms.get_volume()
                np.testing.assert_allclose(atoms.get_stress(), expected, rtol=0, atol=1e-12, err_msg=name)
        assert atoms.calc.n_neighbor_builds == 1, name


def test_rebuild_conditions(model_file):
    model, path = model_file
    atoms = _structures(list(model.spec.elements))["triclinic"]
    atoms.calc = NEP(model, skin=0.5)
    atoms.get_potential_energy()
    atoms.positions[3] += [0.24, 0.0, 0.0]  # < skin / 2
    atoms.get_potential_energy()
    assert atoms.calc.n_neighbor_builds == 1
    atoms.positions[3] += [0.02, 0.0, 0.0]  # now 0.26 Å from where the list was built
    atoms.get_potential_energy()
    assert atoms.calc.n_neighbor_builds == 2
    atoms.set_cell(atoms.cell * 1.01, scale_atoms=False)
    atoms.get_potential_energy()
    assert atoms.calc.n_neighbor_builds == 3
    elements = list(model.spec.elements)
    atoms.symbols[0] = elements[(elements.index(atoms.symbols[0]) + 1) % len(elements)]
    atoms.get_potential_energy()
    assert atoms.calc.n_neighbor_builds == 4
    e = atoms.get_potential_energy()  # nothing changed: ASE does not even call calculate
    assert atoms.calc.n_neighbor_builds == 4 and e == pytest.approx(ours(model, atoms)["energy"][0], abs=1e-12)


def test_velocity_verlet_reuses_list_and_conserves_energy(tmp_path, one_thread):
    """50 NVE steps of a rattled 32-atom cell: few rebuilds, total energy drift small."""
    model, _ = model_and_file(SPECS["uniform"], tmp_path, seed=5)
    atoms = bulk("Cu", "fcc", a=3.7, cubic=True) * (2, 2, 2)
    atoms.symbols[::3] = "Pd"
    atoms.rattle(0.05, seed=2)
    atoms.calc = NEP(model, skin=1.0)
    rng = np.random.default_rng(1)  # Maxwell-Boltzmann momenta at 600 K, zero total momentum
    momenta = rng.normal(size=(len(atoms), 3)) * np.sqrt(atoms.get_masses() * units.kB * 600)[:, None]
    atoms.set_momenta(momenta - momenta.mean(0))
    energies = []
    dyn = VelocityVerlet(atoms, timestep=1.0 * units.fs)
    dyn.attach(lambda: energies.append(atoms.get_total_energy()), interval=1)
    dyn.run(50)
    assert atoms.calc.n_neighbor_builds <= 5, atoms.calc.n_neighbor_builds
    energies = np.array(energies)
    scale = 1.5 * units.kB * 600 * len(atoms)  # kinetic energy scale, eV
    assert np.ptp(energies) < 1e-3 * scale, (np.ptp(energies), scale)


def test_float32_and_errors(model_file):
    model, path = model_file
    atoms = _structures(list(model.spec.elements))["triclinic"]
    atoms.calc = NEP(path, precision="float32")
    ref = ours(model, atoms)
    np.testing.assert_allclose(atoms.get_forces(), ref["forces"], rtol=0, atol=1e-4)
    assert atoms.get_potential_energy() == pytest.approx(ref["energy"][0], abs=1e-4 * len(atoms))
    NEP(model, precision="float32")
    assert model.W0.dtype == torch.float64  # the caller's model is copied, not converted
    with pytest.raises(ValueError, match="precision"):
        NEP(path, precision="float16")
    with pytest.raises(ValueError, match="skin"):
        NEP(path, skin=-1.0)
    atoms.symbols[0] = "Au"
    atoms.calc = NEP(path)
    with pytest.raises(ValueError, match="element Au is not a type"):
        atoms.get_potential_energy()


def test_device_auto_and_torch_device(model_file):
    """device "auto" (CUDA when available) and a torch.device are accepted, as by evaluate and
    predict; a CUDA device on a machine without CUDA is a SettingError naming it."""
    model, path = model_file
    expected = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    assert NEP(path, device="auto").device == expected
    assert NEP(path, device=torch.device("cpu")).device == torch.device("cpu")
    if not torch.cuda.is_available():
        atoms = _structures(list(model.spec.elements))["triclinic"]
        atoms.calc = NEP(path, device="auto")
        np.testing.assert_allclose(atoms.get_forces(), ours(model, atoms)["forces"], rtol=0, atol=1e-10)
        with pytest.raises(SettingError, match="device cuda"):
            NEP(path, device="cuda")
