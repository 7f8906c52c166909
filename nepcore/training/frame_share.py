"""Which frames hold a split's squared force or energy error, and the warning when a few do.

An RMSE over a split can be decided by one or two frames far outside the training data: on
PdCuNi_mid (issue 10, tenth round) one 256-atom rattled validation frame held 85 % of the
validation split's squared force error, so the fitness, the plateau schedule and the best-model
choice followed that frame while the model still improved on the other 19. Two places say it:

* a training stage, at its end, for its validation split (:func:`validation_frame_warnings`,
  in the log and ``status.json``), because that split steers the stage;
* ``nepcore evaluate``, for the evaluated split (nepcore.evaluation.frame_errors), which also
  lists the worst frames in metrics.json.

Both use :func:`concentration_warning`, the one home of the rule and its message.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch

from nepcore.model.nep_model import NEPModel
from nepcore.training.data import BatchSource

#: The warning: at most this fraction of a split's frames (at least one) ...
CONCENTRATED_FRAMES = 0.02
#: ... hold more than this share of its squared force (or energy) error ...
CONCENTRATED_SHARE = 0.5
#: ... in a split of at least this many frames with that label (in a handful of frames one
#: frame holding half the error is ordinary).
CONCENTRATED_MIN_FRAMES = 10

_UNITS = {"force": "meV/Å", "energy": "meV/atom"}


def frame_name(source_path: str, source_frame: int) -> str:
    """How a warning names a frame: its input file and 0-based frame number there."""
    return f"{source_path} frame {int(source_frame)}"


def concentration_warning(
    split: str,
    quantity: str,
    squared: np.ndarray,
    samples: np.ndarray,
    name: Callable[[int], str],
    see: str,
) -> str | None:
    """A warning when a few frames hold most of a split's squared ``quantity`` error.

    Args:
        split: the split's name, as the message gives it ("valid", "test").
        quantity: "force" or "energy".
        squared: (F,) per frame, the sum of its squared errors (force: over the components,
            eV²/Å²; energy: the squared error of the energy per atom, eV²/atom²).
        samples: (F,) per frame, the number of those squared errors (force: 3 × atoms, energy:
            1), 0 for a frame without the label.
        name: the name of the frame at a position of ``squared`` (e.g. "a.xyz frame 13").
        see: where to read more, appended in parentheses.

    Returns:
        None, or a line naming the frames, their share and the split's RMSE without them
        (meV/Å or meV/atom), when at most CONCENTRATED_FRAMES of the frames with that label (at
        least one) hold more than CONCENTRATED_SHARE of the squared error, in a split of at
        least CONCENTRATED_MIN_FRAMES such frames whose errors are all finite.
    """
    squared, samples = np.asarray(squared, dtype=np.float64), np.asarray(samples, dtype=np.float64)
    labelled = np.flatnonzero(samples > 0)
    if labelled.size < CONCENTRATED_MIN_FRAMES or not np.isfinite(squared[labelled]).all():
        return None
    total = float(squared[labelled].sum())
    if total <= 0:
        return None
    allowed = max(1, int(CONCENTRATED_FRAMES * labelled.size))
    order = labelled[np.argsort(-squared[labelled], kind="stable")]
    share = np.cumsum(squared[order]) / total
    held = int(np.searchsorted(share, CONCENTRATED_SHARE, side="right")) + 1  # smallest set above the share
    if held > allowed:
        return None
    worst = order[:held]
    rest = (total - squared[worst].sum()) / (samples[labelled].sum() - samples[worst].sum())
    names = "; ".join(name(int(i)) for i in worst)
    return (
        f"{split} {quantity}: {held} of {labelled.size} frames ({names}) "
        f"{'holds' if held == 1 else 'hold'} {100 * share[held - 1]:.0f} % of the squared {quantity} error; "
        f"without {'it' if held == 1 else 'them'} the {quantity} RMSE is {1e3 * np.sqrt(rest):.1f} "
        f"{_UNITS[quantity]} instead of {1e3 * np.sqrt(total / samples[labelled].sum()):.1f} ({see})"
    )


def frame_squared_errors(
    model: NEPModel, source: BatchSource, batch_size: int, device: torch.device, force_path: str
) -> dict[str, np.ndarray]:
    """Per-frame squared errors of ``model`` on every frame of ``source`` (one pass, no training).

    Returns:
        {"frame_index" (F,) dataset frame indices, "force_sq" (F,) Σ over the frame's force
        components of the squared error (eV²/Å²), "force_n" (F,) 3 × atoms (0 without reference
        forces), "energy_sq" (F,) squared error of the energy per atom as predicted, b1
        included (eV²/atom²), "energy_n" (F,) 1 with a reference energy, else 0}.
    """
    keys = ("frame_index", "force_sq", "force_n", "energy_sq", "energy_n")
    parts: dict[str, list[np.ndarray]] = {k: [] for k in keys}
    with torch.no_grad():
        for batch in source.batches(batch_size, shuffle=False, device=device):
            out = model(batch, force_path=force_path)
            n = batch.atoms_per_frame.double()
            has_f, has_e = batch.has_forces.double(), batch.has_energy.double()
            df2 = ((out["forces"] - batch.forces) ** 2).sum(1).double() * has_f[batch.atom_frame]
            force_sq = torch.zeros_like(n).index_add_(0, batch.atom_frame, df2)
            d = (out["energy"].double() - batch.energy.double()) / n * has_e
            for key, value in (
                ("frame_index", batch.frame_index),
                ("force_sq", force_sq),
                ("force_n", 3.0 * n * has_f),
                ("energy_sq", d * d),
                ("energy_n", has_e),
            ):
                parts[key].append(value.cpu().numpy())
    return {k: np.concatenate(v) if v else np.zeros(0) for k, v in parts.items()}


def validation_frame_warnings(
    model: NEPModel,
    source: BatchSource,
    batch_size: int,
    device: torch.device,
    force_path: str,
    origin: Callable[[int], str] | None = None,
) -> list[str]:
    """The concentration warnings (force, then energy) of ``model`` on a validation split.

    Args:
        model: the stage's best model (the one its choices were made by).
        source: the validation split. batch_size: frames per evaluation batch.
        origin: the name of a dataset frame (its input file and frame number); None names it
            by its dataset index.

    Returns:
        0-2 lines (see :func:`concentration_warning`), each saying what follows from it for
        the stage.
    """
    errors = frame_squared_errors(model, source, batch_size, device, force_path)
    index = errors["frame_index"]

    def name(i: int) -> str:
        return f"dataset frame {int(index[i])}" if origin is None else origin(int(index[i]))

    see = (
        "the plateau schedule, early stop and the best model follow this split's RMSEs, so mostly those frames; "
        "check their labels; a model can end better with a frame far outside the rest of the data left out than "
        'with it in either split (README, "When something is wrong"); nepcore evaluate --split valid lists the worst '
        "frames"
    )
    found = (
        concentration_warning("valid", q, errors[f"{q}_sq"], errors[f"{q}_n"], name, see) for q in ("force", "energy")
    )
    return [w for w in found if w]


__all__ = [
    "CONCENTRATED_FRAMES",
    "CONCENTRATED_MIN_FRAMES",
    "CONCENTRATED_SHARE",
    "concentration_warning",
    "frame_name",
    "frame_squared_errors",
    "validation_frame_warnings",
]
