"""Signs that a training stage diverged or stopped learning, from its per-epoch metrics.

A too-large learning rate does not always end in a NaN: the first-layer pre-activations can
grow until every tanh saturates, the forces (derivatives through the saturated tanh) become
zero, and the force error freezes at the RMS of the reference forces while the energy error
still moves (b1 follows the residual). The run then ends "normally". The rules below read only
the metrics already in ``history`` (plain floats, one dict per epoch, as loss.out), so they add
no work and no host synchronisation to the training loop:

* **frozen**: the training force RMSE (the virial RMSE when the data have no forces) has not
  changed by more than ``FROZEN_RTOL`` (relative) over ``FROZEN_EPOCHS`` consecutive epochs:
  saturated networks. A learning model moves it every epoch; float32 summation in a shuffled
  order changes a frozen one by ~1e-7..1e-6 only.
* **exploding**: an epoch's training loss is above ``EXPLODING_FACTOR`` times the lowest
  training loss before it.
* **not learning**: from a fresh initialisation, after ``NOT_LEARNING_EPOCHS`` epochs the best
  training loss is still above ``NOT_LEARNING_FRACTION`` of the first epoch's.

Each is a warning (in the log and in status.json's ``warnings``), reported once, at the epoch
where it first holds. A non-finite loss is an error instead (:func:`non_finite_message`): the
weights are then NaN and nothing useful can follow.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

#: Consecutive epochs over which an unchanged force RMSE counts as frozen.
FROZEN_EPOCHS = 5
#: Largest relative spread (max - min) / max of the force RMSE over those epochs.
FROZEN_RTOL = 1e-5
#: Training loss above this factor times the lowest earlier one: exploding.
EXPLODING_FACTOR = 100.0
#: Epochs after which a fresh stage must have lowered its training loss ...
NOT_LEARNING_EPOCHS = 10
#: ... below this fraction of the first epoch's training loss.
NOT_LEARNING_FRACTION = 0.9


def training_warnings(
    history: Sequence[dict[str, float]], fresh_start: bool = True, line_search: bool = False
) -> list[str]:
    """The divergence warnings of a stage so far, each once, in the order they first held.

    Args:
        history: one dict per completed epoch with ``epoch``, ``train_loss``, ``train_rmse_f``,
            ``train_rmse_v`` (eV/Å, eV/atom) and ``lr``, as the stage records them.
        fresh_start: the stage started from an initialisation (the "not learning" rule only
            applies then: a fine-tuned or stage-2 start may already be near its minimum).
        line_search: the stage runs L-BFGS (``optimizer: lbfgs``), whose line search only
            accepts steps that lower the loss: a force RMSE that stops moving there means a
            converged fit, not saturated networks, so the "frozen" rule does not apply.

    Returns:
        Human-readable warnings (no "warning:" prefix).
    """
    found: dict[str, str] = {}
    lowest: dict[str, float] | None = None  # the epoch of lowest training loss so far
    for k, current in enumerate(history):
        candidates = {
            "frozen": (
                _frozen(history[max(0, k + 1 - FROZEN_EPOCHS) : k + 1])
                if "frozen" not in found and not line_search
                else None
            ),
            "exploding": _exploding(lowest, current) if "exploding" not in found else None,
            "not learning": _not_learning(history[: k + 1]) if fresh_start and k + 1 == NOT_LEARNING_EPOCHS else None,
        }
        for kind, message in candidates.items():
            if kind not in found and message is not None:
                found[kind] = message
        if lowest is None or current["train_loss"] < lowest["train_loss"]:
            lowest = current
    return list(found.values())


def non_finite_message(loss: float, epoch: int, stage: int, lr: float, history: Sequence[dict[str, float]]) -> str:
    """The error for a non-finite loss: what happened, the last finite loss, what to change."""
    last = (
        f"; the last finite training loss was {history[-1]['train_loss']:.4g} in epoch {int(history[-1]['epoch'])}"
        if history
        else ""
    )
    return (
        f"the loss became {loss} in epoch {epoch} of stage {stage}: training diverged{last}; "
        f"try a smaller --lr (now {lr:g}) or a smaller --clip; the outputs keep the last saved epoch"
    )


def _frozen(history: Sequence[dict[str, float]]) -> str | None:
    if len(history) < FROZEN_EPOCHS:
        return None
    window = history[-FROZEN_EPOCHS:]
    for key, name, scale, unit in (
        ("train_rmse_f", "force", 1e3, "meV/Å"),
        ("train_rmse_v", "virial", 1e3, "meV/atom"),
    ):
        values = [float(h.get(key, 0.0)) for h in window]
        if not all(v > 0.0 and math.isfinite(v) for v in values):
            continue  # this label is absent (RMSE 0): look at the next one
        if (max(values) - min(values)) <= FROZEN_RTOL * max(values):
            first, last = int(window[0]["epoch"]), int(window[-1]["epoch"])
            return (
                f"the training {name} RMSE has stayed at {scale * values[-1]:.1f} {unit} for {FROZEN_EPOCHS} "
                f"epochs ({first}-{last}): the networks are probably saturated and predict no {name}s; "
                f"the learning rate {window[0]['lr']:g} is likely too large (retrain with a smaller --lr)"
            )
        return None  # the first present label decides
    return None


def _exploding(lowest: dict[str, float] | None, current: dict[str, float]) -> str | None:
    if lowest is None:
        return None
    if current["train_loss"] > EXPLODING_FACTOR * lowest["train_loss"]:
        return (
            f"the training loss exploded from {lowest['train_loss']:.4g} (epoch {int(lowest['epoch'])}) to "
            f"{current['train_loss']:.4g} (epoch {int(current['epoch'])}); the learning rate "
            f"{current['lr']:g} is likely too large (retrain with a smaller --lr or --clip)"
        )
    return None


def _not_learning(history: Sequence[dict[str, float]]) -> str | None:
    first = history[0]["train_loss"]
    best = min(h["train_loss"] for h in history)
    if best > NOT_LEARNING_FRACTION * first:
        return (
            f"after {NOT_LEARNING_EPOCHS} epochs the training loss is still {best:.4g}, not below "
            f"{NOT_LEARNING_FRACTION:g} x its first value {first:.4g}: the model is not learning "
            "(learning rate too large or too small, or contradictory labels?)"
        )
    return None
