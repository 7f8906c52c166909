"""Early stop of a training stage (nepcore.training.schedule.EarlyStop) on synthetic sequences of
validation metrics: patience counted on every watched RMSE, and the slow-progress stop
(stop_window, stop_min_gain) on the kept model's monitored loss and the best validation force RMSE."""

from __future__ import annotations

import math

import numpy as np
import pytest

from nepcore.training.schedule import EarlyStop, LRSchedule

# ---- early stop ------------------------------------------------------------------------------------


def test_early_stop_keeps_a_slowly_improving_noisy_run_alive() -> None:
    """A loss falling 0.5 % per epoch under ±2 % noise still sets new bests within 30 epochs."""
    rng = np.random.default_rng(0)
    stop = EarlyStop(patience=30)
    for epoch in range(1, 401):
        stop.update(epoch, 0.995**epoch * (1 + 0.02 * rng.standard_normal()))
        assert not stop.should_stop, epoch


def test_early_stop_ends_a_flat_run_after_patience_epochs() -> None:
    stop = EarlyStop(patience=5)
    stopped = []
    for epoch, v in enumerate([1.0, 0.9, 0.9, 0.95, 0.91, 0.9, 0.92, 0.5], 1):
        stop.update(epoch, v)
        stopped.append(stop.should_stop)
    assert stopped == [False] * 6 + [True, False] and stop.best_epoch == 8


def test_early_stop_waits_while_the_validation_force_still_falls() -> None:
    """PbTe fold 0's pattern: a lucky energy makes epoch 2 the best fitness, the forces keep
    falling; the stage goes on while they fall and stops `patience` epochs after they stall."""
    stop = EarlyStop(patience=3)
    forces = [0.050, 0.045, 0.044, 0.043, 0.042, 0.041, 0.041, 0.041, 0.041, 0.041]
    fitness = [0.060, 0.045, 0.050, 0.049, 0.048, 0.047, 0.047, 0.047, 0.047, 0.047]
    stopped = []
    for epoch, (fit, force) in enumerate(zip(fitness, forces), 1):
        stop.update(epoch, fit, {"force": force})
        stopped.append(stop.should_stop)
    assert stop.best_epoch == 2 and stop.best == 0.045  # the best model is still the best fitness
    assert stopped == [False] * 8 + [True, True]  # forces last improved at epoch 6
    # without force labels (None or nan) only the monitored loss counts
    for missing in (None, math.nan):
        alone = EarlyStop(patience=3)
        for epoch, fit in enumerate(fitness, 1):
            alone.update(epoch, fit, {"force": missing})
        assert alone.should_stop and alone.bad_epochs == 8


def test_early_stop_and_plateau_wait_while_the_other_frames_still_improve() -> None:
    """PdCuNi_mid's pattern: one hard validation frame holds most of the squared force error, so
    the fitness and the force RMSE stall while the energy or the virial RMSE (one value per
    frame) still improves; the stage goes on and keeps its rate until all of them stall."""
    fitness = [0.20, 0.18, 0.181, 0.182, 0.181, 0.183, 0.182, 0.182, 0.182, 0.182, 0.182, 0.182]
    forces = [0.19, 0.17, 0.171, 0.172, 0.171, 0.173, 0.172, 0.172, 0.172, 0.172, 0.172, 0.172]
    energy = [0.012, 0.011, 0.010, 0.011, 0.0105, 0.0109, 0.011, 0.011, 0.011, 0.011, 0.011, 0.011]
    virial = [0.09, 0.08, 0.079, 0.078, 0.077, 0.076, 0.076, 0.076, 0.076, 0.076, 0.076, 0.076]
    stop = EarlyStop(patience=3)
    s = LRSchedule("plateau", 0.01, 1e-4, decay=0.7, patience=3)
    stopped, rates = [], []
    for epoch, values in enumerate(zip(fitness, forces, energy, virial), 1):
        errors = dict(zip(("force", "energy", "virial"), values[1:]))
        stop.update(epoch, values[0], errors)
        stopped.append(stop.should_stop)
        rates.append(s.step(epoch, values[0], errors))
    assert stop.best_epoch == 2  # the best model is still the best fitness
    assert stopped == [False] * 8 + [True] * 4  # the virial last improved at epoch 6
    assert rates == pytest.approx([0.01] * 8 + [0.007] * 3 + [0.0049])
    # counting the force alone (the rule before) would have stopped at epoch 5
    alone = EarlyStop(patience=3)
    for epoch, (fit, force) in enumerate(zip(fitness, forces), 1):
        alone.update(epoch, fit, {"force": force})
    assert alone.should_stop and alone.bad_epochs == 10


def test_slow_progress_ends_a_stage_whose_kept_model_gains_less_than_min_gain_over_the_window() -> None:
    """A fitness falling 0.5 % an epoch gains 2.5 % over five epochs: kept going at min_gain 2 %,
    ended at 3 %, at the first epoch with five before it (epoch 6); while the validation energy
    sets a new best every epoch, which keeps `patience` from ever ending it."""

    def reasons(per_epoch: float, min_gain: float, window: int = 5, epochs: int = 12) -> list:
        stop = EarlyStop(patience=4, window=window, min_gain=min_gain)
        out = []
        for e in range(1, epochs + 1):
            stop.update(e, (1 - per_epoch) ** e, {"energy": 0.9**e})
            out.append(stop.stop_reason)
        return out

    assert reasons(0.005, 0.02) == [None] * 12
    assert reasons(0.005, 0.03) == [None] * 5 + ["slow_progress"] * 7
    assert reasons(0.005, 0.03, window=0) == [None] * 12  # off
    assert reasons(0.0, 0.0) == [None] * 5 + ["slow_progress"] * 7  # flat: no gain at all ends it at 0
    # an epoch that is not kept (forces outside the bound) leaves the kept value where it was
    stop = EarlyStop(patience=100, window=3, min_gain=0.01)
    for e, (v, keep) in enumerate([(1.0, True), (0.5, False), (0.4, False), (0.3, False)], 1):
        stop.update(e, v, {}, keep=keep)
    assert stop.kept == 1.0 and stop.best_epoch == 1 and stop.stop_reason == "slow_progress"


def test_slow_progress_matches_the_replay_of_a_loss_out_and_waits_for_a_kept_model() -> None:
    """The rule as benchmarks replay it from loss.out: at epoch e, the running minimum of the
    fitness against its value at e - window. Epochs not recorded (a non-finite loss) are
    skipped: the comparison takes the latest recorded epoch at or before e - window. No stop
    while nothing was kept (a stage whose every epoch was outside the force bound)."""
    rng = np.random.default_rng(1)
    fitness = 0.97 ** np.arange(1, 401) * (1 + 0.03 * rng.standard_normal(400)) + 0.2
    # the force RMSE falls on for longer than the fitness (its floor is lower)
    force = 0.975 ** np.arange(1, 401) * (1 + 0.01 * rng.standard_normal(400)) + 0.02
    best, best_force = np.minimum.accumulate(fitness), np.minimum.accumulate(force)
    fitness_alone = next(e for e in range(21, 401) if best[e - 1] >= 0.99 * best[e - 21])
    stalled = (best[20:] >= 0.99 * best[:-20]) & (best_force[20:] >= 0.99 * best_force[:-20])
    expected = 21 + int(np.argmax(stalled))  # the first epoch e > 20 at which both stalled
    assert 100 < fitness_alone < expected < 400
    for errors, stop_at in (({"force": 0.0}, expected), ({}, fitness_alone)):
        stop = EarlyStop(patience=10**6, window=20, min_gain=0.01)
        for e, v in enumerate(fitness, 1):
            stop.update(e, float(v), {"force": float(force[e - 1])} if errors else {})
            if stop.should_stop:
                break
        assert e == stop_at and stop.stop_reason == "slow_progress"
    gappy = EarlyStop(patience=100, window=3, min_gain=0.5)
    for e in (1, 2, 5):  # epochs 3 and 4 not recorded
        gappy.update(e, 1.0)
    assert gappy.kept_trail[-1] == [5, 1.0] and gappy.slow_progress  # against epoch 2
    never_kept = EarlyStop(patience=100, window=2, min_gain=0.5)
    for e in range(1, 6):
        never_kept.update(e, 1.0, {}, keep=False)
    assert not never_kept.should_stop


def test_slow_progress_state_resumes_and_its_settings_may_change() -> None:
    """The trail is in the checkpoint state, so a resumed stage stops where an uninterrupted one
    does; the window and gain come from the resumed run's settings (like patience)."""
    losses = [0.995**e for e in range(1, 13)]
    whole = EarlyStop(patience=100, window=5, min_gain=0.03)
    expected = [(whole.update(e, v), whole.stop_reason)[1] for e, v in enumerate(losses, 1)]
    first = EarlyStop(patience=100, window=5, min_gain=0.03)
    got = [(first.update(e, v), first.stop_reason)[1] for e, v in enumerate(losses[:8], 1)]
    resumed = EarlyStop(patience=100, window=5, min_gain=0.03)
    resumed.load_state_dict(first.state_dict())
    got += [(resumed.update(e, v), resumed.stop_reason)[1] for e, v in enumerate(losses[8:], 9)]
    assert got == expected and resumed == whole
    changed = EarlyStop(patience=100, window=0, min_gain=0.03)
    changed.load_state_dict(first.state_dict())
    assert changed.window == 0 and not changed.should_stop


def test_slow_progress_waits_for_the_best_validation_force_to_stall_too() -> None:
    """A lucky validation energy sets a best fitness at epoch 2 that no later epoch beats, while
    the validation force RMSE falls 2 % an epoch to epoch 10 (PbTe fold 4 in the forty-ninth
    round): with a window of 3 epochs and 1 %, the stage ends at epoch 13, the first whose best
    force is no lower than three epochs before, not at epoch 5 as the fitness alone would. A force
    that stalls while the fitness still falls does not end it either."""

    def stops(fitness: list[float], force: list[float]) -> list[int]:
        stop = EarlyStop(patience=10**6, window=3, min_gain=0.01)
        out = []
        for e, (v, f) in enumerate(zip(fitness, force), 1):
            stop.update(e, v, {"force": f})
            out += [e] if stop.stop_reason == "slow_progress" else []
        return out

    lucky = [1.0, 0.5] + [0.6] * 14
    falling_force = [0.98 ** min(e, 10) for e in range(1, 17)]
    assert stops(lucky, falling_force) == list(range(13, 17))
    stop = EarlyStop(patience=10**6, window=3, min_gain=0.01)
    for e, (v, f) in enumerate(zip(lucky[:13], falling_force), 1):
        stop.update(e, v, {"force": f})
    assert stop.window_gain == 0.0 and stop.force_window_gain == pytest.approx(0.0)
    stop.force_trail[-1][1] = 0.98**11  # had the force fallen 2 % once more, no stop
    assert stop.force_window_gain == pytest.approx(0.02) and not stop.slow_progress
    assert stops([0.97**e for e in range(1, 17)], [1.0] * 16) == []  # fitness still falls 3 %/epoch
    # without force labels (None: that label is absent), the fitness alone decides: epoch 5
    assert stops(lucky, [None] * 16) == list(range(5, 17))


def test_slow_progress_resumes_from_a_checkpoint_without_the_force_trail() -> None:
    """A checkpoint written before the rule read forces has no force trail: the force window then
    counts from the resume (as the kept trail did for checkpoints before stop_window)."""
    old = EarlyStop(patience=100, window=3, min_gain=0.01)
    for e in range(1, 6):
        old.update(e, 1.0, {"force": 1.0})
    assert old.should_stop
    state = old.state_dict()
    del state["force_trail"]
    resumed = EarlyStop(patience=100, window=3, min_gain=0.01)
    resumed.load_state_dict(state)
    reasons = []
    for e in range(6, 10):
        resumed.update(e, 1.0, {"force": 1.0})
        reasons.append(resumed.stop_reason)
    assert resumed.force_trail[0] == [6, 1.0] and reasons == [None, None, None, "slow_progress"]
