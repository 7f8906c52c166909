"""The nepcore structures HDF5 file: schema, atomic writing and (partial) reading.

One file holds one dataset: every frame of every input, concatenated, plus the split.
Per-atom arrays are flat (all frames one after another); ``frames/offsets`` says where each
frame's atoms are. Labels that a frame lacks are NaN and flagged ``False`` in the matching
``has_*`` mask, so a missing label is never confused with a zero label.

Schema (format ``nepcore-structures``, version 1; F frames, N atoms, T species, S sources)::

    /                       attrs: format="nepcore-structures", format_version=1,
                                   converter="nepcore <version>", n_frames, n_atoms,
                                   cutoff_checked (Å, the --cutoff of the isolated-atom check),
                                   content_sha256 (hex SHA-256 of every dataset; see
                                   nepcore.data.structures_integrity, which readers run)
    /units                  attrs: length="Å", energy="eV", force="eV/Å", virial="eV",
                                   stress="eV/Å^3"
    /species                (T,)     str      chemical symbols; an atom's type indexes this
    /atoms/types            (N,)     uint8    index into /species
    /atoms/positions        (N, 3)   float64  Cartesian positions, Å
    /atoms/forces           (N, 3)   float64  eV/Å; NaN for frames without forces
    /frames/offsets         (F+1,)   int64    atoms of frame f: offsets[f]:offsets[f+1]
    /frames/cell            (F, 3, 3) float64 rows are cell vectors, Å (zero rows allowed
                                              along non-periodic directions)
    /frames/pbc             (F, 3)   bool     periodicity along each cell vector
    /frames/energy          (F,)     float64  total energy, eV; NaN where absent
    /frames/has_energy      (F,)     bool
    /frames/has_forces      (F,)     bool
    /frames/virial          (F, 3, 3) float64 total virial, eV, row-major as GPUMD's
                                              ``virial="xx xy xz yx yy yz zx zy zz"``
                                              (W = -stress * V when it came from a stress);
                                              NaN where absent
    /frames/has_virial      (F,)     bool
    /frames/weight          (F,)     float64  per-frame loss weight (GPUMD ``weight``), 1 default
    /frames/config_type     (F,)     str      GPUMD ``config_type`` label, "" if none
    /frames/source          (F,)     int32    index into /sources
    /frames/source_frame    (F,)     int32    0-based frame number inside that source file
    /sources/path           (S,)     str      input file as given on the command line
    /sources/sha256         (S,)     str      hex digest of the file's bytes
    /sources/n_frames       (S,)     int64    frames read from it
    /split/train, /split/valid, /split/test
                            (k,)     int64    sorted frame indices; disjoint, together all F
                            attrs on /split: mode ("fractions" or "files"), seed,
                                   fractions (train, valid, test; NaN for mode "files")

Nothing in the file depends on the time or machine: the same inputs and seed give the same
content. Datasets are written contiguous and uncompressed so that one frame's slice is one
cheap hyperslab read (the lazy store reads frames one by one).
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass, field

import h5py
import numpy as np

from nepcore._utils import atomic_path, update_array_digest
from nepcore._version import __version__
from nepcore.errors import NepcoreError

FORMAT_NAME = "nepcore-structures"
FORMAT_VERSION = 1
SPLIT_NAMES = ("train", "valid", "test")
UNITS = {"length": "Å", "energy": "eV", "force": "eV/Å", "virial": "eV", "stress": "eV/Å^3"}


#: StructureArrays fields that training reads (hashed by StructureArrays.update_digest).
TRAINING_FIELDS = (
    "types",
    "positions",
    "forces",
    "cell",
    "pbc",
    "energy",
    "has_energy",
    "has_forces",
    "virial",
    "has_virial",
    "weight",
    "frame_index",
)


class DatasetFileError(NepcoreError, ValueError):
    """A file that is not a readable nepcore structures dataset."""


@dataclass
class StructureArrays:
    """Frames in flat form (the in-memory image of ``/atoms`` and ``/frames``).

    Shapes and units as in the module docstring; ``offsets`` (F+1,) int64 starts at 0.
    ``types`` index into ``species``. ``frame_index`` (F,) int64 is each frame's index in the
    whole dataset (equal to ``arange(F)`` for a complete file).
    """

    species: tuple[str, ...]
    offsets: np.ndarray
    types: np.ndarray
    positions: np.ndarray
    forces: np.ndarray
    cell: np.ndarray
    pbc: np.ndarray
    energy: np.ndarray
    has_energy: np.ndarray
    has_forces: np.ndarray
    virial: np.ndarray
    has_virial: np.ndarray
    weight: np.ndarray
    config_type: list[str]
    source: np.ndarray
    source_frame: np.ndarray
    frame_index: np.ndarray = field(default=None)  # type: ignore[assignment]

    def __post_init__(self) -> None:
        if self.frame_index is None:
            self.frame_index = np.arange(self.n_frames, dtype=np.int64)

    @property
    def n_frames(self) -> int:
        return int(self.offsets.shape[0] - 1)

    @property
    def n_atoms(self) -> int:
        return int(self.offsets[-1] - self.offsets[0])

    @property
    def atoms_per_frame(self) -> np.ndarray:
        return np.diff(self.offsets)

    def frame_slice(self, f: int) -> slice:
        return slice(int(self.offsets[f] - self.offsets[0]), int(self.offsets[f + 1] - self.offsets[0]))

    def update_digest(self, digest: hashlib._Hash) -> None:
        """Feed everything training reads of these frames (species, atoms per frame, types,
        positions, labels with their masks, weights, dataset frame indices) into ``digest``;
        config_type and the sources are left out."""
        update_array_digest(digest, "species", np.frombuffer(" ".join(self.species).encode(), np.uint8))
        update_array_digest(digest, "atoms_per_frame", self.atoms_per_frame)
        for key in TRAINING_FIELDS:
            update_array_digest(digest, key, getattr(self, key))

    def subset(self, indices: np.ndarray) -> StructureArrays:
        """The frames ``indices`` (positions in this object, any order) as a new object."""
        indices = np.asarray(indices, dtype=np.int64)
        n = self.atoms_per_frame[indices]
        atom_index = concat_ranges(self.offsets[indices] - self.offsets[0], n)
        per_atom = {k: getattr(self, k)[atom_index] for k in ("types", "positions", "forces")}
        per_frame = {k: getattr(self, k)[indices] for k in (*_FRAME_KEYS, "frame_index")}
        return StructureArrays(
            species=self.species,
            offsets=np.concatenate([[0], np.cumsum(n)]).astype(np.int64),
            config_type=[self.config_type[i] for i in indices],
            **per_atom,
            **per_frame,
        )


def concat_ranges(starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """``concatenate([arange(s, s + n) for s, n in zip(starts, lengths)])``, vectorised (int64)."""
    starts = np.asarray(starts, dtype=np.int64)
    lengths = np.asarray(lengths, dtype=np.int64)
    total = int(lengths.sum())
    if total == 0:
        return np.zeros(0, dtype=np.int64)
    first_out = np.cumsum(lengths) - lengths  # where each range begins in the output
    return np.arange(total, dtype=np.int64) + np.repeat(starts - first_out, lengths)


@dataclass
class Provenance:
    """Everything in the file that is not frame data: sources, split and conversion settings."""

    source_paths: list[str]
    source_sha256: list[str]
    source_n_frames: list[int]
    split: dict[str, np.ndarray]
    split_mode: str = "fractions"
    split_seed: int = 0
    split_fractions: tuple[float, float, float] = (float("nan"),) * 3
    cutoff_checked: float = float("nan")
    converter: str = f"nepcore {__version__}"


# ---- writing --------------------------------------------------------------------------------


def write_structures(path: str | os.PathLike, data: StructureArrays, prov: Provenance) -> None:
    """Write ``data`` and ``prov`` to ``path`` atomically, following the module schema."""
    with atomic_path(path) as tmp, h5py.File(tmp, "w", track_order=True) as h5:
        _write_into(h5, data, prov)


def _write_into(h5: h5py.File, data: StructureArrays, prov: Provenance) -> None:
    text = h5py.string_dtype("utf-8")
    # track_times=False keeps the bytes free of timestamps (same inputs -> same file content)
    put = lambda grp, name, arr, dtype=None: grp.create_dataset(
        name, data=np.asarray(arr, dtype=dtype), track_times=False
    )
    h5.attrs.update(
        format=FORMAT_NAME,
        format_version=FORMAT_VERSION,
        converter=prov.converter,
        n_frames=data.n_frames,
        n_atoms=data.n_atoms,
        cutoff_checked=float(prov.cutoff_checked),
    )
    h5.create_group("units").attrs.update(UNITS)
    put(h5, "species", list(data.species), text)
    atoms = h5.create_group("atoms")
    put(atoms, "types", data.types, np.uint8)
    put(atoms, "positions", data.positions, np.float64)
    put(atoms, "forces", data.forces, np.float64)
    frames = h5.create_group("frames")
    put(frames, "offsets", data.offsets, np.int64)
    put(frames, "cell", data.cell, np.float64)
    put(frames, "pbc", data.pbc, bool)
    put(frames, "energy", data.energy, np.float64)
    put(frames, "has_energy", data.has_energy, bool)
    put(frames, "has_forces", data.has_forces, bool)
    put(frames, "virial", data.virial, np.float64)
    put(frames, "has_virial", data.has_virial, bool)
    put(frames, "weight", data.weight, np.float64)
    put(frames, "config_type", list(data.config_type), text)
    put(frames, "source", data.source, np.int32)
    put(frames, "source_frame", data.source_frame, np.int32)
    sources = h5.create_group("sources")
    put(sources, "path", list(prov.source_paths), text)
    put(sources, "sha256", list(prov.source_sha256), text)
    put(sources, "n_frames", prov.source_n_frames, np.int64)
    split = h5.create_group("split")
    split.attrs.update(
        mode=prov.split_mode, seed=int(prov.split_seed), fractions=np.asarray(prov.split_fractions, dtype=np.float64)
    )
    for name in SPLIT_NAMES:
        put(split, name, np.sort(np.asarray(prov.split.get(name, []), dtype=np.int64)), np.int64)
    from nepcore.data.structures_integrity import CHECKSUM_ATTR, content_sha256

    h5.attrs[CHECKSUM_ATTR] = content_sha256(h5)  # readers verify it (structures_integrity)


# ---- reading --------------------------------------------------------------------------------

#: Per-frame datasets (small: read whole by :meth:`StructureFile.frame_table`).
_FRAME_KEYS = (
    "cell",
    "pbc",
    "energy",
    "has_energy",
    "has_forces",
    "virial",
    "has_virial",
    "weight",
    "source",
    "source_frame",
)


class StructureFile:
    """An open structures HDF5 file; reads all of it or selected frames.

    Use as a context manager, or call :meth:`close`. ``path`` names the file in errors.
    """

    def __init__(self, path: str | os.PathLike):
        self.path = str(path)
        try:
            self._h5 = h5py.File(self.path, "r")
        except (OSError, FileNotFoundError) as err:
            raise DatasetFileError(f"{self.path}: cannot open as HDF5 ({err})") from None
        try:
            self._open_checked()
        except DatasetFileError:
            self._h5.close()
            raise
        except (OSError, KeyError, ValueError, TypeError, RuntimeError, AttributeError) as err:
            # h5py's errors for damaged metadata (bad object header, metadata checksum, ...)
            self._h5.close()
            raise DatasetFileError(f"{self.path}: damaged HDF5 file ({err}); convert the raw files again") from None
        self._table: dict[str, np.ndarray] | None = None
        self._config_types: list[str] | None = None

    def _open_checked(self) -> None:
        """Check the format tags, layout and checksum; read species and offsets."""
        from nepcore.data.structures_integrity import check_integrity

        if self._h5.attrs.get("format") != FORMAT_NAME:
            raise DatasetFileError(f"{self.path}: not a nepcore structures file (no format={FORMAT_NAME!r})")
        version = int(self._h5.attrs.get("format_version", -1))
        if version != FORMAT_VERSION:
            raise DatasetFileError(f"{self.path}: format_version {version}, this nepcore reads {FORMAT_VERSION}")
        check_integrity(self._h5, self.path)  # layout and content checksum
        self.species: tuple[str, ...] = tuple(
            s.decode() if isinstance(s, bytes) else s for s in self._h5["species"][()]
        )
        self.offsets: np.ndarray = self._h5["frames/offsets"][()]

    def __enter__(self) -> StructureFile:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        if self._h5.id.valid:
            self._h5.close()

    @property
    def n_frames(self) -> int:
        return int(self.offsets.shape[0] - 1)

    @property
    def n_atoms(self) -> int:
        return int(self.offsets[-1])

    @property
    def attrs(self) -> dict:
        return dict(self._h5.attrs)

    def split(self, name: str) -> np.ndarray:
        """Sorted frame indices of split ``name`` (train/valid/test), or all frames for "all"."""
        if name == "all":
            return np.arange(self.n_frames, dtype=np.int64)
        if name not in SPLIT_NAMES:
            raise DatasetFileError(
                f"{self.path}: unknown split {name!r}; expected one of {', '.join(SPLIT_NAMES)} or all"
            )
        return self._h5[f"split/{name}"][()].astype(np.int64)

    def provenance(self) -> Provenance:
        h5 = self._h5
        split_attrs = h5["split"].attrs
        return Provenance(
            source_paths=_strings(h5["sources/path"][()]),
            source_sha256=_strings(h5["sources/sha256"][()]),
            source_n_frames=[int(n) for n in h5["sources/n_frames"][()]],
            split={name: self.split(name) for name in SPLIT_NAMES},
            split_mode=str(split_attrs["mode"]),
            split_seed=int(split_attrs["seed"]),
            split_fractions=tuple(float(x) for x in split_attrs["fractions"]),
            cutoff_checked=float(h5.attrs["cutoff_checked"]),
            converter=str(h5.attrs["converter"]),
        )

    def frame_table(self) -> dict[str, np.ndarray]:
        """All per-frame arrays (everything under /frames but offsets and config_type); read
        once and kept, they are small (about 150 bytes per frame)."""
        if self._table is None:
            self._table = {k: self._h5[f"frames/{k}"][()] for k in _FRAME_KEYS}
        return self._table

    def config_types(self) -> list[str]:
        if self._config_types is None:
            self._config_types = _strings(self._h5["frames/config_type"][()])
        return self._config_types

    def read_all(self) -> StructureArrays:
        """The whole dataset in memory."""
        return StructureArrays(
            species=self.species,
            offsets=self.offsets.astype(np.int64),
            types=self._h5["atoms/types"][()],
            positions=self._h5["atoms/positions"][()],
            forces=self._h5["atoms/forces"][()],
            config_type=list(self.config_types()),
            **{k: v.copy() for k, v in self.frame_table().items()},
        )

    def read_frames(self, indices: np.ndarray) -> StructureArrays:
        """Frames ``indices`` (any order, repeats allowed) read from disk; each run of
        consecutive frames is one hyperslab read per per-atom array."""
        indices = np.asarray(indices, dtype=np.int64)
        unique = np.unique(indices)
        pieces: dict[str, list[np.ndarray]] = {"types": [], "positions": [], "forces": []}
        for start, stop in contiguous_runs(unique):
            a, b = int(self.offsets[start]), int(self.offsets[stop])
            for key, chunks in pieces.items():
                chunks.append(self._h5[f"atoms/{key}"][a:b])
        empty = {"types": np.zeros(0, np.uint8), "positions": np.zeros((0, 3)), "forces": np.zeros((0, 3))}
        table = self.frame_table()
        config_types = self.config_types()
        unique_frames = StructureArrays(
            species=self.species,
            offsets=np.concatenate([[0], np.cumsum(np.diff(self.offsets)[unique])]).astype(np.int64),
            config_type=[config_types[i] for i in unique],
            frame_index=unique,
            **{k: np.concatenate(v) if v else empty[k] for k, v in pieces.items()},
            **{k: v[unique] for k, v in table.items()},
        )
        return unique_frames.subset(np.searchsorted(unique, indices))


def contiguous_runs(sorted_unique: np.ndarray) -> list[tuple[int, int]]:
    """[(start, stop), ...] half-open runs of consecutive values in a sorted, unique array."""
    values = np.asarray(sorted_unique, dtype=np.int64)
    if len(values) == 0:
        return []
    breaks = np.flatnonzero(np.diff(values) != 1) + 1
    starts = values[np.concatenate([[0], breaks])]
    stops = values[np.concatenate([breaks - 1, [len(values) - 1]])] + 1
    return list(zip(starts.tolist(), stops.tolist()))


def _strings(values) -> list[str]:
    return [v.decode() if isinstance(v, bytes) else str(v) for v in values]
