"""The default recipe's parts (issue 10): warm-up and cosine schedules, weight averaging, the
final-model choice and its force-regression warning, and GPUMD's force_delta / type_weight /
per-frame weights in the loss (early stop: tests/test_training_early_stop.py)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch
from helpers.oracle import random_params
from helpers.reference_batch import collate, frame_from_atoms
from helpers.tiny_training import tiny_splits

from nepcore.data.demo import make_demo_dataset
from nepcore.data.store import StreamDataStore
from nepcore.evaluation.metrics import force_regression
from nepcore.io.nep_txt import read_nep
from nepcore.model.nep_model import NEPModel
from nepcore.spec import ModelSpec
from nepcore.training.averaging import WeightAverage, averaged_weights, trainable_tensors
from nepcore.training.compiled_step import TrainingLoss
from nepcore.training.config import StageConfig, StageConfigError
from nepcore.training.distributed import Distributed
from nepcore.training.epoch import evaluate_sums, run_epoch, train_step
from nepcore.training.loss import LossWeights, data_loss, error_sums
from nepcore.training.optimizers import NADAM_MOMENTUM_DECAY, parameter_groups, stage_optimizer
from nepcore.training.qscaler import compute_q_scaler, initial_parameters
from nepcore.training.schedule import LRSchedule
from nepcore.training.stage import TrainData, train_stage

SPEC = ModelSpec(("Cu", "Pd", "Ni"), 4.5, 3.5, 3, 3, 4, 4, 4, neurons=8)


# ---- schedules -----------------------------------------------------------------------------------


def test_warmup_ramps_linearly_then_holds_the_plateau_level() -> None:
    s = LRSchedule("plateau", 0.01, 1e-5, warmup_steps=4)
    assert [s.at(k) for k in range(6)] == pytest.approx([0.0025, 0.005, 0.0075, 0.01, 0.01, 0.01])


def test_cosine_runs_from_lr_to_lr_min_over_the_steps_after_warmup() -> None:
    s = LRSchedule("cosine", 0.01, 0.001, warmup_steps=10, total_steps=110)
    assert s.at(0) == pytest.approx(0.001)  # warm-up: 1/10 of the first cosine value (lr)
    assert s.at(10) == pytest.approx(0.01)
    assert s.at(60) == pytest.approx(0.001 + 0.009 * 0.5)  # half-way
    assert s.at(110) == pytest.approx(0.001) and s.at(500) == pytest.approx(0.001)  # floor after the end
    rates = [s.at(k) for k in range(10, 111)]
    assert all(a >= b for a, b in zip(rates, rates[1:]))  # monotone decay
    assert s.step(5, 1.0) == s.lr  # the per-epoch update does not touch a cosine schedule


@pytest.mark.parametrize("beta2", [None, 0.999, 0.9])
def test_adam_takes_its_second_moment_decay_from_the_settings(beta2: float | None) -> None:
    """Stage 1's and stage 2's Adam run beta2 0.95 unless adam_beta2 says otherwise (0.999:
    torch's default, the models trained before)."""
    for stage in (1, 2):
        cfg = StageConfig(stage=stage, optimizer="adam", **({} if beta2 is None else {"adam_beta2": beta2}))
        loss = TrainingLoss(NEPModel(SPEC), cfg.loss_weights(), "analytical")
        optimizer, objective = stage_optimizer(cfg, loss, None, torch.device("cpu"), Distributed(), compiled=False)
        assert objective is None and isinstance(optimizer, (torch.optim.Adam, torch.optim.NAdam))
        assert {g["betas"] for g in optimizer.param_groups} == {(0.9, 0.95 if beta2 is None else beta2)}


@pytest.mark.parametrize(("stage", "momentum"), [(1, None), (2, None), (1, "plain"), (2, "nesterov")])
def test_adam_momentum_picks_nadam_or_adam(stage: int, momentum: str | None) -> None:
    """Stage 1 steps with NAdam (Nesterov momentum, warmed up at NADAM_MOMENTUM_DECAY) and stage 2
    with Adam unless adam_momentum says otherwise; amsgrad has no Nesterov form."""
    cfg = StageConfig(stage=stage, optimizer="adam", **({} if momentum is None else {"adam_momentum": momentum}))
    expected = momentum or ("nesterov" if stage == 1 else "plain")
    assert cfg.adam_momentum == expected
    loss = TrainingLoss(NEPModel(SPEC), cfg.loss_weights(), "analytical")
    optimizer, _ = stage_optimizer(cfg, loss, None, torch.device("cpu"), Distributed(), compiled=False)
    if expected == "nesterov":
        assert type(optimizer) is torch.optim.NAdam
        assert {g["momentum_decay"] for g in optimizer.param_groups} == {NADAM_MOMENTUM_DECAY}
    else:
        assert type(optimizer) is torch.optim.Adam
    with pytest.raises(StageConfigError, match="amsgrad needs adam_momentum plain"):
        StageConfig(stage=stage, amsgrad=True, adam_momentum="nesterov")
    assert StageConfig(stage=stage, amsgrad=True, adam_momentum="plain").amsgrad


def test_plateau_decays_only_after_patience_epochs_without_improvement() -> None:
    s = LRSchedule("plateau", 0.01, 1e-4, decay=0.7, patience=3)
    losses = [1.0, 0.9, 0.95, 0.95, 0.95, 0.8, 0.85, 0.85, 0.85]
    rates = [s.step(e, v) for e, v in enumerate(losses, 1)]
    assert rates == pytest.approx([0.01] * 4 + [0.007] * 4 + [0.0049])


def test_plateau_waits_while_the_validation_force_still_falls() -> None:
    """A noisy fitness that stalls while the forces fall does not decay the rate; once the
    forces stall too, `patience` epochs decay it, and without force labels the fitness alone
    decides, as before."""
    fitness = [1.0, 0.8, 0.9, 0.9, 0.9, 0.9, 0.9, 0.9, 0.9]
    forces = [0.50, 0.45, 0.44, 0.43, 0.42, 0.42, 0.42, 0.42, 0.42]
    s = LRSchedule("plateau", 0.01, 1e-4, decay=0.7, patience=3)
    rates = [s.step(e, v, {"force": f}) for e, (v, f) in enumerate(zip(fitness, forces), 1)]
    assert rates == pytest.approx([0.01] * 7 + [0.007] * 2)  # forces last improved at epoch 5
    assert s.best == 0.8 and s.best_force == 0.42
    for missing in (None, math.nan):
        alone = LRSchedule("plateau", 0.01, 1e-4, decay=0.7, patience=3)
        rates = [alone.step(e, v, {"force": missing}) for e, v in enumerate(fitness, 1)]
        assert rates == pytest.approx([0.01] * 4 + [0.007] * 3 + [0.0049] * 2)


def test_schedule_from_a_checkpoint_without_best_force_resumes() -> None:
    """Checkpoints written before the plateau counted forces (energies, virials) lack their
    best values: they start at inf."""
    a = LRSchedule("plateau", 0.01, 1e-5, decay=0.7, patience=2)
    a.step(1, 1.0, {"force": 0.5, "energy": 0.1, "virial": 0.2})
    state = a.state_dict()
    for key in ("best_force", "best_energy", "best_virial"):
        del state[key]
    b = LRSchedule("plateau", 0.01, 1e-5, decay=0.7, patience=2)
    b.load_state_dict(state)
    assert b.best == 1.0 and b.best_force == b.best_energy == b.best_virial == math.inf


def test_schedule_state_round_trips() -> None:
    a = LRSchedule("plateau", 0.01, 1e-5, decay=0.7, patience=2, warmup_steps=3)
    for e, v in enumerate([1.0, 1.1, 1.2, 1.3], 1):
        a.step(e, v)
    b = LRSchedule("plateau", 0.01, 1e-5, decay=0.7, patience=2, warmup_steps=3)
    b.load_state_dict(a.state_dict())
    assert b == a and b.at(7) == a.at(7)


def test_window_decays_when_no_watched_metric_gained_min_gain_over_it() -> None:
    """With lr_window 5 and lr_min_gain 3 %: a loss falling 0.5 % an epoch gains 2.5 % over five
    epochs and decays at epochs 6 and 12 (the window restarts after a decay); 1 % an epoch (4.9 %)
    never decays; one watched RMSE that still gains enough keeps the rate; window 0 is the plain
    plateau rule, which a steady fall never trips."""

    def rates(per_epoch: float, force_per_epoch: float | None = None, window: int = 5) -> list[float]:
        s = LRSchedule("plateau", 0.01, 1e-5, decay=0.7, patience=100, window=window, min_gain=0.03)
        out = []
        for e in range(1, 13):
            errors = {} if force_per_epoch is None else {"force": (1 - force_per_epoch) ** e}
            out.append(s.step(e, (1 - per_epoch) ** e, errors))
        return out

    assert rates(0.005) == pytest.approx([0.01] * 5 + [0.007] * 6 + [0.0049])
    assert rates(0.01) == pytest.approx([0.01] * 12)
    assert rates(0.0, force_per_epoch=0.01) == pytest.approx([0.01] * 12)
    assert rates(0.0, force_per_epoch=0.005) == pytest.approx([0.01] * 5 + [0.007] * 6 + [0.0049])
    assert rates(0.005, window=0) == pytest.approx([0.01] * 12)


def test_window_state_resumes_mid_window() -> None:
    """A run resumed from a checkpoint taken inside a window decays at the same epoch as one
    that never stopped."""
    losses = [0.995**e for e in range(1, 13)]
    whole = LRSchedule("plateau", 0.01, 1e-5, decay=0.7, patience=100, window=5, min_gain=0.03)
    expected = [whole.step(e, v) for e, v in enumerate(losses, 1)]
    first = LRSchedule("plateau", 0.01, 1e-5, decay=0.7, patience=100, window=5, min_gain=0.03)
    got = [first.step(e, v) for e, v in enumerate(losses[:8], 1)]
    resumed = LRSchedule("plateau", 0.01, 1e-5, decay=0.7, patience=100, window=5, min_gain=0.03)
    resumed.load_state_dict(first.state_dict())
    got += [resumed.step(e, v) for e, v in enumerate(losses[8:], 9)]
    assert got == expected and resumed == whole


# ---- weight averaging -----------------------------------------------------------------------------


def test_weight_average_is_the_warmed_up_ema_of_the_steps() -> None:
    values = [torch.tensor([float(v)]) for v in (1.0, 5.0, -2.0, 4.0, 0.5)]
    param = {"w": values[0].clone()}
    avg = WeightAverage(param, decay=0.6)
    expected = 1.0
    for n, v in enumerate(values[1:], 1):
        param["w"].copy_(v)
        avg.update(param)
        d = min(0.6, (1 + n) / (10 + n))
        expected = d * expected + (1 - d) * float(v)
        assert float(avg.shadow["w"]) == pytest.approx(expected)
    with avg.swapped_into(param):
        assert float(param["w"]) == pytest.approx(expected)
    assert float(param["w"]) == 0.5  # restored
    restored = WeightAverage({"w": torch.zeros(1)}, 0.6)
    restored.load_state_dict(avg.state_dict())
    assert restored.updates == 4 and torch.equal(restored.shadow["w"], avg.shadow["w"])


def test_averaged_b1_is_the_mean_residual_of_the_averaged_steps() -> None:
    """The averaged model's b1 is the raw b1 plus Σ a_t e_res_t / Σ a_t e_wsum_t, a_t being the
    weights of the steps in the average; a later move of the raw b1 is taken out of the sums."""
    param = {"w": torch.zeros(1), "b1": torch.zeros(())}
    avg = WeightAverage(param, decay=0.6)
    steps = [(0.3, 2.0), (-0.1, 1.0), (0.0, 0.0), (0.8, 4.0)]  # (Σ w² d, Σ w²): a step without energies too
    res = wsum = 0.0
    for n, (r, w) in enumerate(steps, 1):
        avg.update(param, torch.tensor([r, w]))
        a = 1 - min(0.6, (1 + n) / (10 + n))
        res, wsum = res + a * (r - res), wsum + a * (w - wsum)
    assert avg.residual.tolist() == pytest.approx([res, wsum])
    raw_b1 = torch.tensor(1.5)
    avg.set_offset("b1", raw_b1, avg.residual)
    assert float(avg.shadow["b1"]) == pytest.approx(1.5 + res / wsum)
    avg.rebase_residual(torch.tensor(0.25))  # the raw b1 moves by 0.25: residuals shrink by as much
    assert float(avg.residual[0] / avg.residual[1]) == pytest.approx(res / wsum - 0.25)
    restored = WeightAverage({"w": torch.zeros(1), "b1": torch.zeros(())}, 0.6)
    restored.load_state_dict(avg.state_dict())
    assert torch.equal(restored.residual, avg.residual)
    for none in (None, torch.zeros(2)):  # no residuals yet, or steps without energies: the raw b1
        avg.set_offset("b1", raw_b1, none)
        assert float(avg.shadow["b1"]) == 1.5


def test_averaged_model_is_nearer_its_energy_offset_than_the_epoch_mean() -> None:
    """The networks' mean energy drifts during an epoch (the loss removes each batch's mean
    residual), so b1 from the whole epoch's mean residual leaves the averaged weights off by the
    drift; from the averaged steps' residuals it is nearer (40 frames, 20 steps per epoch
    averaged over ~10, lr 0.01, 10 epochs: RMS 16 against 86 meV/atom)."""
    train = StreamDataStore.from_atoms(make_demo_dataset(seed=2, n_frames=40), SPEC, torch.float64)
    data, stats = TrainData(train, None), compute_q_scaler(SPEC, train.batches(8), mode="gpumd")
    cfg = StageConfig(stage=1, epochs=10, lr=0.01, batch_size=2, precision="float64", device="cpu",
                      progress=False, lambda_e=0.1)  # fmt: skip
    torch.manual_seed(0)
    model = NEPModel(SPEC, initial_parameters(stats, SPEC, 0))
    optimizer = torch.optim.Adam(parameter_groups(model, cfg.lr, cfg.lr_c_factor), lr=cfg.lr)
    loss = TrainingLoss(model, cfg.loss_weights(), "analytical")
    avg = WeightAverage(trainable_tensors(model), 0.9)
    ours, epoch_mean = [], []
    for epoch in range(1, cfg.epochs + 1):
        b1_before = model.b1.detach().clone()
        sums = run_epoch(loss, data.train, cfg, optimizer, epoch, torch.device("cpu"), average=avg)
        with averaged_weights(model, avg):
            s = evaluate_sums(model, data.train, 8, torch.device("cpu"), "analytical")
        residual = float(s["e_res"] / s["e_wsum"])  # the averaged model's mean residual (eV/atom)
        ours.append(residual)
        # U = w1·h − b1: the epoch-mean b1 would leave the residual off by the difference of b1s
        epoch_mean.append(residual + float(avg.shadow["b1"] - (b1_before + sums["e_res"] / sums["e_wsum"])))
    rms = lambda values: float(np.sqrt(np.mean(np.square(values))))
    assert rms(ours) < 0.5 * rms(epoch_mean), (ours, epoch_mean)


def test_weight_average_smooths_noise_around_a_target() -> None:
    """SGD-like noise around a fixed point: the average is closer to it than the last iterate."""
    rng = np.random.default_rng(1)
    target = torch.zeros(50, dtype=torch.float64)
    param = {"w": target + torch.as_tensor(rng.normal(size=50))}
    avg = WeightAverage(param, decay=0.95)
    for _ in range(400):
        param["w"].copy_(target + torch.as_tensor(rng.normal(size=50)))
        avg.update(param)
    assert float(avg.shadow["w"].norm()) < 0.3 * float(param["w"].norm())


# ---- final model ------------------------------------------------------------------------------------


def _status(tmp_path: Path, valid_f: float) -> Path:
    path = tmp_path / "status.json"
    path.write_text(json.dumps({"best": {"valid_rmse_f": valid_f}}))
    return path


def test_force_regression_warns_above_five_percent(tmp_path: Path) -> None:
    metrics = {"splits": {"valid": {"force": {"rmse": 0.106}}}}
    warning = force_regression(metrics, _status(tmp_path, 0.100))
    assert warning is not None and "6 %" in warning and "106.0 meV/Å" in warning and "100.0 meV/Å" in warning
    assert force_regression({"splits": {"valid": {"force": {"rmse": 0.104}}}}, _status(tmp_path, 0.100)) is None
    assert force_regression({"splits": {"train": {"force": {"rmse": 0.2}}}}, _status(tmp_path, 0.1)) is None
    assert force_regression(metrics, tmp_path / "missing.json") is None


@pytest.fixture(scope="module")
def tiny():
    return tiny_splits(seed=2, n_frames=16, n_train=12, spec=SPEC)


def test_stage2_keeps_its_starting_model_when_it_only_gets_worse(tiny, tmp_path: Path) -> None:
    """A stage 2 whose every epoch is worse on the monitored fitness exports stage 1's model."""
    data, stats = tiny
    common = dict(batch_size=4, precision="float64", device="cpu", progress=False, monitor="fitness", ema=0.0)
    train_stage(StageConfig(stage=1, epochs=6, lr=0.02, **common), data, stats, tmp_path / "s1")
    # a huge learning rate on energies only: every stage-2 epoch ruins the forces
    status = train_stage(
        StageConfig(stage=2, optimizer="adam", epochs=3, lr=0.5, lambda_e=1.0, lambda_f=0.0, lambda_v=0.0, **common),
        data,
        stats,
        tmp_path / "s2",
        init=tmp_path / "s1" / "checkpoint.pt",
    )
    assert status["best_epoch"] == 0 and status["best"]["epoch"] == 0
    start = read_nep(tmp_path / "s1" / "nep_best.txt").params
    kept = read_nep(tmp_path / "s2" / "nep_best.txt").params
    assert all(np.allclose(kept[k], start[k], rtol=0, atol=1e-12) for k in start)


@pytest.mark.parametrize(("c_factor", "momentum"), [(1.0, "plain"), (3.0, "plain"), (3.0, "nesterov")])
def test_descriptor_coefficients_step_at_lr_c_factor_times_the_rate(
    tiny, tmp_path: Path, c_factor: float, momentum: str
) -> None:
    """Adam's first step moves a parameter with a non-zero gradient by its group's rate (m/sqrt(v)
    = sign of the gradient), so one step shows each group's rate: the networks' lr, the
    coefficients' lr_c_factor * lr (to within Adam's eps against the largest gradient). NAdam's
    first step is the same sign step times one factor of its momentum schedule (the rate times
    (1 - mu1) / (1 - mu1) + mu2 (1 - beta1) / (1 - mu1 mu2)), the same for every group."""
    data, stats = tiny
    lr = 1e-3
    cfg = StageConfig(stage=1, epochs=1, lr=lr, lr_c_factor=c_factor, batch_size=12, precision="float64",
                      device="cpu", progress=False, ema=0.0, clip=0.0, adam_momentum=momentum)  # fmt: skip
    train_stage(cfg, data, stats, tmp_path)
    start = initial_parameters(stats, SPEC, cfg.seed)
    after = torch.load(tmp_path / "checkpoint.pt", weights_only=False)["model"]
    moved = {k: np.abs(after[k].numpy() - start[k]).max() for k in ("W0", "b0", "w1", "c_radial", "c_angular")}
    step = lr
    if momentum == "nesterov":
        mu1, mu2 = (0.9 * (1 - 0.5 * 0.96 ** (t * NADAM_MOMENTUM_DECAY)) for t in (1, 2))
        step = lr * (1 + mu2 * 0.1 / (1 - mu1 * mu2))
    assert moved["W0"] == pytest.approx(step, rel=1e-5) and moved["w1"] == pytest.approx(step, rel=1e-5)
    assert moved["b0"] == pytest.approx(step, rel=1e-5)
    assert moved["c_radial"] == pytest.approx(c_factor * step, rel=1e-5)
    assert moved["c_angular"] == pytest.approx(c_factor * step, rel=1e-5)


def test_clipping_bounds_the_gradient_norm_of_every_group(tiny) -> None:
    """The clip threshold applies to the norm over all trained parameters, coefficients included."""
    data, _ = tiny
    model = NEPModel(SPEC, random_params(SPEC, seed=1))
    optimizer = torch.optim.Adam(parameter_groups(model, 0.0, 2.0), lr=0.0)
    loss = TrainingLoss(model, LossWeights(), "analytical")
    train_step(loss, next(iter(data.train.batches(12))), optimizer, clip=1e-6)
    grads = [p.grad for group in optimizer.param_groups for p in group["params"]]
    assert any(g.abs().max() > 0 for g in grads[-2:])  # the coefficients have gradients
    assert float(torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in grads]))) == (
        pytest.approx(1e-6, rel=1e-4)
    )


def test_ema_stage_exports_the_average_and_snapshots_the_best(tiny, tmp_path: Path) -> None:
    data, stats = tiny
    cfg = StageConfig(
        stage=1,
        epochs=4,
        lr=0.02,
        batch_size=4,
        precision="float64",
        device="cpu",
        progress=False,
        ema=0.9,
        snapshot_every=2,
    )
    status = train_stage(cfg, data, stats, tmp_path)
    index = (tmp_path / "snapshots" / "index.tsv").read_text().split("\n")
    assert [row.split("\t")[0] for row in index if row] == ["2", "4"]
    assert (tmp_path / "snapshots" / "epoch000004.txt").read_text() == (
        tmp_path / "nep_best.txt"
    ).read_text() or status["best_epoch"] < 4
    ckpt = torch.load(tmp_path / "checkpoint.pt", weights_only=False)
    exported = read_nep(tmp_path / "nep.txt").params
    assert np.allclose(exported["W0"].ravel(), ckpt["average"]["shadow"]["W0"].numpy().ravel(), atol=1e-12)
    assert not np.allclose(exported["W0"].ravel(), ckpt["model"]["W0"].numpy().ravel(), atol=1e-6)


# ---- GPUMD loss options -------------------------------------------------------------------------


def test_force_delta_type_weight_and_frame_weight_enter_the_force_term(tiny) -> None:
    frames = make_demo_dataset(seed=3, n_frames=2)
    fs = [frame_from_atoms(a, SPEC) for a in frames]
    fs[0].weight, fs[1].weight = 1.0, 3.0
    batch = collate(fs)
    model = NEPModel(SPEC, random_params(SPEC, 5))
    out = {k: v.detach() for k, v in model(batch).items()}
    delta, tw = 0.4, (1.0, 2.0, 0.5)
    weights = LossWeights(0.0, 1.0, 0.0, force_delta=delta, type_weight=tw)
    s = error_sums(out, batch, weights)
    # by hand, atom by atom
    dF = (out["forces"] - batch.forces).numpy()
    ref = batch.forces.numpy()
    types, frame = batch.types.numpy(), batch.atom_frame.numpy()
    w_frame = np.array([1.0, 3.0])
    expected = sum(
        w_frame[frame[i]] ** 2 * tw[types[i]] ** 2 * delta / (delta + np.linalg.norm(ref[i])) * (dF[i] ** 2).sum()
        for i in range(len(types))
    )
    assert float(s["f_w"]) == pytest.approx(expected, rel=1e-12)
    assert float(s["f_sq"]) == pytest.approx((dF**2).sum(), rel=1e-12)  # the RMSE stays unweighted
    n3 = 3 * len(types)
    assert float(data_loss(s, weights)) == pytest.approx(expected / n3, rel=1e-12)
    rmse_form = LossWeights(0.0, 2.0, 0.0, form="rmse", force_delta=delta, type_weight=tw)
    assert float(data_loss(error_sums(out, batch, rmse_form), rmse_form)) == pytest.approx(
        2.0 * math.sqrt(expected / n3), rel=1e-12
    )
    # neither option: the plain frame-weighted sum
    plain = error_sums(out, batch, LossWeights())
    assert float(plain["f_w"]) == pytest.approx(
        sum(w_frame[frame[i]] ** 2 * (dF[i] ** 2).sum() for i in range(len(types))), rel=1e-12
    )


def test_type_weight_length_and_sign_are_checked(tiny, tmp_path: Path) -> None:
    data, stats = tiny
    with pytest.raises(ValueError, match="type_weight values must be >= 0"):
        LossWeights(type_weight=(1.0, -1.0))
    from nepcore.training.stage import TrainingError

    with pytest.raises(TrainingError, match="type_weight has 2 values, the model has 3 types"):
        train_stage(
            StageConfig(stage=1, epochs=1, type_weight=(1.0, 2.0), device="cpu", progress=False, precision="float64"),
            data,
            stats,
            tmp_path,
        )


def test_fitness_monitor_without_virial_labels(tmp_path: Path) -> None:
    """Frames without virials (PbTe, many DFT sets): the fitness leaves the virial term out."""
    frames = make_demo_dataset(seed=4, n_frames=10)
    for atoms in frames:
        atoms.calc.results.pop("stress", None)
        atoms.info.pop("virial", None)
        atoms.info.pop("stress", None)
    data = TrainData(
        StreamDataStore.from_atoms(frames[:8], SPEC, torch.float64),
        StreamDataStore.from_atoms(frames[8:], SPEC, torch.float64),
    )
    stats = compute_q_scaler(SPEC, data.train.batches(8), mode="gpumd")
    cfg = StageConfig(stage=1, epochs=2, batch_size=4, precision="float64", device="cpu", progress=False)
    status = train_stage(cfg, data, stats, tmp_path)
    best = status["best"]
    assert best["valid_rmse_v"] is None
    assert best["fitness"] == pytest.approx(best["valid_rmse_e"] + best["valid_rmse_f"])


def test_ema_decay_spans_at_most_two_epochs() -> None:
    from nepcore.training.stage import ema_decay

    assert ema_decay(0.99, 200) == 0.99  # a large training set: the setting
    assert ema_decay(0.99, 3) == pytest.approx(1 - 1 / 6)  # 3 steps per epoch: about two epochs
    assert ema_decay(0.5, 3) == 0.5


# ---- batch: auto ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "atoms_per_frame, frames",
    [(70.0, 7), (250.0, 2), (134.0, 4), (24.0, 21), (1000.0, 2), (0.0, 500)],
)
def test_auto_batch_aims_at_500_atoms_and_at_least_two_frames(atoms_per_frame: float, frames: int) -> None:
    from nepcore.training.config import frames_per_batch

    assert frames_per_batch("auto", atoms_per_frame) == frames
    assert frames_per_batch(8, atoms_per_frame) == 8  # a number is taken as it is


@pytest.mark.parametrize(
    "atoms_per_frame, optimizer, train_frames, frames",
    [
        (134.0, "adam", 1600, 16),  # PdCuNi_medium: 4 frames would be 400 steps an epoch
        (134.0, "adam", 1601, 17),  # rounded up: never more than 100 steps
        (134.0, "adam", 400, 4),  # 100 steps of 4 frames: the atom target decides
        (96.1, "adam", 320, 5),  # sweep_k8: 64 steps, unchanged
        (24.0, "adam", 240, 21),  # the demo: unchanged
        (134.0, "adam", None, 4),  # split size unknown: the atom target alone
        (134.0, "lbfgs", 10**6, 31),  # L-BFGS chunks only set memory: not capped
    ],
)
def test_auto_batch_takes_at_most_100_steps_an_epoch(
    atoms_per_frame: float, optimizer: str, train_frames: int | None, frames: int
) -> None:
    from nepcore.training.config import BATCH_AUTO_MAX_STEPS, frames_per_batch

    assert BATCH_AUTO_MAX_STEPS == 100
    assert frames_per_batch("auto", atoms_per_frame, optimizer, train_frames) == frames
    assert frames_per_batch(8, atoms_per_frame, optimizer, 10**6) == 8  # a number is taken as it is


def test_auto_batch_cap_is_resolved_and_logged(tiny, tmp_path: Path, caplog, monkeypatch) -> None:
    import nepcore.training.config as config

    # a tiny split made "large": 2-frame batches by atoms, at most 2 steps an epoch
    monkeypatch.setattr(config, "BATCH_AUTO_ATOMS", 1)
    monkeypatch.setattr(config, "BATCH_AUTO_MAX_STEPS", 2)
    data, stats = tiny
    n = len(data.train)
    frames = -(-n // 2)
    assert frames > config.frames_per_batch("auto", data.train.n_atoms / n) == 2  # the cap is what binds
    cfg = StageConfig(stage=1, epochs=1, precision="float64", device="cpu", progress=False)
    with caplog.at_level("INFO"):
        status = train_stage(cfg, data, stats, tmp_path)
    assert status["settings"]["batch_size"] == frames
    assert f"batch auto: {frames} frames per minibatch" in caplog.text
    assert f"raised so that {n} training frames take 2 steps an epoch" in caplog.text


@pytest.mark.parametrize(
    "stage, lbfgs_limit, optimizer, per_batch, target_atoms, min_frames",
    [
        (1, None, "adam", "minibatch", 500, 2),  # stage 1: Adam, ~500-atom minibatches
        (2, 10**6, "lbfgs", "chunk of the L-BFGS objective", 4096, 1),  # optimizer auto, a small split
        (2, 10, "adam", "minibatch", 500, 2),  # optimizer auto, a split over the L-BFGS limit
    ],
)
def test_auto_settings_are_resolved_logged_and_recorded(
    tiny, tmp_path: Path, caplog, monkeypatch, stage, lbfgs_limit, optimizer, per_batch, target_atoms, min_frames
) -> None:
    import nepcore.training.config as config

    if lbfgs_limit is not None:
        monkeypatch.setattr(config, "LBFGS_AUTO_MAX_ATOMS", lbfgs_limit)
    data, stats = tiny
    per_frame = data.train.n_atoms / len(data.train)
    expected = max(min_frames, round(target_atoms / per_frame))
    cfg = StageConfig(stage=stage, epochs=1, precision="float64", device="cpu", progress=False)
    assert cfg.batch_size == "auto" and cfg.optimizer == ("adam" if stage == 1 else "auto")
    with caplog.at_level("INFO"):
        status = train_stage(cfg, data, stats, tmp_path)
    assert status["settings"]["batch_size"] == expected and status["settings"]["optimizer"] == optimizer
    assert f"batch auto: {expected} frames per {per_batch}" in caplog.text
    assert (f"optimizer auto: {optimizer} ({data.train.n_atoms} training atoms" in caplog.text) == (stage == 2)
    saved = torch.load(tmp_path / "checkpoint.pt", weights_only=False)
    # a resume on the same data decides the same
    assert saved["config"]["batch_size"] == expected and saved["config"]["optimizer"] == optimizer


@pytest.mark.parametrize("value", ["0", "many", "2.5"])
def test_batch_size_flag_takes_a_whole_number_or_auto(value: str, tmp_path: Path, capsys) -> None:
    from nepcore.cli import main as cli_main

    with pytest.raises(SystemExit) as stop:
        cli_main(["train", "--stage", "1", "--data", "x.h5", "--qscaler", "q.json", "--out-dir",
                  str(tmp_path), "--batch-size", value])  # fmt: skip
    assert stop.value.code == 2
    assert "batch" in capsys.readouterr().err
