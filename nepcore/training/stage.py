"""One training stage of a NEP potential: ``nepcore train --stage 1|2``.

A stage starts from a model (initialisation with the q-scaler of ``qscaler.json``, a stage-1
checkpoint, or a fine-tuned nep.txt/checkpoint), runs epochs over the training split
(Adam, :mod:`nepcore.training.epoch`, or full-batch L-BFGS, :mod:`nepcore.training.lbfgs`)
with the loss of :mod:`nepcore.training.loss`, evaluates the validation split after every epoch, and
ends at ``epochs``, when the monitored loss (validation when there is a validation split,
else training) and the validation force, energy and virial RMSEs have not improved for
``patience`` epochs, or (``stop_window``) when its best model's monitored loss and the best
validation force RMSE have both fallen by no more than ``stop_min_gain`` over the last
``stop_window`` epochs (:class:`nepcore.training.schedule.EarlyStop`). Its folder gets:

* ``checkpoint.pt`` at the end (atomically; see :mod:`nepcore.training.checkpoint`), and
  ``resume.pt`` every ``checkpoint_every`` epochs while the stage runs (removed when it ends).
  An existing ``resume.pt`` (else ``checkpoint.pt``) is resumed automatically. The running
  checkpoint has its own name because Snakemake deletes a job's declared outputs when the job
  fails or is killed: ``resume.pt`` is not declared, so a rerun of an interrupted job
  (``--rerun-incomplete``, a SLURM time-out) continues where it stopped;
* ``nep.txt`` (last weights) and ``nep_best.txt`` (best monitored loss), with the true maximum
  neighbour counts of the data in their headers;
* ``loss.out``: one row per epoch, GPUMD's columns ``epoch L_total L1 L2 E_train F_train
  V_train E_test F_test V_test`` (RMSEs in eV/atom, eV/Å, eV/atom; the "test" columns are the
  validation split, 0 without one; training E RMSE after the mean-residual shift, as GPUMD);
* ``status.json``: why the stage ended (``plateau``, ``slow_progress`` or ``max_epochs``), the epoch, the best and
  last metrics (an RMSE is null for a label no frame carries), the settings, the starting
  point, the frames carrying each label (``labels``), ``warnings`` (e.g. no forces in the
  training split, also logged when the stage starts) and whether the step ran compiled
  (``compile``: the setting, the decision and its reason, the compile cache).

Multi-GPU: under ``torchrun`` each process trains on every N-th batch with DDP
(:mod:`nepcore.training.distributed`); only rank 0 writes files.

Determinism: batch order is a function of (seed, epoch); the per-epoch state (parameters, Adam
moments, schedule, early stop) is all in the checkpoint, so a resumed run is bit-identical to
an uninterrupted one on the same device and precision. The shared bias b1 gets no gradient:
after each epoch it is moved by the epoch's weighted mean per-atom energy residual, and the
weight average's b1 is set from the mean residual of the steps it averages
(:mod:`nepcore.training.averaging`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tqdm import tqdm

from nepcore._utils import sha256_arrays
from nepcore.errors import NepcoreError, writing
from nepcore.model.nep_model import NEPModel, resolve_device
from nepcore.spec import ModelSpec
from nepcore.training.averaging import WeightAverage, averaged_weights, ema_decay, exported_weights, trainable_tensors
from nepcore.training.batch_parts import batch_parts_for
from nepcore.training.checkpoint import (
    CheckpointError,
    load_checkpoint,
    mismatch_error,
    mismatches,
    rng_state,
    save_checkpoint,
    set_rng_state,
)
from nepcore.training.compiled_step import TrainingLoss, resolve_compile
from nepcore.training.config import StageConfig
from nepcore.training.data import TrainData, keep_fixed_passes, resolve_auto
from nepcore.training.distributed import Distributed
from nepcore.training.divergence import non_finite_message, training_warnings
from nepcore.training.epoch import epoch_metrics, evaluate_sums, run_epoch
from nepcore.training.frame_share import frame_name, validation_frame_warnings
from nepcore.training.geometry_cache import geometry_cache_for
from nepcore.training.optimizers import stage_optimizer
from nepcore.training.outputs import (
    log_line,
    remove_stale_temporaries,
    set_aside_line,
    stage_lock,
    write_outputs,
    write_snapshot,
)
from nepcore.training.qscaler import QScalerStats, initial_parameters
from nepcore.training.reproducibility import deterministic_kernels
from nepcore.training.schedule import (
    FAR_FORCE_RISE_FACTOR,
    EarlyStop,
    LRSchedule,
    counts_as_progress,
    keeps_forces,
    set_aside,
    validation_errors,
)
from nepcore.training.start import load_model_file, require_same_architecture, restrict_elements

log = logging.getLogger(__name__)

#: The running checkpoint (not a Snakemake output, so it survives an interrupted job).
RESUME_NAME = "resume.pt"


class TrainingError(NepcoreError, RuntimeError):
    """A stage that cannot start or continue (message says why)."""


def open_data(path: str | Path, spec: ModelSpec, dtype: torch.dtype, lazy: bool | None = None) -> TrainData:
    """Training and validation splits of a ``nepcore convert`` dataset as streaming stores."""
    from nepcore.data.store import StreamDataStore
    from nepcore.data.structures_h5 import StructureFile

    train = StreamDataStore.from_hdf5(path, spec, split="train", dtype=dtype, lazy=lazy, progress=None)
    if len(train) == 0:
        raise TrainingError(f"{path}: the training split is empty")
    valid = StreamDataStore.from_hdf5(path, spec, split="valid", dtype=dtype, lazy=lazy, progress=None)
    with StructureFile(path) as h5:
        paths, table = h5.provenance().source_paths, h5.frame_table()
    source, source_frame = table["source"], table["source_frame"]
    origin = lambda i: frame_name(paths[int(source[i])], source_frame[i])
    return TrainData(train, valid if len(valid) else None, origin)


# ---- starting point --------------------------------------------------------------------------


def start_parameters(
    cfg: StageConfig, stats: QScalerStats, init: str | Path | None = None, finetune: str | Path | None = None
) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    """Float64 parameters a fresh stage starts from, and a description for status.json.

    init: a stage-1 checkpoint (its ``cfg.init_weights`` weights and q_scaler). finetune: a
    nep.txt or checkpoint.pt restricted to the run's elements, keeping its q_scaler or taking
    qscaler.json's (``cfg.finetune_qscaler``). Neither: initialisation consistent with ``stats``.
    """
    spec = stats.spec
    if init is not None and finetune is not None:
        raise TrainingError("give either --init or --finetune-from, not both")
    if init is not None:
        start_spec, params = load_model_file(init, cfg.init_weights)
        require_same_architecture(start_spec, spec, str(init), "qscaler.json")
        info = {"kind": "init", "path": str(init), "weights": cfg.init_weights}
    elif finetune is not None:
        full_spec, params = load_model_file(finetune, "last")
        start_spec, params = restrict_elements(full_spec, params, spec.elements, str(finetune))
        require_same_architecture(start_spec, spec, str(finetune), "qscaler.json")
        if cfg.finetune_qscaler == "recompute":
            params["q_scaler"] = np.asarray(stats.q_scaler, dtype=np.float64).copy()
        info = {
            "kind": "finetune",
            "path": str(finetune),
            "elements": list(spec.elements),
            "q_scaler": cfg.finetune_qscaler,
        }
    else:
        if cfg.stage == 2:
            log.warning("warning: stage 2 without --init starts from a fresh initialisation")
        params = initial_parameters(stats, spec, cfg.seed, cfg.init_bias_std)
        info = {"kind": "initialisation", "q_scaler_mode": stats.mode, "bias_std": cfg.init_bias_std}
    info["sha256"] = parameters_sha256(params)
    return params, info


def parameters_sha256(params: dict[str, np.ndarray]) -> str:
    """SHA-256 of float64 parameters by name (names and bytes only, as earlier checkpoints)."""
    return sha256_arrays(((k, np.asarray(params[k], dtype=np.float64)) for k in sorted(params)), layout=False)


# ---- the stage -----------------------------------------------------------------------------


@dataclass
class _State:
    """Mutable state of a running stage (all of it goes into the checkpoint)."""

    epoch: int
    best_params: dict[str, torch.Tensor]
    history: list[dict[str, float]]
    schedule: LRSchedule
    early: EarlyStop
    average: WeightAverage | None = None
    start_metrics: dict[str, float] | None = None


def train_stage(
    cfg: StageConfig,
    data: TrainData,
    stats: QScalerStats,
    out_dir: str | Path,
    init: str | Path | None = None,
    finetune: str | Path | None = None,
    resume: str | Path | None = None,
    distributed: Distributed = Distributed(),
    restart_on_mismatch: bool = False,
) -> dict[str, Any]:
    """Run (or resume) one stage and write its outputs to ``out_dir``; returns status.json's dict.

    resume: a checkpoint to continue from; by default ``out_dir/resume.pt`` (a run that was
    interrupted), else ``out_dir/checkpoint.pt``, when it exists. A checkpoint that does not
    match this run (architecture, settings, the data's content hash, or more epochs run than
    ``cfg.epochs``) is refused, or, with ``restart_on_mismatch``, a default one is moved aside
    to ``<name>.stale`` (said in the log) and the stage starts afresh.
    distributed: this process's place in a torchrun job (see nepcore.training.distributed).
    The folder is locked for the whole stage (:func:`~nepcore.training.outputs.stage_lock`):
    a second run into it fails at once.
    Raises TrainingError / CheckpointError / StartModelError with a one-line reason.
    """
    out_dir = Path(out_dir)
    with writing(out_dir):
        out_dir.mkdir(parents=True, exist_ok=True)
    device = distributed.device(resolve_device(cfg.device))
    with stage_lock(out_dir, distributed.is_main), deterministic_kernels(device), contextlib.ExitStack() as resources:
        return _train_stage(
            cfg, data, stats, out_dir, init, finetune, resume, distributed, restart_on_mismatch, device, resources
        )


def _train_stage(
    cfg: StageConfig,
    data: TrainData,
    stats: QScalerStats,
    out_dir: Path,
    init: str | Path | None,
    finetune: str | Path | None,
    resume: str | Path | None,
    distributed: Distributed,
    restart_on_mismatch: bool,
    device: torch.device,
    resources: contextlib.ExitStack,
) -> dict[str, Any]:
    """:func:`train_stage` inside its lock; ``resources`` holds what the stage sets up for its
    duration (the batch parts' threads)."""
    spec, dtype = stats.spec, cfg.dtype
    if cfg.type_weight and len(cfg.type_weight) != spec.n_types:
        raise TrainingError(
            f"type_weight has {len(cfg.type_weight)} values, the model has {spec.n_types} types "
            f"({' '.join(spec.elements)})"
        )
    for source in (data.train, data.valid):
        if source is not None and getattr(source, "dtype", dtype) != dtype:
            raise TrainingError(f"the data store holds {source.dtype} frames but the precision is {cfg.precision}")
    cfg = resolve_auto(cfg, data, distributed.is_main)
    torch.manual_seed(cfg.seed)
    start, start_info = start_parameters(cfg, stats, init, finetune)
    config = {**cfg.trajectory(), **data.identity(), "start_sha256": start_info["sha256"],
              "processes": distributed.world}  # fmt: skip

    model = NEPModel(spec, start).to(device=device, dtype=dtype)
    lbfgs = cfg.optimizer == "lbfgs"
    n_batches = math.ceil(len(data.train) / cfg.batch_size)
    train_atoms = getattr(data.train, "n_atoms", None)
    stage_atoms = None if train_atoms is None else cfg.epochs * train_atoms
    batch_atoms = None if train_atoms is None else train_atoms / len(data.train) * cfg.batch_size
    compiled, compile_reason = resolve_compile(cfg.compile, device, stage_atoms, batch_atoms)
    loss = TrainingLoss(
        model, cfg.loss_weights(), cfg.force_path, compiled=compiled, angular_slots=data.max_neighbors()[1]
    )
    compile_info = {
        "mode": cfg.compile,
        "enabled": compiled,
        "reason": compile_reason,
        "cache": str(loss.cache_dir) if compiled else None,
    }
    stores = [source for source in (data.train, data.valid) if source is not None]
    loss.geometry_cache, geometry_reason = geometry_cache_for(
        spec, stores, device, compiled, cfg.force_path, dtype, distributed.world
    )
    kept_reason = keep_fixed_passes(data, device, distributed.world)
    loss.batch_parts, parts_reason = batch_parts_for(
        cfg.batch_parts, device, compiled, distributed.world, cfg.batch_size
    )
    if loss.batch_parts is not None:
        resources.enter_context(loss.batch_parts.threads())
    optimizer, objective = stage_optimizer(cfg, loss, data.train, device, distributed, compiled)
    steps_per_epoch = math.ceil(n_batches / distributed.world)
    use_average = cfg.ema > 0 and not lbfgs  # one deterministic step per epoch: nothing to average
    average = WeightAverage(trainable_tensors(model), ema_decay(cfg.ema, steps_per_epoch)) if use_average else None
    state = _State(0, _clone(model), [], cfg.schedule_for(steps_per_epoch), cfg.early_stop(), average)

    if distributed.is_main:
        remove_stale_temporaries(out_dir)
    running_path, ckpt_path = out_dir / RESUME_NAME, out_dir / "checkpoint.pt"
    explicit = resume is not None
    if resume is None:
        resume = running_path if running_path.exists() else ckpt_path if ckpt_path.exists() else None
    if resume is not None:
        ckpt_path = Path(resume)
        saved = load_checkpoint(ckpt_path)
        problems = mismatches(saved, spec.architecture_dict(), config, epochs=cfg.epochs)
        if problems and (explicit or not restart_on_mismatch):
            raise mismatch_error(ckpt_path, problems)
        if problems:
            stale = ckpt_path.with_name(ckpt_path.name + ".stale")
            if distributed.is_main:
                ckpt_path.replace(stale)
                log.warning(
                    "warning: %s does not match this run (%s); moved it to %s and starting stage %d afresh",
                    ckpt_path,
                    "; ".join(problems),
                    stale.name,
                    cfg.stage,
                )
        else:
            _restore(saved, model, optimizer, state, device, dtype)
            log.info("resuming stage %d from %s after epoch %d", cfg.stage, ckpt_path, state.epoch)
    monitor = "valid" if data.valid is not None else "train"
    data_warnings = data.warnings() + stats.warnings()  # stats: model types without atoms in the data
    if distributed.is_main:
        for warning in data_warnings:
            log.warning("warning: %s", warning)
        log.info("geometry cache: %s", geometry_reason)
        log.info("batch parts: %s", parts_reason)
        log.info("kept passes: %s", kept_reason)
    data_info = {"labels": data.label_counts(), "warnings": data_warnings}
    fresh_start = start_info["kind"] == "initialisation"
    divergence = training_warnings(state.history, fresh_start, lbfgs)  # those of resumed epochs: said before
    max_neighbors = data.max_neighbors()
    ckpt_path = out_dir / "checkpoint.pt"
    wrapped = None if lbfgs else distributed.wrap(loss, device)  # L-BFGS sums its gradients itself
    if resume is None and init is not None and data.valid is not None:
        # A continued model is a candidate too: stage 2 never ends worse than where it started
        # on the monitored metric (nep_best.txt is then its starting model).
        valid_sums = evaluate_sums(model, data.valid, cfg.batch_size, device, cfg.force_path, distributed, loss)
        state.start_metrics = _valid_only(epoch_metrics(model, cfg, valid_sums, valid_sums))
        state.early.update(0, state.start_metrics["monitored"], validation_errors(state.start_metrics))
        log.info(
            "stage %d starts at valid fitness %.4e, monitored %.4e",
            cfg.stage,
            state.start_metrics["fitness"],
            state.start_metrics["monitored"],
        )

    frame_warnings: list[str] = []  # the validation frames that steered the stage, said at its end

    def save(finished: bool, reason: str | None) -> dict[str, Any]:
        status = {
            **_status(cfg, state, reason, monitor, start_info),
            **data_info,
            "warnings": data_warnings + divergence + frame_warnings,
            "compile": compile_info,
            "geometry_cache": geometry_reason,
            "batch_parts": parts_reason,
            "kept_passes": kept_reason,
        }
        if not distributed.is_main:
            return status
        save_checkpoint(ckpt_path if finished else running_path, {
            "spec": spec.architecture_dict(), "config": config, "model": _clone(model, cpu=True),
            "best_model": {k: v.detach().cpu() for k, v in state.best_params.items()},
            "optimizer": optimizer.state_dict(), "schedule": state.schedule.state_dict(),
            "average": None if state.average is None else state.average.state_dict(),
            "start_metrics": state.start_metrics,
            "early_stop": state.early.state_dict(), "epoch": state.epoch, "finished": finished,
            "reason": reason, "history": state.history, "rng": rng_state(),
            "max_neighbors": list(max_neighbors), "init": start_info,
        })  # fmt: skip
        write_outputs(
            out_dir,
            spec,
            exported_weights(model, state.average),
            state.best_params,
            max_neighbors,
            state.history,
            status,
        )
        if finished:
            running_path.unlink(missing_ok=True)
        return status

    while True:
        reason = state.early.stop_reason or ("max_epochs" if state.epoch >= cfg.epochs else None)
        if reason is not None:
            if distributed.is_main and data.valid is not None:
                frame_warnings = _frame_warnings(spec, state.best_params, data, cfg, device)
                for warning in frame_warnings:
                    log.warning("warning: %s", warning)
            status = save(True, reason)
            log.info(
                "stage %d ended after epoch %d (%s); best epoch %d",
                cfg.stage,
                state.epoch,
                reason,
                state.early.best_epoch,
            )
            if status.get("set_aside") and distributed.is_main:
                log.info(set_aside_line(cfg.stage, status["set_aside"], cfg.max_force_rise, state.early.best_epoch))
            if reason == "slow_progress" and distributed.is_main:
                force_gain = state.early.force_window_gain
                log.info(
                    "stage %d: its best model's %s fell by %.2f %%%s over the last %d epochs, no more than "
                    "%g %% (stop_window, stop_min_gain)",
                    cfg.stage,
                    f"{'validation' if monitor == 'valid' else 'training'} {cfg.monitor}",
                    100 * state.early.window_gain,
                    "" if force_gain is None else f" and the best validation force RMSE by {100 * force_gain:.2f} %",
                    cfg.stop_window,
                    100 * cfg.stop_min_gain,
                )
            if reason == "plateau" and state.early.far_epochs and distributed.is_main:
                log.info(
                    "stage %d: %d of its last %d epochs had a validation force RMSE more than %g %% above the "
                    "starting model's (%g x max_force_rise): they count as no progress, as they can never be kept",
                    cfg.stage,
                    state.early.far_epochs,
                    state.early.bad_epochs,
                    100 * FAR_FORCE_RISE_FACTOR * cfg.max_force_rise,
                    FAR_FORCE_RISE_FACTOR,
                )
            return status
        epoch = state.epoch + 1
        t0 = time.perf_counter()
        with tqdm(
            total=None if lbfgs else n_batches,  # L-BFGS: evaluations of the split, as many as its line search needs
            desc=f"stage {cfg.stage} epoch {epoch}",
            unit=" evaluation" if lbfgs else " batch",
            leave=False,
            disable=None if cfg.progress is None else not cfg.progress,
        ) as bar:
            train_sums = (
                objective.epoch(optimizer, bar)
                if lbfgs
                else run_epoch(
                    loss,
                    data.train,
                    cfg,
                    optimizer,
                    epoch,
                    device,
                    bar,
                    distributed,
                    wrapped,
                    state.schedule,
                    (epoch - 1) * steps_per_epoch,
                    state.average,
                )
            )
        with averaged_weights(model, state.average):  # the averaged weights are validated and kept
            valid_sums = (
                None
                if data.valid is None
                else evaluate_sums(model, data.valid, cfg.batch_size, device, cfg.force_path, distributed, loss)
            )
            metrics = epoch_metrics(model, cfg, train_sums, valid_sums)
            errors = validation_errors(metrics)
            keep = keeps_forces(errors, state.start_metrics, cfg.max_force_rise)
            progress = counts_as_progress(errors, state.start_metrics, cfg.max_force_rise)
            new_best = (
                state.early.update(epoch, metrics["monitored"], errors, keep, progress)
                if math.isfinite(metrics["monitored"])
                else False
            )
            if new_best:
                state.best_params = _clone(model)
            snapshot_due = bool(cfg.snapshot_every) and epoch % cfg.snapshot_every == 0 and distributed.is_main
            # taken here, inside the averaged weights: the model this epoch validated (replaying keep rules)
            validated = _clone(model) if snapshot_due and cfg.snapshot_models == "epoch" else None
        if not math.isfinite(metrics["monitored"]):
            raise TrainingError(
                non_finite_message(metrics["monitored"], epoch, cfg.stage, state.schedule.lr, state.history)
            )
        metrics.update(
            epoch=epoch,
            lr=optimizer.param_groups[0]["lr"],
            seconds=time.perf_counter() - t0,
            process_cpu_s=time.process_time(),
        )
        if not lbfgs:  # L-BFGS's step length comes from its line search
            state.schedule.step(epoch, metrics["monitored"], validation_errors(metrics))
        state.epoch = epoch
        state.history.append(metrics)
        found = training_warnings(state.history, fresh_start, lbfgs)
        if distributed.is_main:
            log.info(log_line(cfg.stage, metrics, cfg.epochs))
            for warning in found[len(divergence) :]:
                log.warning("warning: %s", warning)
        divergence = found
        if epoch % cfg.checkpoint_every == 0:
            save(False, None)
        if snapshot_due:
            chosen = state.best_params if validated is None else validated
            write_snapshot(out_dir, spec, chosen, max_neighbors, epoch, metrics["process_cpu_s"])


def _frame_warnings(
    spec: ModelSpec, best: dict[str, torch.Tensor], data: TrainData, cfg: StageConfig, device: torch.device
) -> list[str]:
    """The validation frames that hold most of the best model's squared force or energy error
    (nepcore.training.frame_share): one pass over the validation split, at the stage's end."""
    params = {k: v.detach().cpu().to(torch.float64).numpy() for k, v in best.items()}
    model = NEPModel(spec, params).to(device=device, dtype=cfg.dtype)
    return validation_frame_warnings(model, data.valid, cfg.batch_size, device, cfg.force_path, data.origin)


def _valid_only(metrics: dict[str, float]) -> dict[str, float]:
    return {k: v for k, v in metrics.items() if not k.startswith("train")}


def _clone(model: NEPModel, cpu: bool = False) -> dict[str, torch.Tensor]:
    """A detached copy of every parameter and buffer (float64 on the CPU when ``cpu``)."""
    out = {}
    for k, v in model.parameter_dict().items():
        v = v.detach().clone()
        out[k] = v.cpu().to(torch.float64) if cpu else v
    return out


def _restore(
    saved: dict,
    model: NEPModel,
    optimizer: torch.optim.Optimizer,
    state: _State,
    device: torch.device,
    dtype: torch.dtype,
) -> None:
    """Load the checkpoint's model, optimiser, schedule, early stop, history and RNG states."""
    with torch.no_grad():
        for k, v in model.parameter_dict().items():
            v.copy_(saved["model"][k].to(device=device, dtype=dtype))
    optimizer.load_state_dict(saved["optimizer"])
    state.schedule.load_state_dict(saved["schedule"])
    state.early.load_state_dict(saved["early_stop"])
    state.epoch = int(saved["epoch"])
    state.history = list(saved["history"])
    state.best_params = {k: v.to(device=device, dtype=dtype) for k, v in saved["best_model"].items()}
    if state.average is not None and saved.get("average") is not None:
        state.average.load_state_dict(saved["average"])
    state.start_metrics = saved.get("start_metrics")
    set_rng_state(saved["rng"])


def _status(cfg: StageConfig, state: _State, reason: str | None, monitor: str, start: dict) -> dict[str, Any]:
    best = next((h for h in state.history if h["epoch"] == state.early.best_epoch), None)
    if state.early.best_epoch == 0 and state.start_metrics is not None:
        best = {**state.start_metrics, "epoch": 0}
    return {
        "stage": cfg.stage, "reason": reason, "finished": reason is not None, "epoch": state.epoch,
        "max_epochs": cfg.epochs, "patience": cfg.patience, "monitor": monitor,
        "best_epoch": state.early.best_epoch, "best": best,
        "set_aside": set_aside(state.history, state.start_metrics, cfg.max_force_rise, state.early.best_epoch),
        "far_epochs": state.early.far_epochs,
        "last": state.history[-1] if state.history else None, "lr": state.schedule.lr,
        "settings": dataclasses.asdict(cfg), "start": start,
    }  # fmt: skip


__all__ = [
    "TrainData",
    "TrainingError",
    "CheckpointError",
    "train_stage",
    "open_data",
    "start_parameters",
]
