"""The training loss of one batch, eager or compiled with inductor, and the ``compile`` rule.

:class:`TrainingLoss` is a module (so DDP can wrap it) whose forward is the whole per-batch
computation up to the loss: pair vectors, descriptors, per-type networks, forces (closed form,
or autograd through the make_fx-traced graph), virials, ZBL, the error sums and the data loss.
Compiled, that forward up to the error sums is one inductor graph (``fullgraph=True``) and its
backward is AOTAutograd's; the batch sizes are dynamic (nepcore.model.compiled), so one
compilation serves every training batch of every epoch, the last partial batch and the
validation batches. What stays outside the graph per step: the λ-weighted data loss (a few
scalar ops: inside, dynamo would bake the weights into the graph as constants, and stage 2,
whose weights differ, would compile a graph of its own instead of reusing stage 1's), the
L1/L2 terms (a handful of ops on the parameters, only when λ1, λ2 > 0), gradient clipping
(foreach) and the optimiser's step (fused Adam; NAdam, stage 1's default, in its foreach form).

Validation reuses the training graph with grad enabled and the outputs detached: a
``torch.no_grad()`` call would be a second graph (dynamo guards on the grad mode), i.e. a second
compilation, for a saving of a few stored activations.
"""

from __future__ import annotations

import os

import torch

from nepcore.model import potential as core
from nepcore.model.batch import Batch
from nepcore.model.compiled import batch_tensors, configure_cache, shape_settings
from nepcore.model.nep_model import NEPModel
from nepcore.training.batch_parts import BatchParts, joined_outputs, part_gradients
from nepcore.training.geometry_cache import GeometryCache
from nepcore.training.loss import SUM_KEYS, LossWeights, data_loss, error_sums

#: ``auto`` on the CPU compiles when a stage processes at least this many atoms (epochs x
#: atoms of the training split): the work a cold compilation takes to repay. Measured
#: (benchmarks/bench_step.py, PdCuNi_medium, batch 32, float32, 2 threads): compiled steps
#: ~1.3x faster than eager for both force paths (a saving of ~23 % of the eager time, which is
#: 80-170 µs per atom, idle to loaded machine), against a cold compilation of 60-280 s:
#: break-even at 3-7 million atoms. A warm start (6-17 s) repays within ~0.5 million.
CPU_AUTO_MIN_ATOMS = 10_000_000
#: ... and when its minibatches hold at least this many atoms on average. At batches the size
#: of the default ``batch: auto`` (~500 atoms; measured at ~280: sweep_k4, 4 frames, one thread)
#: a compiled step saved only ~7 % of an epoch (3.9 against 4.2 s) against a cold compilation
#: of 60-100 CPU s, and in the issue-10 learning curves the compilation cost PdCuNi_medium and
#: sweep_k8 a minute of their first 300 CPU s; the 1.3x above was measured at ~4,300 atoms.
CPU_AUTO_MIN_BATCH_ATOMS = 2_000


def resolve_compile(
    mode: str, device: torch.device, stage_atoms: int | None, batch_atoms: float | None = None
) -> tuple[bool, str]:
    """Whether a stage compiles its training step, and why (for status.json).

    Args:
        mode: "off", "on" or "auto".
        device: the training device.
        stage_atoms: atoms the stage may process (epochs x training atoms; None: unknown).
        batch_atoms: mean atoms per minibatch (None: unknown).

    Returns:
        (enabled, reason). ``auto`` compiles on CUDA (launch overhead is what compiling
        removes there), and on the CPU when the stage processes at least CPU_AUTO_MIN_ATOMS
        atoms in batches of at least CPU_AUTO_MIN_BATCH_ATOMS atoms (README "Compiled
        training"). The rule reads sizes only, never timings, so a resumed stage decides as the
        first run did.
    """
    if mode == "off":
        return False, "off"
    if mode == "on":
        return True, "on"
    if mode != "auto":
        raise ValueError(f"compile must be off, on or auto, found {mode!r}")
    if device.type == "cuda":
        return True, "auto: CUDA"
    if stage_atoms is None or stage_atoms < CPU_AUTO_MIN_ATOMS:
        return False, f"auto: CPU stage of {stage_atoms} atom-epochs < {CPU_AUTO_MIN_ATOMS} does not repay the compile"
    if batch_atoms is None or batch_atoms < CPU_AUTO_MIN_BATCH_ATOMS:
        shown = "unknown" if batch_atoms is None else f"{batch_atoms:.0f}"
        return (
            False,
            f"auto: CPU batches of {shown} atoms < {CPU_AUTO_MIN_BATCH_ATOMS} gain too little to repay the compile",
        )
    return True, (
        f"auto: CPU stage of {stage_atoms} atom-epochs >= {CPU_AUTO_MIN_ATOMS} "
        f"in batches of {batch_atoms:.0f} atoms >= {CPU_AUTO_MIN_BATCH_ATOMS}"
    )


class TrainingLoss(torch.nn.Module):
    """forward(batch) -> (data loss (), error sums (len(SUM_KEYS),), forces (N, 3) eV/Å) of one batch.

    model: the NEPModel (a submodule: DDP wrapping this module reduces its gradients).
    weights: the loss weights and form. force_path: "analytical" or "autograd".
    compiled: compile with inductor (cache_dir: the compile cache, see configure_cache).
    angular_slots: the compiled step lays every batch's angular pairs out in this many slots
    per atom (the data's largest angular neighbour count), a static size: with the slot count
    dynamic, inductor 2.13 fixes the strides of the dense (atoms, slots, ...) activations that
    the backward saves to the first batch's count, and a later batch with another count fails
    its stride check. Zero-padded slots change nothing but the rounding of the sums.
    The loss excludes the L1/L2 regularisation (nepcore.training.loss.regularisation).
    """

    def __init__(
        self,
        model: NEPModel,
        weights: LossWeights,
        force_path: str,
        compiled: bool = False,
        cache_dir: str | os.PathLike | None = None,
        angular_slots: int | None = None,
    ) -> None:
        super().__init__()
        if force_path not in ("analytical", "autograd"):
            raise ValueError(f"force path must be analytical or autograd, found {force_path!r}")
        self.model = model
        self.weights = weights
        self.force_path = force_path
        self.compiled = compiled
        self._traced = None
        self._tables: core.CoreTables | None = None
        self.angular_slots = angular_slots
        self._slots: torch.Tensor | None = None
        #: per-frame pair geometry reused across epochs (eager analytical CPU steps; set by the stage)
        self.geometry_cache: GeometryCache | None = None
        #: frame-parallel parts of each batch (eager CPU steps; set by the stage, see batch_parts)
        self.batch_parts: BatchParts | None = None
        if compiled:
            self.cache_dir = configure_cache(cache_dir)
            self._compiled = torch.compile(self._sums_and_forces, fullgraph=True)

    def _sums_and_forces(
        self,
        params: dict[str, torch.Tensor],
        tensors: dict[str, torch.Tensor],
    ) -> tuple[torch.Tensor, torch.Tensor]:
        batch = Batch(**tensors)
        if self._traced is None:
            out = core.evaluate(params, self._tables, batch)
        else:
            energy, _, forces, virial = self._traced.graph(params, tensors)
            out = {"energy": energy, "forces": forces, "virial": virial}
        sums = error_sums(out, batch, self.weights)
        return torch.stack([sums[k] for k in SUM_KEYS]), out["forces"]

    def forward(self, batch: Batch) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        if not self.compiled:
            out = self.outputs(batch)
            sums = error_sums(out, batch, self.weights)
            return data_loss(sums, self.weights), torch.stack([sums[k] for k in SUM_KEYS]), out["forces"]
        params = self.model.parameter_dict()
        tensors = batch_tensors(batch)
        # the tables are looked up here, not in the graph: their first lookup fills a dict,
        # which the graph's guards would see change
        self._tables = self.model.tables(batch.positions.device, batch.positions.dtype)
        if self.angular_slots is not None and batch.angular_slots.shape[0] <= self.angular_slots:
            if self._slots is None or self._slots.device != batch.positions.device:
                self._slots = torch.zeros(self.angular_slots, dtype=torch.int8, device=batch.positions.device)
            tensors["angular_slots"] = self._slots
        if self.force_path == "autograd" and self._traced is None:
            from nepcore.model.autograd import TracedAutogradForces

            traced = TracedAutogradForces(self._tables)
            traced.trace(params, tensors)
            self._traced = traced
        with shape_settings():
            sums, forces = self._compiled(params, tensors)
        return data_loss(dict(zip(SUM_KEYS, sums.unbind())), self.weights), sums, forces

    def outputs(self, batch: Batch) -> dict[str, torch.Tensor]:
        """The eager model's outputs of ``batch`` (energies, forces, virials, ...), with the
        stage's geometry cache when it has one (radial couples, the geometry kept or computed)."""
        return self.model(batch, force_path=self.force_path, geometry=self._cached_geometry(batch))

    def gradients(self, batch: Batch, objective) -> tuple[torch.Tensor, torch.Tensor]:
        """``objective(error sums)`` of ``batch`` and its gradient, added to the parameters' .grad.

        objective: the scalar to differentiate from the stacked error sums (len(SUM_KEYS),).
        With :attr:`batch_parts` the batch is evaluated in parts on several threads
        (nepcore.training.batch_parts), else as one. Returns (objective, sums), detached.
        """
        if self.batch_parts is not None:
            params = [p for p in self.model.parameters() if p.requires_grad]
            return part_gradients(self.outputs, self.batch_parts, batch, objective, params, self.weights)
        _, sums, _ = self(batch)
        value = objective(sums)
        value.backward()
        return value.detach(), sums.detach()

    def _cached_geometry(self, batch: Batch) -> core.PairGeometry | None:
        if self.geometry_cache is None:
            return None
        return self.geometry_cache.geometry(self.model.tables(batch.positions.device, batch.positions.dtype), batch)

    def error_sums(self, batch: Batch) -> torch.Tensor:
        """The detached error sums of ``batch`` without training (validation)."""
        if not self.compiled:
            with torch.no_grad():
                if self.batch_parts is None:
                    out = self.outputs(batch)
                else:
                    out = joined_outputs(self.batch_parts.map(self.outputs, self.batch_parts.split(batch)))
                sums = error_sums(out, batch, self.weights)
                return torch.stack([sums[k] for k in SUM_KEYS])
        with torch.enable_grad():  # the training graph, not a second compilation (module docstring)
            _, sums, _ = self(batch)
        return sums.detach()
