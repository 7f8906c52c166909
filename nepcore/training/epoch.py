"""One pass of a training stage: Adam steps over the training split's minibatches, and the
error sums and metrics of a split.

:func:`run_epoch` is an Adam epoch (full-batch L-BFGS has its own in
:mod:`nepcore.training.lbfgs`); :func:`evaluate_sums` and :func:`epoch_metrics` are what
either optimiser's epoch is judged by: the loss terms, the RMSEs and the monitored metric.
Nothing here reads a value back to the host until :func:`epoch_metrics`, the epoch's one sync.
"""

from __future__ import annotations

import torch
from tqdm import tqdm

from nepcore.model.batch import Batch
from nepcore.model.nep_model import NEPModel
from nepcore.training.averaging import WeightAverage
from nepcore.training.compiled_step import TrainingLoss
from nepcore.training.config import StageConfig
from nepcore.training.data import BatchSource
from nepcore.training.distributed import Distributed
from nepcore.training.loss import RESIDUAL_SUMS, SUM_KEYS, LossWeights, data_loss, energy_shift, regularisation, rmse
from nepcore.training.schedule import LRSchedule

#: The fitness a stage can monitor (``monitor: fitness``; the choices live in StageConfig):
#: RMSE_E + RMSE_F + FITNESS_LAMBDA_V RMSE_V (eV/atom and eV/Å summed as in GPUMD's fitness with
#: λe = λf = 1), the same measure in both stages, so stage 2 is judged by its forces too.
FITNESS_LAMBDA_V = 0.1


def train_step(
    loss: TrainingLoss,
    batch: Batch,
    optimizer: torch.optim.Optimizer,
    clip: float,
    wrapped: torch.nn.Module | None = None,
) -> torch.Tensor:
    """One Adam step on ``batch``; returns the detached error sums stacked in SUM_KEYS order.

    loss: the batch loss (eager or compiled, nepcore.training.compiled_step).
    wrapped: ``loss`` inside DDP when distributed (its forward all-reduces the gradients).
    With ``loss.batch_parts`` (never with DDP) the batch is evaluated in parts on several
    threads (nepcore.training.batch_parts): the same loss and gradient up to rounding.
    No host synchronisation: everything stays a tensor until the epoch ends.
    """
    if loss.batch_parts is not None:  # never under DDP (batch_parts_for)
        optimizer.zero_grad(set_to_none=True)
        weights = loss.weights
        _, sums = loss.gradients(batch, lambda stacked: data_loss(dict(zip(SUM_KEYS, stacked.unbind())), weights))
        l1, l2 = regularisation(loss.model, weights)
        if l1.requires_grad or l2.requires_grad:
            (l1 + l2).backward()
    else:
        data, sums, _ = (loss if wrapped is None else wrapped)(batch)
        l1, l2 = regularisation(loss.model, loss.weights)
        total = data + l1 + l2
        optimizer.zero_grad(set_to_none=True)
        total.backward()
    if clip > 0:
        params = [p for group in optimizer.param_groups for p in group["params"]]
        torch.nn.utils.clip_grad_norm_(params, clip, foreach=True)
    optimizer.step()
    return sums.detach()


def run_epoch(
    loss: TrainingLoss,
    source: BatchSource,
    cfg: StageConfig,
    optimizer: torch.optim.Optimizer,
    epoch: int,
    device: torch.device,
    bar: tqdm | None = None,
    distributed: Distributed = Distributed(),
    wrapped: torch.nn.Module | None = None,
    schedule: LRSchedule | None = None,
    first_step: int = 0,
    average: WeightAverage | None = None,
) -> dict[str, torch.Tensor]:
    """Train on every batch of ``source`` once, then move b1 by the epoch's mean energy residual
    (the averaged model's b1 by the mean residual of the steps it averages).

    schedule: sets the rate of each step (``schedule.at(first_step + i)``); None keeps the
    optimiser's. average: the weight average updated after each step (b1 moved with the model).
    Distributed: this process takes every N-th batch; the sums are added over processes.
    Returns the epoch's error sums (tensors, keyed as SUM_KEYS).
    """
    model = loss.model
    total = torch.zeros(len(SUM_KEYS), dtype=model.W0.dtype, device=device)
    batches = distributed.batches(source, cfg.batch_size, shuffle=True, seed=cfg.seed, epoch=epoch, device=device)
    with distributed.join(wrapped):
        for i, batch in enumerate(batches):
            if schedule is not None:
                for group in optimizer.param_groups:
                    group["lr"] = schedule.at(first_step + i) * group["lr_factor"]
            step_sums = train_step(loss, batch, optimizer, cfg.clip, wrapped)
            total = total + step_sums
            if average is not None:
                average.update(model.parameter_dict(), step_sums[RESIDUAL_SUMS])
            if bar is not None:
                bar.update(distributed.world)
    sums = dict(zip(SUM_KEYS, distributed.sum(total)))
    with torch.no_grad():
        shift = energy_shift(sums).to(model.b1.dtype)
        if average is not None:  # its b1 from the residuals of the steps it averages
            average.end_epoch(model.b1, shift, distributed)
        model.b1.add_(shift)
    return sums


def evaluate_sums(
    model: NEPModel,
    source: BatchSource,
    batch_size: int,
    device: torch.device,
    force_path: str,
    distributed: Distributed = Distributed(),
    loss: TrainingLoss | None = None,
) -> dict[str, torch.Tensor]:
    """Error sums of the model on every frame of ``source`` (no training; sharded over processes).

    loss: the stage's batch loss (compiled: validation reuses its graph); default eager.
    """
    loss = TrainingLoss(model, LossWeights(), force_path) if loss is None else loss
    total = torch.zeros(len(SUM_KEYS), dtype=model.W0.dtype, device=device)
    for batch in distributed.batches(source, batch_size, shuffle=False, device=device):
        total = total + loss.error_sums(batch)
    return dict(zip(SUM_KEYS, distributed.sum(total)))


def epoch_metrics(
    model: NEPModel, cfg: StageConfig, train: dict[str, torch.Tensor], valid: dict[str, torch.Tensor] | None
) -> dict[str, float]:
    """Loss terms and RMSEs of one epoch as plain floats (the epoch's one host sync)."""
    weights = cfg.loss_weights()
    with torch.no_grad():
        l1, l2 = regularisation(model, weights)
        values = {"l1": l1, "l2": l2, "train_loss": data_loss(train, weights, shifted=True) + l1 + l2}
        if valid is not None:
            values["valid_loss"] = data_loss(valid, weights, shifted=False) + l1 + l2
    metrics = {k: float(v) for k, v in values.items()}
    floats = lambda sums: {k: float(v) for k, v in sums.items()}
    metrics.update({f"train_{k}": v for k, v in rmse(floats(train), shifted_energy=True).items()})
    if valid is not None:
        metrics.update({f"valid_{k}": v for k, v in rmse(floats(valid), shifted_energy=False).items()})
    prefix = "valid" if valid is not None else "train"
    part = lambda key: metrics[f"{prefix}_rmse_{key}"] or 0.0
    metrics["fitness"] = part("e") + part("f") + FITNESS_LAMBDA_V * part("v")
    metrics["monitored"] = metrics["fitness"] if cfg.monitor == "fitness" else metrics[f"{prefix}_loss"]
    return metrics


__all__ = ["FITNESS_LAMBDA_V", "epoch_metrics", "evaluate_sums", "run_epoch", "train_step"]
