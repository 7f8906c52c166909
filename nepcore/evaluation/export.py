"""Export of the chosen model (``nepcore export``): copy, re-read, cross-check with calorine.

The copy is made to a temporary file beside the destination and only renamed into place after
every check passed, so a failed export leaves no file (and an earlier export untouched):

1. the source parses with :func:`nepcore.io.nep_txt.read_nep`;
2. the copy is byte-identical to the source and parses to the same architecture;
3. nepcore and, when installed, calorine's ``CPUNEP`` (GPUMD's NEP_CPU) predict the same
   energies and forces on a few frames of the dataset (evenly spaced over the test split, or
   the validation/training split when there is no test split), in float64. nep.txt values
   are written exactly, so both sides evaluate the same numbers and agree to ~1e-12; the
   tolerances (1e-6 eV/atom, 1e-5 eV/Å) catch a wrong file, not rounding.

NEP_CPU treats every cell as periodic: frames with open directions get the vacuum-padded cell
of :func:`nepcore.data.gpumd_xyz.gpumd_cell` (as ``nepcore export-xyz`` writes them for GPUMD).
"""

from __future__ import annotations

import os
import shutil
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from nepcore._utils import atomic_path, sha256_file
from nepcore.data.gpumd_xyz import VACUUM_MARGIN, gpumd_cell
from nepcore.data.neighbor_frames import compact_frames
from nepcore.data.store import StreamDataStore
from nepcore.data.structures_h5 import SPLIT_NAMES, StructureArrays, StructureFile
from nepcore.errors import NepcoreError
from nepcore.io.nep_txt import NepFileError, read_nep
from nepcore.model.nep_model import NEPModel

#: Frames compared with calorine by default.
DEFAULT_CHECK_FRAMES = 3
#: Largest accepted |E_nepcore - E_calorine| / N, eV/atom.
ENERGY_TOLERANCE = 1e-6
#: Largest accepted |F_nepcore - F_calorine| per component, eV/Å.
FORCE_TOLERANCE = 1e-5


class ExportError(NepcoreError, RuntimeError):
    """The model cannot be exported; the message says which file and which check."""


@dataclass
class ExportReport:
    """What :func:`export_model` checked. Deviations in eV/atom and eV/Å (None: not run)."""

    output: Path
    sha256: str
    checked_frames: list[int] = field(default_factory=list)
    calorine_version: str | None = None
    max_energy_deviation: float | None = None
    max_force_deviation: float | None = None
    skipped: str | None = None


def export_model(
    model: str | os.PathLike,
    data: str | os.PathLike,
    output: str | os.PathLike,
    n_frames: int = DEFAULT_CHECK_FRAMES,
    use_calorine: bool = True,
) -> ExportReport:
    """Copy ``model`` (nep.txt) to ``output`` after checking it (see the module docstring).

    data: the ``nepcore convert`` dataset whose frames are used for the calorine check.
    n_frames: frames to compare (0 skips the comparison). use_calorine: False skips it too.
    Raises :class:`ExportError` when a check fails (nothing is written then).
    """
    model, output = Path(model), Path(output)
    try:
        source = read_nep(model)
    except NepFileError as err:
        raise ExportError(f"cannot read the model: {err}") from None
    except OSError as err:
        raise ExportError(f"{model}: cannot read ({err.strerror or err})") from None
    with atomic_path(output) as tmp:
        shutil.copyfile(model, tmp)
        digest = sha256_file(tmp)
        if digest != sha256_file(model):
            raise ExportError(f"{output}: the copy differs from {model} (disk full or file changed meanwhile?)")
        try:
            copy = read_nep(tmp)
        except NepFileError as err:
            raise ExportError(f"the copy does not re-read: {err}") from None
        if copy.spec != source.spec:
            raise ExportError(f"{output}: the copy re-reads to another architecture than {model}")
        report = ExportReport(output=output, sha256=digest)
        if not use_calorine or n_frames <= 0:
            report.skipped = "calorine check not asked for"
        elif source.source_format != "nep4":
            # calorine (NEP_CPU) reads only NEP4 files; nepcore reads this one as the NEP4 model
            # it maps onto exactly, so the file is exported as it is, unchecked
            report.skipped = f"calorine reads only NEP4 files and {model} is a legacy {source.source_format} file"
        else:
            _check_with_calorine(tmp, data, n_frames, report)
    return report


def check_frames(data: str | os.PathLike, n_frames: int) -> StructureArrays:
    """Up to ``n_frames`` frames evenly spaced over the first non-empty split of test, valid,
    train."""
    with StructureFile(data) as h5:
        for name in reversed(SPLIT_NAMES):
            indices = h5.split(name)
            if len(indices):
                pick = np.unique(np.linspace(0, len(indices) - 1, min(n_frames, len(indices))).round().astype(int))
                return h5.read_frames(indices[pick])
        return h5.read_frames(np.zeros(0, dtype=np.int64))


def nepcore_predictions(model: NEPModel, frames: StructureArrays) -> tuple[np.ndarray, np.ndarray]:
    """float64 nepcore energies (F,) eV and forces (N, 3) eV/Å of ``frames``."""
    model = model.to(torch.float64).eval()
    store = StreamDataStore(compact_frames(frames, model.spec, np.float64), model.spec, torch.float64)
    with torch.no_grad():
        out = model(store.batch(np.arange(len(store))))
    return out["energy"].numpy(), out["forces"].numpy()


def calorine_predictions(path: Path, frames: StructureArrays) -> tuple[np.ndarray, np.ndarray]:
    """Energies (F,) eV and forces (N, 3) eV/Å of ``frames`` from calorine's CPUNEP."""
    from ase import Atoms
    from calorine.calculators import CPUNEP

    energies, forces = [], []
    for f in range(frames.n_frames):
        atoms_slice = frames.frame_slice(f)
        positions = frames.positions[atoms_slice]
        symbols = [frames.species[t] for t in frames.types[atoms_slice].tolist()]
        atoms = Atoms(symbols, positions=positions, cell=gpumd_cell(frames.cell[f], frames.pbc[f], positions), pbc=True)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # calorine warns about pbc/cell details irrelevant here
            atoms.calc = CPUNEP(str(path))
            energies.append(atoms.get_potential_energy())
            forces.append(atoms.get_forces())
    return np.array(energies), np.concatenate(forces) if forces else np.zeros((0, 3))


def _check_with_calorine(path: Path, data: str | os.PathLike, n_frames: int, report: ExportReport) -> None:
    """Compare nepcore and calorine on a few frames; fills ``report``, raises on disagreement."""
    try:
        import calorine
    except ImportError:
        report.skipped = "calorine is not installed"
        return
    model = NEPModel.from_nep(path)
    if max(float(np.max(model.spec.pair_cutoffs(kind))) for kind in ("radial", "angular")) >= VACUUM_MARGIN:
        report.skipped = f"cutoff not below the {VACUUM_MARGIN} Å vacuum of open directions"
        return
    try:
        frames = check_frames(data, n_frames)
        ours_e, ours_f = nepcore_predictions(model, frames)
    except NepcoreError as err:  # a damaged dataset, species the model lacks
        raise ExportError(f"cannot evaluate the model on {data}: {err}") from None
    if frames.n_frames == 0:
        report.skipped = f"{data} has no frames"
        return
    theirs_e, theirs_f = calorine_predictions(path, frames)
    n = frames.atoms_per_frame.astype(np.float64)
    report.calorine_version = str(getattr(calorine, "__version__", "unknown"))
    report.checked_frames = frames.frame_index.tolist()
    report.max_energy_deviation = float(np.abs(ours_e / n - theirs_e / n).max())
    report.max_force_deviation = float(np.abs(ours_f - theirs_f).max(initial=0.0))
    if not (report.max_energy_deviation <= ENERGY_TOLERANCE and report.max_force_deviation <= FORCE_TOLERANCE):
        raise ExportError(
            f"{report.output}: calorine {report.calorine_version} and nepcore disagree on frames "
            f"{report.checked_frames} of {data}: max |dE| {report.max_energy_deviation:.3g} eV/atom "
            f"(tolerance {ENERGY_TOLERANCE:g}), max |dF| {report.max_force_deviation:.3g} eV/Å "
            f"(tolerance {FORCE_TOLERANCE:g})"
        )
