"""Per-frame force and energy errors of one split: which frames an RMSE comes from.

An RMSE over a split can be decided by one or two frames far outside the training data (in
issue 10's measurements a rattled frame with 13 eV/Å reference forces held 80 % of one test
split's squared force error, and one surface frame 70 % of another's squared energy error),
or by a frame with a broken label. ``nepcore evaluate`` keeps a few numbers per frame of every
split (memory: a few floats per frame, not per atom), lists the worst frames in metrics.json
(``splits.<split>.worst_frames.force`` and ``.energy``) and warns when a small share of the
frames holds most of the squared error, with the RMSE without them (the rule's one home is
nepcore.training.frame_share, which a training stage uses for its validation split).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from nepcore.training.frame_share import concentration_warning, frame_name

if TYPE_CHECKING:
    from nepcore.evaluation.metrics import FrameValues

#: Frames listed in ``worst_frames``.
WORST_FRAMES = 5


def max_force_error(values: FrameValues) -> np.ndarray:
    """(F,) max over a frame's atoms of |F_pred - F_ref| (eV/Å); NaN without reference forces
    (atoms whose prediction is NaN are skipped)."""
    return _largest_per_frame(np.linalg.norm(values.forces - values.forces_ref, axis=1), values)


def _largest_per_frame(per_atom: np.ndarray, values: FrameValues) -> np.ndarray:
    """(F,) max over each frame's atoms of ``per_atom`` (N,), skipping NaN; NaN for a frame
    with no finite value."""
    out = np.full(len(values.n_atoms), -np.inf)
    np.maximum.at(out, values.atom_frame, np.nan_to_num(per_atom, nan=-np.inf))
    return np.where(np.isfinite(out), out, np.nan)


class FrameErrors:
    """Running per-frame force and energy errors of one split.

    Args:
        source_paths: the dataset's input files (``/sources/path``), to name a frame's origin.
        source: (F_dataset,) index into ``source_paths`` of every dataset frame.
        source_frame: (F_dataset,) 0-based frame number inside that file.
    """

    def __init__(self, source_paths: list[str], source: np.ndarray, source_frame: np.ndarray) -> None:
        self._source_paths, self._source, self._source_frame = source_paths, source, source_frame
        self._parts: dict[str, list[np.ndarray]] = {
            k: []
            for k in (
                "frame_index",
                "n_atoms",
                "force_sq",
                "force_n",
                "max_force_error",
                "energy_error",
                "energy_ref",
                "max_force_ref",
            )
        }
        self._config_type: list[str] = []

    def add(self, values: FrameValues) -> None:
        """Add one batch's frames (``FrameValues`` of :mod:`nepcore.evaluation.metrics`)."""
        n_frames = len(values.n_atoms)
        err = values.forces - values.forces_ref  # (N, 3) eV/Å, NaN without reference forces
        has_ref = np.isfinite(values.forces_ref).all(axis=1)
        # atoms without a reference count zero; a NaN prediction against a reference stays NaN
        sq = np.where(has_ref, (err**2).sum(axis=1), 0.0)
        self._parts["frame_index"].append(np.asarray(values.frame_index, dtype=np.int64))
        self._parts["n_atoms"].append(np.asarray(values.n_atoms, dtype=np.int64))
        self._parts["force_sq"].append(np.bincount(values.atom_frame, weights=sq, minlength=n_frames))
        self._parts["force_n"].append(3 * np.bincount(values.atom_frame, weights=has_ref, minlength=n_frames))
        self._parts["max_force_error"].append(max_force_error(values))
        self._parts["energy_error"].append(values.energy - values.energy_ref)
        self._parts["energy_ref"].append(values.energy_ref)
        self._parts["max_force_ref"].append(_largest_per_frame(np.linalg.norm(values.forces_ref, axis=1), values))
        self._config_type += list(values.config_type)

    def origin(self, frame_index: int) -> tuple[str, int]:
        """(input file, 0-based frame number in it) of a dataset frame."""
        return self._source_paths[int(self._source[frame_index])], int(self._source_frame[frame_index])

    def _column(self, key: str) -> np.ndarray:
        parts = self._parts[key]
        return np.concatenate(parts) if parts else np.zeros(0)

    def _squared(self, quantity: str) -> tuple[np.ndarray, np.ndarray]:
        """(sum of squared errors, samples) per frame of ``quantity`` ("force": components,
        eV²/Å²; "energy": the energy per atom, eV²/atom², one sample per frame with a label)."""
        if quantity == "force":
            return self._column("force_sq"), self._column("force_n")
        energy = self._column("energy_error")
        has = ~np.isnan(self._column("energy_ref"))
        return np.where(has, energy**2, 0.0), has.astype(np.float64)

    def worst(self, quantity: str = "force", k: int = WORST_FRAMES) -> list[dict]:
        """The ``k`` frames with the largest squared ``quantity`` ("force" or "energy") error,
        worst first; frames without that label are not listed.

        Returns:
            [{"frame_index" (in the dataset), "source" (input file), "source_frame" (0-based
            frame number in it), "config_type", "n_atoms", "share" (the frame's share of the
            split's squared error of ``quantity``, 0-1), "force_rmse" (eV/Å, over the frame's
            components), "max_force_error" (eV/Å, largest |F_pred - F_ref| of an atom),
            "energy_error" (eV/atom, pred - ref), "max_force_ref" (eV/Å, largest reference force
            |F_ref| of an atom)}, ...]; numbers are None where a label is missing or a
            prediction is not finite.
        """
        sq, n = self._squared(quantity)
        labelled = np.flatnonzero(n > 0)
        if labelled.size == 0:
            return []
        total = float(np.nansum(sq[labelled]))
        order = labelled[np.argsort(-np.nan_to_num(sq[labelled], nan=np.inf), kind="stable")][:k]
        index, atoms = self._column("frame_index"), self._column("n_atoms")
        force_sq, force_n = self._squared("force")
        max_err, energy = self._column("max_force_error"), self._column("energy_error")
        max_ref = self._column("max_force_ref")
        number = lambda x: None if not np.isfinite(x) else float(x)
        with np.errstate(invalid="ignore", divide="ignore"):
            force_rmse = np.sqrt(force_sq / force_n)
        return [
            {
                "frame_index": int(index[i]),
                "source": self.origin(index[i])[0],
                "source_frame": self.origin(index[i])[1],
                "config_type": self._config_type[i],
                "n_atoms": int(atoms[i]),
                "share": number(sq[i] / total) if total > 0 else None,
                "force_rmse": number(force_rmse[i]),
                "max_force_error": number(max_err[i]),
                "energy_error": number(energy[i]),
                "max_force_ref": number(max_ref[i]),
            }
            for i in order
        ]

    def concentration_warning(self, split: str, quantity: str = "force") -> str | None:
        """A warning when a few frames hold most of the split's squared ``quantity`` error
        (the rule and message of nepcore.training.frame_share.concentration_warning, frames
        named by input file and 0-based frame number).

        Returns:
            None, or a line naming the frames, their share and the split's RMSE without them.
        """
        sq, n = self._squared(quantity)
        index = self._column("frame_index")
        return concentration_warning(
            split,
            quantity,
            sq,
            n,
            lambda i: frame_name(*self.origin(index[i])),
            f"metrics.json splits.{split}.worst_frames.{quantity}",
        )

    def largest_reference_force(self) -> float | None:
        """The largest reference force |F_ref| of any atom of the split (eV/Å); None without
        reference forces."""
        ref = self._column("max_force_ref")
        return float(np.nanmax(ref)) if np.isfinite(ref).any() else None

    def extrapolation_warning(self, split: str, training_largest: float | None) -> str | None:
        """A warning naming the frames whose largest reference force exceeds the training
        split's largest: there the model extrapolates, and no rule that reads the validation
        split sees it (issue 10, twenty-fourth round: on sweep_k1 three test frames with forces of
        10-16 eV/Å, against at most 12.4 in training, decided the test force RMSE).

        Args:
            split: the split's name, for the message.
            training_largest: the training split's ``largest_reference_force`` (eV/Å), or None.

        Returns:
            None, or one line: how many frames, the five with the largest forces (input file,
            0-based frame number, eV/Å), and the training split's largest.
        """
        if training_largest is None:
            return None
        ref, index = self._column("max_force_ref"), self._column("frame_index")
        beyond = np.flatnonzero(np.nan_to_num(ref, nan=-np.inf) > training_largest)
        if beyond.size == 0:
            return None
        beyond = beyond[np.argsort(-ref[beyond], kind="stable")]
        named = ", ".join(f"{frame_name(*self.origin(index[i]))} ({ref[i]:.1f} eV/Å)" for i in beyond[:WORST_FRAMES])
        more = f" and {beyond.size - WORST_FRAMES} more" if beyond.size > WORST_FRAMES else ""
        return (
            f"{split}: {beyond.size} of {len(ref)} frames have reference forces beyond the training split's "
            f"largest ({training_largest:.1f} eV/Å): {named}{more}; the model extrapolates there, and their "
            f"errors can decide the force RMSE (compare metrics.json splits.{split}.worst_frames.force)"
        )
