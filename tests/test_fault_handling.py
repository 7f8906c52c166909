"""Faults and bad input (issue 8): each test reproduces a fault and checks the one-line error
(message, exit status) and what is left on disk.

Unwritable outputs are made two ways: a folder without write permission (skipped when the
tests run as root, who writes there anyway) and a path under a regular file (ENOTDIR, which
stops root too). A full disk is simulated by making the file writes raise ENOSPC.
"""

from __future__ import annotations

import errno
import json
import os
import stat
from pathlib import Path

import numpy as np
import pytest

from nepcore.cli import main as cli_main
from nepcore.errors import NepcoreError, OutputError

TYPES = ["Cu", "Pd", "Ni"]
ARCH = ["--type", *TYPES, "--cutoff", "4", "3", "--n-max", "3", "3", "--basis-size", "3", "3",
        "--l-max", "4", "--neuron", "6"]


def run_cli(args: list[str], capsys) -> tuple[int, str, str]:
    code = cli_main([str(a) for a in args])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def one_error_line(err: str) -> str:
    lines = [line for line in err.strip().splitlines() if line.startswith("error:")]
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


@pytest.fixture(scope="module")
def work(tmp_path_factory) -> dict[str, Path]:
    """demo.xyz (12 frames), its dataset, qscaler.json and a 1-epoch stage-1 model."""
    root = tmp_path_factory.mktemp("faults")
    paths = {"root": root, "xyz": root / "demo.xyz", "h5": root / "structures.h5",
             "qscaler": root / "qscaler.json", "stage": root / "stage1"}
    assert cli_main(["demo-data", "-o", str(paths["xyz"]), "--n-frames", "12", "--seed", "3"]) == 0
    assert cli_main(["convert", str(paths["xyz"]), "-o", str(paths["h5"]), "--no-progress",
                     "--split", "0.7", "0.15", "0.15"]) == 0
    assert cli_main(["qscaler", str(paths["h5"]), "-o", str(paths["qscaler"]), *ARCH]) == 0
    assert cli_main(["train", "--stage", "1", "--data", str(paths["h5"]), "--qscaler", str(paths["qscaler"]),
                     "--out-dir", str(paths["stage"]), "--epochs", "1", "--no-progress"]) == 0
    paths["model"] = paths["stage"] / "nep.txt"
    return paths


# ---- unwritable outputs (item 6) ---------------------------------------------------------------

#: command -> (arguments with {out} for the output, the output the message must name)
WRITERS = {
    "convert": (["convert", "{xyz}", "-o", "{out}/s.h5", "--no-progress"], "{out}/s.h5"),
    "evaluate": (["evaluate", "--model", "{model}", "--data", "{h5}", "--out-dir", "{out}/eval"], "{out}/eval"),
    "evaluate-into": (["evaluate", "--model", "{model}", "--data", "{h5}", "--out-dir", "{out}"],
                      "{out}/energy_test.out"),
    "export": (["export", "--model", "{model}", "--data", "{h5}", "-o", "{out}/nep.txt"], "{out}/nep.txt"),
    "predict": (["predict", "--model", "{model}", "{xyz}", "-o", "{out}/pred"], "{out}/pred"),
    "predict-into": (["predict", "--model", "{model}", "{xyz}", "-o", "{out}"], "{out}/energy_train.out"),
    "demo-data": (["demo-data", "-o", "{out}/demo.xyz", "--n-frames", "2"], "{out}/demo.xyz"),
    "export-xyz": (["export-xyz", "{h5}", "-o", "{out}/train.xyz"], "{out}/train.xyz"),
    "qscaler": (["qscaler", "{h5}", "-o", "{out}/q.json", *ARCH], "{out}/q.json"),
    "train": (["train", "--stage", "1", "--data", "{h5}", "--qscaler", "{qscaler}", "--out-dir", "{out}/st",
               "--epochs", "1", "--no-progress"], "{out}/st"),
}


def _fill(template: str, work: dict[str, Path], out: Path) -> str:
    return template.format(out=out, **{k: v for k, v in work.items() if k != "out"})


@pytest.mark.parametrize("how", ["read-only folder", "under a file"])
@pytest.mark.parametrize("command", list(WRITERS))
def test_unwritable_output_is_one_line_naming_the_output(work, tmp_path, capsys, command, how) -> None:
    args, target = WRITERS[command]
    if how == "read-only folder":
        out = tmp_path / "readonly"
        out.mkdir()
        out.chmod(stat.S_IRUSR | stat.S_IXUSR)
        try:
            (out / "probe").write_text("")
            (out / "probe").unlink()
            pytest.skip("running as root: a read-only folder is still writable")
        except PermissionError:
            pass
        expected = "permission denied"
    else:
        (tmp_path / "plain_file").write_text("not a folder\n")
        out = tmp_path / "plain_file"
        expected = "not a folder"
        if command.endswith("-into"):
            target = "{out}"  # the output folder itself is the file in the way
    try:
        code, _, err = run_cli([_fill(a, work, out) for a in args], capsys)
        line = one_error_line(err)
        assert code == 1
        assert line == f"error: cannot write {_fill(target, work, out)}: " + line.split(": ", 2)[2], line
        assert expected in line and "Errno" not in line and ".tmp" not in line
        if out.is_dir():
            assert list(out.iterdir()) == []  # no temporary or partial file left
    finally:
        if out.is_dir():
            out.chmod(stat.S_IRWXU)


def _enospc(*args, **kwargs):
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def test_disk_full_while_training_names_the_file_and_leaves_no_temporary(work, tmp_path, capsys,
                                                                         monkeypatch) -> None:
    """Every checkpoint write raises ENOSPC: one line "cannot write .../checkpoint.pt: disk full",
    exit 1, no temporary files; the same for the nep.txt / loss.out writers."""
    import nepcore.training.checkpoint as checkpoint_module

    out = tmp_path / "st"
    args = ["train", "--stage", "1", "--data", work["h5"], "--qscaler", work["qscaler"], "--out-dir", out,
            "--epochs", "2", "--checkpoint-every", "1", "--no-progress"]
    real_fdopen = os.fdopen

    def full_disk_fdopen(fd, mode="r", *a, **k):
        handle = real_fdopen(fd, mode, *a, **k)
        if "b" in mode:
            handle.write = _enospc  # the checkpoint bytes
        return handle

    monkeypatch.setattr(checkpoint_module.os, "fdopen", full_disk_fdopen)
    code, _, err = run_cli(args, capsys)
    line = one_error_line(err)
    assert code == 1
    assert line == f"error: cannot write {out / 'resume.pt'}: disk full (no space left on device, errno ENOSPC)"
    assert sorted(p.name for p in out.iterdir()) == []  # the temporary was removed
    monkeypatch.undo()

    import nepcore.training.outputs as outputs_module

    monkeypatch.setattr(outputs_module.Path, "write_text", _enospc)
    code, _, err = run_cli(args, capsys)
    line = one_error_line(err)
    assert code == 1 and line.startswith(f"error: cannot write {out / 'loss.out'}: disk full"), line
    assert not [p.name for p in out.iterdir() if p.name.startswith(".")]


def test_output_error_is_a_nepcore_error_and_an_os_error() -> None:
    err = OutputError.from_os_error("a/b.txt", OSError(errno.ENOSPC, "No space left on device", "a/.b.txt.x.tmp"))
    assert isinstance(err, NepcoreError) and isinstance(err, OSError) and err.errno == errno.ENOSPC
    assert str(err) == "cannot write a/b.txt: disk full (no space left on device, errno ENOSPC)"
