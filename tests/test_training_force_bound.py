"""Stage 2 keeps forces (issue 10): a stage that starts from a model keeps as its best model
only epochs whose validation force RMSE is at most ``max_force_rise`` above its starting
model's; the bound changes which epoch is kept, never how the stage trains. An epoch more than
FAR_FORCE_RISE_FACTOR times the bound above is no progress for early stop (forty-fifth round)."""

from __future__ import annotations

import json
import logging
import math
from pathlib import Path

import pytest
import torch
from helpers.tiny_training import tiny_splits

from nepcore.evaluation.metrics import force_regression
from nepcore.spec import ModelSpec
from nepcore.training.config import MAX_FORCE_RISE, StageConfig
from nepcore.training.data import TrainData
from nepcore.training.schedule import FAR_FORCE_RISE_FACTOR, EarlyStop, counts_as_progress, keeps_forces, set_aside
from nepcore.training.stage import train_stage

SPEC = ModelSpec(("Cu", "Pd", "Ni"), 4.5, 3.5, 3, 3, 4, 4, 4, neurons=8)
START = {"valid_rmse_f": 0.100, "valid_rmse_e": 0.020, "valid_rmse_v": None, "monitored": 0.120}


def test_the_default_bound_is_the_threshold_of_evaluates_warning(tmp_path: Path) -> None:
    """One number: the model stage 2 keeps by default never triggers 'stage 2 gave up forces'."""
    assert StageConfig(stage=2).max_force_rise == StageConfig(stage=1).max_force_rise == MAX_FORCE_RISE == 0.05
    status = tmp_path / "status.json"
    status.write_text(json.dumps({"best": {"valid_rmse_f": 0.1}}))
    at_bound = 0.1 * (1.0 + StageConfig(stage=2).max_force_rise)
    assert force_regression({"splits": {"valid": {"force": {"rmse": at_bound * (1 - 1e-9)}}}}, status) is None
    assert force_regression({"splits": {"valid": {"force": {"rmse": at_bound * (1 + 1e-6)}}}}, status) is not None


def test_the_bound_is_relative_to_the_starting_models_force_rmse() -> None:
    assert keeps_forces({"force": 0.102}, START, 0.02)
    assert not keeps_forces({"force": 0.1021}, START, 0.02)
    assert keeps_forces({"force": 0.100}, START, 0.0) and not keeps_forces({"force": 0.1001}, START, 0.0)
    # no starting model (a fresh stage), or no force labels: nothing to keep
    assert keeps_forces({"force": 9.0}, None, 0.02)
    assert keeps_forces({"force": None}, START, 0.02)
    assert keeps_forces({"force": 9.0}, {**START, "valid_rmse_f": None}, 0.02)
    assert keeps_forces({"force": math.nan}, START, 0.02)


def test_progress_needs_forces_within_five_times_the_bound() -> None:
    """The wider bound of early stop is the bound of keeps_forces times FAR_FORCE_RISE_FACTOR."""
    assert FAR_FORCE_RISE_FACTOR == 5.0
    assert counts_as_progress({"force": 0.125}, START, 0.05) and not counts_as_progress({"force": 0.1251}, START, 0.05)
    assert counts_as_progress({"force": 0.110}, START, 0.02) and not counts_as_progress({"force": 0.1101}, START, 0.02)
    # no starting model, no force labels, or no bound (1e9): every epoch can be progress
    assert counts_as_progress({"force": 9.0}, None, 0.05)
    assert counts_as_progress({"force": None}, START, 0.05)
    assert counts_as_progress({"force": 9.0}, START, 1e9)


def test_an_epoch_far_outside_the_bound_is_a_bad_epoch_that_sets_no_bests() -> None:
    """Energies that improve at every epoch keep a stage alive only while its forces are within
    the wider bound; the far epochs set no bests, so progress after them is measured against the
    last epoch that counted."""
    early = EarlyStop(patience=3)
    early.update(0, START["monitored"], {"force": START["valid_rmse_f"], "energy": START["valid_rmse_e"]})
    far = [(0.300, 0.015), (0.300, 0.010), (0.300, 0.005)]  # force 3x the start's, energy falling
    for epoch, (force, energy) in enumerate(far, 1):
        found = {"force": force, "energy": energy}
        assert not counts_as_progress(found, START, 0.05)
        early.update(epoch, force + energy, found, keeps_forces(found, START, 0.05), progress=False)
        assert early.bad_epochs == early.far_epochs == epoch
    assert early.should_stop and early.best_epoch == 0
    assert early.best_energy == START["valid_rmse_e"] and early.best == START["monitored"]
    # the same epochs counted as progress (the rule before) would have kept the stage alive
    before = EarlyStop(patience=3)
    before.update(0, START["monitored"], {"force": START["valid_rmse_f"], "energy": START["valid_rmse_e"]})
    for epoch, (force, energy) in enumerate(far, 1):
        before.update(epoch, force + energy, {"force": force, "energy": energy}, keep=False)
    assert before.bad_epochs == 0 and not before.should_stop
    # an epoch back within it that improves resets both counts (0.019 beats the start's 0.020)
    early.update(4, 0.119, {"force": 0.1, "energy": 0.019})
    assert early.bad_epochs == early.far_epochs == 0 and early.best_epoch == 4


def _run(errors: list[tuple[float, float, float]], tolerance: float) -> tuple[EarlyStop, list[int]]:
    """Epoch 0 is the starting model (START); then (monitored, force, energy) per epoch."""
    early = EarlyStop(patience=3)
    early.update(0, START["monitored"], {"force": START["valid_rmse_f"], "energy": START["valid_rmse_e"]})
    bad = []
    for epoch, (monitored, force, energy) in enumerate(errors, 1):
        found = {"force": force, "energy": energy}
        early.update(epoch, monitored, found, keeps_forces(found, START, tolerance))
        bad.append(early.bad_epochs)
    return early, bad


# energies fall fast while forces rise: the fitness falls at epochs 1-3 (forces within 2 % at
# epoch 1 only), then nothing improves for three epochs
TRADE = [(0.117, 0.101, 0.016), (0.110, 0.104, 0.006), (0.108, 0.106, 0.002)] + [(0.2, 0.2, 0.2)] * 3


def test_early_stop_keeps_the_lowest_fitness_within_the_bound_and_stops_as_before() -> None:
    bounded, bad_bounded = _run(TRADE, 0.02)
    free, bad_free = _run(TRADE, 1e9)
    assert bounded.best_epoch == 1 and bounded.kept == pytest.approx(0.117)
    assert free.best_epoch == 3 and free.kept == pytest.approx(0.108)
    # the stall rule saw every epoch alike: same counts, same stop, same best monitored value
    assert bad_bounded == bad_free == [0, 0, 0, 1, 2, 3]
    assert bounded.should_stop and free.should_stop and bounded.best == free.best == pytest.approx(0.108)


def test_without_a_bound_every_epoch_is_kept_as_before() -> None:
    """keep=True everywhere reproduces the early stop of before the bound: kept == best."""
    early = EarlyStop(patience=2)
    for epoch, value in enumerate([1.0, 0.9, 0.95, 0.8, 0.85, 0.85], 1):
        early.update(epoch, value)
        assert early.kept == early.best
    assert early.best_epoch == 4 and early.should_stop


def test_the_kept_loss_survives_a_resume() -> None:
    """Interrupted after an epoch that was set aside (a lower loss than the kept one), the
    resumed tracker neither keeps a later epoch worse than the kept one nor refuses one between
    the two."""
    sequence = [(0.117, 0.101, 0.016), (0.110, 0.104, 0.006), (0.118, 0.101, 0.010), (0.114, 0.101, 0.011)]
    whole, _ = _run(sequence, 0.02)
    first, _ = _run(sequence[:2], 0.02)
    resumed = EarlyStop(patience=3)
    resumed.load_state_dict(first.state_dict())
    kept = []
    for epoch, (monitored, force, energy) in enumerate(sequence[2:], 3):
        found = {"force": force, "energy": energy}
        kept.append(resumed.update(epoch, monitored, found, keeps_forces(found, START, 0.02)))
    assert kept == [False, True]
    assert resumed.best_epoch == whole.best_epoch == 4 and resumed.state_dict() == whole.state_dict()


def test_a_checkpoint_from_before_the_bound_resumes_with_its_best_as_kept() -> None:
    early = EarlyStop(patience=3)
    state = {k: v for k, v in EarlyStop(patience=3, best=0.5, best_epoch=7).state_dict().items() if k != "kept"}
    early.load_state_dict(state)
    assert early.kept == 0.5 and not early.update(8, 0.6) and early.update(9, 0.4)


def test_set_aside_names_the_passed_over_epochs() -> None:
    history = [
        {"epoch": e, "monitored": m, "valid_rmse_f": f, "valid_rmse_e": en, "valid_rmse_v": None}
        for e, (m, f, en) in enumerate(TRADE, 1)
    ]
    aside = set_aside(history, START, 0.02, best_epoch=1)
    assert aside["epochs"] == 2 and aside["limit"] == pytest.approx(0.102)
    assert aside["lowest"]["epoch"] == 3 and aside["lowest"]["valid_rmse_f"] == pytest.approx(0.106)
    assert set_aside(history, START, 1e9, best_epoch=3) is None
    assert set_aside(history, None, 0.02, best_epoch=3) is None  # a fresh stage


@pytest.fixture(scope="module")
def stage1(tmp_path_factory):
    data, stats = tiny_splits(seed=2, n_frames=16, n_train=12, spec=SPEC)
    out = tmp_path_factory.mktemp("s1")
    cfg = StageConfig(stage=1, epochs=6, lr=0.02, lambda_e=0.0, batch_size=4, precision="float64", device="cpu",
                      progress=False)  # fmt: skip
    train_stage(cfg, data, stats, out)
    return data, stats, out / "checkpoint.pt"


def _self_validated(stage1) -> tuple:
    """The stage-1 fixture's (data, stats, checkpoint), its training frames as the validation
    split too, so that an energy-only stage 2 lowers its monitored loss at almost every epoch."""
    data, stats, ckpt = stage1
    return TrainData(data.train, data.train), stats, ckpt


def _energy_only_stage2(**settings) -> dict:
    """A stage 2 that trains energies only (lambda_f 0), float64, Adam at 0.003, no weight
    average: validated on its own training frames, it lowers its monitored (energy) loss at
    almost every epoch, whatever the forces do."""
    return dict(stage=2, optimizer="adam", lr=0.003, lambda_e=1.0, lambda_f=0.0, lambda_v=0.0, monitor="loss",
                batch_size=4, precision="float64", device="cpu", progress=False, ema=0.0, **settings)  # fmt: skip


def _bounded_and_free(stage1, common: dict, tmp_path: Path, caplog) -> tuple[dict, dict]:
    """The statuses of ``common`` continued from stage 1 with max_force_rise 0.02 (folder b, its
    log captured) and without a bound (1e9, folder f), validated on the training frames."""
    data, stats, ckpt = _self_validated(stage1)
    with caplog.at_level(logging.INFO, logger="nepcore.training.stage"):
        bounded = train_stage(StageConfig(**common, max_force_rise=0.02), data, stats, tmp_path / "b", init=ckpt)
    free = train_stage(StageConfig(**common, max_force_rise=1e9), data, stats, tmp_path / "f", init=ckpt)
    return bounded, free


def test_stage2_passes_over_epochs_that_buy_fitness_with_forces(stage1, tmp_path: Path, caplog) -> None:
    """An energy-only stage 2 lowers the monitored loss while the untrained forces drift up:
    with the bound the stage keeps the best epoch within it and says what it passed over;
    without it, the lowest loss. Both train alike (the same loss.out)."""
    bounded, free = _bounded_and_free(stage1, _energy_only_stage2(epochs=10, patience=50), tmp_path, caplog)
    assert (tmp_path / "b" / "loss.out").read_bytes() == (tmp_path / "f" / "loss.out").read_bytes()
    assert bounded["set_aside"] is not None, "the test needs a stage 2 that trades forces for its monitored loss"
    assert json.loads((tmp_path / "b" / "status.json").read_text())["set_aside"] == bounded["set_aside"]

    saved = torch.load(tmp_path / "b" / "checkpoint.pt", weights_only=False)
    start = saved["start_metrics"]
    epochs = [(0, start["monitored"], start["valid_rmse_f"])] + [
        (h["epoch"], h["monitored"], h["valid_rmse_f"]) for h in saved["history"]
    ]
    within = [e for e in epochs if e[2] <= 1.02 * start["valid_rmse_f"]]
    assert bounded["best_epoch"] == min(within, key=lambda e: e[1])[0]
    assert free["best_epoch"] == min(epochs, key=lambda e: e[1])[0] != bounded["best_epoch"]
    assert bounded["best"]["valid_rmse_f"] <= 1.02 * start["valid_rmse_f"] < free["best"]["valid_rmse_f"]
    assert bounded["set_aside"]["lowest"]["epoch"] == free["best_epoch"]
    assert free["set_aside"] is None
    # nep_best.txt is the kept epoch's model: the two stages' differ
    assert (tmp_path / "b" / "nep_best.txt").read_bytes() != (tmp_path / "f" / "nep_best.txt").read_bytes()
    lines = [r.getMessage() for r in caplog.records if "were set aside" in r.getMessage()]
    assert len(lines) == 1 and f"kept epoch {bounded['best_epoch']};" in lines[0] and "max_force_rise" in lines[0]


def test_a_resumed_bounded_stage_keeps_the_same_epoch(stage1, tmp_path: Path) -> None:
    """The kept loss is part of the early-stop state: a stage 2 stopped after 5 epochs and
    resumed to 10 writes the same nep_best.txt, loss.out and set_aside as one run of 10."""
    data, stats, ckpt = _self_validated(stage1)
    common = _energy_only_stage2(patience=50, max_force_rise=0.02)
    whole = train_stage(StageConfig(epochs=10, **common), data, stats, tmp_path / "whole", init=ckpt)
    train_stage(StageConfig(epochs=5, **common), data, stats, tmp_path / "parts", init=ckpt)
    parts = train_stage(StageConfig(epochs=10, **common), data, stats, tmp_path / "parts", init=ckpt)
    assert whole["set_aside"] is not None and parts["set_aside"] == whole["set_aside"]
    assert parts["best_epoch"] == whole["best_epoch"]
    for name in ("nep_best.txt", "nep.txt", "loss.out"):
        assert (tmp_path / "parts" / name).read_bytes() == (tmp_path / "whole" / name).read_bytes()


def test_a_stage_whose_forces_leave_for_good_stops_after_patience_epochs(stage1, tmp_path: Path, caplog) -> None:
    """The energy-only stage 2 above sets a new best validation energy at almost every epoch while
    its forces drift up (+4.9 % at epoch 1, +11 % at epoch 4). With the bound at 2 % (the wider
    one at 10 %) its epochs beyond 10 % are no progress: it stops on the plateau three epochs
    later, says why, and trained as the unbounded stage did up to there (the same loss.out
    lines); without a bound it runs all its epochs."""
    common = _energy_only_stage2(epochs=12, patience=3)
    bounded, free = _bounded_and_free(stage1, common, tmp_path, caplog)
    assert free["reason"] == "max_epochs" and free["epoch"] == 12
    assert bounded["reason"] == "plateau" and bounded["epoch"] == 6
    saved = torch.load(tmp_path / "b" / "checkpoint.pt", weights_only=False)
    start_force = saved["start_metrics"]["valid_rmse_f"]
    wider = (1 + FAR_FORCE_RISE_FACTOR * 0.02) * start_force
    # epochs 1-3 count (energies improve, forces within 10 %); 4-6, beyond it, end the stage
    assert [h["valid_rmse_f"] > wider for h in saved["history"]] == [False] * 3 + [True] * 3
    assert saved["early_stop"]["far_epochs"] == bounded["far_epochs"] == 3 and free["far_epochs"] == 0
    lines = (tmp_path / "b" / "loss.out").read_text().splitlines()
    assert lines == (tmp_path / "f" / "loss.out").read_text().splitlines()[: len(lines)]
    said = [r.getMessage() for r in caplog.records if "count as no progress" in r.getMessage()]
    assert len(said) == 1 and "3 of its last 3 epochs" in said[0] and "10 % above" in said[0]
    # stopped after epoch 5 (two far epochs counted) and resumed: the same stop and files
    data, stats, ckpt = _self_validated(stage1)
    part = dict(common, max_force_rise=0.02)
    train_stage(StageConfig(**{**part, "epochs": 5}), data, stats, tmp_path / "p", init=ckpt)
    resumed = train_stage(StageConfig(**part), data, stats, tmp_path / "p", init=ckpt)
    assert resumed["reason"] == "plateau" and resumed["epoch"] == 6
    for name in ("nep_best.txt", "nep.txt", "loss.out"):
        assert (tmp_path / "p" / name).read_bytes() == (tmp_path / "b" / name).read_bytes()
