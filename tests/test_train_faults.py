"""Training under faults the issue-8 probes found: data without forces, stale checkpoints
after the data or the settings changed, two runs into one folder. Each test reproduces the
fault through the command line and checks the message, exit status and files left."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import torch

from nepcore.cli import main as cli_main
from nepcore.data.demo import make_demo_dataset
from nepcore.data.store import StreamDataStore
from nepcore.spec import ModelSpec
from nepcore.training.qscaler import compute_q_scaler, write_qscaler

ENV = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
SPEC = ModelSpec(("Cu", "Pd", "Ni"), 4.0, 3.0, 2, 2, 4, 4, 2, neurons=6)


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


def make_dataset(
    folder: Path, forces: bool = True, n_frames: int = 12
) -> dict[str, Path]:
    """A converted tiny dataset (8 train, 4 valid frames) and its qscaler.json."""
    from nepcore.data.convert import convert

    folder.mkdir(parents=True, exist_ok=True)
    xyz = write_xyz(
        folder / "raw.xyz", make_demo_dataset(seed=1, n_frames=n_frames), forces
    )
    h5 = folder / "structures.h5"
    convert([str(xyz)], h5, fractions=(2 / 3, 1 / 3, 0.0), progress=False)
    store = StreamDataStore.from_hdf5(h5, SPEC, split="train", dtype=torch.float64)
    write_qscaler(
        folder / "qscaler.json", compute_q_scaler(SPEC, store.batches(4), mode="gpumd")
    )
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


# ---- item 1: data without forces -----------------------------------------------------------------


def test_training_without_forces_says_so_and_never_prints_f_zero(
    tmp_path: Path, capsys
) -> None:
    ds = make_dataset(tmp_path / "data", forces=False)
    proc = train(ds, tmp_path / "stage1")
    err = proc.stderr
    assert proc.returncode == 0, err
    first = err.splitlines()[0]
    assert first.startswith(
        "warning: the training split has no forces labels (0 of 8 frames)"
    ), err
    assert "F n/a" in err and "F 0.0" not in err
    status = json.loads((tmp_path / "stage1" / "status.json").read_text())
    assert status["labels"]["train"] == {"energy": 8, "forces": 0, "virial": 0}
    assert any("no forces labels" in w for w in status["warnings"])
    assert status["last"]["train_rmse_f"] is None and status["last"]["train_rmse_e"] > 0

    assert cli_main(["evaluate", "--model", str(tmp_path / "stage1" / "nep.txt"), "--data", str(ds["h5"]),
                     "--out-dir", str(tmp_path / "eval"), "--split", "valid"]) == 0  # fmt: skip
    err = capsys.readouterr().err
    metrics = json.loads((tmp_path / "eval" / "metrics.json").read_text())
    assert metrics["splits"]["train"]["force"] is None
    assert any("not trained on force" in w for w in metrics["warnings"]), metrics[
        "warnings"
    ]
    assert "warning: train force: the training split has no force labels" in err


def test_gpumd_force_column_is_not_dropped_by_a_forces_key(
    shared_data: Path, tmp_path: Path, capsys
) -> None:
    """Issue 8 repro: PbTe's GPUMD ``force`` column with ``--forces-key forces``."""
    src = shared_data / "PbTe" / "train.xyz"
    assert cli_main(["convert", str(src), "-o", str(tmp_path / "a.h5"), "--forces-key", "forces",
                     "--no-progress"]) == 1  # fmt: skip
    err = capsys.readouterr().err
    assert err.startswith(
        f"error: {src}: frame 0: forces: no 'forces' column, but the frame has a 'force'"
    )
    assert err.count("\n") == 1 and not (tmp_path / "a.h5").exists()
    assert (
        cli_main(["convert", str(src), "-o", str(tmp_path / "b.h5"), "--no-progress"])
        == 0
    )
    assert "forces 25/25" in capsys.readouterr().out
