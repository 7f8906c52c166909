"""Weight averaging of a training stage: an exponential moving average (EMA) of the parameters.

After every optimiser step the average moves towards the current weights,
``avg <- avg + (1 - d_n) (theta - avg)`` with ``d_n = min(decay, (1 + n) / (10 + n))`` after
the n-th update: the warm-up keeps the first updates from being dominated by the random start.
The averaged weights are what a stage validates, keeps as its best model and exports; the
optimiser goes on with the raw weights. Averaging over the last ~1 / (1 - decay) steps removes
most of the step-to-step noise of a large learning rate at no extra evaluation cost.

The shared output bias b1 is not learnt: the training loss removes each batch's mean energy
residual, so the networks' mean energy per atom drifts freely from step to step, and b1 is set
from the residuals afterwards. The average therefore also keeps an EMA, with the same weights,
of each step's residual sums (Σ w² d, Σ w²; d the per-atom energy error of the raw weights).
Their ratio is the mean residual over the steps the averaged weights come from, and is what
the averaged model's b1 is set from (:meth:`WeightAverage.set_offset`). Setting it from the
whole epoch's mean residual instead, as the raw model's b1 is, leaves the averaged model off by
the drift between the middle of the epoch and its last ~1 / (1 - decay) steps: up to
87 meV/atom on PdCuNi_medium (1,600 frames, 400 steps per epoch).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from contextlib import contextmanager

import torch

from nepcore.model.nep_model import TRAINABLE, NEPModel
from nepcore.training.distributed import Distributed
from nepcore.training.loss import energy_shift


class WeightAverage:
    """EMA of named tensors (the model's trainable parameters), updated per optimiser step."""

    def __init__(self, params: dict[str, torch.Tensor], decay: float) -> None:
        """params: name -> tensor to average (copied). decay: per-step factor in [0, 1)."""
        if not 0.0 <= decay < 1.0:
            raise ValueError(f"weight-average decay must be in [0, 1), found {decay}")
        self.decay = float(decay)
        self.updates = 0
        self.shadow = {k: v.detach().clone() for k, v in params.items()}
        #: EMA of the steps' energy-residual sums (Σ w² d, Σ w²), relative to the raw b1; None
        #: until a step passes them.
        self.residual: torch.Tensor | None = None

    def factor(self) -> float:
        """d_n of the next update (with the warm-up)."""
        n = self.updates + 1
        return min(self.decay, (1.0 + n) / (10.0 + n))

    @torch.no_grad()
    def update(self, params: dict[str, torch.Tensor], residual: torch.Tensor | None = None) -> None:
        """Move the average towards ``params`` (after an optimiser step).

        Args:
            params: name -> the raw weights after the step.
            residual: the step's energy-residual sums (Σ w² d, Σ w²), shape (2,), eV/atom and 1;
                averaged with the same weight as the parameters (a tensor: no host sync).
        """
        weight = 1.0 - self.factor()
        for name, avg in self.shadow.items():
            avg.lerp_(params[name].detach(), weight)
        if residual is not None:
            if self.residual is None:
                self.residual = torch.zeros_like(residual)
            self.residual.lerp_(residual.detach(), weight)
        self.updates += 1

    @torch.no_grad()
    def set_offset(self, name: str, raw: torch.Tensor, residual_sums: torch.Tensor | None) -> None:
        """Set the averaged ``name`` (b1) to ``raw`` plus the averaged mean energy residual.

        Args:
            name: the bias that U = w1·h − b1 subtracts (b1).
            raw: its current raw value, which the residuals were measured against (eV).
            residual_sums: :attr:`residual`, summed over processes when distributed (shape (2,));
                None (no step gave residual sums) or a zero weight sum keeps ``raw``.
        """
        offset = torch.zeros_like(raw)
        if residual_sums is not None:  # a zero weight sum has a zero residual sum: offset 0
            offset = energy_shift(dict(zip(("e_res", "e_wsum"), residual_sums))).to(raw.dtype)
        self.shadow[name].copy_(raw + offset)

    @torch.no_grad()
    def rebase_residual(self, shift: torch.Tensor) -> None:
        """Express :attr:`residual` against a raw b1 moved by ``shift`` (eV/atom)."""
        if self.residual is not None:
            self.residual[0].sub_(shift.to(self.residual.dtype) * self.residual[1])

    @torch.no_grad()
    def end_epoch(self, b1: torch.Tensor, shift: torch.Tensor, distributed: Distributed) -> None:
        """Set the averaged b1 at an epoch's end, before the raw ``b1`` moves by ``shift``.

        Args:
            b1: the raw model's b1 (eV), which the epoch's residuals were measured against.
            shift: what the raw b1 is about to be moved by (the epoch's mean residual, eV/atom).
            distributed: this process's place in a torchrun job.

        Under DDP, when the batches do not divide evenly, rank 0 took the most steps and the
        others averaged fewer: every process goes on with rank 0's average (which its checkpoint
        holds), and keeps an equal share of the residual sums pooled over the processes (the EMA
        is linear, so the next pooled sum is unchanged).
        """
        if distributed.enabled:
            for tensor in self.shadow.values():
                distributed.broadcast_(tensor)
            self.updates = int(distributed.broadcast_(torch.tensor(self.updates, device=b1.device)))
        # a collective on every process, also one that has had no batch yet
        pooled = distributed.sum(self.residual if self.residual is not None else b1.new_zeros(2))
        self.residual = pooled / distributed.world
        self.set_offset("b1", b1, pooled)
        self.rebase_residual(shift)

    @contextmanager
    def swapped_into(self, params: dict[str, torch.Tensor]) -> Iterator[None]:
        """Temporarily copy the averaged values into ``params`` (in place); restored on exit."""
        saved = {k: params[k].detach().clone() for k in self.shadow}
        with torch.no_grad():
            for k, avg in self.shadow.items():
                params[k].copy_(avg)
        try:
            yield
        finally:
            with torch.no_grad():
                for k, value in saved.items():
                    params[k].copy_(value)

    def state_dict(self) -> dict:
        return {
            "decay": self.decay,
            "updates": self.updates,
            "shadow": {k: v.detach().cpu().clone() for k, v in self.shadow.items()},
            "residual": None if self.residual is None else self.residual.detach().cpu().clone(),
        }

    def load_state_dict(self, state: dict) -> None:
        self.updates = int(state["updates"])
        for k, v in state["shadow"].items():
            self.shadow[k].copy_(v.to(device=self.shadow[k].device, dtype=self.shadow[k].dtype))
        device = next(iter(self.shadow.values())).device
        residual = state.get("residual")  # absent in older checkpoints: averaged from here on
        self.residual = None if residual is None else residual.to(device)


def ema_decay(ema: float, steps_per_epoch: int) -> float:
    """The per-step decay of the weight average: ``ema``, capped so the average spans at most
    about two epochs (1 - 1 / (2 steps_per_epoch)).

    The cap was set when the averaged model's b1 was the raw model's (the epoch's mean
    residual): the networks' mean energy drifts freely, and an average over many epochs (a tiny
    training set has few steps per epoch) lagged that drift by a constant energy offset (seen on
    PbTe: 40 meV/atom with 3 steps per epoch). The averaged b1 now follows the averaged steps
    (:meth:`WeightAverage.set_offset`), which removes that lag to first order; the cap stays, as
    a long average of fast-moving weights is also further from any model the steps passed
    through, and longer averages were not measured to help (`ema 0.999` on PdCuNi_medium).
    """
    return min(ema, 1.0 - 1.0 / (2.0 * max(steps_per_epoch, 1)))


def trainable_tensors(model: NEPModel) -> dict[str, torch.Tensor]:
    return {k: getattr(model, k) for k in TRAINABLE}


def averaged_weights(model: NEPModel, average: WeightAverage | None):
    """Context in which ``model`` holds the averaged weights (a no-op without averaging)."""
    return contextlib.nullcontext() if average is None else average.swapped_into(trainable_tensors(model))


def exported_weights(model: NEPModel, average: WeightAverage | None) -> dict[str, torch.Tensor]:
    """The "last" model a stage writes: the averaged weights when averaging, else the model's."""
    params = dict(model.parameter_dict())
    if average is not None:
        params.update(average.shadow)
    return params
