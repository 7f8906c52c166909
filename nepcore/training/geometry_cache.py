"""Per-frame pair geometry kept across epochs by the eager CPU training step.

The pair vectors, distances, type pairs, Chebyshev basis (with its derivative) and unit
vectors of a frame's pairs (:class:`nepcore.model.potential.PairGeometry`) do not depend on the
parameters, so every epoch recomputed the same numbers: the step with the cache is 1.16-1.20x
faster at the default batch (``benchmarks/bench_step.py --modes cached``). :class:`GeometryCache` keeps
them per frame the first time a frame is seen and assembles a later batch's geometry by
concatenating its frames' rows (every operation is per pair, so these are the bits of
computing them again).

The radial pairs are kept as couples (:class:`nepcore.model.potential.RadialCouples`): each
pair and its reverse once, with the per-atom, per-type basis sums that the radial descriptors
contract. The descriptors and energies are the full list's to the bit; the forces and virials
add the two directions' terms before multiplying by the basis derivative, so they agree with
the full list to rounding (float64: 1e-15 relative), and a stage trains byte-identically with
the cache kept or not (:class:`GeometryCache` ``keep``), so how much memory a resumed stage
finds never changes its numbers. A step does half the radial channel's per-pair work of the
forces, virials and their backward pass (at a 6 Å radial cutoff ~60 radial pairs per atom
against ~16 angular): 0.88-0.97 of the full list's step time at the default batch (sweep_k4,
5 frames; 0.93 on sweep_k8), 0.87 at 20 frames (``benchmarks/bench_couples.py``, interleaved in
one process, one thread), and the cache holds 0.58-0.61 of the bytes it held with the full list.
Computed every step (the cache not kept) the couples cost a matching of each pair with its
reverse on the host, ~4 % more than the full list computed every step.

Where it is used (:func:`geometry_cache_for`): every CPU stage on the eager analytical step
takes the couples; it keeps the geometry when its splits are held in memory and the geometry
fits in :data:`MEMORY_SHARE` of the memory available at the start. On CUDA the geometry is
cheaper to compute than to copy to the device, the compiled step has it inside its graph, and
the autograd force path differentiates it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from nepcore.data.store import StreamDataStore, available_memory_bytes
from nepcore.model import potential as core
from nepcore.model.batch import Batch
from nepcore.spec import ModelSpec

#: Largest share of the memory available at the stage's start the cache may take.
MEMORY_SHARE = 0.25


def cache_nbytes(spec: ModelSpec, stores: list[StreamDataStore], itemsize: int) -> int | None:
    """Bytes the cached geometry of every frame of ``stores`` takes.

    Per angular pair: vector and unit vector (6), distance, basis and derivative (2 (KA+1))
    floats and one int64 type pair. Per radial couple (half the store's radial pairs, which
    hold every pair both ways): vector (3), distance and basis derivative (KR+1) floats and
    four int64 indices. Per atom: T (KR+1) basis sums.

    Args:
        spec: the model (basis sizes, types).
        stores: the splits.
        itemsize: bytes per float (4 in float32).
    Returns:
        Bytes, or None when a store is lazy (its pairs are on disk and not counted).
    """
    counts = [store.pair_counts() for store in stores]
    if any(c is None for c in counts):
        return None
    couples = sum(c[0] for c in counts) // 2
    angular = sum(c[1] for c in counts)
    atoms = sum(store.n_atoms for store in stores)
    per_couple = (4 + spec.basis_size_radial + 1) * itemsize + 4 * 8
    per_angular = (7 + 2 * (spec.basis_size_angular + 1)) * itemsize + 8
    per_atom = spec.n_types * (spec.basis_size_radial + 1) * itemsize
    return couples * per_couple + angular * per_angular + atoms * per_atom


@dataclass
class _Frame:
    """One frame's cached geometry. angular: PairGeometry's angular fields (its rows of the
    batch it was first seen in). index: (H, 4) int64 frame-local (i, j, row_ij, row_ji) of its
    couples, row_ji −1 for a one-way pair; rv, r, df: the couples' rows; sums: (n·T, KR+1)."""

    n_atoms: int
    angular: dict[str, torch.Tensor | None]
    index: torch.Tensor
    rv: torch.Tensor
    r: torch.Tensor
    df: torch.Tensor
    sums: torch.Tensor
    one_way: bool


class GeometryCache:
    """Pair geometry of each frame seen so far, keyed by dataset frame index (unique over the
    splits it serves: :func:`geometry_cache_for` checks).

    The geometry is kept as row ranges (views) of the batch where a frame was first seen; a
    later batch concatenates its frames' rows in its own frame order (the batch's atoms and
    pairs are grouped by frame in that order) and offsets the couples' atom indices.

    keep: False computes every batch's geometry (couples included) and keeps nothing: the
    same numbers as a kept cache, for stages whose geometry does not fit in memory, so that
    whether it fits never changes a stage's numbers (a resumed stage may find less memory).
    """

    def __init__(self, keep: bool = True) -> None:
        self.keep = keep
        self._frames: dict[int, _Frame] = {}

    def __len__(self) -> int:
        return len(self._frames)

    def geometry(self, tables: core.CoreTables, batch: Batch) -> core.PairGeometry:
        """The batch's pair geometry with radial couples and the basis derivatives that forces need.

        Args:
            tables: the model's tables on the batch's device and dtype.
            batch: frames of the splits the cache serves.
        Returns:
            Assembled from the cache when every frame was seen before, else computed (and the
            frames not seen before are kept).
        """
        index = batch.frame_index.tolist() if self.keep else []
        if self.keep and all(f in self._frames for f in index):
            return self._assemble([self._frames[f] for f in index], tables.spec.n_types, batch)
        with torch.no_grad():  # the geometry needs no gradient on the analytical path
            full = core.pair_geometry(tables, batch, compute_forces=True)
            couples = core.radial_couples(tables, batch, full)
        if self.keep:
            self._keep(index, full, couples, tables.spec.n_types, batch)
        radial_none = dict.fromkeys(core.PairGeometry.RADIAL)
        angular = {name: getattr(full, name) for name in core.PairGeometry.ANGULAR}
        return core.PairGeometry(**radial_none, **angular, couples=couples)

    def _keep(
        self, index: list[int], full: core.PairGeometry, couples: core.RadialCouples, T: int, batch: Batch
    ) -> None:
        """Split a computed batch's geometry into its frames and keep the frames not seen before."""
        n_frames = len(index)
        atoms = torch.bincount(batch.atom_frame, minlength=n_frames).tolist()
        start = np.concatenate([[0], np.cumsum(atoms)[:-1]])
        frame_of = lambda i: batch.atom_frame.index_select(0, i)
        angular_counts = torch.bincount(frame_of(batch.angular_i), minlength=n_frames).tolist()
        angular = {name: getattr(full, name).split(angular_counts) for name in core.PairGeometry.ANGULAR}
        couple_frame = frame_of(couples.i)
        offset = torch.from_numpy(start).to(couples.i.device).index_select(0, couple_frame)
        local = torch.stack(
            [couples.i - offset, couples.j - offset, couples.row_ij - offset * T, couples.row_ji - offset * T], dim=1
        )
        if couples.one_way:
            local[:, 3] = torch.where(couples.row_ji == batch.positions.shape[0] * T, -1, local[:, 3])
        counts = torch.bincount(couple_frame, minlength=n_frames).tolist()
        split = {name: getattr(couples, name).split(counts) for name in ("rv", "r", "df")}
        local_parts, sums = local.split(counts), couples.sums.split([a * T for a in atoms])
        for k, frame in enumerate(index):
            if frame not in self._frames:
                self._frames[frame] = _Frame(
                    atoms[k], {name: angular[name][k] for name in angular}, local_parts[k],
                    split["rv"][k], split["r"][k], split["df"][k], sums[k], bool((local_parts[k][:, 3] < 0).any()),
                )  # fmt: skip

    @staticmethod
    def _assemble(parts: list[_Frame], T: int, batch: Batch) -> core.PairGeometry:
        """A batch's geometry from its frames' cached rows (every frame seen before)."""
        n_atoms, n_angular = sum(p.n_atoms for p in parts), sum(p.angular["ra"].shape[0] for p in parts)
        if n_atoms != batch.positions.shape[0] or n_angular != batch.angular_i.shape[0]:
            raise RuntimeError("the geometry cache holds other frames under these frame indices")
        angular = {name: _cat([p.angular[name] for p in parts]) for name in core.PairGeometry.ANGULAR}
        local = index = _cat([p.index for p in parts])
        if len(parts) > 1:
            starts = np.concatenate([[0], np.cumsum([p.n_atoms for p in parts])[:-1]])
            counts = torch.tensor([p.index.shape[0] for p in parts])
            offset = torch.repeat_interleave(torch.from_numpy(starts), counts).to(index.device)
            index = local + offset[:, None] * torch.tensor([1, 1, T, T], device=index.device)
        i, j, row_ij, row_ji = index.unbind(1)
        one_way = any(p.one_way for p in parts)
        if one_way:  # a frame-local −1: the zero row after the batch's N·T rows
            row_ji = torch.where(local[:, 3] < 0, n_atoms * T, row_ji)
        couples = core.RadialCouples(
            _cat([p.sums for p in parts]), i, j, row_ij, row_ji,
            _cat([p.rv for p in parts]), _cat([p.r for p in parts]), _cat([p.df for p in parts]), one_way,
        )  # fmt: skip
        return core.PairGeometry(**dict.fromkeys(core.PairGeometry.RADIAL), **angular, couples=couples)


def _cat(parts: list[torch.Tensor]) -> torch.Tensor:
    return parts[0] if len(parts) == 1 else torch.cat(parts)


def geometry_cache_for(
    spec: ModelSpec,
    stores: list[StreamDataStore],
    device: torch.device,
    compiled: bool,
    force_path: str,
    dtype: torch.dtype,
    processes: int = 1,
) -> tuple[GeometryCache | None, str]:
    """The geometry cache of a stage's splits, or None, and the reason (for the log and status.json).

    Every eager analytical CPU stage gets one, so its steps take the radial couples whether
    or not the geometry is kept; "off" means computed every step (``keep`` False).
    processes: the stage's DDP processes. Each keeps its own cache, and over the epochs each
    sees every frame, so the memory rule counts the cache once per process (as if all ran on
    this machine).
    """
    if device.type != "cpu":
        return None, "off: not a CPU stage"
    if compiled:
        return None, "off: the compiled step computes the geometry inside its graph"
    if force_path != "analytical":
        return None, "off: the autograd force path differentiates the geometry"
    computed = lambda reason: (GeometryCache(keep=False), f"off: {reason}; computed every step")
    if not all(isinstance(store, StreamDataStore) for store in stores):
        return computed("a data source that is not a StreamDataStore")
    indices = np.concatenate([store.frame_index for store in stores])
    if np.unique(indices).size != indices.size:  # the cache is keyed by frame index
        return computed("the splits share frame indices")
    itemsize = torch.empty(0, dtype=dtype).element_size()
    need = cache_nbytes(spec, stores, itemsize)
    if need is None:
        return computed("the data store reads its frames from disk (lazy mode)")
    available = available_memory_bytes()
    each = "" if processes == 1 else f" in each of {processes} processes"
    if available is not None and need * processes > MEMORY_SHARE * available:
        return computed(
            f"it would take {need / 2**20:.0f} MiB{each}, more than {MEMORY_SHARE:.0%} of the "
            f"{available / 2**20:.0f} MiB available"
        )
    return GeometryCache(), f"on ({need / 2**20:.0f} MiB{each} once every frame was seen)"


__all__ = ["MEMORY_SHARE", "GeometryCache", "cache_nbytes", "geometry_cache_for"]
