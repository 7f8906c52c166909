"""Host-side frames and the flat device batch that the model core consumes.

A :class:`Frame` is one structure in compact host form (numpy) with its neighbour pairs;
:func:`collate` concatenates frames into a :class:`Batch` of torch tensors: no padding,
atom indices of pairs offset into the concatenated atoms, per-atom frame index, and the
reference labels with per-frame presence masks. Pair vectors are *not* part of a batch: the
core forms ``r_ij = r_j - r_i + shift @ cell`` from positions on the device.

Units: Å, eV, eV/Å; virials in eV as totals per frame, order xx yy zz xy yz zx (GPUMD).
"""

from __future__ import annotations

from dataclasses import dataclass, fields

import numpy as np
import torch

from nepcore.geometry.neighbors import PairList, neighbor_pairs, split_angular
from nepcore.geometry.virial import ase_stress_to_virial6
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


def pair_cutoff_arrays(spec: ModelSpec) -> tuple[np.ndarray, np.ndarray]:
    """(T, T) radial and angular pair cutoffs (Å) of a model."""
    return np.array(spec.pair_cutoffs("radial")), np.array(spec.pair_cutoffs("angular"))


def build_pairs(
    positions: np.ndarray, cell: np.ndarray, pbc: np.ndarray, types: np.ndarray, spec: ModelSpec
) -> tuple[PairList, PairList]:
    """Radial and angular neighbour pairs of one structure for ``spec``'s cutoffs."""
    rc_radial, rc_angular = pair_cutoff_arrays(spec)
    radial, dist = neighbor_pairs(positions, cell, pbc, types, rc_radial)
    return radial, split_angular(radial, dist, types, rc_angular)


def frame_from_atoms(atoms, spec: ModelSpec, with_labels: bool = True) -> Frame:
    """A :class:`Frame` from an ``ase.Atoms``; labels from its calculator when present.

    The slow, obvious reference that tests compare the fast paths with (with :func:`collate`).
    It reads only the calculator's energy, forces and stress; code that needs the labels as
    ``nepcore convert`` reads them (GPUMD's ``force`` column, ``info["virial"]``, ``weight``)
    uses :func:`nepcore.data.atoms_batch.batch_from_atoms`.
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

    def to(self, device: torch.device | str, non_blocking: bool = False) -> "Batch":
        return Batch(**{f.name: getattr(self, f.name).to(device, non_blocking=non_blocking) for f in fields(self)})

    def pin_memory(self) -> "Batch":
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
    as_float = lambda x: torch.from_numpy(np.ascontiguousarray(x, dtype=np.float64)).to(dtype)  # noqa: E731
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
