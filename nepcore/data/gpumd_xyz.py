"""Writing frames as GPUMD-ready extended XYZ (``train.xyz`` / ``test.xyz``).

Each frame is written as GPUMD's ``structure.cu`` reads it (docs/model.md#forces-virial-and-stress)::

    <n atoms>
    Lattice="ax ay az bx by bz cx cy cz" energy=E virial="xx xy xz yx yy yz zx zy zz" weight=w
    config_type=label pbc="T T T" Properties=species:S:1:pos:R:3:force:R:3
    Pd x y z fx fy fz

Units Å, eV, eV/Å, eV (total virial). Numbers are written with Python's shortest exact
``repr``, so reading the file back gives bit-identical values. ``Lattice`` and
``Properties`` are capitalised because ASE only recognises them so; GPUMD lower-cases keys.
A frame without energy, forces or virial simply lacks that key/column (GPUMD needs energy
and forces for training; :class:`ExportCounts` reports frames lacking them).
Non-periodic directions get a vacuum gap of :data:`VACUUM_MARGIN` (see :func:`gpumd_cell`):
GPUMD's trainer needs a 3x3 lattice and, except for its long-range models, ignores ``pbc``
and treats every frame as periodic. ``pbc`` is still written for ASE and other readers.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np

from nepcore._utils import atomic_open
from nepcore.data.structures_h5 import StructureArrays

#: Vacuum gap (Å) between a non-periodic frame and its periodic image in the exported
#: lattice: wider than any practical NEP cutoff, so GPUMD sees no image interactions.
VACUUM_MARGIN = 20.0


@dataclass
class ExportCounts:
    frames: int = 0
    atoms: int = 0
    without_energy: int = 0
    without_forces: int = 0
    without_virial: int = 0


def gpumd_cell(cell: np.ndarray, pbc: np.ndarray, positions: np.ndarray) -> np.ndarray:
    """A right-handed (3, 3) cell (Å) that GPUMD's trainer treats as the frame means.

    GPUMD reads ``pbc`` only for its long-range models and otherwise replicates every frame
    periodically, so each non-periodic direction needs a vacuum gap wider than any cutoff:
    a zero cell vector becomes a vector orthogonal to the given ones, and a given one is
    lengthened, until the gap between the atoms and their image is :data:`VACUUM_MARGIN`.
    Periodic directions are never changed.
    """
    cell = np.array(cell, dtype=np.float64, copy=True)
    open_dirs = ~np.asarray(pbc, dtype=bool)
    if not open_dirs.any():
        return cell
    zero = np.linalg.norm(cell, axis=1) < 1e-8
    if (zero & ~open_dirs).any():
        raise ValueError("a periodic direction has no cell vector")
    chosen = [cell[d] / np.linalg.norm(cell[d]) for d in range(3) if not zero[d]]
    filled = []
    for d in np.flatnonzero(zero):
        # prefer the Cartesian axis of the same index; Gram-Schmidt it against what we have
        for e in np.roll(np.eye(3), -d, axis=0):
            u = e - sum(np.dot(e, c) * c for c in chosen)
            if np.linalg.norm(u) > 0.1:
                u = u / np.linalg.norm(u)
                break
        chosen.append(u)
        cell[d] = u
        filled.append(d)
    if np.linalg.det(cell) < 0:
        cell[filled[-1] if filled else np.flatnonzero(open_dirs)[-1]] *= -1.0
    for d in np.flatnonzero(open_dirs):
        normal = np.cross(cell[(d + 1) % 3], cell[(d + 2) % 3])
        normal /= np.linalg.norm(normal)
        height = abs(np.dot(cell[d], normal))
        extent = np.ptp(positions @ normal) if len(positions) else 0.0
        if height - extent < VACUUM_MARGIN:
            cell[d] *= (extent + VACUUM_MARGIN) / height
    return cell


def _value(x: float) -> str:
    return repr(float(x))


def _quoted(text: str) -> str:
    if text and not any(c.isspace() or c in "\"'=" for c in text):
        return text
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def frame_lines(data: StructureArrays, f: int) -> list[str]:
    """The lines (without newlines) of frame ``f`` of ``data`` in GPUMD's extxyz format."""
    atoms = data.frame_slice(f)
    positions = data.positions[atoms]
    pbc = data.pbc[f]
    cell = gpumd_cell(data.cell[f], pbc, positions)
    comment = ['Lattice="' + " ".join(_value(x) for x in cell.ravel()) + '"']
    if data.has_energy[f]:
        comment.append(f"energy={_value(data.energy[f])}")
    if data.has_virial[f]:
        comment.append('virial="' + " ".join(_value(x) for x in data.virial[f].ravel()) + '"')
    comment.append(f"weight={_value(data.weight[f])}")
    if data.config_type[f]:
        comment.append(f"config_type={_quoted(data.config_type[f])}")
    comment.append('pbc="' + " ".join("T" if p else "F" for p in pbc) + '"')
    with_forces = bool(data.has_forces[f])
    comment.append("Properties=species:S:1:pos:R:3" + (":force:R:3" if with_forces else ""))
    symbols = [data.species[t] for t in data.types[atoms].tolist()]
    columns = np.hstack([positions, data.forces[atoms]]) if with_forces else positions
    body = [s + " " + " ".join(map(repr, row)) for s, row in zip(symbols, columns.tolist())]
    return [str(len(symbols)), " ".join(comment), *body]


def write_gpumd_xyz(path: str | os.PathLike, data: StructureArrays) -> ExportCounts:
    """Write every frame of ``data`` to ``path`` (atomically: temp file + rename)."""
    counts = ExportCounts(
        frames=data.n_frames,
        atoms=data.n_atoms,
        without_energy=int((~data.has_energy).sum()),
        without_forces=int((~data.has_forces).sum()),
        without_virial=int((~data.has_virial).sum()),
    )
    with atomic_open(path) as out:
        for f in range(data.n_frames):
            out.write("\n".join(frame_lines(data, f)))
            out.write("\n")
    return counts
