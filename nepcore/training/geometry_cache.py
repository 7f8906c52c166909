"""Per-frame pair geometry kept across epochs by the eager CPU training step.

The pair vectors, distances, type pairs, Chebyshev basis (with its derivative) and unit
vectors of a frame's pairs (:class:`nepcore.model.potential.PairGeometry`) do not depend on the
parameters, so every epoch recomputed the same numbers: the step with the cache is 1.16-1.20x
faster at the default batch (``benchmarks/bench_step.py --modes cached``). :class:`GeometryCache` keeps
them per frame the first time a frame is seen and assembles a later batch's geometry by
concatenating its frames' rows, which gives the same bits as computing them again (every
operation is per pair), so training and resume stay byte-identical.

Where it is used (:func:`geometry_cache_for`): CPU stages on the eager analytical step whose
splits are held in memory and whose geometry fits in :data:`MEMORY_SHARE` of the memory
available at the start. On CUDA the geometry is cheaper to compute than to copy to the device,
the compiled step has it inside its graph, and the autograd force path differentiates it.
"""

from __future__ import annotations

from dataclasses import fields

import numpy as np
import torch

from nepcore.data.store import StreamDataStore, available_memory_bytes
from nepcore.model import potential as core
from nepcore.model.batch import Batch
from nepcore.spec import ModelSpec

#: Largest share of the memory available at the stage's start the cache may take.
MEMORY_SHARE = 0.25
_FIELDS = tuple(f.name for f in fields(core.PairGeometry))


def cache_nbytes(spec: ModelSpec, stores: list[StreamDataStore], itemsize: int) -> int | None:
    """Bytes the geometry of every pair of ``stores`` takes.

    Per radial pair: vector (3), distance, basis and derivative (2 (KR+1)) floats and one int64
    type pair; per angular pair the same with the unit vector (3) on top.

    Args:
        spec: the model (basis sizes).
        stores: the splits.
        itemsize: bytes per float (4 in float32).
    Returns:
        Bytes, or None when a store is lazy (its pairs are on disk and not counted).
    """
    counts = [store.pair_counts() for store in stores]
    if any(c is None for c in counts):
        return None
    radial = sum(c[0] for c in counts)
    angular = sum(c[1] for c in counts)
    per_radial = (4 + 2 * (spec.basis_size_radial + 1)) * itemsize + 8
    per_angular = (7 + 2 * (spec.basis_size_angular + 1)) * itemsize + 8
    return radial * per_radial + angular * per_angular


class GeometryCache:
    """Pair geometry of each frame seen so far, keyed by dataset frame index (unique over the
    splits it serves: :func:`geometry_cache_for` checks).

    The geometry is kept as row ranges (views) of the batch where a frame was first seen, so
    a batch whose frames are all new costs no copy; a later batch concatenates its frames'
    rows in its own frame order (the batch's pairs are grouped by frame in that order).
    """

    def __init__(self) -> None:
        self._frames: dict[int, dict[str, torch.Tensor | None]] = {}

    def __len__(self) -> int:
        return len(self._frames)

    def geometry(self, tables: core.CoreTables, batch: Batch) -> core.PairGeometry:
        """The batch's pair geometry, with the basis derivatives that forces need.

        Args:
            tables: the model's tables on the batch's device and dtype.
            batch: frames of the splits the cache serves.
        Returns:
            Assembled from the cache when every frame was seen before, else computed (and the
            frames not seen before are kept).
        """
        index = batch.frame_index.tolist()
        if all(f in self._frames for f in index):
            parts = [self._frames[f] for f in index]
            geometry = core.PairGeometry(**{name: _cat([p[name] for p in parts]) for name in _FIELDS})
            if geometry.r.shape[0] != batch.radial_i.shape[0] or geometry.ra.shape[0] != batch.angular_i.shape[0]:
                raise RuntimeError("the geometry cache holds other frames under these frame indices")
            return geometry
        with torch.no_grad():  # the geometry needs no gradient on the analytical path
            geometry = core.pair_geometry(tables, batch, compute_forces=True)
        n_frames = len(index)
        per_frame = {
            "radial": torch.bincount(batch.atom_frame.index_select(0, batch.radial_i), minlength=n_frames).tolist(),
            "angular": torch.bincount(batch.atom_frame.index_select(0, batch.angular_i), minlength=n_frames).tolist(),
        }
        split = {}
        for channel, names in (("radial", core.PairGeometry.RADIAL), ("angular", core.PairGeometry.ANGULAR)):
            for name in names:
                split[name] = getattr(geometry, name).split(per_frame[channel])
        for k, frame in enumerate(index):
            if frame not in self._frames:
                self._frames[frame] = {name: split[name][k] for name in _FIELDS}
        return geometry


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
    """A cache for a stage's splits, or None, and the reason (for the log and status.json).

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
    if not all(isinstance(store, StreamDataStore) for store in stores):
        return None, "off: a data source that is not a StreamDataStore"
    indices = np.concatenate([store.frame_index for store in stores])
    if np.unique(indices).size != indices.size:  # the cache is keyed by frame index
        return None, "off: the splits share frame indices"
    itemsize = torch.empty(0, dtype=dtype).element_size()
    need = cache_nbytes(spec, stores, itemsize)
    if need is None:
        return None, "off: the data store reads its frames from disk (lazy mode)"
    available = available_memory_bytes()
    each = "" if processes == 1 else f" in each of {processes} processes"
    if available is not None and need * processes > MEMORY_SHARE * available:
        return None, (
            f"off: it would take {need / 2**20:.0f} MiB{each}, more than {MEMORY_SHARE:.0%} of the "
            f"{available / 2**20:.0f} MiB available"
        )
    return GeometryCache(), f"on ({need / 2**20:.0f} MiB{each} once every frame was seen)"


__all__ = ["MEMORY_SHARE", "GeometryCache", "cache_nbytes", "geometry_cache_for"]
