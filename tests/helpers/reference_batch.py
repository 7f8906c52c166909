"""The slow, obvious batch assembly: the reference the package's fast paths are compared with.

:class:`Frame` is one structure with its neighbour pairs (numpy); :func:`collate` concatenates
frames into a :class:`~nepcore.model.batch.Batch` one field at a time. The package builds
batches with :func:`nepcore.data.atoms_batch.batch_from_atoms` and
:meth:`nepcore.data.neighbor_frames.CompactFrames.to_batch`, which must give the same tensors.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from nepcore.data.neighbor_frames import CompactFrames
from nepcore.geometry.neighbors import PairList, neighbor_pairs, split_angular
from nepcore.geometry.virial import ase_stress_to_virial6
from nepcore.model.batch import Batch, pair_cutoff_arrays, slot_layout
from nepcore.spec import ModelSpec


@dataclass
class Frame:
    """One structure on the host.

    positions: (n, 3) float64 Å. types: (n,) int32 model type indices. cell: (3, 3) float64
    rows = cell vectors, Å. pbc: (3,) bool. radial/angular: neighbour pairs.
    energy: total energy, eV (nan if absent). forces: (n, 3) eV/Å or None.
    virial: (6,) total virial eV (xx yy zz xy yz zx) or None. weight: per-frame loss weight.
    """

    positions: np.ndarray
    types: np.ndarray
    cell: np.ndarray
    pbc: np.ndarray
    radial: PairList
    angular: PairList
    energy: float = float("nan")
    forces: np.ndarray | None = None
    virial: np.ndarray | None = None
    weight: float = 1.0
    index: int = -1

    @property
    def n_atoms(self) -> int:
        return int(self.positions.shape[0])


def build_pairs(
    positions: np.ndarray, cell: np.ndarray, pbc: np.ndarray, types: np.ndarray, spec: ModelSpec
) -> tuple[PairList, PairList]:
    """Radial and angular neighbour pairs of one structure for ``spec``'s cutoffs."""
    rc_radial, rc_angular = pair_cutoff_arrays(spec)
    radial, dist = neighbor_pairs(positions, cell, pbc, types, rc_radial)
    return radial, split_angular(radial, dist, types, rc_angular)


def frame_from_atoms(atoms, spec: ModelSpec, with_labels: bool = True) -> Frame:
    """A :class:`Frame` from an ``ase.Atoms``; labels from its calculator when present.

    It reads only the calculator's energy, forces and stress; the package's path
    (:func:`nepcore.data.atoms_batch.batch_from_atoms`) reads the labels as ``nepcore convert``
    does (GPUMD's ``force`` column, ``info["virial"]``, ``weight``).
    """
    symbols = atoms.get_chemical_symbols()
    index = {s: t for t, s in enumerate(spec.elements)}
    try:
        types = np.array([index[s] for s in symbols], dtype=np.int32)
    except KeyError as err:
        raise ValueError(f"element {err.args[0]} is not a type of the model {list(spec.elements)}") from None
    positions = atoms.get_positions().astype(np.float64)
    cell = atoms.cell.array.astype(np.float64)
    pbc = np.asarray(atoms.pbc, dtype=bool)
    radial, angular = build_pairs(positions, cell, pbc, types, spec)
    frame = Frame(positions, types, cell, pbc, radial, angular)
    if with_labels and atoms.calc is not None:
        results = getattr(atoms.calc, "results", {})
        if "energy" in results:
            frame.energy = float(results["energy"])
        if "forces" in results:
            frame.forces = np.asarray(results["forces"], dtype=np.float64)
        if "stress" in results and all(pbc):
            frame.virial = ase_stress_to_virial6(np.asarray(results["stress"]), atoms.get_volume())
    return frame


def frames_of(compact: CompactFrames) -> list[Frame]:
    """The frames of a :class:`~nepcore.data.neighbor_frames.CompactFrames` as :class:`Frame`
    objects (positions/forces upcast to float64)."""
    frames = []
    for f in range(compact.n_frames):
        a = slice(
            int(compact.atom_offsets[f] - compact.atom_offsets[0]),
            int(compact.atom_offsets[f + 1] - compact.atom_offsets[0]),
        )
        p = slice(
            int(compact.pair_offsets[f] - compact.pair_offsets[0]),
            int(compact.pair_offsets[f + 1] - compact.pair_offsets[0]),
        )
        n = a.stop - a.start
        i = np.repeat(np.arange(n, dtype=np.int32), compact.radial_count[a])
        radial = PairList(i, compact.pair_j[p].copy(), compact.pair_shift[p].astype(np.int32))
        frames.append(Frame(
            positions=compact.positions[a].astype(np.float64),
            types=compact.types[a].copy(),
            cell=compact.cells[f].copy(),
            pbc=compact.pbc[f].copy(),
            radial=radial,
            angular=radial.select(compact.angular[p]),
            energy=float(compact.energy[f]) if compact.has_energy[f] else float("nan"),
            forces=compact.forces[a].astype(np.float64) if compact.has_forces[f] else None,
            virial=compact.virial[f].copy() if compact.has_virial[f] else None,
            weight=float(compact.weight[f]),
            index=int(compact.frame_index[f]),
        ))  # fmt: skip
    return frames


def store_frames(store, indices) -> list[Frame]:
    """:class:`Frame` objects of the frames ``indices`` of a StreamDataStore."""
    return frames_of(store._take(np.asarray(indices, dtype=np.int64)))


def collate(frames: list[Frame], dtype: torch.dtype = torch.float64) -> Batch:
    """Concatenate frames into one :class:`Batch` on the CPU (float tensors in ``dtype``)."""
    n_atoms = np.array([f.n_atoms for f in frames], dtype=np.int64)
    offsets = np.concatenate([[0], np.cumsum(n_atoms)[:-1]])

    def pairs(name: str):
        i = np.concatenate([getattr(f, name).i.astype(np.int64) + o for f, o in zip(frames, offsets)])
        j = np.concatenate([getattr(f, name).j.astype(np.int64) + o for f, o in zip(frames, offsets)])
        s = np.concatenate([getattr(f, name).shift for f in frames])
        return torch.from_numpy(i), torch.from_numpy(j), torch.from_numpy(s).to(dtype)

    ri, rj, rs = pairs("radial")
    ai, aj, ash = pairs("angular")
    slot, n_slots = slot_layout(ai.numpy(), int(n_atoms.sum()))
    forces = [f.forces if f.forces is not None else np.zeros((f.n_atoms, 3)) for f in frames]
    virial = [f.virial if f.virial is not None else np.zeros(6) for f in frames]
    as_float = lambda x: torch.from_numpy(np.ascontiguousarray(x, dtype=np.float64)).to(dtype)
    return Batch(
        positions=as_float(np.concatenate([f.positions for f in frames])),
        types=torch.from_numpy(np.concatenate([f.types for f in frames]).astype(np.int64)),
        atom_frame=torch.from_numpy(np.repeat(np.arange(len(frames)), n_atoms)),
        cells=as_float(np.stack([f.cell for f in frames])),
        atoms_per_frame=as_float(n_atoms),
        radial_i=ri,
        radial_j=rj,
        radial_shift=rs,
        angular_i=ai,
        angular_j=aj,
        angular_shift=ash,
        angular_slot=torch.from_numpy(slot),
        angular_slots=torch.zeros(n_slots, dtype=torch.int8),
        energy=as_float(np.nan_to_num([f.energy for f in frames], nan=0.0)),
        has_energy=torch.tensor([bool(np.isfinite(f.energy)) for f in frames]),
        forces=as_float(np.concatenate(forces)),
        has_forces=torch.tensor([f.forces is not None for f in frames]),
        virial=as_float(np.stack(virial)),
        has_virial=torch.tensor([f.virial is not None for f in frames]),
        weight=as_float([f.weight for f in frames]),
        frame_index=torch.tensor([f.index for f in frames], dtype=torch.int64),
    )
