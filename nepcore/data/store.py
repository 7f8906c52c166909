"""``StreamDataStore``: the host-resident dataset that feeds training, the q-scaler pass,
evaluation and prediction through one batch interface.

* Frames are kept on the host in the compact form of :mod:`nepcore.data.neighbor_frames` (int32 indices,
  int8 image shifts, positions/forces in float32 or float64): about 0.6 KB per atom at
  cutoffs 6/4 Å in float32, pairs included. Neighbour pairs for the model's radial and
  angular cutoffs are computed once per structure, when the store is built.
* Nothing per-structure goes to the device up front: :meth:`StreamDataStore.batches`
  assembles each batch on the host (:meth:`~nepcore.data.neighbor_frames.CompactFrames.to_batch`,
  vectorised over the frames) in a background thread, one or two batches ahead, pins it and copies it with
  ``non_blocking=True`` when the device is CUDA. The batch content depends only on
  (seed, epoch, batch size, shuffle), never on prefetching.
* Passes that repeat unchanged (unshuffled, on the CPU: a stage's validation after every
  epoch, full-batch L-BFGS's evaluations) can be kept after their first assembly
  (:meth:`StreamDataStore.keep_passes`, within a byte budget the stage sets).
* Lazy mode (datasets larger than host memory): the compact frames go to a scratch HDF5
  file instead (:mod:`nepcore.data.neighbor_frames_h5`), only per-frame arrays stay in memory, and the
  background thread reads each batch's frames from disk. Chosen automatically from the
  estimated size against the available memory, or forced with ``lazy=True/False``.

Typical use::

    store = StreamDataStore.from_hdf5("structures.h5", spec, split="train", dtype=torch.float32)
    for batch in store.batches(32, shuffle=True, seed=0, epoch=epoch, device="cuda"):
        ...
"""

from __future__ import annotations

import hashlib
import os
import tempfile
import weakref
from collections.abc import Iterator, Sequence

import numpy as np
import torch
from tqdm import tqdm

from nepcore.data.atoms_batch import structures_from_atoms
from nepcore.data.neighbor_frames import CompactFrames, compact_frames, numpy_float
from nepcore.data.neighbor_frames_h5 import CompactFramesFile, CompactFramesWriter
from nepcore.data.prefetch import prefetched
from nepcore.data.reading import LabelKeys, pack_structures
from nepcore.data.structures_h5 import StructureFile
from nepcore.model.batch import Batch
from nepcore.spec import ModelSpec

#: Frames per chunk while building (bounds the temporary memory of the pair search).
BUILD_CHUNK_FRAMES = 256
#: Lazy mode is chosen when the estimated in-memory size exceeds this share of the memory
#: available now (the rest is left to the model, the optimiser and the OS page cache).
AUTO_LAZY_MEMORY_SHARE = 0.5
#: Frames sampled to estimate the bytes per atom (pairs dominate and depend on density).
_ESTIMATE_FRAMES = 8


def available_memory_bytes() -> int | None:
    """Memory the OS can give now (Linux ``MemAvailable``), or None if unknown."""
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


class StreamDataStore:
    """Frames of one split, their neighbour pairs, and batch assembly.

    Build with :meth:`from_hdf5` or :meth:`from_atoms`. ``dtype`` is the float type of the
    host positions/forces and of the batches. Store indices (``0 .. len-1``) are used by
    :meth:`frames` and :meth:`batch`; a batch's ``frame_index`` holds dataset frame indices.
    """

    def __init__(
        self,
        source: CompactFrames | CompactFramesFile,
        spec: ModelSpec,
        dtype: torch.dtype,
        scratch_path: str | None = None,
        content_sha256: str | None = None,
    ):
        self.spec = spec
        self.dtype = dtype
        #: SHA-256 of the frames' content (positions, labels, weights: StructureArrays.update_digest)
        self.content_sha256 = content_sha256
        self._source = source
        self._finalizer = weakref.finalize(self, _close_source, source, scratch_path)
        if isinstance(source, CompactFrames):
            self._atom_offsets, per_frame = source.atom_offsets, source.__dict__
        else:
            self._atom_offsets, per_frame = source.atom_offsets, source.per_frame
        self.frame_index: np.ndarray = per_frame["frame_index"]
        #: frames that carry each label: {"energy": n, "forces": n, "virial": n}
        self.label_counts: dict[str, int] = {
            label: int(np.count_nonzero(per_frame[f"has_{label}"])) for label in ("energy", "forces", "virial")
        }
        self._max_radial = int(per_frame["max_radial"].max(initial=0))
        self._max_angular = int(per_frame["max_angular"].max(initial=0))
        #: kept unshuffled CPU passes (keep_passes): {(batch_size, drop_last, shard): batches}
        self._kept: dict[tuple, list[Batch]] = {}
        self._kept_budget, self._kept_nbytes = 0, 0

    # ---- construction ------------------------------------------------------------------------
    @classmethod
    def from_hdf5(
        cls,
        path: str | os.PathLike,
        spec: ModelSpec,
        split: str = "train",
        dtype: torch.dtype = torch.float32,
        lazy: bool | None = None,
        scratch_dir: str | None = None,
        progress: bool | None = False,
    ) -> StreamDataStore:
        """The frames of ``split`` (train/valid/test/all) of a ``nepcore convert`` dataset.

        lazy: None chooses from the estimated size vs. available memory; True keeps the
        compact frames in a scratch file in ``scratch_dir`` (default: the system temp dir),
        deleted by :meth:`close`. progress: tqdm bar over frames while computing pairs
        (None: only on a terminal).
        """
        np_dtype = numpy_float(dtype)
        with StructureFile(path) as h5:
            indices = h5.split(split)
            if lazy is None:
                lazy = cls._estimate_nbytes(h5, indices, spec, np_dtype) > AUTO_LAZY_MEMORY_SHARE * (
                    available_memory_bytes() or float("inf")
                )
            chunks = [indices[k : k + BUILD_CHUNK_FRAMES] for k in range(0, len(indices), BUILD_CHUNK_FRAMES)]
            bar = tqdm(
                total=len(indices),
                desc=f"neighbour pairs ({split})",
                unit=" frames",
                disable=None if progress is None else not progress,
                leave=False,
            )
            digest = hashlib.sha256()

            def read(chunk: np.ndarray) -> CompactFrames:
                data = h5.read_frames(chunk)
                data.update_digest(digest)  # the content hash a checkpoint carries
                bar.update(len(chunk))
                return compact_frames(data, spec, np_dtype, str(path))

            with bar:
                if not lazy:
                    parts = [read(chunk) for chunk in chunks or [indices]]
                    source = CompactFrames.concatenate(parts, release=True) if chunks else parts[0]
                    return cls(source, spec, dtype, content_sha256=digest.hexdigest())
                fd, scratch = tempfile.mkstemp(prefix="nepcore-store-", suffix=".h5", dir=scratch_dir)
                os.close(fd)
                try:
                    writer = CompactFramesWriter(scratch)
                    for chunk in chunks or [indices]:
                        writer.append(read(chunk))
                    writer.close()
                    return cls(
                        CompactFramesFile(scratch), spec, dtype, scratch_path=scratch, content_sha256=digest.hexdigest()
                    )
                except BaseException:
                    os.unlink(scratch)
                    raise

    @classmethod
    def from_atoms(
        cls,
        atoms_list: Sequence,
        spec: ModelSpec,
        dtype: torch.dtype = torch.float64,
        with_labels: bool = True,
        keys: LabelKeys = LabelKeys(),
        source_format: str | None = None,
    ) -> StreamDataStore:
        """An in-memory store of ``ase.Atoms`` (e.g. for ``nepcore predict`` on files).

        Labels (energy, forces, virial/stress, weight) are read as ``nepcore convert`` reads
        them when ``with_labels``; species must be types of ``spec``. source_format: the
        ase.io format the atoms came from ("extxyz" matters for a 3x3 ``virial``).
        Raises :class:`~nepcore.data.checks.StructureError` naming the frame (path "<atoms>").
        """
        structures = structures_from_atoms(
            atoms_list, spec, with_labels=with_labels, keys=keys, source_format=source_format
        )
        data = pack_structures(structures, spec.elements)
        digest = hashlib.sha256()
        data.update_digest(digest)
        return cls(compact_frames(data, spec, numpy_float(dtype)), spec, dtype, content_sha256=digest.hexdigest())

    @staticmethod
    def _estimate_nbytes(h5: StructureFile, indices: np.ndarray, spec: ModelSpec, np_dtype) -> float:
        """In-memory size of ``indices``, extrapolated from a few evenly spaced frames."""
        if len(indices) == 0:
            return 0.0
        sample = indices[np.unique(np.linspace(0, len(indices) - 1, _ESTIMATE_FRAMES).astype(np.int64))]
        part = compact_frames(h5.read_frames(sample), spec, np_dtype, h5.path)
        n_atoms = float(np.diff(h5.offsets)[indices].sum())
        return part.nbytes / max(part.n_atoms, 1) * n_atoms

    # ---- sizes ----------------------------------------------------------------------------------
    def __len__(self) -> int:
        return int(self._atom_offsets.shape[0] - 1)

    @property
    def n_atoms(self) -> int:
        """Atoms in all frames of the store."""
        return int(self._atom_offsets[-1])

    @property
    def atoms_per_frame(self) -> np.ndarray:
        return np.diff(self._atom_offsets)

    @property
    def lazy(self) -> bool:
        return isinstance(self._source, CompactFramesFile)

    def max_neighbors(self) -> tuple[int, int]:
        """Largest (radial, angular) neighbour count of any atom: the true maxima, as the
        ``cutoff`` line of nep.txt wants them."""
        return self._max_radial, self._max_angular

    def pair_counts(self) -> tuple[int, int] | None:
        """(radial, angular) neighbour pairs over all frames of the store; None in lazy mode,
        whose pairs are on disk (counting the angular ones would read them all)."""
        source = self._source
        if not isinstance(source, CompactFrames):
            return None
        return int(source.pair_offsets[-1] - source.pair_offsets[0]), int(np.count_nonzero(source.angular))

    def host_nbytes(self) -> int:
        """Bytes of host memory the store holds (arrays only; the scratch file not counted)."""
        source = self._source
        return source.nbytes if isinstance(source, CompactFrames) else source.host_nbytes

    # ---- access -----------------------------------------------------------------------------
    def _take(self, indices: np.ndarray) -> CompactFrames:
        return self._source.take(np.asarray(indices, dtype=np.int64))

    def batch(self, indices: Sequence[int] | np.ndarray) -> Batch:
        """The CPU :class:`Batch` of store frames ``indices`` (in that order); the batch owns
        its memory."""
        return self._take(np.asarray(indices, dtype=np.int64)).to_batch(self.dtype)

    def batch_indices(
        self, batch_size: int, shuffle: bool = False, seed: int = 0, epoch: int = 0, drop_last: bool = False
    ) -> list[np.ndarray]:
        """The store indices of each batch of an epoch: a permutation from (seed, epoch) when
        shuffling, else the stored order; the last batch may be short unless ``drop_last``."""
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, found {batch_size}")
        n = len(self)
        order = np.random.default_rng([int(seed), int(epoch)]).permutation(n) if shuffle else np.arange(n)
        stop = n - n % batch_size if drop_last else n
        return [order[k : min(k + batch_size, stop)] for k in range(0, stop, batch_size)]

    def batches(
        self,
        batch_size: int,
        shuffle: bool = False,
        seed: int = 0,
        epoch: int = 0,
        device: torch.device | str = "cpu",
        prefetch: int = 2,
        drop_last: bool = False,
        shard: tuple[int, int] = (0, 1),
    ) -> Iterator[Batch]:
        """Batches of an epoch on ``device``, assembled ``prefetch`` ahead in a background
        thread (0: in the calling thread). On CUDA, batches are pinned and copied with
        ``non_blocking=True``; the copy is queued on the current stream, so kernels that use
        the batch are ordered after it.

        shard: (rank, world): only every world-th batch of the epoch's order, starting at
        rank (distributed training; the order itself does not depend on the shard).
        After :meth:`keep_passes`, an unshuffled CPU pass comes from the batches kept from its
        first assembly (the same objects, so the same content).
        """
        device = torch.device(device)
        pin = device.type == "cuda"
        rank, world = shard
        order = self.batch_indices(batch_size, shuffle, seed, epoch, drop_last)[rank::world]

        def assemble(indices: np.ndarray) -> Batch:
            batch = self.batch(indices)
            return batch.pin_memory() if pin else batch

        if device.type == "cpu" and not shuffle and self._kept_budget > 0:
            yield from self._kept_pass((batch_size, drop_last, shard), assemble, order, prefetch)
            return
        for batch in prefetched(assemble, order, ahead=prefetch):
            yield batch if device.type == "cpu" else batch.to(device, non_blocking=pin)

    def keep_passes(self, max_nbytes: int) -> None:
        """Keep the batches of unshuffled CPU passes for the next pass of the same batch size
        and shard, up to ``max_nbytes`` bytes of batches in all (0: keep none, drop those kept).

        A stage reads its validation split after every epoch, and full-batch L-BFGS its training
        split at every evaluation, in the same batches each time: kept, they are not assembled
        again (PbTe's stage 2: ~8 % of an L-BFGS epoch). They are the very batches a new pass
        would assemble, so the numbers are the same whether a pass is kept or not; a pass that
        would take the kept bytes over ``max_nbytes`` is assembled every time. Nothing reading
        a batch may change it in place (none does). Shuffled passes and other devices are never
        kept: device memory stays bounded by the batch.
        """
        self._kept_budget = int(max_nbytes)
        if self._kept_nbytes > self._kept_budget:
            self._kept, self._kept_nbytes = {}, 0

    @property
    def kept_nbytes(self) -> int:
        """Bytes of the batches :meth:`keep_passes` holds now."""
        return self._kept_nbytes

    def _kept_pass(self, key: tuple, assemble, order: list[np.ndarray], prefetch: int) -> Iterator[Batch]:
        kept = self._kept.get(key)
        if kept is not None:
            yield from kept
            return
        made = []
        for batch in prefetched(assemble, order, ahead=prefetch):
            made.append(batch)
            yield batch
        nbytes = sum(batch.nbytes for batch in made)
        if self._kept_nbytes + nbytes <= self._kept_budget:  # a whole pass only (not one cut short)
            self._kept[key], self._kept_nbytes = made, self._kept_nbytes + nbytes

    # ---- lifetime -----------------------------------------------------------------------------
    def close(self) -> None:
        """Release the scratch file of a lazy store (also done when the store is collected)."""
        self._finalizer()

    def __enter__(self) -> StreamDataStore:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _close_source(source, scratch_path: str | None) -> None:
    if isinstance(source, CompactFramesFile):
        source.close()
    if scratch_path and os.path.exists(scratch_path):
        os.unlink(scratch_path)
