"""The one virial / stress convention of nepcore (GPUMD's).

A virial here is the *total* virial of a structure in eV, ``W = -stress * volume``, so a
compressed crystal (negative ASE stress) has a positive virial. Everywhere in nepcore (the
batch labels, the model output, ``virial_*.out``, the loss) the six components are stored in
GPUMD's order ``xx yy zz xy yz zx`` (:data:`VIRIAL_COMPONENTS`).

Two 3x3 -> 6 readings exist, and both are GPUMD's:

* :data:`VIRIAL_INDEX` (``xy = [0, 1]``, ``yz = [1, 2]``, ``zx = [2, 0]``) reads the model's
  own virial tensor ``W = -sum_ij r_ij (x) dE/dr_ij`` (docs/model.md, "Virial and stress");
* :data:`REFERENCE_VIRIAL_INDEX` (``yx``, ``zy``, ``zx``: the lower-triangle entry of each
  off-diagonal pair) reads a *reference* label given as 9 numbers ``xx xy xz yx yy yz zx zy
  zz``, which is what GPUMD's trainer keeps of an extxyz ``virial=``.

For the usual symmetric tensors the two agree. ASE orders a stress as Voigt ``xx yy zz yz xz
xy`` in eV/Å³ with positive = tensile; :func:`virial6_to_ase_stress` and
:func:`ase_stress_to_virial6` convert. GPUMD's ``stress_*.out`` is ``W / V`` in GPa, positive
= compressive (:func:`stress_gpa`).
"""

from __future__ import annotations

import numpy as np

__all__ = [
    "ASE_VOIGT_FROM_ATOM9",
    "ASE_VOIGT_FROM_VIRIAL6",
    "PRESSURE_UNIT_CONVERSION",
    "REFERENCE_VIRIAL_INDEX",
    "VIRIAL_COMPONENTS",
    "VIRIAL_INDEX",
    "ase_stress_to_virial6",
    "reference_virial6",
    "stress_gpa",
    "virial6_to_ase_stress",
]

#: The six components, in the order nepcore (and GPUMD's virial_*.out) stores them.
VIRIAL_COMPONENTS = ("xx", "yy", "zz", "xy", "yz", "zx")
#: (row, column) of each of the six in the model's 3x3 virial tensor.
VIRIAL_INDEX = ((0, 0), (1, 1), (2, 2), (0, 1), (1, 2), (2, 0))
#: (row, column) of each of the six in a reference 3x3 virial label (GPUMD keeps yx, zy, zx).
REFERENCE_VIRIAL_INDEX = ((0, 0), (1, 1), (2, 2), (1, 0), (2, 1), (2, 0))
#: Positions in the six (xx yy zz xy yz zx) of ASE's Voigt order xx yy zz yz xz xy.
ASE_VOIGT_FROM_VIRIAL6 = (0, 1, 2, 4, 5, 3)
#: Positions in a row-major 3x3 (9 numbers) of ASE's Voigt order, reading the off-diagonal
#: entries as :data:`VIRIAL_INDEX` does (yz = [1, 2], xz = zx = [2, 0], xy = [0, 1]).
ASE_VOIGT_FROM_ATOM9 = (0, 4, 8, 5, 6, 1)
#: GPUMD's PRESSURE_UNIT_CONVERSION: eV/Å³ -> GPa.
PRESSURE_UNIT_CONVERSION = 160.2177


def reference_virial6(virial3x3: np.ndarray | None) -> np.ndarray:
    """The six components of a reference virial label, GPUMD's reading.

    Args:
        virial3x3: (3, 3) or (9,) total virial, eV, row-major ``xx xy xz yx yy yz zx zy zz``;
            None for an absent label.

    Returns:
        (6,) float64 eV in the order :data:`VIRIAL_COMPONENTS`; NaN when absent.
    """
    if virial3x3 is None:
        return np.full(6, np.nan)
    v = np.asarray(virial3x3, dtype=np.float64).reshape(3, 3)
    return np.array([v[r, c] for r, c in REFERENCE_VIRIAL_INDEX])


def ase_stress_to_virial6(stress: np.ndarray, volume: float) -> np.ndarray:
    """The six virial components (eV) of an ASE stress: ``W = -stress * volume``.

    Args:
        stress: ASE Voigt (6,) ``xx yy zz yz xz xy`` or (3, 3), eV/Å³, positive = tensile.
        volume: cell volume, Å³.

    Returns:
        (6,) float64 total virial, eV, order :data:`VIRIAL_COMPONENTS`.
    """
    s = np.asarray(stress, dtype=np.float64)
    if s.shape == (6,):
        full = np.array([[s[0], s[5], s[4]], [s[5], s[1], s[3]], [s[4], s[3], s[2]]])
    else:
        full = s.reshape(3, 3)
    return np.array([-full[a, b] * volume for a, b in VIRIAL_INDEX])


def virial6_to_ase_stress(virial: np.ndarray, volume: float) -> np.ndarray:
    """ASE stress from virials: ``stress = -W / volume`` in ASE's Voigt order.

    Args:
        virial: (..., 6) total virials, eV, order :data:`VIRIAL_COMPONENTS`.
        volume: cell volume, Å³.

    Returns:
        (..., 6) stress, eV/Å³, order ``xx yy zz yz xz xy``, positive = tensile.
    """
    return -np.asarray(virial)[..., list(ASE_VOIGT_FROM_VIRIAL6)] / volume


def stress_gpa(virial: np.ndarray, volume: np.ndarray) -> np.ndarray:
    """GPUMD's stress_*.out values: total virials over volumes, in GPa, positive = compressive.

    Args:
        virial: (F, 6) total virials, eV (NaN stays NaN).
        volume: (F,) cell volumes, Å³; a non-positive volume (open cluster) gives NaN.

    Returns:
        (F, 6) float64 stresses, GPa.
    """
    virial = np.asarray(virial, dtype=np.float64).reshape(-1, 6)
    volume = np.asarray(volume, dtype=np.float64).reshape(-1, 1)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(volume > 0, virial / volume * PRESSURE_UNIT_CONVERSION, np.nan)
