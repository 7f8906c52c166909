"""Training stages: learning, loss definitions, b1, schedules, checkpoints and bit-exact resume
after SIGKILL, plateau -> stage 2, calorine parity of every nep.txt, fine-tuning a published
potential restricted to some of its elements."""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from helpers import specs
from helpers.oracle import calorine_reference, ours, random_params
from helpers.reference_batch import collate, frame_from_atoms

from nepcore.data.demo import make_demo_dataset
from nepcore.data.store import StreamDataStore
from nepcore.io.nep_txt import read_nep
from nepcore.model.nep_model import NEPModel
from nepcore.spec import ModelSpec
from nepcore.training.checkpoint import CheckpointError, load_checkpoint
from nepcore.training.config import StageConfig, stage_defaults
from nepcore.training.epoch import evaluate_sums
from nepcore.training.loss import LossWeights, data_loss, error_sums, regularisation, rmse
from nepcore.training.qscaler import compute_q_scaler, initial_parameters, write_qscaler
from nepcore.training.schedule import EarlyStop, LRSchedule
from nepcore.training.stage import (
    TrainData,
    TrainingError,
    parameters_sha256,
    start_parameters,
    train_stage,
)

SPEC = specs.TINY
CPU = torch.device("cpu")


@pytest.fixture(scope="module")
def frames():
    return make_demo_dataset(seed=1, n_frames=24)


def split(frames, dtype: torch.dtype = torch.float64) -> TrainData:
    """Frames 0-17 train, 18-23 valid."""
    return TrainData(
        StreamDataStore.from_atoms(frames[:18], SPEC, dtype), StreamDataStore.from_atoms(frames[18:], SPEC, dtype)
    )


@pytest.fixture(scope="module")
def data(frames) -> TrainData:
    return split(frames)


@pytest.fixture(scope="module")
def stats(data):
    return compute_q_scaler(SPEC, data.train.batches(8), mode="gpumd")


def train_rmse(params: dict, data: TrainData, spec: ModelSpec = SPEC) -> dict[str, float]:
    """GPUMD's training RMSEs (E with the mean residual removed) of a model on data.train."""
    sums = evaluate_sums(NEPModel(spec, params), data.train, 8, CPU, "analytical")
    return rmse({k: float(v) for k, v in sums.items()}, shifted_energy=True)


def cfg(**changes) -> StageConfig:
    base = dict(stage=1, batch_size=4, precision="float64", device="cpu", progress=False)
    return StageConfig(**{**base, **changes})


# ---- learning ----------------------------------------------------------------------------------


def test_training_learns(data, stats, tmp_path: Path) -> None:
    c = cfg(epochs=8, lr=0.02, lambda_e=1.0, lambda_f=1.0)
    start, _ = start_parameters(c, stats)
    status = train_stage(c, data, stats, tmp_path)
    before, after = train_rmse(start, data), train_rmse(read_nep(tmp_path / "nep.txt").params, data)
    assert status["reason"] == "max_epochs" and status["epoch"] == 8
    assert after["rmse_e"] < before["rmse_e"] / 3, (before, after)
    assert after["rmse_f"] < before["rmse_f"] / 3, (before, after)
    rows = np.loadtxt(tmp_path / "loss.out")
    assert rows.shape == (8, 10) and np.array_equal(rows[:, 0], np.arange(1, 9))  # GPUMD's 10 columns
    assert rows[-1, 5] < rows[0, 5] and rows[-1, 8] < rows[0, 8]  # F train and F "test" (valid) fall


# ---- loss definitions ----------------------------------------------------------------------------


def labelled_batch(frames, weights=(1.0, 2.0, 0.5), drop=True):
    fs = [frame_from_atoms(a, SPEC) for a in frames[:3]]
    for f, w in zip(fs, weights):
        f.weight = w
    if drop:  # frame 1 has no energy, frame 2 no forces, frame 0 no virial
        fs[1].energy, fs[2].forces, fs[0].virial = float("nan"), None, None
    return collate(fs)


def test_error_sums_follow_the_definitions(frames) -> None:
    batch = labelled_batch(frames)
    model = NEPModel(SPEC, random_params(SPEC, 3))
    out = {k: v.detach() for k, v in model(batch).items()}
    s = {k: float(v) for k, v in error_sums(out, batch).items()}
    n, w2 = batch.atoms_per_frame.numpy(), batch.weight.numpy() ** 2
    d = ((out["energy"] - batch.energy).numpy() / n)[[0, 2]]
    shift = (w2[[0, 2]] * d).sum() / w2[[0, 2]].sum()
    assert math.isclose(s["e_w"], (w2[[0, 2]] * (d - shift) ** 2).sum(), rel_tol=1e-12)
    assert math.isclose(s["e_sq_raw"], (d**2).sum(), rel_tol=1e-12) and s["e_n"] == 2
    k = int(n[0] + n[1])  # atoms of frames 0 and 1 (with forces)
    dF2 = ((out["forces"] - batch.forces).numpy()[:k] ** 2).sum(1)
    frame_w2 = np.repeat(w2[:2], n[:2].astype(int))
    assert math.isclose(s["f_w"], (frame_w2 * dF2).sum(), rel_tol=1e-12) and s["f_n"] == 3 * k
    dV = ((out["virial"] - batch.virial).numpy() / n[:, None])[1:]
    assert math.isclose(s["v_w"], (w2[1:, None] * dV**2).sum(), rel_tol=1e-12) and s["v_n"] == 12
    w = LossWeights(0.3, 0.7, 0.2, form="rmse")
    expected = 0.3 * math.sqrt(s["e_w"] / 2) + 0.7 * math.sqrt(s["f_w"] / (3 * k)) + 0.2 * math.sqrt(s["v_w"] / 12)
    assert math.isclose(float(data_loss(error_sums(out, batch), w)), expected, rel_tol=1e-12)


def test_b1_gets_no_gradient_and_the_epoch_sets_it(frames, data, stats, tmp_path: Path) -> None:
    batch = labelled_batch(frames, drop=False)
    model = NEPModel(SPEC, random_params(SPEC, 4))
    loss = data_loss(error_sums(model(batch), batch), LossWeights(1.0, 1.0, 1.0))
    (g,) = torch.autograd.grad(loss, [model.b1])
    assert abs(float(g)) < 1e-12 * float(loss.detach())  # the mean residual is removed: b1 drops out
    # after a stage, b1 removes the mean per-atom energy residual of the training data (the raw
    # weights': an averaged model's b1 comes from the steps it averages, test_training_recipe.py)
    train_stage(cfg(epochs=1, lr=1e-6, ema=0.0), data, stats, tmp_path)
    params = read_nep(tmp_path / "nep.txt").params
    sums = evaluate_sums(NEPModel(SPEC, params), data.train, 18, CPU, "analytical")
    assert abs(float(sums["e_res"] / sums["e_wsum"])) < 1e-4  # eV/atom, lr tiny: weights barely move


def test_regularisation_is_gpumds_form() -> None:
    params = random_params(SPEC, 5)
    model = NEPModel(SPEC, params)
    l1, l2 = regularisation(model, LossWeights(lambda_1=0.2, lambda_2=0.3))
    theta = np.concatenate([params[k].ravel() for k in ("W0", "b0", "w1", "c_radial", "c_angular")])
    assert theta.size == SPEC.n_trainable - 1  # everything but b1
    assert math.isclose(float(l1.detach()), 0.2 * np.abs(theta).sum() / SPEC.n_trainable, rel_tol=1e-12)
    assert math.isclose(float(l2.detach()), 0.3 * math.sqrt((theta**2).sum() / SPEC.n_trainable), rel_tol=1e-12)


@pytest.mark.parametrize("form", ["mse", "rmse"])
def test_analytical_and_autograd_paths_give_the_same_loss_and_gradients(frames, form: str) -> None:
    batch = labelled_batch(frames)
    weights = LossWeights(0.5, 1.0, 0.3, lambda_1=0.01, lambda_2=0.02, form=form)
    results = []
    for path in ("analytical", "autograd"):
        model = NEPModel(SPEC, random_params(SPEC, 6))
        l1, l2 = regularisation(model, weights)
        loss = data_loss(error_sums(model(batch, force_path=path), batch), weights) + l1 + l2
        loss.backward()
        results.append((float(loss.detach()), {k: p.grad.clone() for k, p in model.named_parameters() if k != "b1"}))
    (la, ga), (lb, gb) = results
    assert math.isclose(la, lb, rel_tol=1e-9)
    for k in ga:
        scale = float(gb[k].abs().max())
        assert scale > 0 and float((ga[k] - gb[k]).abs().max()) <= 1e-9 * scale, k


def test_loss_and_rmse_reproduce_gpumd_on_pbte(shared_data: Path) -> None:
    """GPUMD's PbTe example: loss.out reports RMSE_E 0.000414 eV/atom, RMSE_F 0.039897 eV/Å
    (one batch, mean residual removed) and L1 0.00510, L2 0.01029 at λ = sqrt(N_par/T)/1000."""
    from ase.io import read

    model = NEPModel.from_nep(shared_data / "PbTe" / "nep_gpumd_snes.txt")
    frames = read(shared_data / "PbTe" / "train.xyz", ":")
    store = StreamDataStore.from_atoms(frames, model.spec, torch.float64)
    sums = evaluate_sums(model, store, len(frames), CPU, "analytical")
    r = rmse({k: float(v) for k, v in sums.items()}, shifted_energy=True)
    assert abs(r["rmse_e"] - 0.000414) < 2e-6 and abs(r["rmse_f"] - 0.039897) < 2e-6
    lam = math.sqrt(model.spec.n_trainable / model.spec.n_types) / 1000
    l1, l2 = regularisation(model, LossWeights(lambda_1=lam, lambda_2=lam))
    assert abs(float(l1.detach()) - 0.00510) < 6e-6 and abs(float(l2.detach()) - 0.01029) < 6e-6


# ---- schedule and early stop --------------------------------------------------------------------


def test_schedules_and_early_stop() -> None:
    plateau = LRSchedule("plateau", 1e-2, 3e-3, decay=0.5, patience=2)
    lrs = [plateau.step(e, loss) for e, loss in enumerate([1.0, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5], 1)]
    assert lrs == [1e-2, 1e-2, 1e-2, 5e-3, 5e-3, 3e-3, 3e-3]  # decays after 2 bad epochs, floored
    step = LRSchedule("step", 1.0, 0.1, decay=0.5, step_epochs=2)
    assert [step.step(e, 0.0) for e in range(1, 9)] == [1.0, 0.5, 0.5, 0.25, 0.25, 0.125, 0.125, 0.1]
    stop = EarlyStop(patience=2)
    for epoch, loss in enumerate([3.0, 2.0, 1.99999, 2.5], 1):  # 1.99999: below the 1e-4 relative step
        stop.update(epoch, loss)
    assert stop.should_stop and stop.best_epoch == 2 and stop.best == 2.0


@pytest.mark.parametrize("bias_std", [1.0, 0.1])
def test_a_fresh_stage_starts_from_its_seed_and_bias_spread(data, stats, bias_std, tmp_path) -> None:
    """epochs 0 writes the starting model: the initialisation of --seed with --init-bias-std."""
    status = train_stage(cfg(epochs=0, seed=4, init_bias_std=bias_std), data, stats, tmp_path)
    start = initial_parameters(stats, SPEC, 4, bias_std)
    assert status["start"]["kind"] == "initialisation" and status["start"]["bias_std"] == bias_std
    assert status["start"]["sha256"] == parameters_sha256(start)
    assert cfg().init_bias_std == 1.0  # the default
    b0 = read_nep(tmp_path / "nep.txt").params["b0"]
    np.testing.assert_allclose(b0, start["b0"], rtol=1e-12)


# ---- stage 1 on plateau, stage 2 from its weights ------------------------------------------------


@pytest.fixture(scope="module")
def stages(frames, data, stats, tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("stages")
    # the validation loss of this tiny set stops improving quickly at this high rate
    s1 = train_stage(cfg(epochs=40, patience=2, lr=0.05, checkpoint_every=2), data, stats, root / "stage1")
    s2 = train_stage(
        cfg(stage=2, epochs=2, precision="float32"),
        split(frames, torch.float32),
        stats,
        root / "stage2",
        init=root / "stage1" / "checkpoint.pt",
    )
    return {"root": root, "status1": s1, "status2": s2}


def test_stage1_ends_on_plateau_and_stage2_starts_from_its_weights(stages) -> None:
    root, s1, s2 = stages["root"], stages["status1"], stages["status2"]
    assert s1["reason"] == "plateau" and s1["epoch"] < 40 and s1["monitor"] == "valid"
    # it stopped exactly `patience` (2) epochs after the last epoch that improved the monitored
    # fitness or the validation force RMSE (loss.out: valid E, F, V in columns 7-9)
    table = np.loadtxt(root / "stage1" / "loss.out", ndmin=2)
    force, fitness = table[:, 8], table[:, 7] + table[:, 8] + 0.1 * table[:, 9]
    assert len(table) == s1["epoch"]
    quiet, before = slice(-2, None), slice(None, -2)
    assert force[quiet].min() >= force[before].min() and fitness[quiet].min() >= fitness[before].min()
    assert force[-3] == force[:-2].min() or fitness[-3] == fitness[:-2].min()
    assert fitness[s1["best_epoch"] - 1] == fitness.min()
    assert json.loads((root / "stage1" / "status.json").read_text())["reason"] == "plateau"
    best = load_checkpoint(root / "stage1" / "checkpoint.pt")["best_model"]
    assert s2["start"]["sha256"] == parameters_sha256({k: v.numpy() for k, v in best.items()})
    assert s2["start"]["kind"] == "init" and s2["start"]["weights"] == "best"
    d = {k: stage_defaults(2)[k] for k in ("lambda_e", "lambda_f", "lambda_v", "lr")}
    assert (d["lambda_e"], d["lambda_f"], d["lambda_v"], d["lr"]) == (1.0, 1.0, 0.1, 1e-3)
    for key, value in d.items():
        assert s2["settings"][key] == value
    # stage 2 runs L-BFGS by default: the logged rate is its line search's first trial step
    assert s2["settings"]["optimizer"] == "lbfgs" and s2["last"]["lr"] == 1.0 and s2["reason"] == "max_epochs"
    assert s1["settings"]["lambda_f"] == 1.0 and s1["settings"]["lambda_e"] == 0.1


def test_slow_progress_ends_a_stage_where_the_replay_of_its_loss_out_says(data, stats, tmp_path: Path, caplog) -> None:
    """stop_window: the stage ends at the first epoch whose best validation fitness and best
    validation force RMSE (loss.out's columns) are both no more than stop_min_gain below their
    bests `window` epochs before, says so in status.json and the log, and a run stopped before that
    epoch and resumed ends at the same epoch with the same files (the rule's state is in the
    checkpoint)."""
    settings = dict(epochs=40, patience=100, lr=0.05, stop_window=3, stop_min_gain=0.05)
    with caplog.at_level("INFO", logger="nepcore"):
        status = train_stage(cfg(**settings), data, stats, tmp_path / "whole")
    table = np.loadtxt(tmp_path / "whole" / "loss.out", ndmin=2)
    best = np.minimum.accumulate(table[:, 7] + table[:, 8] + 0.1 * table[:, 9])
    best_force = np.minimum.accumulate(table[:, 8])
    expected = next(
        e for e in range(4, 41) if best[e - 1] >= 0.95 * best[e - 4] and best_force[e - 1] >= 0.95 * best_force[e - 4]
    )
    assert status["reason"] == "slow_progress" and status["epoch"] == expected == len(table) < 40
    gain = 1 - best[expected - 1] / best[expected - 4]
    force_gain = 1 - best_force[expected - 1] / best_force[expected - 4]
    assert (
        f"fell by {100 * gain:.2f} % and the best validation force RMSE by {100 * force_gain:.2f} % "
        "over the last 3 epochs, no more than 5 %"
    ) in caplog.text
    train_stage(cfg(**{**settings, "epochs": expected - 1}), data, stats, tmp_path / "resumed")
    resumed = train_stage(cfg(**settings), data, stats, tmp_path / "resumed")
    assert resumed["reason"] == "slow_progress" and resumed["epoch"] == expected
    for name in ("nep.txt", "nep_best.txt", "loss.out"):
        assert (tmp_path / "resumed" / name).read_bytes() == (tmp_path / "whole" / name).read_bytes(), name


def test_epoch_snapshots_are_the_models_each_epoch_validated(stages, data, stats, tmp_path: Path) -> None:
    """--snapshot-models epoch writes the model each epoch validated (Adam: its weight average),
    not the best so far: scored on the validation split, every snapshot gives that epoch's own
    validation RMSEs (what benchmarks/replay_monitors.py relies on), here for epochs that are all
    worse than the kept starting model."""
    out, init = tmp_path / "s2", stages["root"] / "stage1" / "checkpoint.pt"
    # a high rate on energies only: every epoch gives up forces, so the best stays epoch 0
    settings = dict(stage=2, optimizer="adam", epochs=3, lr=0.2, lambda_f=0.0, lambda_v=0.0, ema=0.5)
    status = train_stage(cfg(**settings, snapshot_every=1, snapshot_models="epoch"), data, stats, out, init=init)
    assert status["best_epoch"] == 0
    history = load_checkpoint(out / "checkpoint.pt")["history"]
    index = (out / "snapshots" / "index.tsv").read_text().splitlines()
    assert [row.split("\t")[0] for row in index] == ["1", "2", "3"]
    for h in history:
        model = read_nep(out / "snapshots" / f"epoch{h['epoch']:06d}.txt")
        sums = evaluate_sums(NEPModel(model.spec, model.params), data.valid, 4, CPU, "analytical")
        scored = rmse({k: float(v) for k, v in sums.items()}, shifted_energy=False)
        for key in ("e", "f", "v"):
            assert scored[f"rmse_{key}"] == pytest.approx(h[f"valid_rmse_{key}"], rel=1e-10, abs=0)
    # the default writes the best-so-far model: here the starting one at every epoch
    train_stage(cfg(**settings, snapshot_every=1), data, stats, tmp_path / "best", init=init)
    assert (tmp_path / "best" / "snapshots" / "epoch000003.txt").read_text() == (out / "nep_best.txt").read_text()
    assert (out / "snapshots" / "epoch000003.txt").read_text() != (out / "nep_best.txt").read_text()


def test_every_nep_txt_reproduces_in_calorine(stages, frames) -> None:
    root = stages["root"]
    for stage in ("stage1", "stage2"):
        state = load_checkpoint(root / stage / "checkpoint.pt")
        for name, key in (("nep.txt", "model"), ("nep_best.txt", "best_model")):
            path = root / stage / name
            params = {k: v.numpy() for k, v in state[key].items()}
            if key == "model" and state.get("average") is not None:  # nep.txt is the weight average
                params.update({k: v.double().numpy() for k, v in state["average"]["shadow"].items()})
            model = NEPModel(SPEC, params)  # float64 copy
            header = path.read_text().splitlines()[1].split()
            assert header[-2:] == [str(n) for n in state["max_neighbors"]]  # the data's true counts
            for atoms in frames[16:20]:
                ref, got = calorine_reference(path, atoms), ours(model, atoms)
                assert abs(got["energy"][0] - ref["energy"]) <= 1e-9 * len(atoms), (stage, name)
                np.testing.assert_allclose(got["forces"], ref["forces"], rtol=0, atol=1e-9)


def test_resume_refuses_a_checkpoint_with_other_settings(stages, data, stats) -> None:
    out = stages["root"] / "stage1"
    with pytest.raises(CheckpointError, match=r"lambda_f: 1\.0 in the checkpoint, 0\.5 now"):
        train_stage(cfg(epochs=40, patience=2, lr=0.05, lambda_f=0.5), data, stats, out)
    other = compute_q_scaler(SPEC.replace(neurons=9), data.train.batches(8))
    with pytest.raises(CheckpointError, match=r"architecture neurons: 8 in the checkpoint, 9 now"):
        train_stage(cfg(epochs=40, patience=2, lr=0.05), data, other, out)
    # the same settings with a larger budget resume the finished stage without training
    status = train_stage(cfg(epochs=40, patience=2, lr=0.05, checkpoint_every=2), data, stats, out)
    assert status["epoch"] == stages["status1"]["epoch"] and status["reason"] == "plateau"


def test_bad_starting_points_are_refused(stages, data, stats) -> None:
    with pytest.raises(TrainingError, match="either --init or --finetune-from"):
        start_parameters(cfg(), stats, init="a.pt", finetune="b.txt")
    other = compute_q_scaler(SPEC.replace(n_max_radial=2), data.train.batches(8))
    with pytest.raises(ValueError, match="n_max_radial: 3 vs 2"):
        start_parameters(cfg(stage=2), other, init=stages["root"] / "stage1" / "checkpoint.pt")


# ---- SIGKILL mid-stage, resume, same bits -----------------------------------------------------------


@pytest.fixture(scope="module")
def dataset(frames, stats, tmp_path_factory) -> dict[str, Path]:
    from ase.io import write

    from nepcore.data.convert import convert

    folder = tmp_path_factory.mktemp("cli")
    write(folder / "demo.xyz", frames[:16], format="extxyz")
    convert([str(folder / "demo.xyz")], folder / "structures.h5", fractions=(0.75, 0.25, 0.0), progress=False)
    write_qscaler(folder / "qscaler.json", stats)
    return {"h5": folder / "structures.h5", "qscaler": folder / "qscaler.json"}


def train_command(dataset: dict[str, Path], out: Path) -> list[str]:
    """Stage 1 with the default recipe (float32, weight averaging, fitness monitor, plateau) on the CPU."""
    return [sys.executable, "-m", "nepcore", "train", "--stage", "1", "--data", str(dataset["h5"]),
            "--qscaler", str(dataset["qscaler"]), "--out-dir", str(out), "--epochs", "5", "--device", "cpu",
            "--checkpoint-every", "1", "--seed", "3", "--no-progress"]  # fmt: skip


@pytest.mark.slow  # subprocess
def test_sigkill_then_resume_is_bit_identical(dataset, tmp_path: Path) -> None:
    # Two torch threads: CPU training must be bit-identical at any thread count (before the
    # deterministic kernels, float32 runs on two threads differed in the last digit run to run).
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1]), "OMP_NUM_THREADS": "2"}
    ref = subprocess.run(train_command(dataset, tmp_path / "ref"), env=env, capture_output=True, text=True)
    assert ref.returncode == 0, ref.stderr

    out = tmp_path / "killed"
    proc = subprocess.Popen(train_command(dataset, out), env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    while not (out / "resume.pt").exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.005)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert proc.returncode == -signal.SIGKILL
    assert not (out / "checkpoint.pt").exists()  # the final checkpoint appears only at the end
    killed_at = load_checkpoint(out / "resume.pt")
    assert not killed_at["finished"] and 1 <= killed_at["epoch"] < 5

    resumed = subprocess.run(train_command(dataset, out), env=env, capture_output=True, text=True)
    assert resumed.returncode == 0, resumed.stderr
    assert f"after epoch {killed_at['epoch']}" in resumed.stderr
    assert not (out / "resume.pt").exists()  # removed once the stage ends
    for name in ("nep.txt", "nep_best.txt", "loss.out"):
        assert (out / name).read_bytes() == (tmp_path / "ref" / name).read_bytes(), name
    assert not [p for p in out.iterdir() if p.name.startswith(".")]  # no temporary files left


def test_cli_reports_bad_input(dataset, tmp_path: Path, capsys) -> None:
    from nepcore.cli import main as cli_main

    def train(qscaler: Path, *more: str) -> int:
        return cli_main(["train", "--stage", "1", "--data", str(dataset["h5"]), "--qscaler", str(qscaler),
                         "--out-dir", str(tmp_path / "x"), *more])  # fmt: skip

    assert train(dataset["qscaler"], "--init", "a.pt", "--finetune-from", "b.txt") == 1
    assert "either --init or --finetune-from" in capsys.readouterr().err
    assert train(tmp_path / "missing.json") == 1
    assert "missing.json" in capsys.readouterr().err
    assert train(dataset["qscaler"], "--finetune-from", str(tmp_path / "none.txt")) == 1
    assert "none.txt" in capsys.readouterr().err


# ---- fine-tuning a published potential on a subset of its elements --------------------------------


def test_finetune_unep_restricted_to_pd_cu_ni(shared_data: Path, tmp_path: Path) -> None:
    from ase.io import read

    from nepcore.training.start import restrict_elements

    unep_path = shared_data / "potentials" / "UNEP-v1.txt"
    unep = read_nep(unep_path)
    spec, _ = restrict_elements(unep.spec, unep.params, ("Pd", "Cu", "Ni"))
    frames = read(shared_data / "teacher-labelled" / "PdCuNi_small.xyz", ":8")
    data = TrainData(
        StreamDataStore.from_atoms(frames[:6], spec, torch.float64),
        StreamDataStore.from_atoms(frames[6:], spec, torch.float64),
    )
    stats = compute_q_scaler(spec, data.train.batches(6), mode="gpumd")

    keep = train_stage(cfg(epochs=0), data, stats, tmp_path / "keep", finetune=unep_path)
    kept = read_nep(tmp_path / "keep" / "nep.txt")
    assert kept.spec.elements == ("Pd", "Cu", "Ni") and keep["start"]["q_scaler"] == "keep"
    assert np.array_equal(kept.params["q_scaler"], unep.params["q_scaler"])
    for atoms in frames[6:]:  # the restricted model is the published one on these elements
        a, b = calorine_reference(unep_path, atoms), calorine_reference(tmp_path / "keep" / "nep.txt", atoms)
        assert abs(a["energy"] - b["energy"]) < 1e-9 * len(atoms)
        np.testing.assert_allclose(a["forces"], b["forces"], rtol=0, atol=1e-9)
    r = train_rmse(kept.params, data, kept.spec)  # the teacher labelled this data: only rounding left
    assert r["rmse_e"] < 1e-5 and r["rmse_f"] < 1e-5

    recompute = train_stage(
        cfg(epochs=1, finetune_qscaler="recompute"), data, stats, tmp_path / "recompute", finetune=unep_path
    )
    assert recompute["start"]["q_scaler"] == "recompute" and recompute["reason"] == "max_epochs"
    new = read_nep(tmp_path / "recompute" / "nep.txt")
    assert np.array_equal(new.params["q_scaler"], stats.q_scaler)
    assert math.isfinite(recompute["last"]["train_loss"])


# ---- multi-process (DDP) training through torchrun ---------------------------------------------


@pytest.mark.slow  # subprocess
def test_torchrun_two_processes_train_one_model(dataset, tmp_path: Path) -> None:
    """Two CPU processes (gloo): each takes every other batch, rank 0 writes, training learns."""
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1]), "OMP_NUM_THREADS": "1"}
    out = tmp_path / "ddp"
    command = train_command(dataset, out) + ["--batch-size", "4", "--lr", "0.02", "--precision", "float64"]
    launcher = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2", "-m"]
    done = subprocess.run(launcher + command[2:], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    saved = load_checkpoint(out / "checkpoint.pt")
    assert saved["finished"] and saved["config"]["processes"] == 2
    history = saved["history"]
    assert history[-1]["train_loss"] < 0.5 * history[0]["train_loss"]
    assert not (out / "resume.pt").exists()
    assert json.loads((out / "status.json").read_text())["epoch"] == 5


@pytest.mark.slow  # subprocess
@pytest.mark.heavy
def test_torchrun_resume_is_bit_identical(dataset, tmp_path: Path) -> None:
    """A two-process stage resumed from its checkpoint ends with the same files as one run
    through: rank 0's checkpoint holds the whole state. Here the processes take two and one
    batches per epoch, so the weight average (each process updates it after its own steps) and
    its energy-residual sums differ between them unless every epoch ends by handing rank 0's
    average to all and pooling the sums."""
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1]), "OMP_NUM_THREADS": "1"}
    launcher = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2", "-m"]

    def run(out: Path, epochs: int) -> None:
        command = train_command(dataset, out) + ["--batch-size", "4", "--lr", "0.02", "--epochs", str(epochs)]
        done = subprocess.run(launcher + command[2:], env=env, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr[-3000:]

    run(tmp_path / "ref", 5)
    run(tmp_path / "resumed", 3)
    run(tmp_path / "resumed", 5)  # continues the finished 3-epoch stage (a larger budget)
    assert load_checkpoint(tmp_path / "resumed" / "checkpoint.pt")["history"][3]["epoch"] == 4
    for name in ("nep.txt", "nep_best.txt", "loss.out"):
        assert (tmp_path / "resumed" / name).read_bytes() == (tmp_path / "ref" / name).read_bytes(), name


@pytest.mark.parametrize(
    ("setting", "before", "now"),
    # the value every stage had until the setting existed
    [("init_bias_std", 0.1, 1.0), ("adam_beta2", 0.999, 0.95), ("adam_momentum", "plain", "nesterov")],
)
def test_a_checkpoint_from_before_a_setting_resumes_as_it_was_trained(
    data, stats, tmp_path: Path, setting: str, before: float, now: float
) -> None:
    """A checkpoint written before a setting existed resumes under the value it was trained
    with and is refused (naming the setting) under the new default."""
    train_stage(cfg(epochs=2, **{setting: before}), data, stats, tmp_path)
    path = tmp_path / "checkpoint.pt"
    saved = torch.load(path, weights_only=True)
    del saved["config"][setting]  # as the previous version wrote it
    torch.save(saved, path)
    status = train_stage(cfg(epochs=3, **{setting: before}), data, stats, tmp_path)  # resumed, not refused
    assert status["epoch"] == 3 and len(np.loadtxt(tmp_path / "loss.out")) == 3
    assert getattr(cfg(), setting) == now  # the default
    with pytest.raises(CheckpointError, match=f"{setting}: {before!r} in the checkpoint, {now!r} now"):
        train_stage(cfg(epochs=4), data, stats, tmp_path)
