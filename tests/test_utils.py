"""Every file nepcore writes is atomic and gets the umask's permissions (as ``open()`` would).

The unit tests check :mod:`nepcore._utils` directly; the pipeline test runs every command the
workflow runs (demo-data, convert, export-xyz, qscaler, train 1 and 2, evaluate, export,
predict) on a tiny dataset under ``umask 022`` and checks the mode of every file it finds.
"""

from __future__ import annotations

import contextlib
import os
import stat
from pathlib import Path

import pytest

from nepcore._utils import atomic_open, atomic_path, atomic_write_text


@contextlib.contextmanager
def umask(mask: int):
    old = os.umask(mask)
    try:
        yield
    finally:
        os.umask(old)


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.mark.parametrize("mask", [0o022, 0o027, 0o002])
def test_atomic_writers_give_the_umask_permissions(tmp_path: Path, mask: int) -> None:
    with umask(mask):
        atomic_write_text(tmp_path / "a.txt", "text\n")
        with atomic_open(tmp_path / "b.bin", "wb") as fh:
            fh.write(b"\0")
        with atomic_path(tmp_path / "sub" / "c.dat") as tmp:
            tmp.write_bytes(b"x")  # a writer that truncates the prepared file keeps its mode
        with open(tmp_path / "plain.txt", "w") as fh:
            fh.write("reference")
    expected = mode(tmp_path / "plain.txt")
    assert expected == 0o666 & ~mask
    for path in (tmp_path / "a.txt", tmp_path / "b.bin", tmp_path / "sub" / "c.dat"):
        assert mode(path) == expected, path
    assert (tmp_path / "a.txt").read_text() == "text\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.txt", "b.bin", "plain.txt", "sub"]


def test_a_failed_write_leaves_the_old_file_and_no_temporary(tmp_path: Path) -> None:
    target = tmp_path / "nep.txt"
    target.write_text("old\n")
    with pytest.raises(RuntimeError), atomic_open(target) as fh:
        fh.write("half")
        raise RuntimeError("interrupted")
    with pytest.raises(KeyboardInterrupt), atomic_path(target) as tmp:
        tmp.write_text("half")
        raise KeyboardInterrupt
    assert target.read_text() == "old\n"
    assert [p.name for p in tmp_path.iterdir()] == ["nep.txt"]


@pytest.mark.slow
def test_every_file_of_the_pipeline_has_the_umask_permissions(tmp_path: Path) -> None:
    from nepcore.cli import main

    d = tmp_path
    flags = ["--epochs", "1", "--batch-size", "4", "--precision", "float64", "--device", "cpu", "--no-progress"]
    commands = [
        ["demo-data", "-o", f"{d}/demo.xyz", "--n-frames", "12"],
        ["convert", f"{d}/demo.xyz", "-o", f"{d}/data/structures.h5", "--split", "0.5", "0.25", "0.25",
         "--no-progress"],
        ["export-xyz", f"{d}/data/structures.h5", "--split", "train", "-o", f"{d}/data/train.xyz"],
        ["qscaler", f"{d}/data/structures.h5", "-o", f"{d}/model/qscaler.json", "--type", "Cu", "Pd", "Ni",
         "--cutoff", "4", "3", "--n-max", "2", "2", "--basis-size", "2", "2", "--l-max", "2", "--neuron", "3"],
        ["train", "--stage", "1", "--data", f"{d}/data/structures.h5", "--qscaler", f"{d}/model/qscaler.json",
         "--out-dir", f"{d}/stage1", *flags],
        ["train", "--stage", "2", "--data", f"{d}/data/structures.h5", "--qscaler", f"{d}/model/qscaler.json",
         "--init", f"{d}/stage1/checkpoint.pt", "--out-dir", f"{d}/stage2", *flags],
        ["evaluate", "--model", f"{d}/stage2/nep.txt", "--data", f"{d}/data/structures.h5",
         "--out-dir", f"{d}/eval", "--loss", f"{d}/stage1/loss.out", f"{d}/stage2/loss.out",
         "--committee", f"{d}/stage1/nep.txt", f"{d}/stage2/nep.txt", "--device", "cpu"],
        ["export", "--model", f"{d}/stage2/nep_best.txt", "--data", f"{d}/data/structures.h5",
         "-o", f"{d}/final/nep.txt"],
        ["predict", "--model", f"{d}/final/nep.txt", "-o", f"{d}/predict", f"{d}/demo.xyz", "--descriptors"],
    ]  # fmt: skip
    with umask(0o022):
        for argv in commands:
            assert main(argv) == 0, argv
    files = sorted(p for p in d.rglob("*") if p.is_file())
    names = {p.relative_to(d).as_posix() for p in files}
    expected = {
        "demo.xyz", "data/structures.h5", "data/train.xyz", "model/qscaler.json", "final/nep.txt",
        "stage1/checkpoint.pt", "stage1/nep.txt", "stage1/loss.out", "stage1/status.json",
        "stage2/checkpoint.pt", "stage2/nep_best.txt", "eval/metrics.json", "eval/energy_test.out",
        "eval/force_test.out", "eval/virial_test.out", "eval/stress_test.out", "eval/parity.png",
        "eval/loss.png", "predict/energy_train.out", "predict/descriptor.out",
    }  # fmt: skip
    assert expected <= names, expected - names
    assert not [n for n in names if "/." in n or n.startswith(".")], "temporary files left behind"
    wrong = {p.relative_to(d).as_posix(): oct(mode(p)) for p in files if mode(p) != 0o644}
    assert not wrong, wrong
