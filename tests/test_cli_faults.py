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
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from nepcore.cli import main as cli_main
from nepcore.errors import NepcoreError, OutputError

TYPES = ["Cu", "Pd", "Ni"]
ARCH = [
    "--type",
    *TYPES,
    "--cutoff",
    "4",
    "3",
    "--n-max",
    "3",
    "3",
    "--basis-size",
    "3",
    "3",
    "--l-max",
    "4",
    "--neuron",
    "6",
]


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
    paths = {
        "root": root,
        "xyz": root / "demo.xyz",
        "h5": root / "structures.h5",
        "qscaler": root / "qscaler.json",
        "stage": root / "stage1",
    }
    assert cli_main(["demo-data", "-o", str(paths["xyz"]), "--n-frames", "12", "--seed", "3"]) == 0
    assert (
        cli_main(
            [
                "convert",
                str(paths["xyz"]),
                "-o",
                str(paths["h5"]),
                "--no-progress",
                "--split",
                "0.7",
                "0.15",
                "0.15",
            ]
        )
        == 0
    )
    assert cli_main(["qscaler", str(paths["h5"]), "-o", str(paths["qscaler"]), *ARCH]) == 0
    assert (
        cli_main(
            [
                "train",
                "--stage",
                "1",
                "--data",
                str(paths["h5"]),
                "--qscaler",
                str(paths["qscaler"]),
                "--out-dir",
                str(paths["stage"]),
                "--epochs",
                "1",
                "--no-progress",
            ]
        )
        == 0
    )
    paths["model"] = paths["stage"] / "nep.txt"
    return paths


# ---- unwritable outputs (item 6) ---------------------------------------------------------------

#: command -> (arguments with {out} for the output, the output the message must name)
WRITERS = {
    "convert": (
        ["convert", "{xyz}", "-o", "{out}/s.h5", "--no-progress"],
        "{out}/s.h5",
    ),
    "evaluate": (
        ["evaluate", "--model", "{model}", "--data", "{h5}", "--out-dir", "{out}/eval"],
        "{out}/eval",
    ),
    "evaluate-into": (
        ["evaluate", "--model", "{model}", "--data", "{h5}", "--out-dir", "{out}"],
        "{out}/energy_test.out",
    ),
    "export": (
        ["export", "--model", "{model}", "--data", "{h5}", "-o", "{out}/nep.txt"],
        "{out}/nep.txt",
    ),
    "predict": (
        ["predict", "--model", "{model}", "{xyz}", "-o", "{out}/pred"],
        "{out}/pred",
    ),
    "predict-into": (
        ["predict", "--model", "{model}", "{xyz}", "-o", "{out}"],
        "{out}/energy_train.out",
    ),
    "demo-data": (
        ["demo-data", "-o", "{out}/demo.xyz", "--n-frames", "2"],
        "{out}/demo.xyz",
    ),
    "export-xyz": (["export-xyz", "{h5}", "-o", "{out}/train.xyz"], "{out}/train.xyz"),
    "qscaler": (["qscaler", "{h5}", "-o", "{out}/q.json", *ARCH], "{out}/q.json"),
    "train": (
        [
            "train",
            "--stage",
            "1",
            "--data",
            "{h5}",
            "--qscaler",
            "{qscaler}",
            "--out-dir",
            "{out}/st",
            "--epochs",
            "1",
            "--no-progress",
        ],
        "{out}/st",
    ),
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


def _full_disk(monkeypatch, binary: bool) -> None:
    """Writes of the atomic writer's binary (or text) files raise ENOSPC, as on a full disk."""
    import builtins

    import nepcore._utils as utils_module

    def full_disk_open(file, mode="r", *args, **kwargs):
        handle = builtins.open(file, mode, *args, **kwargs)
        if "w" in mode and ("b" in mode) == binary:
            handle.write = _enospc
        return handle

    monkeypatch.setattr(utils_module, "open", full_disk_open, raising=False)


@pytest.mark.parametrize(("binary", "first_file"), [(True, "resume.pt"), (False, "nep.txt")])
def test_disk_full_while_training_names_the_file_and_leaves_no_temporary(
    work, tmp_path, capsys, monkeypatch, binary, first_file
) -> None:
    """Before: "... unexpected pos 9216 vs 9110" (torch.save on a full disk). Now the checkpoint
    is serialised in memory and written plainly, so a full disk is ENOSPC: one line naming
    the file and "disk full", exit 1, and no temporary file left; the same for the text
    outputs (nep.txt, loss.out, status.json)."""
    out = tmp_path / "st"
    _full_disk(monkeypatch, binary)
    code, _, err = run_cli(
        [
            "train",
            "--stage",
            "1",
            "--data",
            work["h5"],
            "--qscaler",
            work["qscaler"],
            "--out-dir",
            out,
            "--epochs",
            "2",
            "--checkpoint-every",
            "1",
            "--no-progress",
        ],
        capsys,
    )
    line = one_error_line(err)
    assert code == 1
    assert line == f"error: cannot write {out / first_file}: disk full (no space left on device, errno ENOSPC)"
    assert not [p.name for p in out.iterdir() if p.name.startswith(".")]  # no temporary left
    assert not (out / first_file).exists()


def test_output_error_is_a_nepcore_error_and_an_os_error() -> None:
    err = OutputError.from_os_error("a/b.txt", OSError(errno.ENOSPC, "No space left on device", "a/.b.txt.x.tmp"))
    assert isinstance(err, NepcoreError) and isinstance(err, OSError) and err.errno == errno.ENOSPC
    assert str(err) == "cannot write a/b.txt: disk full (no space left on device, errno ENOSPC)"


# ---- legacy nep3 export, a folder as model, empty Atoms (item 6) -------------------------------


def test_export_of_a_legacy_nep3_file_skips_calorine_with_a_note(tmp_path, capsys) -> None:
    """calorine refuses NEP3 ("Unsupported NEP version 3", a traceback before): the file is
    exported as it is, with a note that the calorine check was skipped and why."""
    from ase.build import bulk
    from ase.io import write

    from nepcore.spec import ModelSpec

    frames = []
    for k in range(4):
        atoms = bulk("Si", "diamond", 5.43, cubic=True)
        atoms[0].symbol = "C"
        atoms.rattle(0.05, seed=k)
        atoms.info["energy"] = -1.0
        frames.append(atoms)
    write(tmp_path / "sic.xyz", frames)
    h5 = tmp_path / "sic.h5"
    assert cli_main(["convert", str(tmp_path / "sic.xyz"), "-o", str(h5), "--no-progress"]) == 0
    model = tmp_path / "nep3.txt"
    # a legacy nep3 file: one network shared by both types (GPUMD <= 3.x layout)
    spec = ModelSpec(("Si", "C"), 5.0, 4.0, 2, 1, 3, 2, 4, neurons=3, flags=(True, True))
    n_body = (spec.dim + 2) * spec.neurons + 1 + spec.n_descriptor_params + spec.dim
    body = np.random.default_rng(3).uniform(0.1, 1.0, n_body)
    header = ["nep3 2 Si C", "cutoff 5 4 50 20", "n_max 2 1", "basis_size 3 2", "l_max 4 2 1", "ANN 3 0"]
    model.write_text("\n".join(header + [repr(v) for v in body.tolist()]) + "\n")
    capsys.readouterr()
    code, out, err = run_cli(["export", "--model", model, "--data", h5, "-o", tmp_path / "final.txt"], capsys)
    assert code == 0, err
    assert "calorine check skipped: calorine reads only NEP4 files" in out and "legacy nep3 file" in out
    assert (tmp_path / "final.txt").read_bytes() == model.read_bytes()


def test_predict_with_a_folder_as_model_is_one_line(work, tmp_path, capsys) -> None:
    code, _, err = run_cli(["predict", "--model", work["stage"], work["xyz"], "-o", tmp_path / "p"], capsys)
    assert code != 0
    assert one_error_line(err) == f"error: {work['stage']}: is a folder, not a nep.txt file"
    assert not (tmp_path / "p").exists()


def test_calculator_on_empty_atoms_gives_zero_energy_and_no_forces(work) -> None:
    from ase import Atoms

    from nepcore.calculator import NEP

    for pbc in (True, False):
        atoms = Atoms(cell=[4.0, 4.0, 4.0], pbc=pbc)
        atoms.calc = NEP(work["model"])
        assert atoms.get_potential_energy() == 0.0
        assert atoms.get_forces().shape == (0, 3)
        if pbc:
            np.testing.assert_array_equal(atoms.get_stress(), np.zeros(6))


# ---- misleading messages (item 7) --------------------------------------------------------------


def _rewrite_dataset(source: Path, target: Path, change) -> int:
    """A copy of a dataset with ``change(StructureArrays, frame)`` applied to a frame of the
    training split, written by nepcore's own writer (so the file is well-formed: only the values
    are bad). Returns the frame."""
    from nepcore.data.structures_h5 import StructureFile, write_structures

    with StructureFile(source) as h5:
        data, prov = h5.read_all(), h5.provenance()
    frame = int(prov.split["train"][1])
    change(data, frame)
    write_structures(target, data, prov)
    return frame


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        (lambda d, f: d.energy.__setitem__(f, np.inf), "energy: non-finite value inf"),
        (
            lambda d, f: d.forces.__setitem__((int(d.offsets[f]) + 1, 2), -np.inf),
            "forces: non-finite value -inf at atom 1",
        ),
        (
            lambda d, f: d.virial.__setitem__((f, 0, 1), np.nan),
            "virial: non-finite value nan",
        ),
        (
            lambda d, f: d.positions.__setitem__((int(d.offsets[f]), 0), np.nan),
            "positions: non-finite value nan at atom 0",
        ),
    ],
    ids=["energy", "forces", "virial", "positions"],
)
def test_non_finite_value_in_a_dataset_names_file_frame_and_field(work, tmp_path, capsys, change, expected) -> None:
    """Before: an inf label trained to a non-finite loss ("try a smaller --lr"), a NaN position
    said "positions and cell must be finite". Now every command that reads the dataset says
    where the bad value is, and training writes nothing."""
    bad = tmp_path / "bad.h5"
    frame = _rewrite_dataset(work["h5"], bad, change)
    out = tmp_path / "st"
    commands = [
        [
            "train",
            "--stage",
            "1",
            "--data",
            bad,
            "--qscaler",
            work["qscaler"],
            "--out-dir",
            out,
            "--epochs",
            "1",
            "--no-progress",
        ],
        ["qscaler", bad, "-o", tmp_path / "q.json", *ARCH],
        [
            "evaluate",
            "--model",
            work["model"],
            "--data",
            bad,
            "--out-dir",
            tmp_path / "eval",
        ],
    ]
    for args in commands:
        code, _, err = run_cli(args, capsys)
        assert code != 0 and one_error_line(err) == f"error: {bad}: frame {frame}: {expected}", (args[0], err)
        assert "--lr" not in err
    assert not out.exists() or not any(out.iterdir())
    assert not (tmp_path / "q.json").exists()


def test_non_finite_positions_in_the_calculator_are_a_structure_error(work) -> None:
    from ase.build import bulk

    from nepcore.calculator import NEP
    from nepcore.data.checks import StructureError

    atoms = bulk("Cu", "fcc", 3.6, cubic=True)
    atoms.positions[2, 1] = np.nan
    atoms.calc = NEP(work["model"])
    with pytest.raises(StructureError, match=r"<atoms>: positions: non-finite value nan at atom 2"):
        atoms.get_potential_energy()


def test_architecture_flag_errors_name_the_flag_not_a_nep_in_line(work, tmp_path, capsys) -> None:
    """Before: "<nep.in text>, line 3: ..." for a value the user gave as --n-max (or as
    model.n_max in the workflow config)."""
    out = tmp_path / "q.json"
    code, _, err = run_cli(
        ["qscaler", work["h5"], "-o", out, "--type", *TYPES, "--n-max", "4", "x"],
        capsys,
    )
    line = one_error_line(err)
    assert code == 1 and "<nep.in text>" not in line and "line" not in line
    assert line.startswith("error: --n-max 4 x (model.n_max in a workflow config): "), line
    code, _, err = run_cli(
        ["qscaler", work["h5"], "-o", out, "--type", *TYPES, "--cutoff", "4", "5"],
        capsys,
    )
    assert one_error_line(err).startswith("error: --cutoff 4 5 (model.cutoff in a workflow config): cutoffs")
    assert not out.exists()


def test_nep_in_folder_and_missing_nep_in_are_told_apart(work, tmp_path, capsys) -> None:
    code, _, err = run_cli(["qscaler", work["h5"], "-o", tmp_path / "q.json", "--nep-in", tmp_path], capsys)
    assert code == 1 and one_error_line(err) == f"error: {tmp_path}: is a folder; give the nep.in file inside it"
    code, _, err = run_cli(
        [
            "qscaler",
            work["h5"],
            "-o",
            tmp_path / "q.json",
            "--nep-in",
            tmp_path / "no.in",
        ],
        capsys,
    )
    assert code == 1 and one_error_line(err) == f"error: {tmp_path / 'no.in'}: no such nep.in file"


def test_resume_help_names_resume_pt_first(capsys) -> None:
    with pytest.raises(SystemExit):
        cli_main(["train", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    entry = text[text.rindex("--resume RESUME") :]  # the option's help, after the usage line
    assert entry.index("default: OUT_DIR/resume.pt") < entry.index("checkpoint.pt")


# ---- two atoms at the same position (item 8) ---------------------------------------------------


def test_overlapping_atoms_in_predict_name_file_frame_and_atoms(work, tmp_path, capsys) -> None:
    """Before: NaN energies and exit 0. Now: one line naming the file, frame and atoms; no output."""
    from ase.io import read, write

    frames = read(work["xyz"], ":5")
    frames[3].positions[4] = frames[3].positions[7]
    bad = tmp_path / "dup.xyz"
    write(bad, frames)
    out = tmp_path / "pred"
    code, _, err = run_cli(
        [
            "predict",
            "--model",
            work["model"],
            work["xyz"],
            bad,
            "-o",
            out,
            "--batch-size",
            "2",
        ],
        capsys,
    )
    assert code != 0
    assert one_error_line(err) == f"error: {bad}: frame 3: positions: atoms 4 and 7 are 0 Å apart (< 0.1 Å)"
    assert not out.exists() or not any(out.iterdir())


def test_overlapping_atoms_in_a_dataset_and_in_the_calculator(work, tmp_path, capsys) -> None:
    from ase.build import bulk

    from nepcore.calculator import NEP
    from nepcore.data.checks import StructureError

    bad = tmp_path / "dup.h5"

    def overlap(data, f) -> None:
        a = int(data.offsets[f])
        data.positions[a + 2] = data.positions[a + 5]

    frame = _rewrite_dataset(work["h5"], bad, overlap)
    code, _, err = run_cli(
        [
            "evaluate",
            "--model",
            work["model"],
            "--data",
            bad,
            "--out-dir",
            tmp_path / "e",
        ],
        capsys,
    )
    assert code != 0
    assert one_error_line(err) == f"error: {bad}: frame {frame}: positions: atoms 2 and 5 are 0 Å apart (< 0.1 Å)"

    atoms = bulk("Cu", "fcc", 3.6, cubic=True)
    atoms.positions[3] = atoms.positions[1] + 0.01
    atoms.calc = NEP(work["model"])
    with pytest.raises(
        StructureError,
        match=r"<atoms>: positions: atoms 1 and 3 are 0.01732 Å apart \(< 0.1 Å\)",
    ):
        atoms.get_potential_energy()
    atoms.positions[3] += 1.0  # moved apart: fine again, and finite
    assert np.isfinite(atoms.get_potential_energy())


# ---- a model type without atoms in the training data (item 5) ------------------------------------


def test_model_type_without_training_atoms_is_warned_and_recorded(work, tmp_path, capsys, caplog) -> None:
    """Before: accepted silently and exported with an untrained Al network. A warning (not an
    error: a type kept for a later fine-tuning is legitimate) from qscaler, recorded in
    qscaler.json, status.json and metrics.json."""
    qscaler = tmp_path / "q.json"
    arch = ARCH[:4] + ["Al"] + ARCH[4:]  # --type Cu Pd Ni Al ...
    code = cli_main(["qscaler", str(work["h5"]), "-o", str(qscaler), *arch])
    assert code == 0
    content = json.loads(qscaler.read_text())
    assert content["atoms_per_type"]["Al"] == 0 and min(content["atoms_per_type"][s] for s in TYPES) > 0
    (warning,) = content["warnings"]
    assert warning.startswith("model type(s) Al have no atoms in the") and "untrained" in warning
    assert f"warning: {warning}" in caplog.messages
    out = tmp_path / "st"
    assert (
        cli_main(
            [
                "train",
                "--stage",
                "1",
                "--data",
                str(work["h5"]),
                "--qscaler",
                str(qscaler),
                "--out-dir",
                str(out),
                "--epochs",
                "1",
                "--no-progress",
            ]
        )
        == 0
    )
    assert warning in json.loads((out / "status.json").read_text())["warnings"]
    capsys.readouterr()
    code, _, err = run_cli(
        [
            "evaluate",
            "--model",
            out / "nep.txt",
            "--data",
            work["h5"],
            "--out-dir",
            tmp_path / "eval",
        ],
        capsys,
    )
    assert code == 0
    (metrics_warning,) = [
        w for w in json.loads((tmp_path / "eval" / "metrics.json").read_text())["warnings"] if "Al" in w
    ]
    assert metrics_warning.startswith("train: model type(s) Al have no atoms in the training split")
    assert f"warning: {metrics_warning}" in err
    # a complete type list: no such warning anywhere
    assert json.loads(work["qscaler"].read_text())["warnings"] == []


@pytest.mark.slow
@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("setpriv") is None, reason="needs root and setpriv")
def test_read_only_folder_as_root_without_the_override_capability(work, tmp_path) -> None:
    """Root writes into a read-only folder anyway; with CAP_DAC_OVERRIDE dropped (setpriv) the
    permission bits hold, so the read-only case runs for real even in a root container."""
    out = tmp_path / "readonly"
    out.mkdir()
    out.chmod(stat.S_IRUSR | stat.S_IXUSR)
    drop = ["setpriv", "--bounding-set=-dac_override,-dac_read_search", "--inh-caps=-dac_override,-dac_read_search"]
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    try:
        for args, target in (
            (["convert", str(work["xyz"]), "-o", str(out / "s.h5"), "--no-progress"], out / "s.h5"),
            (["train", "--stage", "1", "--data", str(work["h5"]), "--qscaler", str(work["qscaler"]), "--out-dir",
              str(out), "--epochs", "1", "--no-progress"], out / "train.lock"),
        ):  # fmt: skip
            done = subprocess.run([*drop, sys.executable, "-m", "nepcore", *args], env=env, capture_output=True,
                                  text=True, timeout=300)  # fmt: skip
            assert done.returncode == 1, done.stderr
            expected = f"error: cannot write {target}: permission denied (is the folder read-only?)"
            assert one_error_line(done.stderr) == expected
            assert list(out.iterdir()) == []
    finally:
        out.chmod(stat.S_IRWXU)
