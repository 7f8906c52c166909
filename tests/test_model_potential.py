"""float64 parity of the analytical core with NEP_CPU (calorine) on random models and cells."""

from __future__ import annotations

import pytest
from helpers.oracle import assert_matches_calorine, model_and_file
from helpers.structures import parity_structures

from nepcore.spec import ModelSpec, ZBLSpec

pytest.importorskip("calorine")


def structures(symbols: list[str]):
    """A small triclinic cell, a cell much smaller than the cutoff, and an open cluster."""
    return parity_structures(symbols, lattice=3.6, n_triclinic=10, n_cluster=7, seeds=(1, 2, 3), min_distance=1.6)


CASES = {
    "L2_q222": dict(l_max=2, flags=(True,)),
    "L3_q123_q233": dict(l_max=3, flags=(False, False, False, True, True)),
    "L4_all_flags": dict(l_max=4, flags=(True,) * 6),
    "L4_q1111": dict(l_max=4, flags=(False, True)),
    "L4_q112": dict(l_max=4, flags=(False, False, True)),
    "L4_q134": dict(l_max=4, flags=(False,) * 5 + (True,)),
    "L5": dict(l_max=5, flags=(True, True)),
    "L6": dict(l_max=6, flags=()),
    "L7": dict(l_max=7, flags=(True,)),
    "L8": dict(l_max=8, flags=(), n_max_angular=2),
}


@pytest.mark.parametrize("contraction", ["pair", "type", "dense"])
@pytest.mark.parametrize("case", CASES)
def test_angular_orders_and_flags(case, contraction, tmp_path):
    settings = dict(
        elements=("Cu", "Pd"), cutoff_radial=5.0, cutoff_angular=4.0, n_max_radial=3,
        n_max_angular=3, basis_size_radial=5, basis_size_angular=4, neurons=6,
    )  # fmt: skip
    spec = ModelSpec(**{**settings, **CASES[case]})
    model, path = model_and_file(spec, tmp_path, seed=list(CASES).index(case), contraction=contraction)
    for name, atoms in structures(["Cu", "Pd"]).items():
        assert_matches_calorine(model, path, atoms), name


ZBL_CASES = {
    "universal": ZBLSpec("universal", 1.0, 2.0),
    "typewise": ZBLSpec("typewise", 1.25, 2.5, 0.7),
    "flexible": ZBLSpec("flexible", 0.0, 0.0),
}


@pytest.mark.parametrize("contraction", ["pair", "type", "dense"])
@pytest.mark.parametrize("kind", ZBL_CASES)
def test_zbl_kinds_with_per_type_cutoffs(kind, contraction, tmp_path):
    spec = ModelSpec(
        elements=("Ni", "Al", "Cu"), cutoff_radial=(5.0, 4.5, 5.5), cutoff_angular=(4.0, 3.5, 3.8),
        n_max_radial=3, n_max_angular=2, basis_size_radial=4, basis_size_angular=4, l_max=4,
        flags=(True, True), neurons=5, zbl=ZBL_CASES[kind], per_type_cutoff=True,
    )  # fmt: skip
    model, path = model_and_file(spec, tmp_path, seed=7, contraction=contraction)
    for atoms in structures(["Ni", "Al", "Cu"]).values():
        # compress so that ZBL is active (pairs inside r_out)
        atoms = atoms.copy()
        if atoms.pbc.any():
            atoms.set_cell(atoms.cell * 0.8, scale_atoms=True)
        else:
            atoms.positions *= 0.8
        assert_matches_calorine(model, path, atoms)
