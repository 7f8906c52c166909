"""Learning-rate schedule and early stopping of one training stage (per epoch, host side).

Both act once per epoch on the monitored loss (a Python float read at the epoch's end), and
their whole state is a small dict, saved in the checkpoint so a resumed run takes the same
decisions as an uninterrupted one.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

from nepcore.errors import SettingError

SCHEDULES: tuple[str, ...] = ("plateau", "step")
#: A loss counts as improved only when it is below best * (1 - IMPROVEMENT_REL): changes at the
#: level of rounding noise must not keep a stage alive forever (torch's plateau default).
IMPROVEMENT_REL = 1e-4


def improved(value: float, best: float) -> bool:
    """``value`` is a real improvement over ``best`` (inf counts as no best yet)."""
    return value < best - IMPROVEMENT_REL * abs(best) if math.isfinite(best) else value < best


@dataclass
class LRSchedule:
    """``plateau``: multiply the rate by ``decay`` after ``patience`` epochs without
    improvement of the monitored loss; ``step``: multiply it by ``decay`` every ``step_epochs``
    epochs. Never below ``lr_min`` (the floor)."""

    kind: str
    lr: float
    lr_min: float
    decay: float = 0.5
    patience: int = 3
    step_epochs: int = 10
    best: float = math.inf
    bad_epochs: int = 0

    def __post_init__(self) -> None:
        if self.kind not in SCHEDULES:
            raise SettingError(f"schedule must be one of {', '.join(SCHEDULES)}, found {self.kind!r}")
        if not 0.0 < self.decay <= 1.0:
            raise SettingError(f"lr decay must be in (0, 1], found {self.decay}")
        if self.lr_min < 0 or self.lr <= 0:
            raise SettingError(f"need lr > 0 and lr_min >= 0, found lr {self.lr}, lr_min {self.lr_min}")
        self.lr = max(self.lr, self.lr_min)

    def step(self, epoch: int, monitored: float) -> float:
        """Update after ``epoch`` (1-based, completed) with its monitored loss; returns the new rate."""
        if self.kind == "step":
            if self.step_epochs > 0 and epoch % self.step_epochs == 0:
                self.lr = max(self.lr * self.decay, self.lr_min)
            return self.lr
        if improved(monitored, self.best):
            self.best, self.bad_epochs = monitored, 0
        else:
            self.bad_epochs += 1
            if self.bad_epochs >= self.patience:
                self.lr = max(self.lr * self.decay, self.lr_min)
                self.bad_epochs = 0
        return self.lr

    def state_dict(self) -> dict:
        return asdict(self)

    def load_state_dict(self, state: dict) -> None:
        for key, value in state.items():
            setattr(self, key, value)


@dataclass
class EarlyStop:
    """Ends a stage when the monitored loss has not improved for ``patience`` epochs."""

    patience: int
    best: float = math.inf
    best_epoch: int = 0
    bad_epochs: int = 0

    def update(self, epoch: int, monitored: float) -> bool:
        """Record ``epoch``'s monitored loss; True when it is a new best."""
        if improved(monitored, self.best):
            self.best, self.best_epoch, self.bad_epochs = monitored, epoch, 0
            return True
        self.bad_epochs += 1
        return False

    @property
    def should_stop(self) -> bool:
        return self.bad_epochs >= self.patience

    def state_dict(self) -> dict:
        return asdict(self)

    def load_state_dict(self, state: dict) -> None:
        for key, value in state.items():
            if key != "patience":  # patience may be changed on resume
                setattr(self, key, value)
