"""Tiny training data: demo frames as in-memory splits (:func:`tiny_splits`), a converted
dataset, and ``nepcore train`` run as a user runs it (a subprocess), for the training tests
(tests/test_training_*.py, tests/test_data_structures_integrity.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import torch

from helpers import specs
from nepcore.data.demo import make_demo_dataset
from nepcore.data.store import StreamDataStore
from nepcore.training.qscaler import compute_q_scaler, write_qscaler

ENV = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
SPEC = specs.MINIMAL


def tiny_splits(seed: int, n_frames: int, n_train: int, dtype: torch.dtype = torch.float64, spec=specs.TINY) -> tuple:
    """Demo frames ``0..n_train-1`` as the training split, the rest as validation, in memory,
    with the gpumd q-scaler of the training split: (TrainData, QScalerStats)."""
    from nepcore.training.stage import TrainData

    frames = make_demo_dataset(seed=seed, n_frames=n_frames)
    data = TrainData(
        StreamDataStore.from_atoms(frames[:n_train], spec, dtype),
        StreamDataStore.from_atoms(frames[n_train:], spec, dtype),
    )
    return data, compute_q_scaler(spec, data.train.batches(8), mode="gpumd")


def write_xyz(path: Path, frames, forces: bool = True) -> Path:
    """extxyz of ``frames``; without ``forces`` the frames carry energies only."""
    from ase.io import write

    if not forces:
        frames = [a.copy() for a in frames]
        for atoms, src in zip(frames, make_demo_dataset(seed=1, n_frames=len(frames))):
            atoms.calc = None
            atoms.info["energy"] = src.get_potential_energy()
    write(path, frames, format="extxyz")
    return path


def make_dataset(folder: Path, forces: bool = True, n_frames: int = 12) -> dict[str, Path]:
    """A converted tiny dataset (8 train, 4 valid frames) and its qscaler.json."""
    from nepcore.data.convert import convert

    folder.mkdir(parents=True, exist_ok=True)
    xyz = write_xyz(folder / "raw.xyz", make_demo_dataset(seed=1, n_frames=n_frames), forces)
    h5 = folder / "structures.h5"
    convert([str(xyz)], h5, fractions=(2 / 3, 1 / 3, 0.0), progress=False)
    store = StreamDataStore.from_hdf5(h5, SPEC, split="train", dtype=torch.float64)
    write_qscaler(folder / "qscaler.json", compute_q_scaler(SPEC, store.batches(4), mode="gpumd"))
    return {"xyz": xyz, "h5": h5, "qscaler": folder / "qscaler.json"}


def train_command(ds: dict[str, Path], out: Path, *more: str) -> list[str]:
    return [sys.executable, "-m", "nepcore", "train", "--stage", "1", "--data", str(ds["h5"]),
            "--qscaler", str(ds["qscaler"]), "--out-dir", str(out), "--epochs", "3", "--batch-size", "4",
            "--precision", "float64", "--device", "cpu", "--checkpoint-every", "1", "--no-progress",
            *more]  # fmt: skip


def train(ds: dict[str, Path], out: Path, *more: str) -> subprocess.CompletedProcess:
    """``nepcore train`` in a subprocess (its log goes to stderr as for a user)."""
    return subprocess.run(
        train_command(ds, out, *more),
        check=False,
        env=ENV,
        capture_output=True,
        text=True,
        timeout=600,
    )
