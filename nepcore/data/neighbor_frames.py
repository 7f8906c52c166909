"""Frames and their neighbour pairs in the compact host form of the data store.

Why this form: at a 6 Å cutoff a metal atom has ~70 radial neighbours, so the pair lists,
not the atoms, set the memory. :class:`PairList`'s int32 ``i, j, shift`` would cost 20 bytes a
pair (> 1.4 KB per atom). Here a pair costs 8 bytes: ``i`` is implicit (pairs are sorted by
``i``, so a per-atom neighbour count replaces it), ``j`` is an int32 index inside its frame,
the image shift is int8 x 3, and the angular pairs are a bool mask over the radial pairs (the
angular cutoff never exceeds the radial one, and ``split_angular`` keeps the radial order).

:meth:`CompactFrames.to_batch` assembles a :class:`~nepcore.model.batch.Batch` vectorised over
the frames; the tests compare it, element for element, with a slow frame-by-frame reference
assembly (``tests/helpers/reference_batch.py``).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, fields

import numpy as np
import torch

from nepcore.data.checks import StructureError, check_arrays, check_close_contacts
from nepcore.data.structures_h5 import StructureArrays
from nepcore.errors import NepcoreError
from nepcore.geometry.neighbors import neighbor_pairs
from nepcore.geometry.virial import REFERENCE_VIRIAL_INDEX
from nepcore.model.batch import Batch, pair_cutoff_arrays, slot_layout
from nepcore.spec import ModelSpec

_NUMPY_OF = {torch.float32: np.float32, torch.float64: np.float64}


class FramesError(NepcoreError, ValueError):
    """Frames that do not fit a model: a species the model lacks, a cell too small for its cutoff."""


def numpy_float(dtype: torch.dtype) -> type:
    """The numpy float type of host arrays for a torch float ``dtype`` (float32 or float64)."""
    if dtype not in _NUMPY_OF:
        raise ValueError(f"dtype must be torch.float32 or torch.float64, found {dtype}")
    return _NUMPY_OF[dtype]


PER_ATOM = ("positions", "types", "forces", "radial_count")
PER_PAIR = ("pair_j", "pair_shift", "angular")
PER_FRAME = (
    "cells",
    "pbc",
    "energy",
    "has_energy",
    "has_forces",
    "virial",
    "has_virial",
    "weight",
    "frame_index",
    "max_radial",
    "max_angular",
)


@dataclass
class CompactFrames:
    """F frames with N atoms and P radial pairs, all in numpy on the host.

    Per atom: positions (N, 3) float32|float64, Å; types (N,) int32 model type indices;
    forces (N, 3) same float type, eV/Å (0 where a frame has none); radial_count (N,) int32
    radial neighbours of each atom. Per pair (radial, sorted by centre atom, then as
    :func:`~nepcore.geometry.neighbors.neighbor_pairs` orders them): pair_j (P,) int32 neighbour
    index inside its frame; pair_shift (P, 3) int8 cell-image shift; angular (P,) bool, the
    pair is also inside the angular cutoff. Per frame: atom_offsets, pair_offsets (F+1,)
    int64 (start at 0); cells (F, 3, 3) float64 Å; pbc (F, 3) bool; energy (F,) float64 total
    eV (NaN where absent); virial (F, 6) float64 total eV, xx yy zz xy yz zx (NaN where
    absent); has_energy/has_forces/has_virial (F,) bool; weight (F,) float64; frame_index
    (F,) int64 index in the dataset; max_radial/max_angular (F,) int32 largest neighbour
    counts of an atom in the frame.
    """

    atom_offsets: np.ndarray
    pair_offsets: np.ndarray
    positions: np.ndarray
    types: np.ndarray
    forces: np.ndarray
    radial_count: np.ndarray
    pair_j: np.ndarray
    pair_shift: np.ndarray
    angular: np.ndarray
    cells: np.ndarray
    pbc: np.ndarray
    energy: np.ndarray
    has_energy: np.ndarray
    has_forces: np.ndarray
    virial: np.ndarray
    has_virial: np.ndarray
    weight: np.ndarray
    frame_index: np.ndarray
    max_radial: np.ndarray
    max_angular: np.ndarray

    @property
    def n_frames(self) -> int:
        return int(self.atom_offsets.shape[0] - 1)

    @property
    def n_atoms(self) -> int:
        return int(self.atom_offsets[-1] - self.atom_offsets[0])

    @property
    def nbytes(self) -> int:
        """Host bytes held by the arrays."""
        return int(sum(getattr(self, f.name).nbytes for f in fields(self)))

    # ---- selection ---------------------------------------------------------------------------
    def take(self, indices: np.ndarray) -> CompactFrames:
        """Frames ``indices`` (positions in this object, any order, repeats allowed), copied.

        Each frame's atoms and pairs are contiguous, so this concatenates slices (memcpy)
        rather than gathering element by element: ~10x faster for batch-sized selections.
        """
        indices = np.asarray(indices, dtype=np.int64)
        atom_bounds = (self.atom_offsets - self.atom_offsets[0]).tolist()
        pair_bounds = (self.pair_offsets - self.pair_offsets[0]).tolist()
        atoms = [slice(atom_bounds[f], atom_bounds[f + 1]) for f in indices.tolist()]
        pairs = [slice(pair_bounds[f], pair_bounds[f + 1]) for f in indices.tolist()]

        def gather(name: str, parts: list[slice]) -> np.ndarray:
            values = getattr(self, name)
            return np.concatenate([values[p] for p in parts]) if parts else values[:0].copy()

        return CompactFrames(
            atom_offsets=_offsets(np.diff(self.atom_offsets)[indices]),
            pair_offsets=_offsets(np.diff(self.pair_offsets)[indices]),
            **{k: gather(k, atoms) for k in PER_ATOM},
            **{k: gather(k, pairs) for k in PER_PAIR},
            **{k: getattr(self, k)[indices] for k in PER_FRAME},
        )

    @staticmethod
    def concatenate(parts: list[CompactFrames], release: bool = False) -> CompactFrames:
        """One object holding the frames of ``parts`` in order.

        release: drop each array of ``parts`` once it is copied (the parts become unusable),
        so the peak memory is the result plus one array's parts instead of twice the result.
        """
        n_atoms = np.concatenate([np.diff(p.atom_offsets) for p in parts])
        n_pairs = np.concatenate([np.diff(p.pair_offsets) for p in parts])
        joined = {}
        for name in PER_ATOM + PER_PAIR + PER_FRAME:
            joined[name] = np.concatenate([getattr(p, name) for p in parts])
            if release:
                for p in parts:
                    setattr(p, name, None)
        return CompactFrames(atom_offsets=_offsets(n_atoms), pair_offsets=_offsets(n_pairs), **joined)

    # ---- conversion --------------------------------------------------------------------------
    def to_batch(self, dtype: torch.dtype = torch.float64) -> Batch:
        """All frames as one :class:`Batch` on the CPU, float tensors in ``dtype``.

        Equal to the tests' frame-by-frame reference assembly, but vectorised. All
        the work is numpy (casts and boolean selection there are 10-50x faster than torch's
        on CPU); the tensors wrap the arrays, which this object must not share: call it on a
        :meth:`take` result (as the store does), not on the store's own arrays.
        """
        real = _NUMPY_OF[dtype]
        n_atoms = np.diff(self.atom_offsets)
        n_pairs = np.diff(self.pair_offsets)
        first_atom = self.atom_offsets[:-1] - self.atom_offsets[0]
        radial_i = np.repeat(np.arange(self.n_atoms, dtype=np.int64), self.radial_count)
        radial_j = self.pair_j.astype(np.int64)
        radial_j += np.repeat(first_atom, n_pairs)
        shift = self.pair_shift.astype(real)
        angular = self.angular
        slot, n_slots = slot_layout(radial_i[angular], self.n_atoms)
        as_tensor = lambda x, t=real: torch.from_numpy(np.ascontiguousarray(x, dtype=t))
        return Batch(
            positions=as_tensor(self.positions),
            types=as_tensor(self.types, np.int64),
            atom_frame=torch.from_numpy(np.repeat(np.arange(self.n_frames, dtype=np.int64), n_atoms)),
            cells=as_tensor(self.cells),
            atoms_per_frame=as_tensor(n_atoms),
            radial_i=torch.from_numpy(radial_i),
            radial_j=torch.from_numpy(radial_j),
            radial_shift=torch.from_numpy(shift),
            angular_i=torch.from_numpy(radial_i[angular]),
            angular_j=torch.from_numpy(radial_j[angular]),
            angular_shift=torch.from_numpy(shift[angular]),
            angular_slot=torch.from_numpy(slot),
            angular_slots=torch.zeros(n_slots, dtype=torch.int8),
            energy=as_tensor(np.where(self.has_energy, self.energy, 0.0)),
            has_energy=as_tensor(self.has_energy, bool),
            forces=as_tensor(self.forces),
            has_forces=as_tensor(self.has_forces, bool),
            virial=as_tensor(np.where(self.has_virial[:, None], self.virial, 0.0)),
            has_virial=as_tensor(self.has_virial, bool),
            weight=as_tensor(self.weight),
            frame_index=as_tensor(self.frame_index, np.int64),
        )


def _fail(source: str, frame: int, field: str, problem: str):
    raise StructureError(source, frame, field, problem)


def _offsets(counts: np.ndarray) -> np.ndarray:
    return np.concatenate([[0], np.cumsum(counts, dtype=np.int64)]).astype(np.int64)


def type_map(dataset_species: tuple[str, ...], spec: ModelSpec) -> np.ndarray:
    """(len(dataset_species),) int32: model type index of each dataset species, -1 if absent."""
    return np.array([spec.elements.index(s) if s in spec.elements else -1 for s in dataset_species], dtype=np.int32)


def compact_frames(
    data: StructureArrays, spec: ModelSpec, dtype: np.dtype = np.float32, source: str = "<structures>"
) -> CompactFrames:
    """Build the compact form of ``data``, computing each frame's pairs for ``spec``'s cutoffs.

    dtype: numpy float type of positions and forces on the host. source: the file named in
    errors. Raises ValueError if a species present in ``data`` is not a type of ``spec``, or a
    cell is so small that an image shift does not fit int8; StructureError ("<source>: frame
    <k>: <field>: ...") on a non-finite position, cell or label, or two atoms closer than
    0.1 Å (checked on the pair distances the search returns anyway).
    """
    check_arrays(data, source)
    mapping = type_map(data.species, spec)
    types = mapping[data.types.astype(np.int64)] if data.n_atoms else np.zeros(0, np.int32)
    if (types < 0).any():
        missing = sorted({data.species[t] for t in np.unique(data.types[types < 0]).tolist()})
        raise FramesError(
            f"species {' '.join(missing)} in the data are not types of the model ({' '.join(spec.elements)})"
        )
    rc_radial, rc_angular = pair_cutoff_arrays(spec)
    pair_j, pair_shift, angular, radial_count, n_pairs = [], [], [], [], []
    max_radial = np.zeros(data.n_frames, np.int32)
    max_angular = np.zeros(data.n_frames, np.int32)
    for f in range(data.n_frames):
        atoms = data.frame_slice(f)
        t = types[atoms]
        pairs, dist = neighbor_pairs(data.positions[atoms], data.cell[f], data.pbc[f], t, rc_radial)
        check_close_contacts(pairs, dist, functools.partial(_fail, source, int(data.frame_index[f])))
        # the rule of neighbors.split_angular, kept as a mask over the radial pairs
        is_angular = dist < rc_angular[t[pairs.i], t[pairs.j]]
        if len(pairs) and np.abs(pairs.shift).max() > np.iinfo(np.int8).max:
            raise FramesError(
                f"frame {int(data.frame_index[f])}: cell too small for the cutoff (image shift beyond 127)"
            )
        count = pairs.counts(len(t)).astype(np.int32)
        pair_j.append(pairs.j.astype(np.int32))
        pair_shift.append(pairs.shift.astype(np.int8))
        angular.append(is_angular)
        radial_count.append(count)
        n_pairs.append(len(pairs))
        max_radial[f] = count.max(initial=0)
        max_angular[f] = np.bincount(pairs.i[is_angular], minlength=len(t)).max(initial=0)
    has_forces = data.has_forces
    forces = np.where(np.isfinite(data.forces), data.forces, 0.0)
    virial6 = (
        np.stack([data.virial[:, a, b] for a, b in REFERENCE_VIRIAL_INDEX], axis=1)
        if data.n_frames
        else np.zeros((0, 6))
    )
    join = lambda parts, empty: np.concatenate(parts) if parts else empty
    return CompactFrames(
        atom_offsets=data.offsets - data.offsets[0],
        pair_offsets=_offsets(np.array(n_pairs, dtype=np.int64)),
        positions=data.positions.astype(dtype),
        types=types.astype(np.int32),
        forces=forces.astype(dtype),
        radial_count=join(radial_count, np.zeros(0, np.int32)),
        pair_j=join(pair_j, np.zeros(0, np.int32)),
        pair_shift=join(pair_shift, np.zeros((0, 3), np.int8)).reshape(-1, 3),
        angular=join(angular, np.zeros(0, bool)),
        cells=data.cell.astype(np.float64),
        pbc=data.pbc.astype(bool),
        energy=data.energy.astype(np.float64),
        has_energy=data.has_energy.astype(bool),
        has_forces=has_forces.astype(bool),
        virial=virial6.astype(np.float64),
        has_virial=data.has_virial.astype(bool),
        weight=data.weight.astype(np.float64),
        frame_index=data.frame_index.astype(np.int64),
        max_radial=max_radial,
        max_angular=max_angular,
    )
