"""Full-batch L-BFGS for a training stage (``optimizer: lbfgs``): one L-BFGS iteration per epoch
on the loss of the whole training split.

Why: a stage that refines a trained model (stage 2) has no use for the noise of minibatches.
On the whole split the loss is one deterministic function, and L-BFGS's curvature estimate
takes it down several times faster per pass over the data than Adam at a small rate (issue 10's
ninth round, docs/recipe_measurements.md: PbTe fold 1's training force RMSE 38.0 → 35.0 meV/Å in 450
passes, where 467 Adam epochs had taken it from 38.2 to 37.6 only).

The objective is the stage's λ-weighted mean squared errors over the whole split (``mse``
form only), with the energy reference b1 a parameter like the others: minimising over b1 the
unshifted energy term is the same as removing the split's mean energy residual (GPUMD's
whole-training-set batch), and unlike the shifted form it is a sum over frames, so the split is
evaluated in chunks of frames (memory bounded by a chunk, not the split) whose gradients add
up exactly. Under torchrun each process takes every N-th chunk and the gradients are summed.

The loss and gradient of the last point evaluated are kept, so the evaluation at the start of
an iteration, which torch's L-BFGS makes at the point its previous line search accepted, costs
nothing when that point was the last one tried (the usual case): an iteration then costs about
one pass over the split.
"""

from __future__ import annotations

from typing import Any

import torch

from nepcore.training.compiled_step import TrainingLoss
from nepcore.training.data import BatchSource
from nepcore.training.distributed import Distributed
from nepcore.training.loss import SUM_KEYS, label_counts, regularisation

#: Correction pairs kept by L-BFGS (a few thousand parameters: memory is no concern).
LBFGS_HISTORY = 50
#: Most evaluations of one line search (torch's strong-Wolfe default).
LBFGS_LINE_SEARCH_EVALS = 25

_COUNTS = ("e_n", "f_n", "v_n")
_TERMS = (("e_w_raw", "e_n", "lambda_e"), ("f_w", "f_n", "lambda_f"), ("v_w", "v_n", "lambda_v"))


def make_lbfgs(params: list[torch.Tensor]) -> torch.optim.LBFGS:
    """torch's L-BFGS with a strong-Wolfe line search, one iteration per ``step`` (an epoch).

    The tolerances are 0: a stage ends on its patience or its epochs, never because a step
    changed the loss by less than some threshold.
    """
    return torch.optim.LBFGS(
        params,
        lr=1.0,
        max_iter=1,
        # torch counts the evaluation at the start of a step too; its default (5/4 of max_iter)
        # would leave the line search none
        max_eval=1 + LBFGS_LINE_SEARCH_EVALS,
        history_size=LBFGS_HISTORY,
        line_search_fn="strong_wolfe",
        tolerance_grad=0.0,
        tolerance_change=0.0,
    )


class FullBatchObjective:
    """The closure L-BFGS calls: the whole split's loss, its gradient in the parameters' .grad.

    Args:
        loss: the stage's batch loss (its model, weights and force path; eager or compiled).
        source: the training split.
        chunk_frames: frames per chunk (memory only).
        device: where the chunks go.
        distributed: this process's place in a torchrun job (chunks sharded, gradients summed).
    """

    def __init__(
        self,
        loss: TrainingLoss,
        source: BatchSource,
        chunk_frames: int,
        device: torch.device,
        distributed: Distributed = Distributed(),
    ) -> None:
        if loss.weights.form != "mse":
            raise ValueError("optimizer lbfgs needs loss_form mse (the rmse form is not a sum over frames)")
        self.loss, self.source, self.chunk_frames = loss, source, chunk_frames
        self.device, self.distributed = device, distributed
        self.params = [p for p in loss.model.parameters() if p.requires_grad]
        self.counts = self._label_counts()
        self._last: tuple[torch.Tensor, torch.Tensor, list[torch.Tensor], torch.Tensor] | None = None
        self.epoch_sums: torch.Tensor | None = None
        self._bar: Any = None

    def _chunks(self):
        return self.distributed.batches(self.source, self.chunk_frames, shuffle=False, device=self.device)

    def _label_counts(self) -> dict[str, torch.Tensor]:
        """e_n, f_n, v_n of the whole split (labels, not predictions: the means' denominators)."""
        total = torch.zeros(3, dtype=self.loss.model.W0.dtype, device=self.device)
        for batch in self._chunks():
            total = total + torch.stack(label_counts(batch))
        return dict(zip(_COUNTS, self.distributed.sum(total)))

    def _flat(self) -> torch.Tensor:
        return torch.cat([p.detach().reshape(-1) for p in self.params])

    def __call__(self) -> torch.Tensor:
        """Loss at the current parameters (a 0-d tensor), with every parameter's .grad set."""
        point = self._flat()
        if self._last is not None and torch.equal(point, self._last[0]):
            _, value, grads, sums = self._last
            for p, g in zip(self.params, grads):
                p.grad = g.clone()
        else:
            value, sums = self._evaluate()
            if self._bar is not None:
                self._bar.update(1)
            self._last = (point, value, [p.grad.detach().clone() for p in self.params], sums)
        if self.epoch_sums is None:
            self.epoch_sums = sums
        return value

    def _evaluate(self) -> tuple[torch.Tensor, torch.Tensor]:
        weights = self.loss.weights
        for p in self.params:
            p.grad = None
        sums = torch.zeros(len(SUM_KEYS), dtype=self.loss.model.W0.dtype, device=self.device)
        value = sums.new_zeros(())

        def objective(chunk_sums: torch.Tensor) -> torch.Tensor:
            """The chunk's share of the split's loss: its sums over the whole split's counts."""
            named = dict(zip(SUM_KEYS, chunk_sums))
            part = chunk_sums.new_zeros(())
            for total_key, count_key, lam in _TERMS:
                weight = getattr(weights, lam)
                if weight > 0:  # a setting: skipping keeps 0·nan out, as data_loss
                    part = part + weight * named[total_key] / self.counts[count_key].clamp_min(1.0)
            return part

        for batch in self._chunks():
            part, chunk_sums = self.loss.gradients(batch, objective)
            value = value + part
            sums = sums + chunk_sums
        if self.distributed.enabled:
            for p in self.params:
                if p.grad is None:
                    p.grad = torch.zeros_like(p)
                p.grad = self.distributed.sum(p.grad)
            value, sums = self.distributed.sum(value), self.distributed.sum(sums)
        l1, l2 = regularisation(self.loss.model, weights)
        if weights.lambda_1 > 0 or weights.lambda_2 > 0:
            (l1 + l2).backward()
            value = value + (l1 + l2).detach()
        for p in self.params:
            if p.grad is None:  # a parameter the loss does not reach (none in a NEP model)
                p.grad = torch.zeros_like(p)
        return value, sums

    def epoch(self, optimizer: torch.optim.LBFGS, bar: Any = None) -> dict[str, torch.Tensor]:
        """One L-BFGS iteration; returns the error sums of the split at the point it started
        from (keyed as SUM_KEYS; the training RMSEs of the epoch's log line).

        bar: a progress bar (tqdm) advanced once per evaluation of the split.
        """
        self.epoch_sums, self._bar = None, bar
        try:
            optimizer.step(self)
        finally:
            self._bar = None
        return dict(zip(SUM_KEYS, self.epoch_sums))
