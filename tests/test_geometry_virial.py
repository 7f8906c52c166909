"""nepcore.geometry.virial: the one component order and the stress <-> virial conversions."""

from __future__ import annotations

import numpy as np
from ase.stress import full_3x3_to_voigt_6_stress

from nepcore.geometry.virial import (
    PRESSURE_UNIT_CONVERSION,
    VIRIAL_COMPONENTS,
    VIRIAL_INDEX,
    ase_stress_to_virial6,
    reference_virial6,
    stress_gpa,
    virial6_to_ase_stress,
)

AXES = "xyz"


def test_component_names_match_the_index_table():
    assert VIRIAL_COMPONENTS == tuple(AXES[r] + AXES[c] for r, c in VIRIAL_INDEX)


def test_a_reference_label_keeps_the_lower_triangle_as_gpumd():
    label = np.arange(1.0, 10.0)  # xx xy xz yx yy yz zx zy zz = 1..9
    np.testing.assert_array_equal(reference_virial6(label), [1, 5, 9, 4, 8, 7])
    assert np.isnan(reference_virial6(None)).all()


def test_ase_stress_and_virial_convert_both_ways_with_gpumds_sign():
    rng = np.random.default_rng(0)
    a = rng.normal(size=(3, 3))
    stress = a + a.T  # eV/Å³, symmetric
    volume = 17.5
    virial = ase_stress_to_virial6(full_3x3_to_voigt_6_stress(stress), volume)
    np.testing.assert_allclose(virial, [-stress[r, c] * volume for r, c in VIRIAL_INDEX], rtol=1e-15)
    np.testing.assert_allclose(ase_stress_to_virial6(stress, volume), virial, rtol=1e-15)
    np.testing.assert_allclose(virial6_to_ase_stress(virial, volume), full_3x3_to_voigt_6_stress(stress), rtol=1e-14)


def test_gpumd_stress_is_positive_under_compression():
    virial = np.array([[2.0, 2.0, 2.0, 0.0, 0.0, 0.0], [1.0] * 6])  # compressed: W > 0
    gpa = stress_gpa(virial, np.array([10.0, 0.0]))
    np.testing.assert_allclose(gpa[0], virial[0] / 10.0 * PRESSURE_UNIT_CONVERSION)
    assert (gpa[0, :3] > 0).all() and np.isnan(gpa[1]).all()  # no volume: NaN
