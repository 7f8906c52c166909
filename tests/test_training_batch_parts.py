"""Frame-parallel CPU steps (``batch_parts``, nepcore.training.batch_parts): a batch evaluated in
parts of whole frames gives the whole batch's outputs, loss and gradient (float64, to rounding),
the same bits on one thread as on two, and a stage that resumes byte-identically; where the
parts are not used, the stage says why."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from helpers import specs
from helpers.tiny_training import make_dataset, tiny_splits

from nepcore.data.store import StreamDataStore
from nepcore.model.batch import frame_bounds, split_frames
from nepcore.model.nep_model import NEPModel
from nepcore.training.batch_parts import BatchParts, batch_parts_for
from nepcore.training.compiled_step import TrainingLoss
from nepcore.training.config import MIN_PART_ATOMS, StageConfig
from nepcore.training.data import TrainData
from nepcore.training.lbfgs import FullBatchObjective
from nepcore.training.loss import SUM_KEYS, LossWeights, data_loss, regularisation
from nepcore.training.qscaler import initial_parameters, read_qscaler
from nepcore.training.stage import train_stage

SPEC = specs.TINY


@pytest.fixture(scope="module")
def tiny():
    """14 training and 6 validation frames (float64) and their q-scaler."""
    return tiny_splits(seed=5, n_frames=20, n_train=14)


def _model(stats) -> NEPModel:
    return NEPModel(SPEC, initial_parameters(stats, SPEC, seed=0)).to(torch.float64)


def test_frame_bounds_cut_whole_frames_at_about_equal_atoms() -> None:
    assert frame_bounds(np.array([10, 10, 10, 10]), 2) == [0, 2, 4]
    assert frame_bounds(np.array([90, 10, 10, 10]), 2) == [0, 1, 4]  # the big frame alone
    assert frame_bounds(np.array([10, 10, 10, 90]), 2) == [0, 3, 4]
    assert frame_bounds(np.array([5, 5, 5]), 4) == [0, 1, 2, 3]  # fewer frames than parts
    assert frame_bounds(np.array([7]), 2) == [0, 1]
    assert frame_bounds(np.array([1, 1, 1, 1, 100]), 3) == [0, 3, 4, 5]  # every run keeps a frame
    assert frame_bounds(np.array([30, 40, 50, 60, 70, 80]), 3) == [0, 3, 5, 6]
    for parts in range(1, 8):
        bounds = frame_bounds(np.arange(1, 6), parts)
        assert bounds[0] == 0 and bounds[-1] == 5 and all(a < b for a, b in zip(bounds, bounds[1:]))
        assert len(bounds) == min(parts, 5) + 1


def test_parts_hold_the_frames_and_give_their_outputs(tiny) -> None:
    """Each part's energies, forces and virials are the whole batch's rows of its frames."""
    data, stats = tiny
    model = _model(stats)
    batch = next(iter(data.train.batches(7, shuffle=True, seed=0, epoch=2)))
    whole = model(batch)
    bounds = frame_bounds(batch.atoms_per_frame.numpy(), 3)
    parts = split_frames(batch, bounds)
    assert [p.n_frames for p in parts] == list(np.diff(bounds))
    assert sum(p.n_atoms for p in parts) == batch.n_atoms
    assert sum(p.radial_i.shape[0] for p in parts) == batch.radial_i.shape[0]
    assert sum(p.angular_i.shape[0] for p in parts) == batch.angular_i.shape[0]
    atoms = frames = 0
    for part in parts:
        assert torch.equal(part.frame_index, batch.frame_index[frames : frames + part.n_frames])
        assert int(part.radial_j.min()) >= 0 and int(part.radial_j.max()) < part.n_atoms
        out = model(part)
        rows = {"energy": slice(frames, frames + part.n_frames), "forces": slice(atoms, atoms + part.n_atoms)}
        rows["virial"] = rows["energy"]
        for key, where in rows.items():
            torch.testing.assert_close(out[key], whole[key][where], rtol=1e-12, atol=1e-14)
        atoms, frames = atoms + part.n_atoms, frames + part.n_frames


def test_a_smallest_part_keeps_small_batches_whole(tiny) -> None:
    """With min_part_atoms a batch is cut into at most (atoms // min_part_atoms) parts: whole
    below twice the minimum, as many parts as asked once every part can hold it."""
    data, _ = tiny
    batch = next(iter(data.train.batches(7, shuffle=True, seed=0, epoch=2)))
    atoms = batch.n_atoms
    assert len(BatchParts(3, 1, atoms // 2 + 1).split(batch)) == 1  # two parts would be smaller
    assert len(BatchParts(3, 1, atoms // 2).split(batch)) == 2
    assert len(BatchParts(3, 1, atoms // 3).split(batch)) == 3
    whole, cut = BatchParts(3, 1, atoms + 1).split(batch), BatchParts(3, 1).split(batch)
    assert whole == [batch] and len(cut) == 3  # 0 (a number's setting): always the parts asked
    with pytest.raises(ValueError, match="min_part_atoms"):
        BatchParts(2, 1, -1)


@pytest.mark.parametrize("force_path", ["analytical", "autograd"])
def test_the_loss_and_gradient_are_the_whole_batchs(tiny, force_path: str) -> None:
    """With GPUMD's loss options on (per-frame weights come with the data), the parts' loss and
    gradient equal one backward pass over the whole batch; one and two threads give the same bits."""
    data, stats = tiny
    weights = LossWeights(lambda_e=0.7, lambda_f=1.3, lambda_v=0.2, force_delta=0.5, type_weight=(1.0, 2.0, 0.5))
    batch = next(iter(data.train.batches(9, shuffle=True, seed=1, epoch=0)))

    def gradients(runner: BatchParts | None):
        model = _model(stats)
        loss = TrainingLoss(model, weights, force_path)
        loss.batch_parts = runner
        objective = lambda s: data_loss(dict(zip(SUM_KEYS, s.unbind())), weights)
        value, sums = loss.gradients(batch, objective)
        return value, sums, [p.grad.clone() for p in model.parameters() if p.requires_grad]

    want_value, want_sums, want_grads = gradients(None)
    got = [gradients(BatchParts(3, workers)) for workers in (1, 2)]
    for value, sums, grads in got:
        assert value.item() == pytest.approx(want_value.item(), rel=1e-12)
        torch.testing.assert_close(sums, want_sums, rtol=1e-12, atol=1e-18)
        for g, h in zip(grads, want_grads):
            torch.testing.assert_close(g, h, rtol=1e-10, atol=1e-14)
    (v1, s1, g1), (v2, s2, g2) = got
    assert torch.equal(v1, v2) and torch.equal(s1, s2) and all(torch.equal(a, b) for a, b in zip(g1, g2))


def test_validation_sums_and_the_lbfgs_objective_are_the_whole_splits(tiny) -> None:
    data, stats = tiny
    weights = LossWeights(lambda_e=0.7, lambda_f=1.3, lambda_v=0.2)
    batch = next(iter(data.valid.batches(6)))
    plain = TrainingLoss(_model(stats), weights, "analytical")
    parted = TrainingLoss(_model(stats), weights, "analytical")
    parted.batch_parts = BatchParts(2, 2)
    torch.testing.assert_close(parted.error_sums(batch), plain.error_sums(batch), rtol=1e-12, atol=1e-18)
    results = []
    for loss in (plain, parted):
        objective = FullBatchObjective(loss, data.train, 5, torch.device("cpu"))
        results.append((objective().item(), [p.grad.clone() for p in objective.params]))
    (want, want_grads), (got, got_grads) = results
    assert got == pytest.approx(want, rel=1e-12)
    for g, h in zip(got_grads, want_grads):
        torch.testing.assert_close(g, h, rtol=1e-10, atol=1e-14)


def test_the_regulariser_adds_its_gradient(tiny) -> None:
    """A training step with λ1, λ2 > 0 adds their gradient to the parts' (as one backward pass of
    data + l1 + l2 does)."""
    from nepcore.training.epoch import train_step

    data, stats = tiny
    weights = LossWeights(lambda_1=0.05, lambda_2=0.05)
    batch = next(iter(data.train.batches(8)))
    params_after = []
    for runner in (None, BatchParts(2, 1)):
        model = _model(stats)
        loss = TrainingLoss(model, weights, "analytical")
        loss.batch_parts = runner
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        train_step(loss, batch, optimizer, clip=0.0)
        params_after.append([p.detach().clone() for p in model.parameters()])
        assert regularisation(model, weights)[0].requires_grad
    for a, b in zip(*params_after):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-14)


@pytest.fixture(scope="module")
def converted(tmp_path_factory):
    """A converted dataset's splits in float32, as a default stage trains."""
    ds = make_dataset(tmp_path_factory.mktemp("parts"), n_frames=14)
    stats = read_qscaler(ds["qscaler"])
    store = lambda split: StreamDataStore.from_hdf5(ds["h5"], stats.spec, split=split, dtype=torch.float32)
    return TrainData(store("train"), store("valid")), stats


def test_a_stage_gives_the_same_bits_on_one_and_two_threads_and_resumes(converted, tmp_path: Path) -> None:
    data, stats = converted
    cfg = StageConfig(stage=1, epochs=4, batch_size=4, device="cpu", progress=False, checkpoint_every=1, batch_parts=2)
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        one = train_stage(cfg, data, stats, tmp_path / "one")
        torch.set_num_threads(2)
        two = train_stage(cfg, data, stats, tmp_path / "two")
        assert torch.get_num_threads() == 2  # the stage gives its threads back
    finally:
        torch.set_num_threads(threads)
    assert one["batch_parts"] == "2 parts per batch on 1 thread"
    assert two["batch_parts"] == "2 parts per batch on 2 threads"
    assert json.loads((tmp_path / "two" / "status.json").read_text())["batch_parts"] == two["batch_parts"]
    short = StageConfig(**{**cfg.__dict__, "epochs": 2})
    train_stage(short, data, stats, tmp_path / "resumed")
    train_stage(cfg, data, stats, tmp_path / "resumed")
    for name in ("loss.out", "nep.txt", "nep_best.txt"):
        want = (tmp_path / "one" / name).read_bytes()
        assert (tmp_path / "two" / name).read_bytes() == want, name
        assert (tmp_path / "resumed" / name).read_bytes() == want, name
    unsplit = train_stage(StageConfig(**{**cfg.__dict__, "batch_parts": 1}), data, stats, tmp_path / "unsplit")
    assert unsplit["batch_parts"] == "off: one part per batch"
    first = lambda folder: (folder / "loss.out").read_text().splitlines()[1].split()
    a, b = first(tmp_path / "one"), first(tmp_path / "unsplit")
    assert a[0] == b[0] and np.allclose(np.array(a[1:], float), np.array(b[1:], float), rtol=1e-4)


def test_where_parts_are_not_used_the_reason_is_given() -> None:
    cpu = torch.device("cpu")
    assert batch_parts_for(1, cpu, False, 1) == (None, "off: one part per batch")
    assert batch_parts_for(2, torch.device("cuda"), False, 1) == (None, "off: not a CPU stage")
    assert "compiled step" in batch_parts_for(2, cpu, True, 1)[1]
    assert "torchrun" in batch_parts_for(2, cpu, False, 2)[1]
    runner, said = batch_parts_for(4, cpu, False, 1)
    assert runner.parts == 4 and runner.workers == min(4, torch.get_num_threads())
    runner.close()
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        assert batch_parts_for("auto", cpu, False, 1) == (None, "off: auto: one part per batch (one thread)")
        torch.set_num_threads(2)
        runner, said = batch_parts_for("auto", cpu, False, 1)
        assert (runner.parts, runner.workers, runner.min_part_atoms) == (2, 2, MIN_PART_ATOMS)
        assert said == (
            f"auto: up to 2 parts per batch of at least {MIN_PART_ATOMS} atoms each, on 2 threads"
            " (a smaller batch whole, on one thread)"
        )
        runner.close()
        runner, said = batch_parts_for(2, cpu, False, 1)  # a number: the parts asked, whatever the atoms
        assert (runner.min_part_atoms, said) == (0, "2 parts per batch on 2 threads")
        runner.close()
        # no more parts (and workers) than frames in a batch
        single = batch_parts_for("auto", cpu, False, 1, 1)
        assert single == (None, "off: auto: one part per batch (one frame per batch)")
        assert batch_parts_for(3, cpu, False, 1, 1) == (None, "off: one part per batch (one frame per batch)")
        torch.set_num_threads(4)
        runner, said = batch_parts_for("auto", cpu, False, 1, 3)
        assert (runner.parts, runner.workers) == (3, 3) and said.startswith("auto: up to 3 parts per batch")
        runner.close()
    finally:
        torch.set_num_threads(threads)
