"""Descriptor normalisation (q_scaler) from the training split: ``nepcore qscaler``.

NEP scales every descriptor component before the networks, ``q̂_d = q_d · q_scaler[d]``,
with ``q_scaler[d] = 1 / (max q_d − min q_d)`` over every atom of the training frames
(docs/model.md#the-q-scaler). The raw descriptors depend on the descriptor coefficients c, so the rule needs
a choice of c:

* ``gpumd``: every coefficient 1 (GPUMD's ``initial_para`` 1, its default), so a file made
  here has the q_scaler GPUMD would compute for the same training frames;
* ``self-consistent``: the model's own seeded initial coefficients
  (:func:`nepcore.model.nep_model.init_parameters` with ``seed``), so the scaled descriptors the
  networks see at the first step span ranges of width 1. ``nepcore train`` then starts from
  the same coefficients (and networks from its own seed; see :func:`initial_parameters`).

The pass streams through the data batch by batch, keeping only a running minimum and maximum
of shape (D,), so memory is bounded by one batch. A component that is constant over the data
has range 0; its denominator is floored (``floor``, descriptor units) so the scaler stays
finite (GPUMD would write ``inf``, which GPUMD's MD reader refuses) and it is reported.

``qscaler.json`` (written atomically) holds ``{"format": "nepcore-qscaler", "version": 1,
"spec": ModelSpec.architecture_dict(), "q_scaler": [...], "min": [...], "max": [...],
"mode": ..., "seed": ..., "floor": ..., "n_atoms": ..., "n_frames": ..., "floored": [...]}``;
the architecture is fixed there and ``nepcore train`` reads it from the file.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from nepcore._utils import atomic_write_text
from nepcore.errors import NepcoreError
from nepcore.model import potential as core
from nepcore.model.batch import Batch
from nepcore.model.nep_model import init_parameters
from nepcore.spec import INITIAL_BIAS_STD, ModelSpec

log = logging.getLogger(__name__)

MODES: tuple[str, ...] = ("gpumd", "self-consistent")
FORMAT_NAME = "nepcore-qscaler"
FORMAT_VERSION = 1
#: Smallest descriptor range (max - min) used as a denominator; a component with a smaller
#: range is constant for all practical purposes.
DEFAULT_FLOOR = 1e-8


class QScalerError(NepcoreError, ValueError):
    """A qscaler.json that cannot be read, or statistics that cannot be computed."""


@dataclass
class QScalerStats:
    """Result of the q-scaler pass.

    spec: the architecture. q_scaler, minimum, maximum: (D,) float64 (raw descriptor units
    for min/max). mode, seed: how the coefficients were chosen. floor: the range floor.
    n_atoms, n_frames: how much data was seen. floored: indices of components whose range
    was below the floor. atoms_per_type: (T,) atom counts per model type in the data (None in
    files written before it was recorded).
    """

    spec: ModelSpec
    q_scaler: np.ndarray
    minimum: np.ndarray
    maximum: np.ndarray
    mode: str
    seed: int
    floor: float = DEFAULT_FLOOR
    n_atoms: int = 0
    n_frames: int = 0
    floored: list[int] = field(default_factory=list)
    zbl_table: np.ndarray | None = None  # flexible ZBL only: (T(T+1)/2, 10) from zbl.in
    atoms_per_type: list[int] | None = None

    def missing_types(self) -> list[str]:
        """Model types with no atom in the data the statistics were taken over."""
        if self.atoms_per_type is None:
            return []
        return [symbol for symbol, n in zip(self.spec.elements, self.atoms_per_type) if n == 0]

    def warnings(self) -> list[str]:
        """Why a model made with these statistics may be partly untrained (said by qscaler,
        recorded in qscaler.json and carried into status.json and metrics.json)."""
        missing = self.missing_types()
        if not missing:
            return []
        return [
            (
                f"model type(s) {', '.join(missing)} have no atoms in the {self.n_frames} frames of the q-scaler "
                "data: their networks stay untrained (keep them only to fine-tune later; predictions for them are "
                "meaningless until then)"
            )
        ]

    def to_json(self) -> dict:
        return {
            "format": FORMAT_NAME,
            "version": FORMAT_VERSION,
            "spec": self.spec.architecture_dict(),
            "q_scaler": [float(x) for x in self.q_scaler],
            "min": [float(x) for x in self.minimum],
            "max": [float(x) for x in self.maximum],
            "mode": self.mode,
            "seed": int(self.seed),
            "floor": float(self.floor),
            "n_atoms": int(self.n_atoms),
            "n_frames": int(self.n_frames),
            "floored": [int(d) for d in self.floored],
            **(
                {}
                if self.atoms_per_type is None
                else {"atoms_per_type": dict(zip(self.spec.elements, map(int, self.atoms_per_type)))}
            ),
            "warnings": self.warnings(),
            **({} if self.zbl_table is None else {"zbl_table": np.asarray(self.zbl_table).tolist()}),
        }


def coefficient_parameters(spec: ModelSpec, mode: str, seed: int = 0) -> dict[str, np.ndarray]:
    """Parameters whose descriptor coefficients define the raw descriptors of ``mode``.

    gpumd: c_radial = c_angular = 1; self-consistent: ``init_parameters(spec, seed)``'s
    coefficients. q_scaler is 1 in both (raw descriptors); the network is irrelevant here.
    """
    if mode not in MODES:
        raise QScalerError(f"q-scaler mode must be one of {', '.join(MODES)}, found {mode!r}")
    shapes = spec.parameter_shapes()
    if mode == "self-consistent":
        params = init_parameters(spec.replace(zbl=None), seed)  # ZBL does not touch descriptors
    else:
        params = {name: np.zeros(shape) for name, shape in shapes.items() if name != "zbl_table"}
        params["c_radial"] = np.ones(shapes["c_radial"])
        params["c_angular"] = np.ones(shapes["c_angular"])
    params["q_scaler"] = np.ones(spec.dim)
    return {k: v for k, v in params.items() if k != "zbl_table"}


def compute_q_scaler(
    spec: ModelSpec,
    batches: Iterable[Batch],
    mode: str = "gpumd",
    seed: int = 0,
    floor: float = DEFAULT_FLOOR,
    zbl_table: np.ndarray | None = None,
) -> QScalerStats:
    """Running min/max of the raw descriptors over ``batches`` and q_scaler = 1/(max - min).

    batches: the training split (any dtype and device; evaluated in that dtype). ZBL is not
    evaluated (it does not change descriptors); a flexible-ZBL ``zbl_table`` is only passed
    through to the result. Raises QScalerError on empty data.
    """
    params_np = coefficient_parameters(spec, mode, seed)
    tables_cpu = core.build_tables(spec.replace(zbl=None))
    lo = hi = None
    n_atoms = n_frames = 0
    per_type = None  # (T,) atom counts, kept on the batches' device until the end
    cache: dict[tuple, tuple[dict, core.CoreTables]] = {}
    with torch.no_grad():
        for batch in batches:
            key = (str(batch.positions.device), batch.positions.dtype)
            if key not in cache:
                params = {k: torch.as_tensor(v, dtype=key[1], device=key[0]) for k, v in params_np.items()}
                cache[key] = (params, tables_cpu.to(key[0], key[1]))
            params, tables = cache[key]
            q = core.evaluate(params, tables, batch, compute_forces=False, return_descriptors=True)["descriptors"]
            if q.shape[0] == 0:
                continue
            counts = torch.bincount(batch.types, minlength=spec.n_types)
            per_type = counts if per_type is None else per_type + counts
            b_lo, b_hi = q.amin(0).to(torch.float64), q.amax(0).to(torch.float64)
            lo = b_lo if lo is None else torch.minimum(lo, b_lo)
            hi = b_hi if hi is None else torch.maximum(hi, b_hi)
            n_atoms += batch.n_atoms
            n_frames += batch.n_frames
    if lo is None:
        raise QScalerError("no atoms in the training split: cannot compute the q-scaler")
    minimum, maximum = lo.cpu().numpy(), hi.cpu().numpy()
    span = maximum - minimum
    floored = [int(d) for d in np.flatnonzero(span < floor)]
    if floored:
        log.warning(
            "warning: descriptor components %s are constant over the training data "
            "(range < %g); their q_scaler is 1/%g",
            floored,
            floor,
            floor,
        )
    q_scaler = 1.0 / np.maximum(span, floor)
    stats = QScalerStats(
        spec,
        q_scaler,
        minimum,
        maximum,
        mode,
        int(seed),
        float(floor),
        n_atoms,
        n_frames,
        floored,
        None if zbl_table is None else np.asarray(zbl_table, dtype=np.float64),
        [int(n) for n in per_type.cpu().tolist()],
    )
    for warning in stats.warnings():
        log.warning("warning: %s", warning)
    return stats


def initial_parameters(
    stats: QScalerStats | None, spec: ModelSpec, seed: int, bias_std: float = INITIAL_BIAS_STD
) -> dict[str, np.ndarray]:
    """Initial training parameters consistent with a q-scaler result.

    The network weights come from ``seed`` (so committee members differ), the hidden biases
    with standard deviation ``bias_std`` (:func:`init_parameters`). In self-consistent
    mode the descriptor coefficients are the ones the statistics were taken with (the
    q-scaler's seed), so the first step sees unit-range scaled descriptors. q_scaler is set
    from ``stats`` (1 when stats is None).
    """
    flexible = spec.zbl is not None and spec.zbl.kind == "flexible"
    params = init_parameters(spec.replace(zbl=None) if flexible else spec, seed, bias_std)
    if stats is not None and stats.mode == "self-consistent":
        coefficients = coefficient_parameters(spec, "self-consistent", stats.seed)
        params["c_radial"], params["c_angular"] = coefficients["c_radial"], coefficients["c_angular"]
    if flexible:
        if stats is None or stats.zbl_table is None:
            raise QScalerError("a flexible-ZBL model needs the zbl.in table (run qscaler with --nep-in)")
        params["zbl_table"] = np.asarray(stats.zbl_table, dtype=np.float64).copy()
    if stats is not None:
        params["q_scaler"] = np.asarray(stats.q_scaler, dtype=np.float64).copy()
    return params


def write_qscaler(path: str | os.PathLike, stats: QScalerStats) -> Path:
    """Write ``qscaler.json`` atomically (temporary file + os.replace)."""
    path = Path(path)
    text = json.dumps(stats.to_json(), indent=1) + "\n"
    return atomic_write_text(path, text)


def read_qscaler(path: str | os.PathLike) -> QScalerStats:
    """Read ``qscaler.json``; QScalerError naming the file and field on a bad file."""
    path = Path(path)
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as err:
        raise QScalerError(f"{path}: cannot read as JSON ({err})") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT_NAME:
        raise QScalerError(f"{path}: not a nepcore qscaler file (no format={FORMAT_NAME!r})")
    try:
        spec = ModelSpec.from_dict(data["spec"])
        q = np.asarray(data["q_scaler"], dtype=np.float64)
        stats = QScalerStats(
            spec, q, np.asarray(data["min"], dtype=np.float64), np.asarray(data["max"], dtype=np.float64),
            str(data["mode"]), int(data["seed"]), float(data.get("floor", DEFAULT_FLOOR)),
            int(data.get("n_atoms", 0)), int(data.get("n_frames", 0)), list(data.get("floored", [])),
            None if data.get("zbl_table") is None else np.asarray(data["zbl_table"], dtype=np.float64),
            None if data.get("atoms_per_type") is None else [int(data["atoms_per_type"][s]) for s in spec.elements],
        )  # fmt: skip
    except KeyError as err:
        raise QScalerError(f"{path}: missing field {err.args[0]!r}") from None
    except (TypeError, ValueError) as err:
        raise QScalerError(f"{path}: {err}") from None
    if q.shape != (spec.dim,):
        raise QScalerError(f"{path}: q_scaler has {q.size} values, the architecture needs {spec.dim}")
    if not np.all(np.isfinite(q)) or np.any(q <= 0):
        raise QScalerError(f"{path}: q_scaler values must be finite and positive")
    return stats
