"""Validation of one raw structure, with errors that name the file, the frame and the field.

Every check here is a hard error (:class:`StructureError`) except atoms without any
neighbour inside the cutoff, which are only counted (a warning in the conversion summary):
isolated atoms are legal (a dimer far apart, a gas-phase molecule) but usually a sign of a
wrong cell or unit. Frame numbers are 0-based, as ``ase.io.read(path, index=k)`` counts.
"""

from __future__ import annotations

import numpy as np

from nepcore.errors import NepcoreError
from nepcore.geometry.neighbors import PairList, neighbor_pairs

#: Two atoms closer than this (Å) are an error: overlapping atoms, a unit mix-up or a
#: duplicated atom; no interatomic potential is defined there.
MIN_DISTANCE = 0.1
#: GPUMD accepts ``weight`` in (0, 100].
MAX_WEIGHT = 100.0
#: Radius (Å) of the first, cheap pass of the isolated-atom search (see :func:`check_geometry`).
_FIRST_PASS_RADIUS = 3.0


class StructureError(NepcoreError, ValueError):
    """A raw structure that cannot go into a dataset.

    ``str(err)`` is ``"<file>: frame <k>: <field>: <problem>"``; the parts are also kept as
    attributes for programs.
    """

    def __init__(self, path: str, frame: int | None, field: str, problem: str):
        self.path, self.frame, self.field, self.problem = str(path), frame, field, problem
        where = f"{path}: frame {frame}" if frame is not None else f"{path}"
        super().__init__(f"{where}: {field}: {problem}")


def check_finite(values: np.ndarray, field: str, raise_error) -> None:
    """``raise_error(field, problem)`` if ``values`` holds NaN or inf (names the first bad row)."""
    bad = ~np.isfinite(values)
    if bad.any():
        first = np.argwhere(bad)[0]
        where = f" at atom {first[0]}" if values.ndim == 2 and field in ("positions", "forces") else ""
        value = values[tuple(first)]
        raise_error(field, f"non-finite value {value}{where}")


def check_cell(cell: np.ndarray, pbc: np.ndarray, raise_error) -> float | None:
    """Check the cell of a frame; return its volume in Å³ (None if it has none).

    A periodic direction needs a non-zero cell vector ("missing cell"); the periodic vectors
    must be linearly independent; when all three vectors are given they must form a
    right-handed cell of positive volume (GPUMD's ``det(lattice) > 0``). Non-periodic
    directions may have zero vectors: no fake vacuum box is needed.
    """
    check_finite(cell, "cell", raise_error)
    lengths = np.linalg.norm(cell, axis=1)
    names = "abc"
    for d in range(3):
        if pbc[d] and lengths[d] < 1e-8:
            raise_error("cell", f"periodic along {names[d]} but cell vector {names[d]} is zero (missing Lattice?)")
    periodic = cell[np.asarray(pbc, dtype=bool)]
    if len(periodic):
        gram = np.linalg.det(periodic @ periodic.T)
        scale = np.prod(lengths[np.asarray(pbc, dtype=bool)]) ** 2
        if gram <= 1e-12 * scale:
            raise_error("cell", "the periodic cell vectors are linearly dependent (zero volume)")
    if np.all(lengths > 1e-8):
        volume = float(np.linalg.det(cell))
        if volume <= 1e-9 * float(np.prod(lengths)):
            if pbc.any():
                raise_error("cell", f"zero or negative cell volume {volume:.6g} Å^3 (need a right-handed cell)")
            return None  # open in every direction: the cell is decoration, volume meaningless
        return volume
    return None


def check_geometry(positions: np.ndarray, cell: np.ndarray, pbc: np.ndarray, cutoff: float, raise_error) -> int:
    """Error on two atoms (or an atom and a periodic image) closer than :data:`MIN_DISTANCE`;
    return how many atoms have no neighbour inside ``cutoff`` (Å).

    Why two passes: the isolated-atom test only needs *one* neighbour per atom, and almost
    every atom has one within 3 Å, so a search at 3 Å (about 1/8 of the pairs of a 6 Å search)
    settles nearly all atoms; only frames that still have a lonely atom are searched again
    at the full cutoff.
    """
    n = len(positions)
    types = np.zeros(n, dtype=np.int64)
    # cutoff <= 0: only the close-contact check, with the smallest search that finds them
    first_radius = max(min(cutoff, _FIRST_PASS_RADIUS), MIN_DISTANCE * 1.01)
    pairs, dist = neighbor_pairs(positions, cell, pbc, types, np.array([[first_radius]]))
    check_close_contacts(pairs, dist, raise_error)
    if cutoff <= 0:
        return 0
    lonely = pairs.counts(n) == 0
    if lonely.any() and cutoff > first_radius:
        pairs, _ = neighbor_pairs(positions, cell, pbc, types, np.array([[cutoff]]))
        lonely = pairs.counts(n) == 0
    return int(lonely.sum())


def check_arrays(data, source: str) -> None:
    """Error on a non-finite value where a frame's data must be finite, in flat frames
    (:class:`~nepcore.data.structures_h5.StructureArrays`, e.g. read back from an HDF5 file).

    Positions and cells always; energy, forces and virial where the frame has them (absent
    labels are NaN by design); weights in (0, MAX_WEIGHT]. One vectorised pass, O(atoms). The
    :class:`StructureError` names ``source``, the dataset frame (``data.frame_index``), the
    field and the atom: an inf label would otherwise surface as a non-finite training loss.
    """
    offsets = np.asarray(data.offsets, dtype=np.int64) - int(data.offsets[0])

    def fail_atoms(field: str, values: np.ndarray, rows_ok: np.ndarray | None = None) -> None:
        bad = ~np.isfinite(values).all(axis=1)
        if rows_ok is not None:
            bad &= rows_ok
        if bad.any():
            atom = int(np.argmax(bad))
            f = int(np.searchsorted(offsets, atom, side="right") - 1)
            value = values[atom][~np.isfinite(values[atom])][0]
            raise StructureError(
                source, int(data.frame_index[f]), field, f"non-finite value {value} at atom {atom - int(offsets[f])}"
            )

    def fail_frames(field: str, values: np.ndarray, present: np.ndarray | None = None) -> None:
        if len(values) == 0:  # no frames (an empty split): nothing to check, and no rows to reshape
            return
        bad = ~np.isfinite(values.reshape(len(values), -1)).all(axis=1)
        if present is not None:
            bad &= np.asarray(present, dtype=bool)
        if bad.any():
            f = int(np.argmax(bad))
            value = values[f][~np.isfinite(values[f])].ravel()[0]
            raise StructureError(source, int(data.frame_index[f]), field, f"non-finite value {value}")

    fail_atoms("positions", data.positions)
    fail_frames("cell", data.cell)
    fail_frames("energy", data.energy, data.has_energy)
    has_forces_per_atom = np.repeat(np.asarray(data.has_forces, dtype=bool), np.diff(offsets))
    fail_atoms("forces", data.forces, has_forces_per_atom)
    fail_frames("virial", data.virial, data.has_virial)
    weight = np.asarray(data.weight, dtype=np.float64)
    bad = ~(np.isfinite(weight) & (weight > 0) & (weight <= MAX_WEIGHT))
    if bad.any():
        f = int(np.argmax(bad))
        raise StructureError(
            source,
            int(data.frame_index[f]),
            "weight",
            f"must be in (0, {MAX_WEIGHT:g}] as GPUMD requires, found {weight[f]}",
        )


def check_close_contacts(pairs: PairList, dist: np.ndarray, raise_error) -> None:
    """``raise_error("positions", ...)`` naming the two atoms when a pair is closer than
    :data:`MIN_DISTANCE` (the model's energy would be NaN there). Uses pairs already found."""
    if len(dist) and dist.min() < MIN_DISTANCE:
        k = int(np.argmin(dist))
        i, j = int(pairs.i[k]), int(pairs.j[k])
        what = f"atoms {i} and {j}" if i != j else f"atom {i} and its periodic image"
        raise_error("positions", f"{what} are {dist[k]:.4g} Å apart (< {MIN_DISTANCE} Å)")
