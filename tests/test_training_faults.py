"""Training under faults the issue-8 probes found: data without forces, stale checkpoints
after the data or the settings changed, two runs into one folder. Each test reproduces the
fault through the command line and checks the message, exit status and files left."""

from __future__ import annotations

import json
import logging
import signal
import subprocess
import time
from pathlib import Path

import pytest
from helpers.tiny_training import ENV, make_dataset, train, train_command, write_xyz

from nepcore.cli import main as cli_main

# ---- item 1: data without forces -----------------------------------------------------------------


@pytest.mark.slow  # subprocess
def test_training_without_forces_says_so_and_never_prints_f_zero(tmp_path: Path, capsys) -> None:
    ds = make_dataset(tmp_path / "data", forces=False)
    proc = train(ds, tmp_path / "stage1")
    err = proc.stderr
    assert proc.returncode == 0, err
    first = err.splitlines()[0]
    assert first.startswith("warning: the training split has no forces labels (0 of 8 frames)"), err
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
    assert any("not trained on force" in w for w in metrics["warnings"]), metrics["warnings"]
    assert "warning: train force: the training split has no force labels" in err


def test_gpumd_force_column_is_not_dropped_by_a_forces_key(shared_data: Path, tmp_path: Path, capsys) -> None:
    """Issue 8 repro: PbTe's GPUMD ``force`` column with ``--forces-key forces``."""
    src = shared_data / "PbTe" / "train.xyz"
    assert cli_main(["convert", str(src), "-o", str(tmp_path / "a.h5"), "--forces-key", "forces",
                     "--no-progress"]) == 1  # fmt: skip
    err = capsys.readouterr().err
    assert err.startswith(f"error: {src}: frame 0: forces: no 'forces' column, but the frame has a 'force'")
    assert err.count("\n") == 1 and not (tmp_path / "a.h5").exists()
    assert cli_main(["convert", str(src), "-o", str(tmp_path / "b.h5"), "--no-progress"]) == 0
    assert "forces 25/25" in capsys.readouterr().out


# ---- item 2: a checkpoint made on other data, or with more epochs than asked -------------------


def relabel(ds: dict[str, Path], shift: float = 0.05) -> None:
    """Change every energy of the raw file (same frames, same positions) and convert again."""
    from ase.io import read

    from nepcore.data.convert import convert

    frames = read(ds["xyz"], index=":")
    for atoms in frames:
        atoms.calc.results["energy"] += shift * len(atoms)
    write_xyz(ds["xyz"], frames)
    convert([str(ds["xyz"])], ds["h5"], fractions=(2 / 3, 1 / 3, 0.0), progress=False)


def interrupted(ds: dict[str, Path], out: Path) -> int:
    """Start a long stage, SIGTERM it (as SLURM does) once resume.pt exists; its epoch."""
    from nepcore.training.checkpoint import load_checkpoint

    proc = subprocess.Popen(train_command(ds, out, "--epochs", "200"), env=ENV, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)  # fmt: skip
    deadline = time.monotonic() + 300
    while not (out / "resume.pt").exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.01)
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=120)
    assert not (out / "checkpoint.pt").exists()
    return int(load_checkpoint(out / "resume.pt")["epoch"])


@pytest.mark.slow  # subprocess
def test_resume_after_the_labels_changed_refuses_or_restarts_cleanly(
    tmp_path: Path,
) -> None:
    ds = make_dataset(tmp_path / "data")
    out = tmp_path / "stage1"
    assert interrupted(ds, out) >= 1
    relabel(ds)

    refused = train(ds, out)
    assert refused.returncode == 1
    assert refused.stderr.startswith(f"error: {out / 'resume.pt'}: the checkpoint does not match this run "
                                     "(the training or validation data changed"), refused.stderr  # fmt: skip
    assert refused.stderr.count("\n") == 1 and "--restart-on-mismatch" in refused.stderr
    assert (out / "resume.pt").exists()  # left as it was

    restarted = train(ds, out, "--restart-on-mismatch")
    assert restarted.returncode == 0, restarted.stderr
    assert "moved it to resume.pt.stale and starting stage 1 afresh" in restarted.stderr
    assert "resuming" not in restarted.stderr
    assert (out / "resume.pt.stale").exists() and not (out / "resume.pt").exists()
    fresh = train(ds, tmp_path / "fresh")
    assert fresh.returncode == 0, fresh.stderr
    for name in (
        "nep.txt",
        "nep_best.txt",
        "loss.out",
    ):  # exactly a run on the new data
        assert (out / name).read_bytes() == (tmp_path / "fresh" / name).read_bytes(), name


def train_here(ds: dict[str, Path], out: Path, capsys, caplog, *more: str) -> tuple[int, str, str]:
    """``nepcore train`` in this process (no interpreter start): exit status, stderr, log."""
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="nepcore"):
        status = cli_main(train_command(ds, out, *more)[3:])
    return status, capsys.readouterr().err, "\n".join(r.getMessage() for r in caplog.records)


def test_finished_checkpoint_is_not_returned_after_the_data_changed(tmp_path: Path, capsys, caplog) -> None:
    ds = make_dataset(tmp_path / "data")
    out = tmp_path / "stage1"
    assert train_here(ds, out, capsys, caplog, "--epochs", "2")[0] == 0
    before = (out / "nep.txt").read_bytes()
    status, _, log = train_here(ds, out, capsys, caplog, "--epochs", "2")
    assert status == 0 and "resuming stage 1" in log  # unchanged data: the finished stage
    relabel(ds, shift=0.0)  # converting again with the same labels changes nothing
    assert train_here(ds, out, capsys, caplog, "--epochs", "2")[0] == 0
    relabel(ds)
    status, err, _ = train_here(ds, out, capsys, caplog, "--epochs", "2")
    assert status == 1 and "the training or validation data changed" in err, err
    assert err.startswith(f"error: {out / 'checkpoint.pt'}: the checkpoint does not match this run")
    assert (out / "nep.txt").read_bytes() == before  # nothing overwritten by the refusal


def test_fewer_epochs_than_already_run_are_not_kept(tmp_path: Path, capsys, caplog) -> None:
    ds = make_dataset(tmp_path / "data")
    out = tmp_path / "stage1"
    assert train_here(ds, out, capsys, caplog, "--epochs", "4")[0] == 0
    status, err, _ = train_here(ds, out, capsys, caplog, "--epochs", "2")
    assert status == 1, err
    assert "it has run 4 epochs, more than epochs=2" in err and err.count("\n") == 1
    status, err, log = train_here(ds, out, capsys, caplog, "--epochs", "2", "--restart-on-mismatch")
    assert status == 0, err
    assert "moved it to checkpoint.pt.stale and starting stage 1 afresh" in log
    stage = json.loads((out / "status.json").read_text())
    assert stage["epoch"] == 2 and stage["max_epochs"] == 2  # was "epoch 4 of max 2"
    assert len((out / "loss.out").read_text().splitlines()) == 1 + 2
    assert (out / "checkpoint.pt.stale").exists()


# ---- item 10: one stage per folder at a time ------------------------------------------------------


def test_second_train_into_a_locked_folder_fails_at_once(tmp_path: Path, capsys, caplog) -> None:
    from nepcore.training.outputs import stage_lock

    ds = make_dataset(tmp_path / "data")
    out = tmp_path / "stage1"
    out.mkdir()
    with stage_lock(out):  # as a running stage holds it (another open file: flock conflicts)
        status, err, _ = train_here(ds, out, capsys, caplog)
    assert status == 1
    assert err == (
        f"error: {out}: another nepcore train is running in this folder (it holds "
        f"{out / 'train.lock'}); wait for it to end, stop it, or use another --out-dir\n"
    )
    assert sorted(p.name for p in out.iterdir()) == ["train.lock"]  # nothing written
    assert train_here(ds, out, capsys, caplog)[0] == 0  # the lock goes with its holder
