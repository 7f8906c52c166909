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

    def to(self, device: torch.device | str, non_blocking: bool = False) -> Batch:
        return Batch(**{f.name: getattr(self, f.name).to(device, non_blocking=non_blocking) for f in fields(self)})

    def pin_memory(self) -> Batch:
        return Batch(**{f.name: getattr(self, f.name).pin_memory() for f in fields(self)})


def slot_layout(i: np.ndarray, n_atoms: int) -> tuple[np.ndarray, int]:
    """Slot of each pair within its centre atom's list (pairs sorted by i) and the slot count.

    i: (n_pairs,) centre indices, sorted. Returns (n_pairs,) int64 slots and max(1, largest
    neighbour count).
    """
    counts = np.bincount(i, minlength=n_atoms)
    start = np.cumsum(counts) - counts
    slot = np.arange(len(i), dtype=np.int64) - start[i]
    return slot, max(1, int(counts.max()) if len(counts) else 1)
