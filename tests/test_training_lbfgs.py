"""Full-batch L-BFGS stages (``optimizer: lbfgs``): the objective is the whole split's loss in
any chunking, with the gradient of a hand-written loss; a stage learns, never raises its loss,
resumes bit-identically and runs under torchrun."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from helpers import specs
from helpers.tiny_training import ENV, make_dataset, tiny_splits

from nepcore.io.nep_txt import read_nep
from nepcore.model.nep_model import NEPModel
from nepcore.training import data as training_data
from nepcore.training.checkpoint import CheckpointError, load_checkpoint
from nepcore.training.compiled_step import TrainingLoss
from nepcore.training.config import (
    LBFGS_AUTO_MAX_ATOMS,
    LBFGS_CHUNK_ATOMS,
    StageConfig,
    StageConfigError,
    frames_per_batch,
    optimizer_for,
)
from nepcore.training.lbfgs import FullBatchObjective, make_lbfgs
from nepcore.training.loss import SUM_KEYS, LossWeights
from nepcore.training.qscaler import initial_parameters
from nepcore.training.stage import train_stage

SPEC = specs.TINY


@pytest.fixture(scope="module")
def tiny():
    """14 training and 6 validation frames (float64) and their q-scaler."""
    return tiny_splits(seed=3, n_frames=20, n_train=14)


@pytest.fixture(scope="module")
def data(tiny):
    return tiny[0]


@pytest.fixture(scope="module")
def stats(tiny):
    return tiny[1]


def objective(stats, data, chunk: int, weights: LossWeights) -> FullBatchObjective:
    model = NEPModel(SPEC, initial_parameters(stats, SPEC, seed=0)).to(torch.float64)
    return FullBatchObjective(TrainingLoss(model, weights, "analytical"), data.train, chunk, torch.device("cpu"))


def test_the_objective_is_the_whole_splits_loss_in_any_chunking(stats, data) -> None:
    """Value and gradient equal λe·mean(((E−E_ref)/N)²) + λf·mean(ΔF²) + λv·mean((ΔW/N)²) of the
    whole split, unshifted (b1 is a parameter), written out by hand, for 1, 3 and all 14 frames
    per chunk."""
    weights = LossWeights(lambda_e=0.7, lambda_f=1.3, lambda_v=0.2)
    results = []
    for chunk in (1, 3, 14):
        obj = objective(stats, data, chunk, weights)
        value = obj()
        grads = [p.grad.clone() for p in obj.params]
        results.append((float(value), grads))
    model = NEPModel(SPEC, initial_parameters(stats, SPEC, seed=0)).to(torch.float64)
    batch = next(iter(data.train.batches(14)))
    out = model(batch, force_path="analytical")
    n = batch.atoms_per_frame
    e = ((out["energy"] - batch.energy) / n) ** 2
    f = (out["forces"] - batch.forces) ** 2
    v = ((out["virial"] - batch.virial) / n[:, None]) ** 2
    hand = 0.7 * e.mean() + 1.3 * f.mean() + 0.2 * v.mean()
    hand.backward()
    expected = [p.grad for p in model.parameters() if p.requires_grad]
    assert model.b1.grad is not None and model.b1.grad.abs().item() > 0  # b1 is fitted
    for value, grads in results:
        assert value == pytest.approx(hand.item(), rel=1e-12)
        for g, h in zip(grads, expected):
            torch.testing.assert_close(g, h, rtol=1e-10, atol=1e-14)


def test_the_objective_keeps_gpumds_loss_options() -> None:
    """With per-frame weights, force_delta, type_weight and L2 the objective is still the stage's
    whole-split loss: data_loss of the split's error sums (unshifted) plus the regulariser."""
    from nepcore.data.demo import make_demo_dataset
    from nepcore.data.store import StreamDataStore
    from nepcore.training.loss import data_loss, regularisation
    from nepcore.training.qscaler import compute_q_scaler

    frames = make_demo_dataset(seed=5, n_frames=9)
    for i, atoms in enumerate(frames):
        atoms.info["weight"] = 0.5 + 0.25 * i
    store = StreamDataStore.from_atoms(frames, SPEC, torch.float64)
    stats = compute_q_scaler(SPEC, store.batches(8), mode="gpumd")
    weights = LossWeights(lambda_e=0.4, lambda_f=1.0, lambda_v=0.3, lambda_2=1e-3, force_delta=2.0,
                          type_weight=(1.0, 3.0, 0.5)[: SPEC.n_types])  # fmt: skip
    model = NEPModel(SPEC, initial_parameters(stats, SPEC, seed=0)).to(torch.float64)
    loss = TrainingLoss(model, weights, "analytical")
    value = float(FullBatchObjective(loss, store, 2, torch.device("cpu"))())
    whole = next(iter(store.batches(9)))
    assert whole.weight is not None and float(whole.weight.max()) > 1  # the weights are in the data
    with torch.no_grad():
        sums = dict(zip(SUM_KEYS, loss.error_sums(whole)))
        expected = data_loss(sums, weights, shifted=False) + sum(regularisation(model, weights))
    assert value == pytest.approx(float(expected), rel=1e-12)
    # and each option changes it (the test would not pass with them ignored)
    for plain in (dataclasses.replace(weights, force_delta=0.0), dataclasses.replace(weights, type_weight=())):
        other = FullBatchObjective(TrainingLoss(model, plain, "analytical"), store, 2, torch.device("cpu"))
        assert abs(float(other()) - value) > 1e-6 * value


def test_an_unchanged_point_is_not_evaluated_again(stats, data) -> None:
    obj = objective(stats, data, 5, LossWeights())
    calls = []
    evaluate = obj._evaluate
    obj._evaluate = lambda: calls.append(1) or evaluate()
    first = obj()
    grads = [p.grad.clone() for p in obj.params]
    for p in obj.params:
        p.grad = None
    assert obj() == first and len(calls) == 1
    assert all(torch.equal(p.grad, g) for p, g in zip(obj.params, grads))
    with torch.no_grad():
        obj.params[0].add_(1e-3)
    obj()
    assert len(calls) == 2


def test_lbfgs_iterations_only_lower_the_training_loss(stats, data) -> None:
    obj = objective(stats, data, 14, LossWeights(lambda_e=1.0, lambda_f=1.0, lambda_v=0.1))
    opt = make_lbfgs(obj.params)
    losses = [float(obj())]
    for _ in range(15):
        obj.epoch(opt)
        losses.append(float(obj()))
    assert all(b <= a for a, b in zip(losses, losses[1:])), losses
    assert losses[-1] < 0.2 * losses[0], losses


def test_settings() -> None:
    assert StageConfig(stage=2).optimizer == "auto" and StageConfig(stage=1).optimizer == "adam"
    with pytest.raises(StageConfigError, match="lbfgs needs loss_form mse"):
        StageConfig(stage=2, loss_form="rmse", optimizer="lbfgs")
    assert StageConfig(stage=2, loss_form="rmse").loss_form == "rmse"  # auto then runs Adam
    small, large = LBFGS_AUTO_MAX_ATOMS, LBFGS_AUTO_MAX_ATOMS + 1
    assert optimizer_for("auto", small, "mse") == "lbfgs" and optimizer_for("auto", large, "mse") == "adam"
    assert optimizer_for("auto", small, "rmse") == "adam" and optimizer_for("auto", None, "mse") == "adam"
    assert optimizer_for("adam", 10, "mse") == "adam" and optimizer_for("lbfgs", 10**9, "mse") == "lbfgs"
    assert frames_per_batch("auto", 100.0, "lbfgs") == round(LBFGS_CHUNK_ATOMS / 100)
    assert frames_per_batch("auto", 10_000.0, "lbfgs") == 1  # a chunk may be one frame
    assert frames_per_batch("auto", 10_000.0, "adam") == 2
    assert frames_per_batch(6, 100.0, "lbfgs") == 6


def cfg(**changes) -> StageConfig:
    base = dict(stage=2, optimizer="lbfgs", precision="float64", device="cpu", progress=False, checkpoint_every=1)
    return StageConfig(**{**base, **changes})


def test_stage_learns_and_exports_what_it_validated(data, stats, tmp_path: Path) -> None:
    status = train_stage(cfg(stage=1, epochs=12, batch_size=5), data, stats, tmp_path)
    assert status["reason"] == "max_epochs" and status["settings"]["optimizer"] == "lbfgs"
    rows = np.loadtxt(tmp_path / "loss.out")
    assert rows[-1, 1] < 0.3 * rows[0, 1]  # the training loss fell
    saved = load_checkpoint(tmp_path / "checkpoint.pt")
    assert saved["average"] is None  # nothing averaged: nep.txt is the optimised model
    assert np.array_equal(read_nep(tmp_path / "nep.txt").params["b1"], saved["model"]["b1"].numpy())
    assert saved["model"]["b1"].item() != 0.0  # b1 is fitted
    assert not status["warnings"]


def test_resume_is_bit_identical(tmp_path: Path) -> None:
    """float32, as the workflow trains: the L-BFGS history, the best model and the early stop
    come back from the checkpoint."""
    f32, stats32 = tiny_splits(seed=3, n_frames=20, n_train=14, dtype=torch.float32)
    c = cfg(stage=1, epochs=6, batch_size=4, precision="float32")
    train_stage(c, f32, stats32, tmp_path / "ref")
    train_stage(cfg(stage=1, epochs=3, batch_size=4, precision="float32"), f32, stats32, tmp_path / "resumed")
    train_stage(c, f32, stats32, tmp_path / "resumed")
    for name in ("nep.txt", "nep_best.txt", "loss.out"):
        assert (tmp_path / "resumed" / name).read_bytes() == (tmp_path / "ref" / name).read_bytes(), name


@pytest.mark.parametrize("optimizer", ["lbfgs", "adam"])
def test_kept_passes_change_no_number(tmp_path: Path, monkeypatch, optimizer: str) -> None:
    """A CPU stage keeps the batches of its unshuffled passes (L-BFGS's evaluations, the
    validation after every epoch; status.json says so); with none kept it writes the same bytes."""
    f32, stats32 = tiny_splits(seed=3, n_frames=20, n_train=14, dtype=torch.float32)
    c = cfg(stage=1, epochs=6, batch_size=4, precision="float32", optimizer=optimizer)
    kept = train_stage(c, f32, stats32, tmp_path / "kept")
    assert kept["kept_passes"].startswith("on (up to ")
    assert f32.valid.kept_nbytes > 0 and (f32.train.kept_nbytes > 0) == (optimizer == "lbfgs")
    monkeypatch.setattr(training_data, "KEPT_PASSES_SHARE", 0.0)
    assembled = train_stage(c, f32, stats32, tmp_path / "assembled")
    assert assembled["kept_passes"] == "off: no memory for them" and f32.valid.kept_nbytes == 0
    for name in ("nep.txt", "nep_best.txt", "loss.out"):
        assert (tmp_path / "kept" / name).read_bytes() == (tmp_path / "assembled" / name).read_bytes(), name


@pytest.mark.slow  # subprocess
def test_torchrun_two_processes_give_the_one_process_fit(tmp_path: Path) -> None:
    """Each process evaluates every other chunk and the gradients are summed: the objective is
    the same function, so two processes follow the one-process trajectory up to rounding."""
    ds = make_dataset(tmp_path / "data")
    env = {**ENV, "OMP_NUM_THREADS": "1"}
    args = ["-m", "nepcore", "train", "--stage", "1", "--optimizer", "lbfgs", "--data", str(ds["h5"]),
            "--qscaler", str(ds["qscaler"]), "--epochs", "5", "--batch-size", "3", "--precision", "float64",
            "--device", "cpu", "--no-progress"]  # fmt: skip
    one = subprocess.run([sys.executable, *args, "--out-dir", str(tmp_path / "one")], env=env, capture_output=True)
    assert one.returncode == 0, one.stderr[-3000:]
    launcher = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2"]
    two = subprocess.run([*launcher, *args[1:], "--out-dir", str(tmp_path / "two")], env=env, capture_output=True)
    assert two.returncode == 0, two.stderr[-3000:]
    assert load_checkpoint(tmp_path / "two" / "checkpoint.pt")["config"]["processes"] == 2
    a, b = (np.loadtxt(tmp_path / d / "loss.out") for d in ("one", "two"))
    np.testing.assert_allclose(b, a, rtol=1e-8)


def test_a_checkpoint_from_before_the_optimizer_setting_resumes_as_adam(data, stats, tmp_path: Path) -> None:
    c = StageConfig(stage=1, epochs=2, batch_size=5, precision="float64", device="cpu", progress=False)
    train_stage(c, data, stats, tmp_path)
    path = tmp_path / "checkpoint.pt"
    saved = torch.load(path, weights_only=True)
    del saved["config"]["optimizer"]  # as the previous version wrote it
    torch.save(saved, path)
    status = train_stage(dataclasses.replace(c, epochs=3), data, stats, tmp_path)  # resumed, not refused
    assert status["epoch"] == 3 and len(np.loadtxt(tmp_path / "loss.out")) == 3
    with pytest.raises(CheckpointError, match="optimizer: 'adam' in the checkpoint, 'lbfgs' now"):
        train_stage(dataclasses.replace(c, epochs=4, optimizer="lbfgs"), data, stats, tmp_path)
