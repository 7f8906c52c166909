"""Streaming prediction with a nep.txt: GPUMD-format ``*_train.out`` files (``nepcore predict``).

Structures are read one at a time with ``ase.io.iread`` (through
:func:`nepcore.data.reading.iter_file`, which also extracts and validates the reference labels:
``energy``, ``forces`` or GPUMD's ``force`` column, ``virial`` or ``stress``), grouped into
batches of ``batch_size`` frames, evaluated, and their rows appended to the output files.
Memory is bounded by one batch, never by the file. Rows follow the input order (files in
the order given, frames in file order), as GPUMD's prediction mode writes them.

The outputs (see :mod:`nepcore.io.gpumd_out` for the exact formats) are written to temporary
files and renamed into place only after the last batch, so a failure (an unknown element in
frame 9000, say) leaves no partial files and any previous outputs untouched.

Periodicity follows what ase.io reports for each frame (an extxyz with a ``Lattice`` and no
``pbc`` key is periodic in all three directions, which is what GPUMD assumes).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from itertools import islice
from pathlib import Path

import numpy as np
import torch
from tqdm import tqdm

from nepcore.data.atoms_batch import batch_from_structures
from nepcore.data.reading import RawStructure, iter_file
from nepcore.geometry.virial import reference_virial6
from nepcore.io.gpumd_out import GpumdOutputs
from nepcore.model.nep_model import NEPModel, resolve_device
from nepcore.spec import ModelSpec

PRECISIONS: dict[str, torch.dtype] = {"float64": torch.float64, "float32": torch.float32}
#: Default frames per batch: large enough to amortise per-call overhead on small frames,
#: small enough that a batch of 1000-atom frames stays well under a GB.
DEFAULT_BATCH_SIZE = 32


@dataclass
class PredictSummary:
    """What :func:`predict` did: frame and atom counts and the files it wrote."""

    n_frames: int = 0
    n_atoms: int = 0
    files: list[Path] = field(default_factory=list)


def iter_structures(paths: Sequence[str | os.PathLike], spec: ModelSpec) -> Iterator[RawStructure]:
    """Every frame of every file, validated, with labels; species must be types of ``spec``.

    Raises :class:`~nepcore.data.checks.StructureError` ("<file>: frame <k>: <field>: <problem>").
    """
    for path in paths:
        yield from iter_file(str(path), allowed_species=spec.elements, cutoff=None, with_labels=True)


def chunked(items: Iterable, size: int) -> Iterator[list]:
    """Consecutive lists of ``size`` items (the last may be shorter), consuming lazily."""
    iterator = iter(items)
    while chunk := list(islice(iterator, size)):
        yield chunk


def _volume(raw: RawStructure) -> float:
    """Cell volume in Å³ when every direction is periodic (GPUMD's stress needs it), else NaN."""
    if not raw.pbc.all():
        return float("nan")
    return float(abs(np.linalg.det(raw.cell)))


def _references(chunk: list[RawStructure]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Reference total energies (F,), forces (N, 3) and virials (F, 6); NaN where absent."""
    energy = np.array([np.nan if s.energy is None else s.energy for s in chunk], dtype=np.float64)
    forces = np.concatenate([s.forces if s.forces is not None else np.full((s.n_atoms, 3), np.nan) for s in chunk])
    virial = np.stack([reference_virial6(s.virial) for s in chunk])
    return energy, forces, virial


def load_model(
    model: NEPModel | str | os.PathLike, precision: str = "float64", device: str | torch.device = "cpu"
) -> NEPModel:
    """A model for inference from a nep.txt path (or a copy of a model) in ``precision`` on ``device``
    ("auto", "cpu", "cuda", "cuda:N" or a torch.device; nepcore.model.nep_model.resolve_device).

    A given model is copied (``Module.to`` would convert the caller's model in place).
    """
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {sorted(PRECISIONS)}, found {precision!r}")
    if isinstance(model, NEPModel):
        model = NEPModel(model.spec, model.numpy_parameters())
    else:
        model = NEPModel.from_nep(model)
    return model.to(device=resolve_device(device), dtype=PRECISIONS[precision]).eval()


def predict(
    model: NEPModel | str | os.PathLike,
    inputs: Sequence[str | os.PathLike],
    out_dir: str | os.PathLike,
    precision: str = "float64",
    descriptors: bool = False,
    batch_size: int = DEFAULT_BATCH_SIZE,
    device: str | torch.device = "cpu",
    progress: bool | None = None,
    compile: bool = False,
) -> PredictSummary:
    """Predict every frame of ``inputs`` and write GPUMD's four ``*_train.out`` files to ``out_dir``.

    model: a nep.txt path or an :class:`NEPModel`. precision: "float64" or "float32".
    descriptors: also write ``descriptor.out`` (scaled descriptors, one row per atom).
    batch_size: frames per evaluation. device: "auto" (CUDA when available), "cpu", "cuda".
    progress: tqdm bar (None: only on a terminal).
    compile: evaluate through the inductor-compiled core (one compilation for every batch).
    Raises StructureError for bad input (naming file and frame), ValueError for bad options.
    """
    if batch_size < 1:
        raise ValueError(f"batch size must be at least 1, found {batch_size}")
    if not inputs:
        raise ValueError("no structure files given")
    device = resolve_device(device)
    net = load_model(model, precision, device)
    if compile:
        net.use_compiled_core()
    dtype = PRECISIONS[precision]
    summary = PredictSummary()
    bar = tqdm(desc="predict", unit=" frames", disable=None if progress is None else not progress, leave=False)
    with bar, GpumdOutputs(out_dir, "train", descriptors=descriptors) as out, torch.no_grad():
        for chunk in chunked(iter_structures(inputs, net.spec), batch_size):
            batch = batch_from_structures(chunk, net.spec, dtype).to(device)
            result = net(batch, return_descriptors=descriptors)
            ref_energy, ref_forces, ref_virial = _references(chunk)
            out.write(
                n_atoms=np.array([s.n_atoms for s in chunk]),
                volume=np.array([_volume(s) for s in chunk]),
                energy=_numpy(result["energy"]),
                forces=_numpy(result["forces"]),
                virial=_numpy(result["virial"]),
                ref_energy=ref_energy,
                ref_forces=ref_forces,
                ref_virial=ref_virial,
                descriptors=_numpy(result["descriptors"]) if descriptors else None,
            )
            summary.n_frames += len(chunk)
            summary.n_atoms += batch.n_atoms
            bar.update(len(chunk))
    summary.files = list(out.paths.values())
    return summary


def _numpy(t: torch.Tensor) -> np.ndarray:
    return t.detach().to("cpu", torch.float64).numpy()
