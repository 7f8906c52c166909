"""Raw structures: reading anything ase.io reads, label extraction and validation.

This module turns ``ase.Atoms`` (from extxyz as GPUMD writes it, VASP OUTCAR/vasprun.xml,
ASE trajectories and databases, ...) into validated :class:`RawStructure` records and packs
them into the flat :class:`~nepcore.data.structures_h5.StructureArrays` that the HDF5 dataset holds.
The file format itself (the HDF5 schema) is documented in :mod:`nepcore.data.structures_h5`, the
whole ``nepcore convert`` pipeline is :func:`nepcore.data.convert.convert`.

Where ase.io puts the labels (all handled by :func:`structure_from_atoms`):

* extxyz ``energy=``, ``forces`` column and ``stress=`` go to a SinglePointCalculator
  (``atoms.calc.results``; stress as ASE Voigt 6, eV/Å³, positive = tensile);
* GPUMD's ``force`` column stays in ``atoms.arrays["force"]``;
* ``virial=`` stays in ``atoms.info["virial"]``; for the keys ``virial`` and ``stress`` ASE
  reshapes the 9 numbers to 3x3 in *Fortran* order, so the matrix is transposed back here
  to GPUMD's row-major reading ``xx xy xz yx yy yz zx zy zz``;
* ``weight=`` and ``config_type=`` stay in ``atoms.info``.

Key lookup is exact first, then case-insensitive (GPUMD lower-cases all keys).
Units: Å, eV, eV/Å; virial in eV (total), ``virial = -stress * volume`` (docs/model.md#forces-virial-and-stress).
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from ase.stress import voigt_6_to_full_3x3_stress

from nepcore.data.checks import MAX_WEIGHT, StructureError, check_cell, check_finite, check_geometry
from nepcore.data.structures_h5 import StructureArrays
from nepcore.elements import SYMBOLS

#: Largest allowed |virial - (-stress V)| per atom and component (eV/atom) before the two
#: are said to disagree; GPUMD's own tolerance.
VIRIAL_STRESS_TOLERANCE = 1e-3
#: ASE extxyz reshapes these info keys to 3x3 in Fortran order.
_ASE_FORTRAN_3X3_KEYS = ("virial", "stress")
#: Force keys tried in order when no key is given: ASE's ``forces``, then GPUMD's ``force``.
DEFAULT_FORCE_KEYS = ("forces", "force")


@dataclass(frozen=True)
class LabelKeys:
    """Names under which labels are looked up (``--energy-key`` etc.).

    forces None means ``forces`` (ASE), then ``force`` (GPUMD's column name).
    """

    energy: str = "energy"
    forces: str | None = None
    virial: str = "virial"
    stress: str = "stress"
    weight: str = "weight"
    config_type: str = "config_type"


@dataclass
class RawStructure:
    """One validated structure. positions (n, 3) Å; cell (3, 3) rows, Å; pbc (3,) bool;
    energy total eV or None; forces (n, 3) eV/Å or None; virial (3, 3) total eV (GPUMD
    row-major) or None; weight > 0; ``n_isolated`` atoms without a neighbour inside the
    checked cutoff; ``virial_stress_disagree``: both given and different (virial kept);
    ``path``, ``frame``: where it was read (for error messages)."""

    numbers: np.ndarray
    positions: np.ndarray
    cell: np.ndarray
    pbc: np.ndarray
    energy: float | None = None
    forces: np.ndarray | None = None
    virial: np.ndarray | None = None
    weight: float = 1.0
    config_type: str = ""
    n_isolated: int = 0
    virial_stress_disagree: bool = False
    path: str = "<atoms>"
    frame: int | None = None

    @property
    def n_atoms(self) -> int:
        return int(self.numbers.shape[0])


def _lookup(mapping: dict | None, key: str) -> Any:
    """``mapping[key]``, else the value of a key equal to ``key`` ignoring case, else None."""
    if not mapping:
        return None
    if key in mapping:
        return mapping[key]
    lower = key.lower()
    for k, v in mapping.items():
        if isinstance(k, str) and k.lower() == lower:
            return v
    return None


def _per_atom(arrays: dict, results: dict, key: str) -> Any:
    """The per-atom array ``key`` (exact name in ``atoms.arrays``, else in the calculator's
    results ignoring case), or None."""
    return arrays.get(key) if key in arrays else _lookup(results, key)


def _calc_results(atoms) -> dict:
    calc = getattr(atoms, "calc", None)
    return dict(getattr(calc, "results", None) or {})


def _tensor3x3(value: Any, key: str, fmt: str | None, field: str, fail) -> np.ndarray:
    """A 3x3 tensor from 9 numbers (row-major), a 3x3 matrix or ASE Voigt 6 (stress only)."""
    try:
        arr = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError):
        fail(field, f"expected numbers, found {value!r}")
    check_finite(arr, field, fail)
    if arr.shape == (9,):
        return arr.reshape(3, 3)
    if arr.shape == (3, 3):
        # extxyz: ASE read the 9 numbers in Fortran order; undo it (GPUMD reads row-major)
        return arr.T.copy() if fmt == "extxyz" and key in _ASE_FORTRAN_3X3_KEYS else arr
    if arr.shape == (6,) and field == "stress":
        return voigt_6_to_full_3x3_stress(arr)
    expected = "9 values (xx xy xz yx yy yz zx zy zz)" + (" or ASE Voigt 6" if field == "stress" else "")
    fail(field, f"expected {expected}, found shape {arr.shape}")
    raise AssertionError  # unreachable: fail raises


def structure_from_atoms(
    atoms,
    keys: LabelKeys = LabelKeys(),
    *,
    path: str = "<atoms>",
    frame: int | None = None,
    fmt: str | None = None,
    allowed_species: Sequence[str] | None = None,
    cutoff: float | None = 6.0,
    with_labels: bool = True,
) -> RawStructure:
    """Validate one ``ase.Atoms`` and extract its labels.

    path, frame: named in errors. fmt: the ase.io format it came from ("extxyz" matters:
    see the module docstring). allowed_species: chemical symbols accepted (None: any
    element H..Pu). cutoff (Å): the isolated-atom check radius; None skips the geometry
    checks (close contacts and isolated atoms), e.g. for prediction. Raises
    :class:`~nepcore.data.checks.StructureError`.
    """

    def fail(field: str, problem: str):
        raise StructureError(path, frame, field, problem)

    numbers = np.asarray(atoms.numbers, dtype=np.int64)
    n = len(numbers)
    if n == 0:
        fail("atoms", "the frame has no atoms")
    bad = (numbers < 1) | (numbers > len(SYMBOLS))
    if bad.any():
        fail("species", f"atom {int(np.argmax(bad))} has atomic number {numbers[bad][0]}, not an element H..Pu")
    if allowed_species is not None:
        unknown = sorted({SYMBOLS[z - 1] for z in set(numbers.tolist())} - set(allowed_species))
        if unknown:
            fail("species", f"{', '.join(unknown)} not among the types {' '.join(allowed_species)}")

    positions = np.array(atoms.positions, dtype=np.float64)
    check_finite(positions, "positions", fail)
    cell = np.array(atoms.cell.array, dtype=np.float64)
    pbc = np.array(atoms.pbc, dtype=bool).reshape(3)
    volume = check_cell(cell, pbc, fail)
    raw = RawStructure(numbers, positions, cell, pbc, path=path, frame=frame)
    if cutoff is not None:
        raw.n_isolated = check_geometry(positions, cell, pbc, cutoff, fail)
    if not with_labels:
        return raw

    info, arrays, results = atoms.info, atoms.arrays, _calc_results(atoms)
    energy = _lookup(info, keys.energy)
    if energy is None:
        energy = _lookup(results, keys.energy)
    if energy is not None:
        try:
            raw.energy = float(np.asarray(energy, dtype=np.float64).reshape(()))
        except (TypeError, ValueError):
            fail("energy", f"expected one number, found {energy!r}")
        check_finite(np.array([raw.energy]), "energy", fail)

    force_keys = (keys.forces,) if keys.forces else DEFAULT_FORCE_KEYS
    forces, force_key = None, force_keys[0]
    for k in force_keys:
        forces = _per_atom(arrays, results, k)
        if forces is not None:
            force_key = k
            break
    if forces is None and keys.forces:
        # an explicit key that misses a force column the file does have would silently
        # train on energies only (GPUMD writes "force", ASE "forces")
        present = [k for k in DEFAULT_FORCE_KEYS if k != keys.forces and _per_atom(arrays, results, k) is not None]
        if present:
            fail(
                "forces",
                f"no {keys.forces!r} column, but the frame has a {present[0]!r} column; "
                f"give --forces-key {present[0]} (or leave --forces-key out to take either)",
            )
    if forces is not None:
        forces = np.asarray(forces, dtype=np.float64)
        if forces.shape != (n, 3):
            fail("forces", f"expected shape ({n}, 3), found {forces.shape} (column {force_key!r})")
        check_finite(forces, "forces", fail)
        raw.forces = forces.copy()

    virial = _lookup(info, keys.virial)
    if virial is not None:
        raw.virial = _tensor3x3(virial, keys.virial, fmt, "virial", fail)
    stress = _lookup(info, keys.stress)
    if stress is None:
        stress = _lookup(results, keys.stress)
    if stress is not None:
        stress_tensor = _tensor3x3(stress, keys.stress, fmt, "stress", fail)
        if volume is None:
            fail("stress", "a stress needs a cell of positive volume to become a virial; give the virial instead")
        from_stress = -stress_tensor * volume
        if raw.virial is None:
            raw.virial = from_stress
        elif np.abs(raw.virial - from_stress).max() / n > VIRIAL_STRESS_TOLERANCE:
            raw.virial_stress_disagree = True  # GPUMD's rule: the virial wins

    weight = _lookup(info, keys.weight)
    if weight is not None:
        try:
            raw.weight = float(np.asarray(weight, dtype=np.float64).reshape(()))
        except (TypeError, ValueError):
            fail("weight", f"expected one number, found {weight!r}")
        if not (np.isfinite(raw.weight) and 0.0 < raw.weight <= MAX_WEIGHT):
            fail("weight", f"must be in (0, {MAX_WEIGHT:g}] as GPUMD requires, found {raw.weight}")
    config_type = _lookup(info, keys.config_type)
    if config_type is not None:
        raw.config_type = str(config_type)
    return raw


def iter_file(
    path: str,
    keys: LabelKeys = LabelKeys(),
    *,
    allowed_species: Sequence[str] | None = None,
    cutoff: float | None = 6.0,
    with_labels: bool = True,
) -> Iterator[RawStructure]:
    """Read and validate every frame of one file (streaming, via ``ase.io.iread``).

    Raises :class:`StructureError` naming the file (and frame) if the file cannot be read,
    is empty, or any frame is invalid.
    """
    import ase.io
    from ase.io.formats import filetype

    if not os.path.exists(path):
        raise StructureError(path, None, "file", "no such file")
    if os.path.isfile(path) and os.path.getsize(path) == 0:
        raise StructureError(path, None, "file", "the file is empty")
    try:
        fmt = filetype(path, guess=True)
    except Exception as err:  # ase raises its own types for empty/unknown files
        message = str(err) or type(err).__name__
        raise StructureError(path, None, "file", f"cannot read: {message}") from None
    count = 0
    try:
        for atoms in ase.io.iread(path, index=":", format=fmt):
            yield structure_from_atoms(
                atoms,
                keys,
                path=path,
                frame=count,
                fmt=fmt,
                allowed_species=allowed_species,
                cutoff=cutoff,
                with_labels=with_labels,
            )
            count += 1
    except StructureError:
        raise
    except Exception as err:  # a parser error part-way through the file
        raise StructureError(path, count, "file", f"cannot read ({fmt}): {err}") from None
    if count == 0:
        raise StructureError(path, None, "file", "no structures in the file")


def pack_structures(
    structures: Sequence[RawStructure],
    species: Sequence[str],
    source: Sequence[int] | None = None,
    source_frame: Sequence[int] | None = None,
) -> StructureArrays:
    """Concatenate records into :class:`StructureArrays`; ``species`` orders the type index.

    Missing labels become NaN with a False mask (forces NaN per atom).
    """
    species = tuple(species)
    lookup = np.full(len(SYMBOLS) + 1, -1, dtype=np.int64)
    for t, symbol in enumerate(species):
        lookup[SYMBOLS.index(symbol) + 1] = t
    n_frames = len(structures)
    counts = np.array([s.n_atoms for s in structures], dtype=np.int64)
    numbers = np.concatenate([s.numbers for s in structures]) if n_frames else np.zeros(0, np.int64)
    types = lookup[numbers]
    if (types < 0).any():
        missing = sorted({SYMBOLS[z - 1] for z in numbers[types < 0].tolist()})
        raise ValueError(f"species {missing} are not in the species list {list(species)}")
    nan3 = lambda s: np.full((s.n_atoms, 3), np.nan)
    return StructureArrays(
        species=species,
        offsets=np.concatenate([[0], np.cumsum(counts)]).astype(np.int64),
        types=types.astype(np.uint8),
        positions=np.concatenate([s.positions for s in structures]) if n_frames else np.zeros((0, 3)),
        forces=np.concatenate([s.forces if s.forces is not None else nan3(s) for s in structures])
        if n_frames
        else np.zeros((0, 3)),
        cell=np.array([s.cell for s in structures], dtype=np.float64).reshape(n_frames, 3, 3),
        pbc=np.array([s.pbc for s in structures], dtype=bool).reshape(n_frames, 3),
        energy=np.array([np.nan if s.energy is None else s.energy for s in structures], dtype=np.float64),
        has_energy=np.array([s.energy is not None for s in structures], dtype=bool),
        has_forces=np.array([s.forces is not None for s in structures], dtype=bool),
        virial=np.array(
            [np.full((3, 3), np.nan) if s.virial is None else s.virial for s in structures], dtype=np.float64
        ).reshape(n_frames, 3, 3),
        has_virial=np.array([s.virial is not None for s in structures], dtype=bool),
        weight=np.array([s.weight for s in structures], dtype=np.float64),
        config_type=[s.config_type for s in structures],
        source=np.asarray(source if source is not None else np.zeros(n_frames), dtype=np.int32),
        source_frame=np.asarray(source_frame if source_frame is not None else np.arange(n_frames), dtype=np.int32),
    )


def species_in(structures: Sequence[RawStructure]) -> tuple[str, ...]:
    """The chemical symbols present, ordered by atomic number."""
    present = set()
    for s in structures:
        present.update(np.unique(s.numbers).tolist())
    return tuple(SYMBOLS[z - 1] for z in sorted(present))
