"""The validation frames that steer a stage (nepcore.training.frame_share): per-frame squared
errors that add up to the split's error sums, and the warning a stage gives at its end when one
validation frame holds most of the best model's squared force error."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import numpy as np
import pytest
import torch
from ase.calculators.singlepoint import SinglePointCalculator
from helpers import specs
from helpers.tiny_training import make_dataset

from nepcore.data.demo import make_demo_dataset
from nepcore.data.store import StreamDataStore
from nepcore.model.nep_model import NEPModel
from nepcore.training.config import StageConfig
from nepcore.training.epoch import evaluate_sums
from nepcore.training.frame_share import frame_squared_errors
from nepcore.training.qscaler import compute_q_scaler
from nepcore.training.stage import TrainData, open_data, train_stage

SPEC = specs.TINY
CPU = torch.device("cpu")
BAD = 5  # the validation frame whose reference forces are scaled


@pytest.fixture(scope="module")
def frames():
    return make_demo_dataset(seed=3, n_frames=24)


def with_forces_scaled(atoms, factor: float):
    """A copy of ``atoms`` whose reference forces are ``factor`` times the EMT ones (a broken
    label, as a unit mix-up would make), energy and stress kept."""
    copy = atoms.copy()
    results = atoms.calc.results
    copy.calc = SinglePointCalculator(
        copy, energy=results["energy"], forces=factor * results["forces"], stress=results["stress"]
    )
    return copy


def splits(frames, bad: bool) -> TrainData:
    """Frames 0-11 train, 12-23 valid (in-memory stores: frame indices 0-11 in each); with ``bad``,
    valid frame BAD's forces are 20x too large."""
    valid = [with_forces_scaled(a, 20.0) if bad and i == BAD else a for i, a in enumerate(frames[12:])]
    return TrainData(
        StreamDataStore.from_atoms(frames[:12], SPEC, torch.float64),
        StreamDataStore.from_atoms(valid, SPEC, torch.float64),
    )


def test_per_frame_errors_add_up_to_the_split_sums(frames) -> None:
    data = splits(frames, bad=True)
    model = NEPModel(SPEC, seed=2)
    errors = frame_squared_errors(model, data.valid, 5, CPU, "analytical")
    sums = {k: float(v) for k, v in evaluate_sums(model, data.valid, 5, CPU, "analytical").items()}
    assert errors["frame_index"].tolist() == list(range(12))
    np.testing.assert_allclose(errors["force_sq"].sum(), sums["f_sq"], rtol=1e-12)
    np.testing.assert_allclose(errors["force_n"].sum(), sums["f_n"], rtol=1e-12)
    np.testing.assert_allclose(errors["energy_sq"].sum(), sums["e_sq_raw"], rtol=1e-12)
    assert errors["energy_n"].sum() == sums["e_n"] == 12
    autograd = frame_squared_errors(model, data.valid, 5, CPU, "autograd")  # the other force path, under no_grad
    for key, value in errors.items():
        np.testing.assert_allclose(autograd[key], value, rtol=1e-12, err_msg=key)
    # frame by frame, by hand: the frame with scaled forces, against ase's own numbers
    atoms = frames[12 + BAD]
    out = model(StreamDataStore.from_atoms([atoms], SPEC, torch.float64).batch([0]))
    by_hand = ((out["forces"].detach().numpy() - 20.0 * atoms.get_forces()) ** 2).sum()
    np.testing.assert_allclose(errors["force_sq"][BAD], by_hand, rtol=1e-12)
    assert errors["force_n"][BAD] == 3 * len(atoms)
    d = (float(out["energy"][0].detach()) - atoms.get_potential_energy()) / len(atoms)
    np.testing.assert_allclose(errors["energy_sq"][BAD], d * d, rtol=1e-12)


@pytest.mark.parametrize("bad", [True, False])
def test_a_stage_says_which_validation_frame_steered_it(frames, tmp_path: Path, caplog, bad: bool) -> None:
    data = splits(frames, bad)
    stats = compute_q_scaler(SPEC, data.train.batches(8), mode="gpumd")
    cfg = StageConfig(stage=1, epochs=2, batch_size=4, precision="float64", device="cpu", progress=False)
    with caplog.at_level(logging.WARNING, logger="nepcore"):
        status = train_stage(cfg, data, stats, tmp_path)
    on_file = json.loads((tmp_path / "status.json").read_text())["warnings"]
    assert [w for w in status["warnings"] if w.startswith("valid")] == [w for w in on_file if w.startswith("valid")]
    said = [w for w in status["warnings"] if w.startswith("valid force:")]
    if not bad:
        assert said == []
        return
    assert len(said) == 1 and f"1 of 12 frames (dataset frame {BAD}) holds" in said[0], said
    assert "the plateau schedule, early stop and the best model follow" in said[0]
    assert said[0] in caplog.text
    # the numbers are the best model's: its share and the RMSE without the frame, recomputed
    best = NEPModel(SPEC, {k: v.numpy() for k, v in torch.load(tmp_path / "checkpoint.pt")["best_model"].items()})
    errors = frame_squared_errors(best, data.valid, 4, CPU, "analytical")
    share = errors["force_sq"][BAD] / errors["force_sq"].sum()
    rest = np.delete(errors["force_sq"], BAD).sum() / np.delete(errors["force_n"], BAD).sum()
    assert share > 0.5 and f"holds {100 * share:.0f} %" in said[0]
    assert f"the force RMSE is {1e3 * np.sqrt(rest):.1f} meV/Å" in said[0]


def test_a_converted_dataset_names_frames_by_their_input_file(tmp_path: Path) -> None:
    ds = make_dataset(tmp_path)
    data = open_data(ds["h5"], specs.MINIMAL, torch.float64)
    assert data.origin is not None
    assert [data.origin(i) for i in (0, 7)] == [f"{ds['xyz']} frame 0", f"{ds['xyz']} frame 7"]
