"""The one ``ase.Atoms`` -> :class:`~nepcore.model.batch.Batch` path.

Labels are read exactly as ``nepcore convert`` reads them
(:func:`nepcore.data.reading.structure_from_atoms`): energy from ``info`` or the calculator,
forces from the ``forces`` array/calculator or GPUMD's ``force`` column, the virial from
``info["virial"]`` (9 numbers, GPUMD's row-major reading) or else ``-stress * volume``, and
the per-frame ``weight``. The batch is then assembled as training batches are
(:func:`nepcore.data.neighbor_frames.compact_frames` and
:meth:`~nepcore.data.neighbor_frames.CompactFrames.to_batch`), so a model sees the same tensors
for the same structure whether it came from a file, a dataset or Python.

Example::

    from ase.build import bulk
    batch = batch_from_atoms([bulk("Si", cubic=True)], model.spec, with_labels=False)
    energy = model(batch)["energy"]          # (1,) eV
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from nepcore.data.checks import StructureError
from nepcore.data.neighbor_frames import CompactFrames, compact_frames, numpy_float
from nepcore.data.reading import (
    LabelKeys,
    RawStructure,
    pack_structures,
    structure_from_atoms,
)
from nepcore.model.batch import Batch
from nepcore.spec import ModelSpec

__all__ = ["batch_from_atoms", "batch_from_structures", "compact_from_structures", "structures_from_atoms"]


def structures_from_atoms(
    atoms_list: Sequence,
    spec: ModelSpec,
    *,
    with_labels: bool = True,
    keys: LabelKeys = LabelKeys(),
    source_format: str | None = None,
) -> list[RawStructure]:
    """Validate ``ase.Atoms`` and read their labels as ``nepcore convert`` does.

    Args:
        atoms_list: the structures (their species must be types of ``spec``).
        spec: the model; its elements are the allowed species.
        with_labels: read energy, forces, virial/stress and weight (False: geometry only).
        keys: label names (``--energy-key`` etc. of convert).
        source_format: the ase.io format the atoms came from ("extxyz" matters for a 3x3
            ``virial``, which ASE reshapes in Fortran order).

    Returns:
        One :class:`~nepcore.data.reading.RawStructure` per structure. Raises
        :class:`~nepcore.data.checks.StructureError` naming the frame (path ``<atoms>``).
    """
    return [
        structure_from_atoms(
            atoms,
            keys,
            frame=k,
            fmt=source_format,
            allowed_species=spec.elements,
            cutoff=None,
            with_labels=with_labels,
        )
        for k, atoms in enumerate(atoms_list)
    ]


def compact_from_structures(
    structures: Sequence[RawStructure], spec: ModelSpec, dtype: torch.dtype = torch.float64
) -> CompactFrames:
    """The compact host form (neighbour pairs for ``spec``'s cutoffs) of validated structures.

    Two atoms closer than 0.1 Å (NaN energies otherwise) raise
    :class:`~nepcore.data.checks.StructureError` naming the structure's file and frame.
    """
    try:
        return compact_frames(pack_structures(structures, spec.elements), spec, numpy_float(dtype))
    except StructureError as err:  # err.frame is the place in ``structures``: name where it came from
        raw = structures[err.frame]
        raise StructureError(raw.path, raw.frame, err.field, err.problem) from None


def batch_from_structures(
    structures: Sequence[RawStructure], spec: ModelSpec, dtype: torch.dtype = torch.float64
) -> Batch:
    """The CPU :class:`~nepcore.model.batch.Batch` of validated structures, float tensors in ``dtype``."""
    return compact_from_structures(structures, spec, dtype).to_batch(dtype)


def batch_from_atoms(
    atoms_list: Sequence,
    spec: ModelSpec,
    *,
    dtype: torch.dtype = torch.float64,
    device: torch.device | str = "cpu",
    with_labels: bool = True,
    keys: LabelKeys = LabelKeys(),
    source_format: str | None = None,
) -> Batch:
    """One :class:`~nepcore.model.batch.Batch` of ``ase.Atoms``, labels read as ``convert`` reads them.

    Args:
        atoms_list: the structures (a single ``ase.Atoms`` is accepted too); species must be
            types of ``spec``. Positions Å, cells Å (rows = cell vectors).
        spec: the model whose cutoffs give the neighbour pairs and whose elements give the types.
        dtype: torch.float64 or torch.float32 for the float tensors.
        device: where the batch goes.
        with_labels: read the reference labels (energy eV, forces eV/Å, virial eV, weight);
            missing ones are masked (``has_energy`` etc. False).
        keys: label names, as ``nepcore convert --energy-key`` etc.
        source_format: the ase.io format the atoms were read from ("extxyz" for files GPUMD
            writes: see :func:`structures_from_atoms`).

    Returns:
        The batch: positions (N, 3), types (N,), cells (F, 3, 3), pairs, and labels energy (F,)
        eV total, forces (N, 3) eV/Å, virial (F, 6) eV total in the order xx yy zz xy yz zx,
        weight (F,), with presence masks.
    """
    from ase import Atoms

    if isinstance(atoms_list, Atoms):
        atoms_list = [atoms_list]
    structures = structures_from_atoms(
        atoms_list, spec, with_labels=with_labels, keys=keys, source_format=source_format
    )
    batch = batch_from_structures(structures, spec, dtype)
    return batch if torch.device(device).type == "cpu" else batch.to(device)
