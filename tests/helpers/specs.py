"""Tiny model architectures shared by the tests (few neurons and small n_max: fast on a CPU)."""

from __future__ import annotations

from nepcore.spec import ModelSpec, ZBLSpec

#: Cu-Pd-Ni, the demo data's elements: the model most training tests use.
TINY = ModelSpec(("Cu", "Pd", "Ni"), 4.5, 3.5, 3, 3, 4, 4, 4, neurons=8)

#: Model types in another order than a dataset's (Ni Cu Pd by atomic number), so the type
#: mapping is exercised too; with universal ZBL.
PD_CU_NI_ZBL = ModelSpec(
    elements=("Pd", "Cu", "Ni"), cutoff_radial=4.5, cutoff_angular=3.5, n_max_radial=3, n_max_angular=2,
    basis_size_radial=4, basis_size_angular=4, l_max=4, flags=(True,), neurons=6,
    zbl=ZBLSpec("universal", 1.0, 2.0),
)  # fmt: skip
