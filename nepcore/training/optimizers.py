"""The optimiser of a training stage: minibatch Adam over two parameter groups, or full-batch
L-BFGS over the whole training split's objective (``optimizer: adam | lbfgs``; ``auto`` is
decided before, by :func:`nepcore.training.data.resolve_auto`).

:func:`parameter_groups` gives Adam's descriptor coefficients their own rate, ``lr_c_factor``
times the networks'; :func:`stage_optimizer` builds what a stage steps with.
"""

from __future__ import annotations

from typing import Any

import torch

from nepcore.training.compiled_step import TrainingLoss
from nepcore.training.config import StageConfig
from nepcore.training.data import BatchSource
from nepcore.training.distributed import Distributed
from nepcore.training.lbfgs import FullBatchObjective, make_lbfgs

#: The descriptor coefficients: the parameters whose rate is ``lr_c_factor`` times the networks'.
DESCRIPTOR_COEFFICIENTS: tuple[str, ...] = ("c_radial", "c_angular")


#: NAdam's momentum decay psi: step t's momentum is beta1 * (1 - 0.5 * 0.96 ** (t * psi)), from
#: beta1/2 at the first step to 0.84 by step 250 and 0.89 by step 500. torch's default, 0.004,
#: stays near beta1/2 for thousands of steps, longer than a stage's first 50 epochs. Measured on
#: stage 1 (forty-first round, docs/recipe_measurements.md "Nesterov momentum"), best validation
#: force by epoch 50 on sweep_k4 / sweep_k8: Adam 45.1 / 59.4 meV/Å, psi 0 (beta1/2 throughout)
#: 50.0 / 61.6, 0.004 44.6 / 59.1, 0.04 35.7 / 56.6, 0.2 34.2 / 56.5.
NADAM_MOMENTUM_DECAY = 0.2


def parameter_groups(model: Any, lr: float, c_factor: float) -> list[dict[str, Any]]:
    """Adam's parameter groups: the networks (W0, b0, w1) at ``lr`` and the descriptor
    coefficients at ``c_factor * lr``. b1 is not among them: it is set from the energy residual.

    Each group carries its ``lr_factor``; the stage sets every step's rate to
    ``schedule.at(step) * lr_factor``, so the schedule moves both groups together. Why a factor:
    with Adam a step moves every parameter by about the rate, and the coefficients (drawn from
    U(-1, 1)) are several times larger than the fan-in-scaled weights (about 0.2), so at one rate
    they change several times more slowly relative to their size (docs/recipe_measurements.md).

    Args:
        model: the NEPModel (a torch module whose parameters carry their nep.txt names).
        lr: the networks' rate (the schedule's level at the start).
        c_factor: the coefficients' rate over the networks'.

    Returns:
        Two groups, networks first (the logged rate is group 0's).
    """
    named = dict(model.named_parameters())
    networks = [p for name, p in named.items() if name != "b1" and name not in DESCRIPTOR_COEFFICIENTS]
    coefficients = [named[name] for name in DESCRIPTOR_COEFFICIENTS]
    return [
        {"params": networks, "lr": lr, "lr_factor": 1.0},
        {"params": coefficients, "lr": lr * c_factor, "lr_factor": c_factor},
    ]


def stage_optimizer(
    cfg: StageConfig,
    loss: TrainingLoss,
    train: BatchSource,
    device: torch.device,
    distributed: Distributed,
    compiled: bool,
) -> tuple[torch.optim.Optimizer, FullBatchObjective | None]:
    """The optimiser a stage steps with, and L-BFGS's objective (None for Adam).

    Adam: betas (0.9, ``cfg.adam_beta2``), with Nesterov momentum (torch's NAdam) when
    ``cfg.adam_momentum`` is nesterov; b1 gets no gradient (the stage sets it from the energy
    residual). Plain Adam is fused (one kernel per parameter group) with the compiled step, while
    the eager step keeps the default implementation, so eager runs stay bit-identical to earlier
    versions at the same settings (torch has no fused NAdam: it runs its foreach form). L-BFGS:
    b1 is a parameter of the whole split's unshifted loss (:mod:`nepcore.training.lbfgs`).

    Args:
        cfg: the stage's settings, ``optimizer`` already resolved (adam or lbfgs).
        loss: the stage's batch loss; its model's b1 is switched to match the optimiser.
        train: the training split (L-BFGS evaluates it in chunks of ``cfg.batch_size`` frames).
        device: where the model lives.
        distributed: this process's place in a torchrun job.
        compiled: whether the training step runs compiled.

    Returns:
        (optimizer, objective): ``objective.epoch(optimizer, bar)`` runs an L-BFGS epoch.
    """
    lbfgs = cfg.optimizer == "lbfgs"
    loss.model.b1.requires_grad_(lbfgs)
    if lbfgs:
        objective = FullBatchObjective(loss, train, cfg.batch_size, device, distributed)
        return make_lbfgs(objective.params), objective
    groups = parameter_groups(loss.model, cfg.lr, cfg.lr_c_factor)
    betas = (0.9, cfg.adam_beta2)
    if cfg.adam_momentum == "nesterov":
        return torch.optim.NAdam(groups, lr=cfg.lr, betas=betas, momentum_decay=NADAM_MOMENTUM_DECAY), None
    return torch.optim.Adam(groups, lr=cfg.lr, betas=betas, amsgrad=cfg.amsgrad, fused=True if compiled else None), None


__all__ = ["DESCRIPTOR_COEFFICIENTS", "NADAM_MOMENTUM_DECAY", "parameter_groups", "stage_optimizer"]
