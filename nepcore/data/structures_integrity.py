"""Integrity of a structures HDF5 file: its layout is checked whenever it is opened, and its
content checksum verified.

``nepcore convert`` stores ``content_sha256`` (root attribute) over every dataset of the file
(:func:`content_sha256`). :func:`check_integrity`, run by
:class:`~nepcore.data.structures_h5.StructureFile` on opening, checks the layout (shapes
against ``n_frames``/``n_atoms``, offsets rising from 0 to ``n_atoms``, type indices below the
species count, split indices in range, sorted, disjoint and covering every frame) and then
recomputes the checksum, so a damaged or hand-edited file fails with one line naming the file
and the problem, never with a traceback or a silently different training set. Files written
before the checksum existed are layout-checked only. Verified files are remembered per process
(by path, inode, size and mtime), so opening one file for several splits hashes it once.
"""

from __future__ import annotations

import hashlib
import os

import h5py
import numpy as np

from nepcore._utils import update_array_digest
from nepcore.data.structures_h5 import SPLIT_NAMES, DatasetFileError

#: Root attribute holding the hex SHA-256 of the file's datasets.
CHECKSUM_ATTR = "content_sha256"
#: Rows hashed per read of a large dataset (bounds the memory of the check).
_ROWS = 1 << 18
_verified: set[tuple] = set()


def content_sha256(h5: h5py.File) -> str:
    """Hex SHA-256 over every dataset of ``h5`` (sorted by name; each hashed with its name,
    dtype and shape, in blocks of rows; strings as their UTF-8 text). Attributes are not
    included: the layout check ties n_frames/n_atoms to the datasets."""
    names: list[str] = []
    h5.visititems(lambda name, obj: names.append(name) if isinstance(obj, h5py.Dataset) else None)
    digest = hashlib.sha256()
    for name in sorted(names):
        ds = h5[name]
        if h5py.check_string_dtype(ds.dtype) is not None:
            text = "\0".join(v.decode() if isinstance(v, bytes) else str(v) for v in ds[()])
            update_array_digest(digest, name, np.frombuffer(text.encode(), dtype=np.uint8))
        elif ds.ndim == 0:
            update_array_digest(digest, name, np.asarray(ds[()]))
        else:
            for start in range(0, max(ds.shape[0], 1), _ROWS):
                update_array_digest(digest, f"{name}[{start}:]", ds[start : start + _ROWS])
    return digest.hexdigest()


def check_integrity(h5: h5py.File, path: str) -> None:
    """Raise DatasetFileError (one line naming ``path``) when the layout of ``h5`` is broken
    or its content does not match its ``content_sha256``."""
    try:
        stat = os.stat(path)
        key = (
            os.path.realpath(path),
            stat.st_dev,
            stat.st_ino,
            stat.st_size,
            stat.st_mtime_ns,
        )
    except OSError:
        key = None
    if key is not None and key in _verified:
        return
    try:
        _check_layout(h5, path)
        expected = h5.attrs.get(CHECKSUM_ATTR)
        if expected is not None and content_sha256(h5) != str(expected):
            raise DatasetFileError(
                f"{path}: content checksum mismatch: the file was changed or damaged after "
                "nepcore convert wrote it; convert the raw files again"
            )
    except DatasetFileError:
        raise
    except (
        OSError,
        KeyError,
        ValueError,
        TypeError,
        RuntimeError,
        IndexError,
        AttributeError,
    ) as err:
        raise DatasetFileError(f"{path}: damaged HDF5 file ({err}); convert the raw files again") from None
    if key is not None:
        _verified.add(key)


def _check_layout(h5: h5py.File, path: str) -> None:
    def fail(problem: str) -> None:
        raise DatasetFileError(f"{path}: damaged structures file: {problem}; convert the raw files again")

    n_frames, n_atoms = int(h5.attrs["n_frames"]), int(h5.attrs["n_atoms"])
    n_species, n_sources = len(h5["species"]), len(h5["sources/path"])
    shapes = {
        "atoms/types": (n_atoms,), "atoms/positions": (n_atoms, 3), "atoms/forces": (n_atoms, 3),
        "frames/offsets": (n_frames + 1,), "frames/cell": (n_frames, 3, 3), "frames/pbc": (n_frames, 3),
        "frames/energy": (n_frames,), "frames/has_energy": (n_frames,), "frames/has_forces": (n_frames,),
        "frames/virial": (n_frames, 3, 3), "frames/has_virial": (n_frames,), "frames/weight": (n_frames,),
        "frames/config_type": (n_frames,), "frames/source": (n_frames,), "frames/source_frame": (n_frames,),
        "sources/sha256": (n_sources,), "sources/n_frames": (n_sources,),
    }  # fmt: skip
    for name, shape in shapes.items():
        if not isinstance(h5.get(name), h5py.Dataset):
            fail(f"{name} is missing")
        if h5[name].shape != shape:
            fail(f"{name} has shape {h5[name].shape}, expected {shape} (n_frames {n_frames}, n_atoms {n_atoms})")
    offsets = h5["frames/offsets"][()]
    steps = np.diff(offsets)
    if offsets[0] != 0 or offsets[-1] != n_atoms or (steps < 1).any():
        bad = 0 if offsets[0] != 0 else int(np.argmax(steps < 1)) + 1 if (steps < 1).any() else n_frames
        fail(f"frames/offsets: offset {bad} is {int(offsets[bad])}; offsets must rise from 0 to n_atoms {n_atoms}")
    types = h5["atoms/types"][()]
    if len(types) and int(types.max()) >= n_species:
        atom = int(np.argmax(types >= n_species))
        frame = int(np.searchsorted(offsets, atom, side="right")) - 1
        fail(f"atoms/types: atom {atom} (frame {frame}) has type {int(types[atom])}, but there are {n_species} species")
    source = h5["frames/source"][()]
    if len(source) and (source.min() < 0 or source.max() >= n_sources):
        fail(
            f"frames/source: frame {int(np.argmax((source < 0) | (source >= n_sources)))} names a source "
            f"outside 0..{n_sources - 1}"
        )
    seen = np.zeros(n_frames, dtype=np.int64)
    for name in SPLIT_NAMES:
        if not isinstance(h5.get(f"split/{name}"), h5py.Dataset):
            fail(f"split/{name} is missing")
        index = h5[f"split/{name}"][()]
        if index.ndim != 1 or (len(index) and (index.min() < 0 or index.max() >= n_frames)):
            fail(f"split/{name}: frame index {int(index.max()) if len(index) else '?'} is outside 0..{n_frames - 1}")
        if (np.diff(index) < 1).any():
            fail(f"split/{name}: frame indices are not sorted and unique")
        seen[index] += 1
    if (seen != 1).any():
        frame = int(np.argmax(seen != 1))
        fail(f"split: frame {frame} is in {int(seen[frame])} splits, expected exactly one")
