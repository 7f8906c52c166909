"""The settings of one training stage, :class:`StageConfig`: the one home of their defaults.

Every training setting is one field below, with its default (per stage where stage 1 and
stage 2 differ), its allowed values, its help text and where it lives in the workflow config.
Everything else is generated from or checked against these fields:

* ``nepcore train``'s flags (:func:`nepcore.cli.train.add_arguments`);
* the workflow's ``nepcore train`` command lines (:func:`nepcore.workflow.train_flags`);
* the config schema's defaults, enums and bounds (``workflow/schemas/config.schema.yaml``),
  config/README.md and docs/CLI.md, by ``tests/test_training_config.py``.

Adding a setting: add a field here with :func:`nepcore.training.setting_fields.setting`, then
its schema entry and a line in config/README.md (the test names whatever is missing). This
module does not import torch, so the workflow can read it cheaply.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from nepcore.spec import INITIAL_BIAS_STD
from nepcore.training.setting_fields import StageConfigError, check_value, setting

if TYPE_CHECKING:  # annotations only: importing either needs torch
    import torch

    from nepcore.training.loss import LossWeights

#: The stages; stage 1 is force-focused, stage 2 energy-focused and starts from stage 1.
STAGES: tuple[int, ...] = (1, 2)

#: ``batch: auto`` aims at about this many atoms per minibatch. Measured (docs/recipe_measurements.md,
#: issue 10): ~500-700 atoms per step trained best per CPU second on PbTe (2 frames of 250
#: atoms: 44.1 meV/Å test against 46.6 at 8 frames) and sweep_k2 (8 frames of 91 atoms: test
#: energy 12.9 against 28.8 meV/atom at 3 frames, forces 56 against 63 meV/Å); on sweep_k4
#: 4 frames of 70 atoms gave 6 % lower forces than 8 for 8 % higher energies.
BATCH_AUTO_ATOMS = 500
#: ... and never fewer frames: the training loss removes each batch's mean energy residual, so a
#: one-frame batch would carry no energy signal at all.
BATCH_AUTO_MIN_FRAMES = 2
#: ... and Adam takes at most about this many steps per epoch: on a large training split the
#: batch grows to ceil(training frames / BATCH_AUTO_MAX_STEPS) frames. Measured (issue 10,
#: twenty-first round, docs/recipe_measurements.md): on PdCuNi_medium (1,600 training frames, 214,000
#: atoms) 4-frame batches (400 steps an epoch) stalled on their step noise at the rate of 0.01
#: (best validation force 31.4 meV/Å at epoch 50, the raw weights' training force 50-57 from
#: epoch 40 to 79, no decay because the validation energies still improved), while 16-frame
#: batches went on down steadily; test force / energy at 600 CPU s 32.0 / 6.69 against
#: 38.2 / 11.13, at 300 s 41.0 / 6.25 against 42.7 / 10.84, at 60 s 81.9 against 73.9. The
#: sets whose splits hold up to about 50,000 atoms (every other set measured) keep their batch.
BATCH_AUTO_MAX_STEPS = 100
#: ``batch: auto`` with ``optimizer: lbfgs``: chunks of about this many atoms. There the chunk
#: size changes only the memory and the rounding of the sums, not the objective (the whole
#: split's loss, nepcore.training.lbfgs), and larger chunks cost less per atom.
LBFGS_CHUNK_ATOMS = 4096
#: ``batch_parts: auto``'s smallest part (nepcore.training.batch_parts), in atoms. Two parts on
#: two threads against the whole batch on one thread (``benchmarks/bench_parts.py``, sweep_k4,
#: issue 10's alloy model, the per-frame geometry cache filled, one run each, two at 463 atoms,
#: fortieth round), wall / CPU time by the batch's atoms: 463 atoms 1.05-1.11 / 1.47-1.50
#: (slower, and half as much CPU again), 639 atoms 0.90 / 1.27, 926 atoms 0.82 / 1.20, 1,853
#: atoms 0.66 / 1.06. The whole batch on two threads was 1.3-2.2 times the wall time of one
#: thread at every size. So the default Adam batch (``batch: auto``, ~500 atoms) stays whole on
#: one thread, and stage 2's L-BFGS chunks (~4,096 atoms) are cut. It holds for PbTe's model too
#: (cutoff 8 Å, n_max 6; its 500-atom batch of two frames, five rounds, forty-seventh
#: round): two parts on two threads 1.15 times the whole batch's wall time on one thread, two
#: parts on one thread 1.33, the whole batch on two threads 2.04.
MIN_PART_ATOMS = 300
#: ``optimizer: auto`` runs L-BFGS on training splits of at most this many atoms, Adam on
#: larger ones. A pass over a small split is a few Adam steps and L-BFGS's curvature pays; on a
#: larger, redundant split Adam's many steps per pass win. Measured from the same stage-1 models
#: (issue 10, ninth and tenth rounds, docs/recipe_measurements.md): L-BFGS ahead on PbTe (4,500 training
#: atoms), the demo (5,700) and PdCuNi_small (6,300); a tie on PdCuNi_mid (14,400) and
#: sweep_k2_half (15,200); Adam ahead on sweep_k4 (29,600) and PdCuNi_medium (214,000).
LBFGS_AUTO_MAX_ATOMS = 12000

#: Stage 2 may give up at most this fraction of its starting model's validation force RMSE:
#: the default of ``max_force_rise`` (the epochs a stage keeps as its best) and the threshold of
#: ``nepcore evaluate``'s warning that stage 2 gave up forces. Issue 10 caps the test force
#: cost of stage 2 at 5 %. 2 % was too tight (twelfth round, docs/recipe_measurements.md): on sweep_k2 a
#: stage 2 with lambda_e 10 moved the validation force RMSE +3 % at its first epoch and then
#: held it, for 47 % lower validation energies; its test force rose 0.7 %, its test energy fell
#: 34 %, and at 2 % all of that was thrown away.
MAX_FORCE_RISE = 0.05

#: Adam's second-moment decay (issue 10, nineteenth round, docs/recipe_measurements.md "Adam's gradient
#: scale follows the last ~20 steps"). torch's default, 0.999, divides each step by the gradient
#: size averaged over ~1,000 steps; 0.95 averages over ~20. Stage 1 at 0.95 reached a 7-19 %
#: lower validation force RMSE by epoch 50 on sweep_k2, sweep_k4 and sweep_k8 (two seeds), 0.99
#: about half of that, 0.9 the same as 0.95 within ±5 %; stage 2's Adam (rate 0.001) did not
#: notice the difference.
ADAM_BETA2 = 0.95

#: Adam's momentum (``adam_momentum``): ``nesterov`` steps with torch's NAdam, whose first moment
#: looks one step ahead and warms up from beta1/2 to beta1 over the first few hundred steps
#: (``NADAM_MOMENTUM_DECAY`` in :mod:`nepcore.training.optimizers`); ``plain`` is Adam. Stage 1
#: with Nesterov momentum reached a 5-24 % lower validation force RMSE by epoch 50 on sweep_k2,
#: sweep_k4 and sweep_k8 (issue 10, forty-first round, docs/recipe_measurements.md "Nesterov
#: momentum"). Stage 2 keeps ``plain``: its Adam (large splits only) was not measured with it.
ADAM_MOMENTA: tuple[str, ...] = ("nesterov", "plain")

#: The optimisers of a stage (``auto`` is decided from the data when the stage starts).
OPTIMIZERS: tuple[str, ...] = ("adam", "lbfgs", "auto")

#: ``epochs: auto`` and ``patience: auto`` (stage 2's defaults) by the optimiser the stage runs.
#: An Adam epoch is ~10-100 steps, an L-BFGS epoch one, so 30 quiet epochs are thousands of Adam
#: steps but 30 L-BFGS iterations. Measured (issue 10, thirty-sixth round, docs/recipe_measurements.md
#: "Stage 2's length follows its optimiser"): on the small sets stage 2's L-BFGS found better models
#: hundreds of epochs after 30 quiet ones. Patience 200 with 1,200 epochs, against 30 and 300: carbon
#: 44.3 / 3.53 -> 37.0 / 0.95 meV/Å / meV/atom, PdCuNi_small 33.6 / 3.83 -> 29.2 / 2.45, PbTe's
#: training force <= 35 meV/Å on four folds of five (two), fits 1.2-2.4 times as long. The cap alone
#: (patience 30) ended carbon's stage at epoch 321, test force unchanged; patience 100 and 150 left
#: PbTe at two folds; 1,500 epochs took PbTe fold 1's fit to 324 CPU s. Adam's numbers are stage 2's
#: of before: the large sets' stage 2 is unchanged.
AUTO_EPOCHS: dict[str, int] = {"adam": 300, "lbfgs": 1200}
AUTO_PATIENCE: dict[str, int] = {"adam": 30, "lbfgs": 200}

_START, _OPT, _LOSS, _RUN = "starting point", "optimisation", "loss (GPUMD's names)", "run"


@dataclass(frozen=True)
class StageConfig:
    """Settings of one training stage (``nepcore train --stage 1|2``).

    Construct with the stage and the settings that differ from its defaults, e.g.
    ``StageConfig(stage=2, epochs=30)``; fields left out (or None) take the stage's default.
    Values are checked on construction (:class:`StageConfigError`).
    """

    stage: int = setting(1, "1 (force-focused) or 2 (energy-focused)", group=_OPT, choices=STAGES, scope="cli")
    epochs: int | str = setting(
        600,
        "maximum passes over the training split, or auto: "
        f"{AUTO_EPOCHS['adam']} with Adam, {AUTO_EPOCHS['lbfgs']} with L-BFGS (one step an epoch)",
        stage2="auto",
        group=_OPT,
        minimum=0,
        resumable=True,
        nep_in="generation",
        auto=True,
    )
    patience: int | str = setting(
        60,
        "early stop after this many epochs in which neither the monitored loss nor any validation RMSE "
        f"(force, energy, virial) improved, or auto: {AUTO_PATIENCE['adam']} with Adam, "
        f"{AUTO_PATIENCE['lbfgs']} with L-BFGS",
        stage2="auto",
        group=_OPT,
        minimum=1,
        resumable=True,
        auto=True,
    )
    stop_window: int = setting(
        0,
        "also end the stage once both its best model's monitored validation metric and the best "
        "validation force RMSE fell by no more than --stop-min-gain of themselves over the last this "
        "many epochs (0 = off)",
        group=_OPT,
        minimum=0,
        resumable=True,
    )
    stop_min_gain: float = setting(
        0.01,
        "with --stop-window: the relative gain over the window below which the stage ends",
        group=_OPT,
        minimum=0,
        maximum=1,
        resumable=True,
    )
    batch_size: int | str = setting(
        "auto",
        f"frames per minibatch (GPUMD's batch), or auto: about {BATCH_AUTO_ATOMS} atoms per batch, "
        f"at least {BATCH_AUTO_MIN_FRAMES} frames and at most about {BATCH_AUTO_MAX_STEPS} steps per epoch",
        group=_OPT,
        minimum=1,
        key="batch",
        nep_in="batch",
        auto=True,
    )
    optimizer: str = setting(
        "adam",
        "adam: minibatch Adam with the schedule and weight average below; lbfgs: full-batch "
        "L-BFGS, one iteration per epoch on the whole training split (ignores the rate, schedule, "
        "ema, clip, adam_momentum, amsgrad and adam_beta2; batch = frames per chunk; loss_form mse); "
        f"auto: lbfgs for training splits of at most {LBFGS_AUTO_MAX_ATOMS} atoms with loss_form mse, else adam",
        stage2="auto",
        group=_OPT,
        choices=OPTIMIZERS,
    )
    lr: float = setting(1e-2, "initial Adam learning rate", stage2=1e-3, group=_OPT, exclusive_minimum=0)
    lr_c_factor: float = setting(
        2.0,
        "learning rate of the descriptor coefficients (c_radial, c_angular) as a multiple of the "
        "networks' (follows the schedule)",
        group=_OPT,
        exclusive_minimum=0,
    )
    lr_min: float = setting(1e-5, "learning-rate floor of the schedule", group=_OPT, minimum=0)
    schedule: str = setting(
        "plateau",
        "plateau: decay when the monitored loss and every validation RMSE (force, energy, virial) stall; "
        "step: every --lr-step epochs; cosine: to --lr-min over --epochs, per optimiser step",
        group=_OPT,
        choices=("plateau", "step", "cosine"),
    )
    lr_decay: float = setting(0.7, "learning-rate factor per decay", group=_OPT, exclusive_minimum=0, maximum=1)
    lr_patience: int = setting(
        15,
        "plateau: epochs in which neither the monitored loss nor any validation RMSE (force, energy, virial) "
        "improved, before a decay",
        stage2=10,
        group=_OPT,
        minimum=1,
    )
    lr_step: int = setting(10, "step: epochs between decays", group=_OPT, minimum=1)
    lr_window: int = setting(
        0,
        "plateau: also decay when no watched metric (monitored, force, energy, virial) improved by "
        "--lr-min-gain over this many epochs (0 = off)",
        group=_OPT,
        minimum=0,
    )
    lr_min_gain: float = setting(
        0.02,
        "plateau with --lr-window: the relative gain over the window below which the rate decays",
        group=_OPT,
        minimum=0,
        maximum=1,
    )
    warmup_steps: int = setting(0, "linear learning-rate warm-up over this many optimiser steps", group=_OPT, minimum=0)
    ema: float = setting(
        0.99,
        "per-step decay of the weight average that is validated, kept and exported "
        "(0 = off; capped at 1 - 1/(2 steps per epoch): at most ~2 epochs)",
        group=_OPT,
        minimum=0,
        maximum=0.9999,
    )
    monitor: str = setting(
        "fitness",
        "validation metric of early stop, plateau and best model: the stage's loss, "
        "or fitness = RMSE_E + RMSE_F + 0.1 RMSE_V",
        group=_OPT,
        choices=("loss", "fitness"),
    )
    max_force_rise: float = setting(
        MAX_FORCE_RISE,
        "a stage that continues a model (stage 2, --init) keeps as best only epochs whose validation "
        "force RMSE is at most this fraction above the starting model's; an epoch more than 5x this "
        "above it is no progress for early stop (--patience)",
        group=_OPT,
        minimum=0,
    )
    init_bias_std: float = setting(
        INITIAL_BIAS_STD,
        "standard deviation of the initial hidden-layer biases of a stage that starts from random "
        "weights (not with --init or --finetune-from); 0.1 reproduces models trained before it became 1",
        group=_START,
        minimum=0,
    )
    lambda_e: float = setting(
        0.1, "energy weight (energy per atom, eV)", stage2=1.0, group=_LOSS, minimum=0, nep_in="lambda_e"
    )
    lambda_f: float = setting(1.0, "force weight (eV/Å)", stage2=1.0, group=_LOSS, minimum=0, nep_in="lambda_f")
    lambda_v: float = setting(
        0.01, "virial weight (virial per atom, eV)", stage2=0.1, group=_LOSS, minimum=0, nep_in="lambda_v"
    )
    lambda_1: float = setting(0.0, "L1 regularisation, GPUMD's form", group=_LOSS, minimum=0, nep_in="lambda_1")
    lambda_2: float = setting(0.0, "L2 regularisation, GPUMD's form", group=_LOSS, minimum=0, nep_in="lambda_2")
    loss_form: str = setting(
        "mse", "mse: sum of weighted MSEs; rmse: of RMSEs, as GPUMD's fitness", group=_LOSS, choices=("mse", "rmse")
    )
    force_delta: float = setting(
        0.0,
        "GPUMD force_delta (eV/Å): force errors weighted by delta/(delta+|F_ref|), 0 = off",
        group=_LOSS,
        minimum=0,
        nep_in="force_delta",
    )
    type_weight: tuple = setting(
        (),
        "GPUMD type_weight: force-loss weight of each model type in type order (empty = all 1)",
        group=_LOSS,
        nep_in="type_weight",
    )
    adam_momentum: str = setting(
        "nesterov",
        "Adam's momentum: nesterov = NAdam (Nesterov momentum, warmed up over the first few hundred "
        "steps); plain = Adam as before this setting existed",
        stage2="plain",
        group=_OPT,
        choices=ADAM_MOMENTA,
    )
    amsgrad: bool = setting(False, "AMSGrad variant of Adam (needs adam_momentum plain)", group=_OPT)
    adam_beta2: float = setting(
        ADAM_BETA2,
        "Adam's second-moment decay beta2 (0.999 = torch's default and the models trained before "
        "0.95 became the default)",
        group=_OPT,
        minimum=0,
        maximum=0.9999,
    )
    clip: float = setting(10.0, "gradient-norm clipping threshold, 0 = off", group=_OPT, minimum=0)
    checkpoint_every: int = setting(5, "epochs between running checkpoints", group=_RUN, minimum=1, resumable=True)
    seed: int = setting(
        0, "seed of initialisation and shuffling (the workflow: runs.<run>.seeds)", group=_RUN, minimum=0, scope="run"
    )
    device: str = setting(
        "auto", "auto = CUDA when available, else CPU", group=_RUN, choices=("auto", "cpu", "cuda"), resumable=True
    )
    precision: str = setting(
        "float32", "floating-point precision of training", group=_RUN, choices=("float32", "float64")
    )
    force_path: str = setting(
        "analytical",
        "closed-form or autograd forces (same values, different speed)",
        group=_RUN,
        choices=("analytical", "autograd"),
    )
    compile: str = setting(
        "auto",
        "compile the training step with inductor: on, off, or auto (on for CUDA; on the "
        "CPU only where it pays, README 'Compiled training')",
        group=_RUN,
        choices=("off", "on", "auto"),
        resumable=True,
    )
    batch_parts: int | str = setting(
        "auto",
        "CPU steps (eager, one process): evaluate each minibatch as this many parts of whole frames, "
        "concurrently on up to as many of torch's threads (README 'Threads'), or auto: one part per "
        f"thread, each of at least {MIN_PART_ATOMS} atoms (a smaller batch runs whole on one thread); the loss and "
        "gradient of the whole batch up to rounding, so the bits depend on the number of parts only",
        group=_RUN,
        minimum=1,
        resumable=True,
        auto=True,
    )
    init_weights: str = setting(
        "best", "which weights of --init to start from", group=_START, choices=("best", "last"), scope="run"
    )
    finetune_qscaler: str = setting(
        "keep",
        "keep the fine-tuned model's q_scaler or take qscaler.json's (recompute)",
        group=_START,
        choices=("keep", "recompute"),
        scope="run",
    )
    snapshot_every: int = setting(
        0,
        "write a model to OUT_DIR/snapshots every N epochs (--snapshot-models says which), 0 = never (learning curves)",
        group=_RUN,
        minimum=0,
        scope="cli",
        resumable=True,
    )
    snapshot_models: str = setting(
        "best",
        "what --snapshot-every writes: best = the best-so-far model (what the stage would export then), "
        "epoch = the model that epoch validated (Adam: its weight average), to replay keep rules offline "
        "(benchmarks/replay_monitors.py)",
        group=_RUN,
        choices=("best", "epoch"),
        scope="cli",
        resumable=True,
    )
    progress: bool | None = setting(
        None,
        "no progress bar even on a terminal (default: a bar on a terminal)",
        group=_RUN,
        scope="cli",
        flag="--no-progress",
        resumable=True,
    )

    def __post_init__(self) -> None:
        if self.stage not in STAGES:
            raise StageConfigError(f"stage must be 1 or 2, found {self.stage!r}")
        for f in dataclasses.fields(self):
            per_stage = f.metadata["per_stage"]
            if per_stage is not None and getattr(self, f.name) is None:
                object.__setattr__(self, f.name, per_stage[self.stage - 1])
            if isinstance(getattr(self, f.name), list):  # type_weight from YAML or the command line
                object.__setattr__(self, f.name, tuple(getattr(self, f.name)))
            check_value(f, getattr(self, f.name))
        if self.amsgrad and self.adam_momentum != "plain":
            raise StageConfigError(
                f"amsgrad needs adam_momentum plain: torch has no AMSGrad form of NAdam (stage {self.stage}, "
                f"adam_momentum {self.adam_momentum})"
            )
        if self.optimizer == "lbfgs" and self.loss_form != "mse":
            raise StageConfigError(
                "optimizer lbfgs needs loss_form mse: its objective is a sum over the training "
                f"split's frames, which the rmse form is not (stage {self.stage})"
            )

    def loss_weights(self) -> LossWeights:
        """The loss weights and form of this stage (imported here: the loss module needs torch)."""
        from nepcore.training.loss import LossWeights

        return LossWeights(
            self.lambda_e,
            self.lambda_f,
            self.lambda_v,
            self.lambda_1,
            self.lambda_2,
            self.loss_form,
            self.force_delta,
            tuple(self.type_weight),
        )

    def schedule_for(self, steps_per_epoch: int):  # -> nepcore.training.schedule.LRSchedule
        """The stage's learning-rate schedule (cosine and warm-up counted in optimiser steps)."""
        from nepcore.training.schedule import LRSchedule

        return LRSchedule(
            self.schedule,
            self.lr,
            self.lr_min,
            self.lr_decay,
            self.lr_patience,
            self.lr_step,
            warmup_steps=self.warmup_steps,
            window=self.lr_window,
            min_gain=self.lr_min_gain,
            total_steps=self.epochs * steps_per_epoch,
        )

    def early_stop(self):  # -> nepcore.training.schedule.EarlyStop
        """The stage's early stop: ``patience``, and ``stop_window`` / ``stop_min_gain``."""
        from nepcore.training.schedule import EarlyStop

        return EarlyStop(self.patience, window=self.stop_window, min_gain=self.stop_min_gain)

    def trajectory(self) -> dict[str, Any]:
        """The settings a resumed run must share with its checkpoint (all but the resumable ones)."""
        resumable = {f.name for f in dataclasses.fields(self) if f.metadata["resumable"]}
        return {k: v for k, v in dataclasses.asdict(self).items() if k not in resumable}

    @property
    def dtype(self) -> torch.dtype:
        """The training precision as a torch dtype (torch imported here, not at module import)."""
        import torch

        return torch.float64 if self.precision == "float64" else torch.float32


def frames_per_batch(
    batch: int | str, atoms_per_frame: float, optimizer: str = "adam", train_frames: int | None = None
) -> int:
    """Frames per minibatch (Adam) or per chunk (L-BFGS): ``batch`` itself, or for ``auto``
    about BATCH_AUTO_ATOMS atoms (Adam) or LBFGS_CHUNK_ATOMS (L-BFGS).

    Args:
        batch: the ``batch`` setting (a whole number of frames or "auto").
        atoms_per_frame: mean atoms per training frame.
        optimizer: the stage's ``optimizer``.
        train_frames: frames in the training split (None: unknown, no step cap).

    Returns:
        ``batch`` when it is a number, else round(target atoms / atoms_per_frame), for Adam at
        least BATCH_AUTO_MIN_FRAMES (each batch's mean energy residual is removed) and at least
        ceil(train_frames / BATCH_AUTO_MAX_STEPS) (at most about that many steps per epoch on
        a large split), for L-BFGS at least 1.
    """
    if batch != "auto":
        return int(batch)
    if optimizer == "lbfgs":
        return max(1, round(LBFGS_CHUNK_ATOMS / max(atoms_per_frame, 1.0)))
    by_atoms = max(BATCH_AUTO_MIN_FRAMES, round(BATCH_AUTO_ATOMS / max(atoms_per_frame, 1.0)))
    by_steps = 0 if train_frames is None else math.ceil(train_frames / BATCH_AUTO_MAX_STEPS)
    return max(by_atoms, by_steps)


def optimizer_for(optimizer: str, train_atoms: int | None, loss_form: str) -> str:
    """The optimiser a stage runs: ``optimizer`` itself, or for ``auto`` L-BFGS when the
    training split holds at most LBFGS_AUTO_MAX_ATOMS atoms and the loss is the mse form (the
    only one L-BFGS takes), else Adam.

    Args:
        optimizer: the ``optimizer`` setting.
        train_atoms: atoms in the training split (None: unknown, Adam).
        loss_form: the ``loss_form`` setting.

    Returns:
        "adam" or "lbfgs".
    """
    if optimizer != "auto":
        return optimizer
    small = train_atoms is not None and train_atoms <= LBFGS_AUTO_MAX_ATOMS
    return "lbfgs" if small and loss_form == "mse" else "adam"


def stage_defaults(stage: int) -> dict[str, Any]:
    """Every setting's default for ``stage`` (1 or 2), keyed by field name."""
    return dataclasses.asdict(StageConfig(stage=stage))


def settings() -> tuple[dataclasses.Field, ...]:
    """The fields of StageConfig, in order (read their ``metadata``, see
    :func:`nepcore.training.setting_fields.setting`)."""
    return dataclasses.fields(StageConfig)


__all__ = [
    "StageConfig",
    "StageConfigError",
    "STAGES",
    "settings",
    "stage_defaults",
    "frames_per_batch",
    "BATCH_AUTO_ATOMS",
    "BATCH_AUTO_MAX_STEPS",
    "LBFGS_CHUNK_ATOMS",
    "MIN_PART_ATOMS",
    "LBFGS_AUTO_MAX_ATOMS",
    "OPTIMIZERS",
    "optimizer_for",
]
