"""Writers for GPUMD's trainer output files (docs/model.md#output-files), shared by ``predict`` and ``evaluate``.

Formats, exactly as GPUMD's ``Fitness::output`` / ``update_energy_force_virial`` print them
(C ``%g``, i.e. 6 significant digits, one space between columns, no trailing space):

* ``energy_*.out``: one row per structure, ``E_pred/N E_ref/N`` (eV/atom);
* ``force_*.out``: one row per atom, ``Fx Fy Fz Fx_ref Fy_ref Fz_ref`` (eV/Å);
* ``virial_*.out``: one row per structure, predicted ``W/N`` in the order xx yy zz xy yz zx
  then the reference in the same order (eV/atom);
* ``stress_*.out``: same layout, ``W/V * 160.2177`` (GPa), **positive = compressive** (the
  opposite sign of an ASE / extxyz ``stress``);
* ``descriptor.out``: scaled descriptors (q · q_scaler), ``%g `` each *with* a trailing space,
  one row per atom (GPUMD ``output_descriptor 2``) or per structure (mean, ``1``).

Absent references (NaN in the arrays given to these writers) are written as ``-1e+06``,
GPUMD's sentinel for a missing virial; nepcore uses it for every absent reference so that a
reader needs a single test (``ref == -1e6``). A predicted stress of a structure without a
volume (an open cluster) is written as ``nan``.

:class:`GpumdOutputs` writes them batch by batch to temporary files and moves them all into
place at the end (:func:`nepcore._utils.atomic_open`), so an interrupted run leaves no
half-written file.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import IO

import numpy as np

from nepcore._utils import atomic_open
from nepcore.errors import writing
from nepcore.geometry.virial import stress_gpa

#: Written in place of an absent reference value.
ABSENT = -1e6


def _fmt(value: float) -> str:
    return f"{value:g}"


def format_rows(pred: np.ndarray, ref: np.ndarray | None = None) -> str:
    """Rows ``pred... ref...`` with ``%g``; NaN in ``ref`` becomes ``-1e+06``.

    pred: (rows, a) values, ref: (rows, b) or None. Returns the text, one line per row.
    """
    pred = np.asarray(pred, dtype=np.float64)
    pred = pred.reshape(len(pred), -1)
    cols = [pred]
    if ref is not None:
        ref = np.asarray(ref, dtype=np.float64).reshape(len(pred), -1)
        cols.append(np.where(np.isnan(ref), ABSENT, ref))
    table = np.concatenate(cols, axis=1)
    return "".join(" ".join(map(_fmt, row)) + "\n" for row in table.tolist())


def format_descriptor_rows(descriptors: np.ndarray) -> str:
    """descriptor.out rows: ``%g `` per value (trailing space, as GPUMD), one row per line."""
    d = np.asarray(descriptors, dtype=np.float64)
    return "".join("".join(_fmt(v) + " " for v in row) + "\n" for row in d.reshape(len(d), -1).tolist())


# ---- streaming writer -----------------------------------------------------------------------
class GpumdOutputs:
    """The four ``*_<suffix>.out`` files (and ``descriptor.out``), written batch by batch.

    Use as a context manager::

        with GpumdOutputs(out_dir, "train", descriptors=True) as out:
            out.write(n_atoms, volume, energy, forces, virial, ref_energy, ...)

    Rows go to temporary files in ``out_dir``; they replace the final names only when the
    block exits without an exception (all files then exist together, or none is touched).
    """

    def __init__(self, out_dir: str | os.PathLike, suffix: str = "train", descriptors: bool = False) -> None:
        self.out_dir = Path(out_dir)
        kinds = ("energy", "force", "virial", "stress")
        self.paths = {kind: self.out_dir / f"{kind}_{suffix}.out" for kind in kinds}
        if descriptors:
            self.paths["descriptor"] = self.out_dir / "descriptor.out"
        self._stack: contextlib.ExitStack | None = None
        self._files: dict[str, IO[str]] = {}

    def __enter__(self) -> GpumdOutputs:
        with writing(self.out_dir):
            self.out_dir.mkdir(parents=True, exist_ok=True)
        stack = contextlib.ExitStack()
        try:
            self._files = {key: stack.enter_context(atomic_open(path)) for key, path in self.paths.items()}
        except BaseException:
            stack.close()
            raise
        self._stack = stack
        return self

    def __exit__(self, exc_type, exc, tb) -> bool:
        assert self._stack is not None
        self._files = {}
        # atomic_open commits on a clean exit and removes its temporary file otherwise.
        # The files are committed one after the other; an error there is rare (disk full).
        return bool(self._stack.__exit__(exc_type, exc, tb))

    def write(
        self,
        n_atoms: np.ndarray,
        volume: np.ndarray,
        energy: np.ndarray,
        forces: np.ndarray,
        virial: np.ndarray,
        ref_energy: np.ndarray,
        ref_forces: np.ndarray,
        ref_virial: np.ndarray,
        descriptors: np.ndarray | None = None,
    ) -> None:
        """Append one batch of F structures with N atoms in total.

        n_atoms (F,); volume (F,) Å³ (<= 0 or NaN: none); energy (F,) total eV; forces (N, 3)
        eV/Å; virial (F, 6) total eV (xx yy zz xy yz zx); the ``ref_*`` alike with NaN where
        absent; descriptors (N, D) scaled, required iff the object was made with descriptors.
        """
        n = np.asarray(n_atoms, dtype=np.float64).reshape(-1, 1)
        energy = np.asarray(energy, dtype=np.float64).reshape(-1, 1)
        ref_energy = np.asarray(ref_energy, dtype=np.float64).reshape(-1, 1)
        virial = np.asarray(virial, dtype=np.float64).reshape(-1, 6)
        ref_virial = np.asarray(ref_virial, dtype=np.float64).reshape(-1, 6)
        self._put("energy", format_rows(energy / n, ref_energy / n))
        self._put("force", format_rows(forces, ref_forces))
        self._put("virial", format_rows(virial / n, ref_virial / n))
        self._put("stress", format_rows(stress_gpa(virial, volume), stress_gpa(ref_virial, volume)))
        if "descriptor" in self._files:
            if descriptors is None:
                raise ValueError("descriptor.out is being written: pass the descriptors of every batch")
            self._put("descriptor", format_descriptor_rows(descriptors))

    def _put(self, kind: str, text: str) -> None:
        """Append ``text`` to the ``kind`` file (OutputError naming it when that fails)."""
        with writing(self.paths[kind]):
            self._files[kind].write(text)
