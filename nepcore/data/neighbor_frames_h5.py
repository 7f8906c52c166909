"""A :class:`~nepcore.data.neighbor_frames.CompactFrames` kept on disk, for datasets larger than memory.

The lazy store writes the compact frames (atoms, pairs computed once) to a scratch HDF5
file chunk by chunk, keeps only the per-frame arrays (a few dozen bytes a frame) in memory,
and reads the atoms and pairs of the frames of a batch when the batch is assembled.

Layout: ``/atoms/<name>`` for :data:`~nepcore.data.neighbor_frames.PER_ATOM`, ``/pairs/<name>`` for
:data:`~nepcore.data.neighbor_frames.PER_PAIR` (chunked, resizable, appended in frame order) and
``/frames/<name>`` for :data:`~nepcore.data.neighbor_frames.PER_FRAME` plus ``atom_offsets`` and
``pair_offsets`` (written on :meth:`CompactFramesWriter.close`).
"""

from __future__ import annotations

import os
import threading

import h5py
import numpy as np

from nepcore.data.neighbor_frames import PER_ATOM, PER_FRAME, PER_PAIR, CompactFrames, _offsets
from nepcore.data.structures_h5 import contiguous_runs

#: Rows per HDF5 chunk: small enough that reading one frame touches few bytes beyond it
#: (a 134-atom frame has ~10k pairs), big enough to keep the chunk index small.
CHUNK_ROWS = 8192


class CompactFramesWriter:
    """Appends :class:`CompactFrames` to a new file ``path``; call :meth:`close` at the end."""

    def __init__(self, path: str | os.PathLike):
        self.path = str(path)
        self._h5 = h5py.File(self.path, "w")
        self._n_atoms: list[np.ndarray] = []
        self._n_pairs: list[np.ndarray] = []
        self._per_frame: list[dict[str, np.ndarray]] = []  # small: kept until close

    def append(self, part: CompactFrames) -> None:
        for group, names in (("atoms", PER_ATOM), ("pairs", PER_PAIR)):
            for name in names:
                values = getattr(part, name)
                key = f"{group}/{name}"
                if key not in self._h5:
                    self._h5.create_dataset(
                        key,
                        shape=(0,) + values.shape[1:],
                        dtype=values.dtype,
                        maxshape=(None,) + values.shape[1:],
                        chunks=(CHUNK_ROWS,) + values.shape[1:],
                        track_times=False,
                    )
                dset = self._h5[key]
                start = dset.shape[0]
                dset.resize(start + len(values), axis=0)
                dset[start:] = values
        self._n_atoms.append(np.diff(part.atom_offsets))
        self._n_pairs.append(np.diff(part.pair_offsets))
        self._per_frame.append({name: getattr(part, name) for name in PER_FRAME})

    def close(self) -> None:
        """Write the per-frame arrays and close the file (needs at least one append)."""
        frames = self._h5.create_group("frames")
        frames.create_dataset("atom_offsets", data=_offsets(np.concatenate(self._n_atoms)), track_times=False)
        frames.create_dataset("pair_offsets", data=_offsets(np.concatenate(self._n_pairs)), track_times=False)
        for name in PER_FRAME:
            values = np.concatenate([part[name] for part in self._per_frame])
            frames.create_dataset(name, data=values, track_times=False)
        self._h5.close()


class CompactFramesFile:
    """Read access to a file written by :class:`CompactFramesWriter`.

    The per-frame arrays are loaded at open; :meth:`take` reads the atoms and pairs of the
    requested frames (one hyperslab per run of consecutive frames per array). Safe to call
    from a background thread (reads are serialised by a lock; h5py's own lock would do, the
    explicit one documents it).
    """

    def __init__(self, path: str | os.PathLike):
        self.path = str(path)
        self._h5 = h5py.File(self.path, "r")
        self._lock = threading.Lock()
        frames = self._h5["frames"]
        self.atom_offsets = frames["atom_offsets"][()]
        self.pair_offsets = frames["pair_offsets"][()]
        self.per_frame = {name: frames[name][()] for name in PER_FRAME}

    @property
    def n_frames(self) -> int:
        return int(self.atom_offsets.shape[0] - 1)

    @property
    def n_atoms(self) -> int:
        return int(self.atom_offsets[-1])

    @property
    def host_nbytes(self) -> int:
        """Bytes held in memory (the per-frame arrays and offsets)."""
        return int(self.atom_offsets.nbytes + self.pair_offsets.nbytes + sum(v.nbytes for v in self.per_frame.values()))

    def take(self, indices: np.ndarray) -> CompactFrames:
        """Frames ``indices`` (any order, repeats allowed) read from disk."""
        indices = np.asarray(indices, dtype=np.int64)
        unique = np.unique(indices)
        runs = contiguous_runs(unique)
        read: dict[str, np.ndarray] = {}
        with self._lock:
            for group, names, offsets in (
                ("atoms", PER_ATOM, self.atom_offsets),
                ("pairs", PER_PAIR, self.pair_offsets),
            ):
                for name in names:
                    dset = self._h5[f"{group}/{name}"]
                    chunks = [dset[int(offsets[a]) : int(offsets[b])] for a, b in runs]
                    read[name] = np.concatenate(chunks) if chunks else dset[:0]
        frames = CompactFrames(
            atom_offsets=_offsets(np.diff(self.atom_offsets)[unique]),
            pair_offsets=_offsets(np.diff(self.pair_offsets)[unique]),
            **read,
            **{name: values[unique] for name, values in self.per_frame.items()},
        )
        if len(unique) == len(indices) and np.array_equal(unique, indices):
            return frames
        return frames.take(np.searchsorted(unique, indices))

    def close(self) -> None:
        with self._lock:
            if self._h5.id.valid:
                self._h5.close()
