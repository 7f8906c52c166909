"""The workflow under hostile input: file names that reach the shell, stale checkpoints,
warnings that must reach the console. Every test runs snakemake in a fresh ``tmp_path``."""

from __future__ import annotations

from pathlib import Path

import h5py
import pytest
from helpers.workflow import TINY_CONFIG, job_blocks, output_of, snakemake, write_config

pytestmark = pytest.mark.slow  # every test runs snakemake in a subprocess


def tiny_config_on(files: list[str]) -> dict:
    """The tiny end-to-end config with its dataset read from ``files`` (globs allowed)."""
    config = {"datasets": {"tiny": {"files": files}}, "runs": TINY_CONFIG["runs"]}
    return config


def test_hostile_and_spaced_file_names_reach_convert_quoted(tmp_path: Path) -> None:
    """A file called ``$(touch PWNED).xyz`` matched by a glob must not run ``touch``, and a
    file name with a space must stay one argument (both are converted)."""
    from nepcore.data.demo import write_demo_dataset

    data = tmp_path / "data"
    write_demo_dataset(data / "$(touch PWNED).xyz", seed=1, n_frames=6)
    write_demo_dataset(data / "my data.xyz", seed=2, n_frames=5)
    cfg = write_config(tmp_path / "hostile.yaml", tiny_config_on(["data/*.xyz"]))
    target = "results/data/tiny/structures.h5"

    dry = snakemake(tmp_path, "-n", "-p", "--cores", "1", target, configfile=cfg)
    assert dry.returncode == 0, output_of(dry)
    shells = {job["rule"]: job["shell"] for job in job_blocks(output_of(dry))}
    assert "'data/$(touch PWNED).xyz' 'data/my data.xyz'" in shells["convert"]
    # no --forces-key by default: convert takes ASE's forces, else GPUMD's force column
    assert "--forces-key" not in shells["convert"]

    proc = snakemake(tmp_path, "--cores", "1", target, configfile=cfg)
    assert proc.returncode == 0, output_of(proc) + (tmp_path / "logs/convert/tiny.log").read_text()
    assert not list(tmp_path.rglob("PWNED")) and not (Path.cwd() / "PWNED").exists()
    with h5py.File(tmp_path / target) as f:
        assert f.attrs["n_frames"] == 11
        assert sorted(p.decode() if isinstance(p, bytes) else p for p in f["sources/path"][()]) == [
            "data/$(touch PWNED).xyz",
            "data/my data.xyz",
        ]


def test_training_rules_restart_a_stale_checkpoint_instead_of_blocking(
    tmp_path: Path,
) -> None:
    """A changed stage setting (or changed data) after an interruption must not block every
    rerun: the rules pass --restart-on-mismatch, so nepcore train moves the stale resume.pt
    aside, says so in the log and starts afresh (tested in test_training_faults.py)."""
    cfg = write_config(tmp_path / "tiny.yaml", TINY_CONFIG)
    dry = snakemake(tmp_path, "-n", "-p", "--cores", "1", "--resources", "gpu=1", configfile=cfg)
    assert dry.returncode == 0, output_of(dry)
    trains = [job["shell"] for job in job_blocks(output_of(dry)) if job["rule"].startswith("train_stage")]
    assert len(trains) == 2 and all("--restart-on-mismatch" in shell for shell in trains), trains


def test_interrupted_stage_with_changed_setting_starts_afresh(tmp_path: Path) -> None:
    """Issue 8: after an interruption, a changed stage setting blocked every rerun ("the
    checkpoint does not match this run") until resume.pt was deleted by hand. Now the stage
    moves it aside, says so in its log and on the console, and trains afresh."""
    import json
    import subprocess
    import sys

    cfg = write_config(tmp_path / "tiny.yaml", TINY_CONFIG)
    qscaler = "results/tiny/model/qscaler.json"
    assert snakemake(tmp_path, "--cores", "1", qscaler, configfile=cfg).returncode == 0
    # the interrupted run: a running checkpoint made with another learning rate
    stage1 = tmp_path / "results/tiny/stage1"
    interrupted = subprocess.run(
        [sys.executable, "-m", "nepcore", "train", "--stage", "1", "--data",
         str(tmp_path / "results/data/tiny/structures.h5"), "--qscaler", str(tmp_path / qscaler),
         "--out-dir", str(stage1), "--epochs", "1", "--batch-size", "8", "--lr", "0.05",
         "--no-progress"],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert interrupted.returncode == 0, interrupted.stderr
    (stage1 / "checkpoint.pt").rename(stage1 / "resume.pt")
    for name in ("nep.txt", "nep_best.txt", "loss.out", "status.json"):
        (stage1 / name).unlink()  # snakemake deletes the outputs of a killed job

    proc = snakemake(tmp_path, "--cores", "1", "results/tiny/stage1/nep.txt", configfile=cfg)
    text = output_of(proc)
    assert proc.returncode == 0, text
    log = (tmp_path / "logs/train_stage1/tiny.log").read_text()
    assert "resume.pt does not match this run (setting lr: 0.05 in the checkpoint, 0.01 now" in log
    assert "moved it to resume.pt.stale and starting stage 1 afresh" in log
    assert "moved it to resume.pt.stale" in text  # the console summary repeats it
    assert (stage1 / "resume.pt.stale").exists() and not (stage1 / "resume.pt").exists()
    status = json.loads((stage1 / "status.json").read_text())
    assert status["epoch"] == 3 and status["settings"]["lr"] == 0.01


def test_warnings_in_rule_logs_reach_the_console(tmp_path: Path) -> None:
    """qscaler's warning about an unknown nep.in keyword goes to logs/qscaler/<run>.log; the
    run's console output must repeat it at the end (and a later run must not repeat old ones)."""
    (tmp_path / "nep.in").write_text(
        "type 3 Cu Pd Ni\ncutoff 4 3\nn_max 2 2\nbasis_size 4 4\nl_max 2 0 0\nneuron 8\nfrobnicate 1\n"
    )
    config = {
        "datasets": TINY_CONFIG["datasets"],
        "runs": {"tiny": {"dataset": "tiny", "nep_in": "nep.in"}},
    }
    cfg = write_config(tmp_path / "warn.yaml", config)
    target = "results/tiny/model/qscaler.json"
    proc = snakemake(tmp_path, "--cores", "1", target, configfile=cfg)
    text = output_of(proc)
    assert proc.returncode == 0, text
    assert "Warnings in the logs of this run (1):" in text, text[-3000:]
    assert "logs/qscaler/tiny.log: warning: nep.in, line 7: 'frobnicate' is not an architecture keyword" in text

    again = snakemake(tmp_path, "--cores", "1", target, configfile=cfg)
    assert again.returncode == 0 and "Warnings in the logs" not in output_of(again)
