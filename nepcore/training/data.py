"""What a training stage reads: its training and validation splits as batch sources."""

from __future__ import annotations

import dataclasses
import logging
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Protocol

import torch

from nepcore.data.store import available_memory_bytes
from nepcore.model.batch import Batch
from nepcore.training.checkpoint import DATA_KEY
from nepcore.training.config import (
    AUTO_EPOCHS,
    AUTO_PATIENCE,
    BATCH_AUTO_ATOMS,
    LBFGS_AUTO_MAX_ATOMS,
    StageConfig,
    frames_per_batch,
    optimizer_for,
)

log = logging.getLogger(__name__)

#: Largest share of the memory available at a stage's start that the batches its splits keep
#: across passes may take (keep_fixed_passes). A split's batches take about four times its
#: store's bytes (float32: 3.8 on PbTe, 4.4 on sweep_k8 at 6/4 Å): int64 indices and float image
#: shifts where the store holds int32 and int8.
KEPT_PASSES_SHARE = 0.1


class BatchSource(Protocol):
    """What a stage needs from a data split (nepcore.data.store.StreamDataStore provides it)."""

    def __len__(self) -> int: ...
    def batches(
        self,
        batch_size: int,
        shuffle: bool = False,
        seed: int = 0,
        epoch: int = 0,
        device: torch.device | str = "cpu",
        prefetch: int = 2,
    ) -> Iterator[Batch]: ...
    def max_neighbors(self) -> tuple[int, int]: ...


@dataclass
class TrainData:
    """The splits a stage uses: ``train`` (required), ``valid`` (None when absent or empty), and
    ``origin``: the name of a dataset frame, its input file and 0-based frame number there (for
    the stage's warnings; None names frames by their dataset index)."""

    train: BatchSource
    valid: BatchSource | None = None
    origin: Callable[[int], str] | None = None

    def max_neighbors(self) -> tuple[int, int]:
        """Largest radial/angular neighbour counts over all splits used (nep.txt header)."""
        counts = [s.max_neighbors() for s in (self.train, self.valid) if s is not None]
        return max(c[0] for c in counts), max(c[1] for c in counts)

    def identity(self) -> dict[str, Any]:
        """Frame counts and content hashes of the splits: a checkpoint made on other data
        (other labels, weights or positions) does not match."""
        return {
            "train_frames": len(self.train),
            "valid_frames": 0 if self.valid is None else len(self.valid),
            DATA_KEY: {
                name: getattr(source, "content_sha256", None)
                for name, source in (("train", self.train), ("valid", self.valid))
                if source is not None
            },
        }

    def label_counts(self) -> dict[str, dict[str, int] | None]:
        """Frames carrying each label per split ({"energy", "forces", "virial"}; None when the
        source does not say)."""
        return {
            name: getattr(source, "label_counts", None)
            for name, source in (("train", self.train), ("valid", self.valid))
            if source is not None
        }

    def warnings(self) -> list[str]:
        """What the training data lacks that the loss would silently skip (said at the start,
        in the log and status.json)."""
        counts = self.label_counts()["train"]
        if counts is None:
            return []
        n = len(self.train)
        return [
            f"the training split has no {label} labels (0 of {n} frames): the model is not trained on {label}"
            for label in ("energy", "forces")
            if counts[label] == 0
        ]


def keep_fixed_passes(data: TrainData, device: torch.device, processes: int = 1) -> str:
    """Let the stage's splits keep the batches of their unshuffled passes (the validation after
    every epoch, full-batch L-BFGS's evaluations; ``StreamDataStore.keep_passes``), within
    :data:`KEPT_PASSES_SHARE` of the memory available now, shared by the splits and the
    processes. The same batches either way, so it changes no number.

    Args:
        data: the stage's splits.
        device: the training device: only a CPU stage keeps batches (device memory stays
            bounded by the batch).
        processes: the stage's torchrun processes (each keeps its own shard's batches).
    Returns:
        The reason, for the log and status.json.
    """
    stores = [source for source in (data.train, data.valid) if source is not None]
    if device.type != "cpu":
        return "off: not a CPU stage (device memory stays bounded by the batch)"
    if not all(hasattr(store, "keep_passes") for store in stores):
        return "off: a data source that cannot keep batches"
    if any(store.lazy for store in stores):
        return "off: the data store reads its frames from disk (lazy mode)"
    available = available_memory_bytes()
    if available is None:
        return "off: the available memory is unknown"
    budget = int(KEPT_PASSES_SHARE * available / processes / len(stores))
    for store in stores:
        store.keep_passes(budget)
    if budget <= 0:
        return "off: no memory for them"
    each = "" if processes == 1 else f" in each of {processes} processes"
    return f"on (up to {budget * len(stores) / 2**20:.0f} MiB{each}, {KEPT_PASSES_SHARE:.0%} of the memory available)"


def resolve_auto(cfg: StageConfig, data: TrainData, say: bool) -> StageConfig:
    """``cfg`` with ``optimizer: auto`` replaced by the optimiser it chooses (from the training
    split's size), then ``epochs: auto`` and ``patience: auto`` by that optimiser's numbers
    (AUTO_EPOCHS, AUTO_PATIENCE) and ``batch: auto`` by its number of frames (from the training
    split's mean frame size, its frame count and the optimiser); each said in the log. The
    checkpoint records the choices, so a resumed stage on the same data decides the same."""
    atoms = getattr(data.train, "n_atoms", None)
    if cfg.optimizer == "auto":
        chosen = optimizer_for("auto", atoms, cfg.loss_form)
        if say:
            size = "unknown" if atoms is None else f"{atoms}"
            log.info(
                "optimizer auto: %s (%s training atoms; L-BFGS up to %d with loss_form mse)",
                chosen,
                size,
                LBFGS_AUTO_MAX_ATOMS,
            )
        cfg = dataclasses.replace(cfg, optimizer=chosen)
    lengths = {
        name: table[cfg.optimizer]
        for name, table in (("epochs", AUTO_EPOCHS), ("patience", AUTO_PATIENCE))
        if getattr(cfg, name) == "auto"
    }
    if lengths:
        if say:
            shown = ", ".join(f"{name} auto: {value}" for name, value in lengths.items())
            log.info("%s (the numbers for %s)", shown, "L-BFGS" if cfg.optimizer == "lbfgs" else "Adam")
        cfg = dataclasses.replace(cfg, **lengths)
    if cfg.batch_size != "auto":
        return cfg
    per_frame = atoms / len(data.train) if atoms else float(BATCH_AUTO_ATOMS)
    n_train = len(data.train)
    frames = frames_per_batch("auto", per_frame, cfg.optimizer, n_train)
    if say:
        capped = frames > frames_per_batch("auto", per_frame, cfg.optimizer)  # the step cap raised it
        log.info(
            "batch auto: %d frames per %s (%.1f atoms per training frame, about %d atoms each%s)",
            frames,
            "chunk of the L-BFGS objective" if cfg.optimizer == "lbfgs" else "minibatch",
            per_frame,
            round(frames * per_frame),
            f"; raised so that {n_train} training frames take {math.ceil(n_train / frames)} steps an epoch"
            if capped
            else "",
        )
    return dataclasses.replace(cfg, batch_size=frames)
