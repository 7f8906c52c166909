"""The tiny model architectures the tests share (small n_max and few neurons: fast on a CPU).

One catalogue instead of a SPEC per test file; a test that needs a variant derives it with
``spec.replace(...)`` where it is used.
"""

from __future__ import annotations

from nepcore.spec import ModelSpec, ZBLSpec

#: Cu-Pd-Ni (the demo data's elements), no ZBL: the model the training tests use.
TINY = ModelSpec(("Cu", "Pd", "Ni"), 4.5, 3.5, 3, 3, 4, 4, 4, neurons=8)

#: Smaller still (n_max 2, l_max 2) for the training-fault tests that run many short trainings.
MINIMAL = ModelSpec(("Cu", "Pd", "Ni"), 4.0, 3.0, 2, 2, 4, 4, 2, neurons=6)

#: Pd-Cu-Ni with universal ZBL. The types are in another order than a dataset's (Ni Cu Pd by
#: atomic number), so the type mapping is exercised too.
SMALL_ZBL = ModelSpec(
    elements=("Pd", "Cu", "Ni"), cutoff_radial=4.5, cutoff_angular=3.5, n_max_radial=3, n_max_angular=2,
    basis_size_radial=4, basis_size_angular=4, l_max=4, flags=(True,), neurons=6,
    zbl=ZBLSpec("universal", 1.0, 2.0),
)  # fmt: skip

#: Per-type cutoffs (pair cutoffs are the means of the two types'), q1111 on, flexible ZBL.
PER_TYPE_FLEXIBLE_ZBL = ModelSpec(
    elements=("Ni", "Al", "Cu"), cutoff_radial=(5.0, 4.2, 4.6), cutoff_angular=(3.4, 3.0, 3.8),
    n_max_radial=3, n_max_angular=2, basis_size_radial=4, basis_size_angular=4, l_max=4,
    flags=(True, True), neurons=5, zbl=ZBLSpec("flexible", 0.0, 0.0), per_type_cutoff=True,
)  # fmt: skip

#: Every higher-order flag on, per-type cutoffs and typewise ZBL: the most terms a model has.
ALL_TERMS = ModelSpec(
    elements=("Cu", "Pd", "Ni"), cutoff_radial=(5.0, 4.6, 4.8), cutoff_angular=(4.0, 3.6, 3.9),
    n_max_radial=3, n_max_angular=3, basis_size_radial=5, basis_size_angular=4, l_max=4,
    flags=(True,) * 6, neurons=7, zbl=ZBLSpec("typewise", 1.0, 2.0, 0.7),
)  # fmt: skip

#: Two types, q1111 on and universal ZBL, for torch.compile on tiny shapes.
COMPILE = ModelSpec(
    elements=("Cu", "Pd"), cutoff_radial=4.5, cutoff_angular=3.8, n_max_radial=2, n_max_angular=2,
    basis_size_radial=3, basis_size_angular=3, l_max=4, flags=(True, True), neurons=4,
    zbl=ZBLSpec("universal", 1.0, 2.0),
)  # fmt: skip

#: Ni-Cu with the smallest sizes, for label and batch-assembly checks (the values do not matter).
LABELS = ModelSpec(elements=("Ni", "Cu"), cutoff_radial=4.0, cutoff_angular=3.0, n_max_radial=2, n_max_angular=2,
                   basis_size_radial=2, basis_size_angular=2, l_max=2, neurons=3)  # fmt: skip

#: GPUMD's default architecture (ModelSpec's defaults) with per-type cutoffs, for the data store.
STORE = ModelSpec(elements=("Pd", "Cu", "Ni"), cutoff_radial=(5.0, 4.5, 4.5), cutoff_angular=(3.5, 3.0, 3.0))
