"""The flat batch that the model core consumes (the core's input contract).

A :class:`Batch` holds the concatenated atoms of several frames as torch tensors: no padding,
atom indices of pairs offset into the concatenated atoms, per-atom frame index, and the
reference labels with per-frame presence masks. Pair vectors are *not* part of a batch: the
core forms ``r_ij = r_j - r_i + shift @ cell`` from positions on the device. Batches are built
by :func:`nepcore.data.atoms_batch.batch_from_atoms` (from ``ase.Atoms``) and by the data store
(:meth:`nepcore.data.neighbor_frames.CompactFrames.to_batch`); the tests keep a slow, obvious
reference assembly (``tests/helpers/reference_batch.py``) that both are compared with.

Units: Å, eV, eV/Å; virials in eV as totals per frame, order xx yy zz xy yz zx (GPUMD).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, fields

import numpy as np
import torch

from nepcore.spec import ModelSpec


def pair_cutoff_arrays(spec: ModelSpec) -> tuple[np.ndarray, np.ndarray]:
    """(T, T) radial and angular pair cutoffs (Å) of a model."""
    return np.array(spec.pair_cutoffs("radial")), np.array(spec.pair_cutoffs("angular"))


@dataclass
class Batch:
    """Concatenated frames as torch tensors (see the module docstring for units).

    positions (N, 3); types (N,) long; atom_frame (N,) long; cells (F, 3, 3);
    atoms_per_frame (F,) float; radial_i/j (P,) long, radial_shift (P, 3) float;
    angular_i/j (Q,) long, angular_shift (Q, 3) float; angular_slot (Q,) long: position of
    each angular pair in its centre atom's list; angular_slots (M,) int8 zeros whose *length*
    M is the largest angular neighbour count (a static size for the dense angular layout, so
    no value has to be read back from the device); energy (F,) total eV (0 where absent);
    has_energy (F,) bool; forces (N, 3) (0 where absent); has_forces (F,) bool;
    virial (F, 6) total eV; has_virial (F,) bool; weight (F,); frame_index (F,) long.
    """

    positions: torch.Tensor
    types: torch.Tensor
    atom_frame: torch.Tensor
    cells: torch.Tensor
    atoms_per_frame: torch.Tensor
    radial_i: torch.Tensor
    radial_j: torch.Tensor
    radial_shift: torch.Tensor
    angular_i: torch.Tensor
    angular_j: torch.Tensor
    angular_shift: torch.Tensor
    angular_slot: torch.Tensor
    angular_slots: torch.Tensor
    energy: torch.Tensor
    has_energy: torch.Tensor
    forces: torch.Tensor
    has_forces: torch.Tensor
    virial: torch.Tensor
    has_virial: torch.Tensor
    weight: torch.Tensor
    frame_index: torch.Tensor

    @property
    def n_atoms(self) -> int:
        return int(self.positions.shape[0])

    @property
    def n_frames(self) -> int:
        return int(self.cells.shape[0])

    @property
    def nbytes(self) -> int:
        """Bytes of the batch's tensors."""
        return sum(getattr(self, f.name).nbytes for f in fields(self))

    def to(self, device: torch.device | str, non_blocking: bool = False) -> Batch:
        return Batch(**{f.name: getattr(self, f.name).to(device, non_blocking=non_blocking) for f in fields(self)})

    def pin_memory(self) -> Batch:
        return Batch(**{f.name: getattr(self, f.name).pin_memory() for f in fields(self)})


def frame_bounds(atoms_per_frame: Sequence[float] | np.ndarray, parts: int) -> list[int]:
    """Where to cut a batch's frames into ``parts`` runs of whole frames with about equal atoms.

    Args:
        atoms_per_frame: (F,) atoms of each frame, in batch order.
        parts: runs wanted; fewer when the batch has fewer frames.
    Returns:
        Frame boundaries ``[0, b1, …, F]``, strictly increasing (every run holds a frame): run k
        is frames ``b[k]:b[k+1]``. Each cut is the frame boundary nearest to k/parts of the atoms.
    """
    n_frames = len(atoms_per_frame)
    parts = max(1, min(parts, n_frames))
    ends = np.cumsum(np.asarray(atoms_per_frame, dtype=np.float64))  # atoms up to each frame's end
    bounds = [0]
    for k in range(1, parts):
        target = ends[-1] * k / parts
        low, high = bounds[-1] + 1, n_frames - (parts - k)  # leave a frame for every later run
        cut = low + int(np.argmin(np.abs(ends[low - 1 : high] - target)))
        bounds.append(cut)
    return bounds + [n_frames]


def split_frames(batch: Batch, bounds: list[int]) -> list[Batch]:
    """The batches of the frame runs ``bounds`` (:func:`frame_bounds`) of a CPU ``batch``.

    Each part holds its frames' atoms, pairs and labels (views, except the pair indices, which
    are offset to the part's atoms) and keeps the batch's angular slot count, so the dense
    angular layout of an atom is the same as in the whole batch. Requires the pairs sorted by
    centre atom, as every nepcore batch has them (so a frame's pairs are one run of rows).

    Args:
        batch: the whole batch (on the CPU: the cuts are looked up on the host).
        bounds: frame boundaries, strictly increasing, from 0 to the frame count.
    Returns:
        One Batch per run, in order.
    """
    atom_bounds = torch.cumsum(batch.atoms_per_frame.to(torch.int64), 0).tolist()
    atoms = [0] + atom_bounds
    cuts = torch.tensor([atoms[b] for b in bounds], dtype=batch.radial_i.dtype)
    radial = torch.searchsorted(batch.radial_i, cuts).tolist()
    angular = torch.searchsorted(batch.angular_i, cuts).tolist()
    parts = []
    for k in range(len(bounds) - 1):
        f0, f1, a0, a1 = bounds[k], bounds[k + 1], atoms[bounds[k]], atoms[bounds[k + 1]]
        p0, p1, q0, q1 = radial[k], radial[k + 1], angular[k], angular[k + 1]
        parts.append(
            Batch(
                positions=batch.positions[a0:a1],
                types=batch.types[a0:a1],
                atom_frame=batch.atom_frame[a0:a1] - f0,
                cells=batch.cells[f0:f1],
                atoms_per_frame=batch.atoms_per_frame[f0:f1],
                radial_i=batch.radial_i[p0:p1] - a0,
                radial_j=batch.radial_j[p0:p1] - a0,
                radial_shift=batch.radial_shift[p0:p1],
                angular_i=batch.angular_i[q0:q1] - a0,
                angular_j=batch.angular_j[q0:q1] - a0,
                angular_shift=batch.angular_shift[q0:q1],
                angular_slot=batch.angular_slot[q0:q1],
                angular_slots=batch.angular_slots,
                energy=batch.energy[f0:f1],
                has_energy=batch.has_energy[f0:f1],
                forces=batch.forces[a0:a1],
                has_forces=batch.has_forces[f0:f1],
                virial=batch.virial[f0:f1],
                has_virial=batch.has_virial[f0:f1],
                weight=batch.weight[f0:f1],
                frame_index=batch.frame_index[f0:f1],
            )
        )
    return parts


def slot_layout(i: np.ndarray, n_atoms: int) -> tuple[np.ndarray, int]:
    """Slot of each pair within its centre atom's list (pairs sorted by i) and the slot count.

    i: (n_pairs,) centre indices, sorted. Returns (n_pairs,) int64 slots and max(1, largest
    neighbour count).
    """
    counts = np.bincount(i, minlength=n_atoms)
    start = np.cumsum(counts) - counts
    slot = np.arange(len(i), dtype=np.int64) - start[i]
    return slot, max(1, int(counts.max()) if len(counts) else 1)
