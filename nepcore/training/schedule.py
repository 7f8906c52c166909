"""Learning-rate schedule and early stopping of one training stage (host side).

The plateau and step schedules and the early stop act once per epoch on the monitored loss (a
Python float read at the epoch's end); the rate of each optimiser step is
:meth:`LRSchedule.at`, which adds the linear warm-up and the cosine decay (both counted in
optimiser steps, so they do not depend on how many frames an epoch holds). Their whole state
is a small dict, saved in the checkpoint so a resumed run takes the same decisions as an
uninterrupted one. Each of Adam's parameter groups steps at the schedule's rate times the
group's ``lr_factor`` (:func:`nepcore.training.optimizers.parameter_groups`).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field

from nepcore.errors import SettingError

SCHEDULES: tuple[str, ...] = ("plateau", "step", "cosine")
#: A loss counts as improved only when it is below best * (1 - IMPROVEMENT_REL): changes at the
#: level of rounding noise must not keep a stage alive forever (torch's plateau default).
IMPROVEMENT_REL = 1e-4


def improved(value: float, best: float) -> bool:
    """``value`` is a real improvement over ``best`` (inf counts as no best yet)."""
    return value < best - IMPROVEMENT_REL * abs(best) if math.isfinite(best) else value < best


#: The validation RMSEs whose improvement also counts as progress, as (name, key in an epoch's
#: metrics, field of the best value so far): forces, energies and virials, each on its own.
WATCHED_ERRORS: tuple[tuple[str, str, str], ...] = (
    ("force", "valid_rmse_f", "best_force"),
    ("energy", "valid_rmse_e", "best_energy"),
    ("virial", "valid_rmse_v", "best_virial"),
)


def error_improved(value: float | None, best: float) -> bool:
    """A validation RMSE ``value`` improves on ``best``; None or nan (a split without that
    label) never does."""
    return value is not None and math.isfinite(value) and improved(value, best)


def record_epoch(tracker: LRSchedule | EarlyStop, monitored: float, errors: dict[str, float | None]) -> bool:
    """The stall rule of the plateau schedule and of early stop, in one place: an epoch is bad
    when neither the monitored metric nor any of the validation force, energy and virial RMSEs
    improved.

    Updates ``tracker.best``, its best RMSEs and ``bad_epochs``; returns True when ``monitored``
    is a new best (an RMSE alone only resets the count of bad epochs).
    """
    progress = False
    for name, _, best_field in WATCHED_ERRORS:
        if error_improved(errors.get(name), getattr(tracker, best_field)):
            setattr(tracker, best_field, errors[name])
            progress = True
    if improved(monitored, tracker.best):
        tracker.best, tracker.bad_epochs = monitored, 0
        return True
    tracker.bad_epochs = 0 if progress else tracker.bad_epochs + 1
    return False


def validation_errors(metrics: dict[str, float | None]) -> dict[str, float | None]:
    """The watched validation RMSEs of an epoch's metrics (nepcore.training.epoch.epoch_metrics)."""
    return {name: metrics.get(key) for name, key, _ in WATCHED_ERRORS}


@dataclass
class LRSchedule:
    """``plateau``: multiply the rate by ``decay`` after ``patience`` epochs in which neither
    the monitored loss nor any validation RMSE improved (as :class:`EarlyStop`, and for the
    same reasons: on a small validation split the fitness's energy term moves more from epoch to
    epoch than the forces improve, and decays on that noise took PdCuNi_small's stage 1 down to
    3e-5 while its forces still fell); with ``window`` > 0 it also decays when improvement is
    slow rather than absent: none of the bests (monitored, force, energy, virial) fell by more
    than ``min_gain`` of itself over the last ``window`` epochs since the last decay (``trail``
    holds those epochs' bests; docs/recipe_measurements.md, "The twenty-sixth round");
    ``step``: multiply it by ``decay`` every ``step_epochs``
    epochs; ``cosine``: from ``lr`` down to ``lr_min`` along half a cosine over
    ``total_steps`` optimiser steps. Never below ``lr_min`` (the floor).

    warmup_steps: the first optimiser steps ramp the rate linearly up to the schedule's value
    (step k of the stage, 0-based, gets (k + 1) / warmup_steps of it); 0 = no warm-up.
    ``lr`` is the per-epoch level (plateau, step); :meth:`at` is the rate of one step.
    """

    kind: str
    lr: float
    lr_min: float
    decay: float = 0.5
    patience: int = 3
    step_epochs: int = 10
    best: float = math.inf
    bad_epochs: int = 0
    warmup_steps: int = 0
    total_steps: int = 0
    lr_start: float = 0.0
    best_force: float = math.inf
    best_energy: float = math.inf
    best_virial: float = math.inf
    window: int = 0
    min_gain: float = 0.0
    trail: list[list[float]] = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.kind not in SCHEDULES:
            raise SettingError(f"schedule must be one of {', '.join(SCHEDULES)}, found {self.kind!r}")
        if not 0.0 < self.decay <= 1.0:
            raise SettingError(f"lr decay must be in (0, 1], found {self.decay}")
        if self.lr_min < 0 or self.lr <= 0:
            raise SettingError(f"need lr > 0 and lr_min >= 0, found lr {self.lr}, lr_min {self.lr_min}")
        if self.warmup_steps < 0:
            raise SettingError(f"warm-up steps must be >= 0, found {self.warmup_steps}")
        self.lr = max(self.lr, self.lr_min)
        self.lr_start = self.lr_start or self.lr

    def at(self, step: int) -> float:
        """The rate of optimiser step ``step`` (0-based, counted from the start of the stage)."""
        level = self.lr
        if self.kind == "cosine":
            span = max(self.total_steps - self.warmup_steps, 1)
            progress = min(max(step - self.warmup_steps, 0) / span, 1.0)
            level = self.lr_min + (self.lr_start - self.lr_min) * 0.5 * (1.0 + math.cos(math.pi * progress))
        if step < self.warmup_steps:
            level *= (step + 1) / self.warmup_steps
        return level

    def step(self, epoch: int, monitored: float, errors: dict[str, float | None] | None = None) -> float:
        """Update after ``epoch`` (1-based, completed) with its monitored loss and validation
        RMSEs (``validation_errors``; a missing one, None or nan: that label is absent); returns
        the new rate."""
        if self.kind == "cosine":
            return self.lr
        if self.kind == "step":
            if self.step_epochs > 0 and epoch % self.step_epochs == 0:
                self.lr = max(self.lr * self.decay, self.lr_min)
            return self.lr
        stalled = not record_epoch(self, monitored, errors or {}) and self.bad_epochs >= self.patience
        slow = self._record_window()
        if stalled or slow:
            self.lr = max(self.lr * self.decay, self.lr_min)
            self.bad_epochs = 0
            self.trail = []
        return self.lr

    def _record_window(self) -> bool:
        """Append this epoch's watched bests to ``trail`` (the last ``window`` + 1 epochs since
        the last decay); True when none of them (monitored, force, energy, virial) fell by more
        than ``min_gain`` of itself over the window (a best that was inf and is now finite counts
        as progress; one still inf, an absent label, as none). Always False with ``window`` 0."""
        if self.window <= 0:
            return False
        bests = [self.best] + [getattr(self, f) for _, _, f in WATCHED_ERRORS]
        self.trail = (self.trail + [bests])[-(self.window + 1) :]
        if len(self.trail) <= self.window:
            return False
        old, new = self.trail[0], self.trail[-1]
        gains = [(o - n) / o if math.isfinite(o) and o > 0 else (math.inf if n < o else 0.0) for o, n in zip(old, new)]
        return max(gains) < self.min_gain

    def state_dict(self) -> dict:
        return asdict(self)

    def load_state_dict(self, state: dict) -> None:
        for key, value in state.items():
            setattr(self, key, value)


def keeps_forces(errors: dict[str, float | None], start: dict[str, float] | None, tolerance: float) -> bool:
    """Whether an epoch may be kept as a stage's best model: its validation force RMSE is at
    most ``1 + tolerance`` times its starting model's.

    Why: stage 2 exists to refine energies without giving up forces, but the fitness
    (E + F + 0.1 V) adds eV/atom to eV/Å, so a model 5 meV/atom better in energy is "better"
    even with forces 3 meV/Å worse. This bound keeps such a trade out of ``nep_best.txt``.

    Args:
        errors: the epoch's validation RMSEs (:func:`validation_errors`; eV/Å for "force").
        start: the starting model's validation metrics (``valid_rmse_f`` in eV/Å), or None for a
            stage that starts from an initialisation (the bound then never applies).
        tolerance: allowed relative rise (0.02 = 2 %).

    Returns:
        True when the bound holds or cannot apply (no starting model, or no force labels).
    """
    reference = None if start is None else start.get("valid_rmse_f")
    force = errors.get("force")
    if reference is None or force is None or not (math.isfinite(reference) and math.isfinite(force)):
        return True
    return force <= (1.0 + tolerance) * reference


#: An epoch whose validation force RMSE is more than this many times ``max_force_rise`` above its
#: starting model's (25 % at the default 5 %) is no progress for early stop (issue 10,
#: forty-fifth round, docs/recipe_measurements.md). Why: such an epoch can never be kept, but a
#: new best of its validation energy reset the stop, so on PdCuNi_small (96 training frames)
#: stage 2's L-BFGS ran 916 epochs past its kept model while the validation force rose to 2.5
#: times its start (two close-contact atoms of one hot frame; the validation energy kept
#: falling). Why a second, wider bound and not the first: stages that leave the 5 % bound come
#: back, and the epochs after are their best (the demo workflow's stage 2: +11.4 % at epoch 19,
#: its kept epoch 40 with test energy 7.55 against 10.25 meV/atom for a stop at the first bound;
#: CrCoNi, +6.6 %, 91 epochs outside). Of the stage 2s of today's recipe measured, those that
#: came back had peaked at +11.4 % or less; those that went further never came back
#: (PdCuNi_small: seed 3 +12.8 %, seed 0 2.5 times, a larger model +23 % and +36 %).
FAR_FORCE_RISE_FACTOR = 5.0


def counts_as_progress(errors: dict[str, float | None], start: dict[str, float] | None, tolerance: float) -> bool:
    """Whether an epoch may count as progress for early stop: its validation force RMSE is at
    most ``1 + FAR_FORCE_RISE_FACTOR * tolerance`` times its starting model's (always, without a
    starting model or force labels; as :func:`keeps_forces`, whose bound this widens).

    Args:
        errors: the epoch's validation RMSEs (:func:`validation_errors`).
        start: the starting model's validation metrics, or None.
        tolerance: the stage's ``max_force_rise``.
    """
    return keeps_forces(errors, start, FAR_FORCE_RISE_FACTOR * tolerance)


def set_aside(
    history: list[dict[str, float]], start: dict[str, float] | None, tolerance: float, best_epoch: int
) -> dict | None:
    """The epochs that :func:`keeps_forces` kept from being a stage's best model: a lower
    monitored loss than the kept model's, but a validation force RMSE above the bound.

    Args:
        history: the stage's per-epoch metrics (``epoch``, ``monitored``, ``valid_rmse_*``).
        start: the starting model's validation metrics (None: the bound never applied).
        tolerance: the stage's ``max_force_rise``.
        best_epoch: the kept model's epoch (0 = the starting model).

    Returns:
        None when no epoch was set aside, else ``{"epochs": count, "limit": bound in eV/Å,
        "lowest": that epoch's epoch, monitored loss and validation RMSEs}``.
    """
    if start is None or start.get("valid_rmse_f") is None:
        return None
    kept = next((h["monitored"] for h in history if h["epoch"] == best_epoch), start["monitored"])
    aside = [
        h
        for h in history
        if math.isfinite(h["monitored"])
        and h["monitored"] < kept
        and not keeps_forces(validation_errors(h), start, tolerance)
    ]
    if not aside:
        return None
    lowest = min(aside, key=lambda h: h["monitored"])
    keys = ("epoch", "monitored", "valid_rmse_e", "valid_rmse_f", "valid_rmse_v")
    return {
        "epochs": len(aside),
        "limit": (1.0 + tolerance) * start["valid_rmse_f"],
        "lowest": {k: lowest.get(k) for k in keys},
    }


def trail_gain(trail: list[list[float]], window: int) -> float | None:
    """The relative fall of a trail of ``[epoch, best so far]`` pairs over ``window`` epochs:
    (then - now) / then, now the last entry (epoch e) and then the latest entry at or before
    e - ``window``. None with ``window`` 0, before such an entry exists, or while there was no
    best then (an infinite or zero value)."""
    if window <= 0 or not trail:
        return None
    epoch, now = trail[-1]
    then = next((v for e, v in reversed(trail) if e <= epoch - window), None)
    if then is None or not math.isfinite(then) or then <= 0:
        return None
    return (then - now) / then


@dataclass
class EarlyStop:
    """Ends a stage after ``patience`` epochs in which neither the monitored loss nor any of the
    validation force, energy and virial RMSEs improved, or (``window`` > 0) once over the last
    ``window`` epochs both the best kept model's monitored loss and the best validation force
    RMSE have fallen by no more than ``min_gain`` of themselves (:attr:`slow_progress`), and
    tracks which epoch is the stage's best model: the lowest monitored loss among the epochs that
    may be kept (:func:`keeps_forces`; ``kept`` is that loss). The stall rule sees every epoch within the
    wider bound of :func:`counts_as_progress` (25 % at the default 5 %): an epoch beyond it is a
    bad epoch whatever it improved, so a stage whose forces have left for good stops after
    ``patience`` such epochs; within it the bound on forces changes which model is kept, never
    how long the stage trains (a stage that leaves the 5 % bound may come back).

    Why forces: the monitored fitness adds the energy RMSE, which on a small validation split
    jumps from epoch to epoch (PbTe fold 0, two validation frames: 0.6 to 8 meV/atom). One lucky
    epoch then set a best that 60 later epochs did not beat while the force RMSE still fell
    (41.5 to 40.2 meV/Å), and the stage stopped at epoch 130 of 600. Why energies and virials:
    one hard frame can hold most of a validation split's squared force error (PdCuNi_mid: a
    256-atom rattled frame, 85 %); the fitness and the force RMSE then follow that frame while
    the model still improves on the others, which the energy and virial RMSEs (one value per
    frame) show (docs/recipe_measurements.md). The best model is still chosen by the monitored loss alone.

    Why a stage may end on slow progress (``window``): what a stage hands on is its best kept
    model, and epochs that do not move that model only cost time, while the RMSEs that reset the
    patience (energies and virials on a small validation split) keep setting bests long after it
    has stopped improving. Why the force RMSE too: read alone, the kept model's fitness (trail
    ``kept_trail``: ``[epoch, kept]`` after each recorded epoch) stood still for 95 epochs after a
    lucky validation energy on PbTe fold 4 while the forces still fell, and stage 1 handed on at
    epoch 169 a model whose training force was 3 % worse (issue 10, forty-ninth round). The best
    validation force RMSE (``force_trail``, the same layout) must have stalled as well; on data
    without force labels it never holds the stage. Why it is still off: in stage 1 at 100
    epochs and 1 %, PbTe's fits (five folds, two seeds) handed over 1-215 epochs early at about
    the same held-out force and 0.89 of the wall time, but stage 2's L-BFGS ran longer from some
    earlier models, and on one fold it stopped early and the training force rose 6 % (fiftieth
    round, docs/recipe_measurements.md).
    """

    patience: int
    window: int = 0
    min_gain: float = 0.0
    best: float = math.inf
    best_epoch: int = 0
    bad_epochs: int = 0
    best_force: float = math.inf
    best_energy: float = math.inf
    best_virial: float = math.inf
    kept: float = math.inf
    #: epochs of the current run of bad epochs that were bad for forces far outside the bound
    far_epochs: int = 0
    kept_trail: list[list[float]] = field(default_factory=list)
    force_trail: list[list[float]] = field(default_factory=list)

    def update(
        self,
        epoch: int,
        monitored: float,
        errors: dict[str, float | None] | None = None,
        keep: bool = True,
        progress: bool = True,
    ) -> bool:
        """Record ``epoch``'s monitored loss and validation RMSEs (``validation_errors``; a
        missing one, None or nan: that label is absent); True when the epoch becomes the best
        model: ``keep`` (it may be kept, :func:`keeps_forces`) and its monitored loss beats
        the best kept one.

        progress: False for an epoch whose forces are too far outside the bound to count
        (:func:`counts_as_progress`): a bad epoch whatever it improved, and it sets no bests.
        """
        new_best = False
        if not progress:
            self.bad_epochs += 1
            self.far_epochs += 1
        else:
            record_epoch(self, monitored, errors or {})
            if self.bad_epochs == 0:
                self.far_epochs = 0
            if keep and improved(monitored, self.kept):
                self.kept, self.best_epoch = monitored, epoch
                new_best = True
        self.kept_trail.append([epoch, self.kept])
        self.force_trail.append([epoch, self.best_force])
        return new_best

    @property
    def window_gain(self) -> float | None:
        """How much the kept model's monitored loss fell over the last ``window`` epochs, as a
        fraction of where it was (:func:`trail_gain` of ``kept_trail``)."""
        return trail_gain(self.kept_trail, self.window)

    @property
    def force_window_gain(self) -> float | None:
        """How much the best validation force RMSE fell over the last ``window`` epochs, as a
        fraction of where it was (:func:`trail_gain` of ``force_trail``)."""
        return trail_gain(self.force_trail, self.window)

    @property
    def slow_progress(self) -> bool:
        """:attr:`window_gain` is known and no more than ``min_gain``, and so is
        :attr:`force_window_gain`, unless no epoch has had a validation force RMSE (no force
        labels: the fitness alone decides)."""
        gain = self.window_gain
        if gain is None or gain > self.min_gain:
            return False
        if self.force_trail and not math.isfinite(self.force_trail[-1][1]):
            return True
        force_gain = self.force_window_gain
        return force_gain is not None and force_gain <= self.min_gain

    @property
    def stop_reason(self) -> str | None:
        """Why the stage ends now: "plateau" (``patience`` bad epochs), "slow_progress"
        (:attr:`slow_progress`), or None."""
        if self.bad_epochs >= self.patience:
            return "plateau"
        return "slow_progress" if self.slow_progress else None

    @property
    def should_stop(self) -> bool:
        return self.stop_reason is not None

    def state_dict(self) -> dict:
        return asdict(self)

    def load_state_dict(self, state: dict) -> None:
        for key, value in state.items():
            if key not in ("patience", "window", "min_gain"):  # settings that may change on resume
                setattr(self, key, value)
        if "kept" not in state:  # a checkpoint from before the bound on forces: every epoch was kept
            self.kept = self.best
