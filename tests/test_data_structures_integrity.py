"""A damaged or edited structures HDF5 fails with one line naming the file in every reader
(qscaler, train, evaluate), never with a traceback or silently different data (issue 8)."""

from __future__ import annotations

import shutil
from pathlib import Path

import h5py
import numpy as np
import pytest
from helpers.tiny_training import make_dataset, train_command

from nepcore.cli import main as cli_main
from nepcore.data.structures_h5 import DatasetFileError, StructureFile
from nepcore.data.structures_integrity import CHECKSUM_ATTR, content_sha256


@pytest.fixture(scope="module")
def good(tmp_path_factory) -> dict[str, Path]:
    """A converted tiny dataset, its qscaler.json and a one-epoch model."""
    root = tmp_path_factory.mktemp("integrity")
    ds = make_dataset(root / "data")
    assert cli_main(train_command(ds, root / "model", "--epochs", "1")[3:]) == 0  # in-process
    return {**ds, "model": root / "model" / "nep.txt"}


def edited(good: dict[str, Path], tmp_path: Path, key: str, index, value) -> Path:
    path = tmp_path / "edited.h5"
    shutil.copy(good["h5"], path)
    with h5py.File(path, "r+") as f:
        array = f[key][()]
        array[index] = value
        f[key][...] = array
    return path


def readers(good: dict[str, Path], h5: Path, out: Path) -> dict[str, list[str]]:
    return {
        "qscaler": ["qscaler", str(h5), "-o", str(out / "q.json"), "--type", "Cu", "Pd", "Ni", "--cutoff", "4", "3"],
        "train": ["train", "--stage", "1", "--data", str(h5), "--qscaler", str(good["qscaler"]),
                  "--out-dir", str(out / "stage1"), "--epochs", "1", "--no-progress"],
        "evaluate": ["evaluate", "--model", str(good["model"]), "--data", str(h5), "--out-dir", str(out / "eval")],
    }  # fmt: skip


CASES = {
    "bad split index": (
        "split/train",
        0,
        999,
        "damaged structures file: split/train: frame index 999 is outside",
    ),
    "bad offsets": (
        "frames/offsets",
        3,
        10**6,
        "damaged structures file: frames/offsets: offset",
    ),
    "bad type index": (
        "atoms/types",
        5,
        7,
        "damaged structures file: atoms/types: atom 5 (frame 0) has type 7",
    ),
    "changed energy": ("frames/energy", 2, 123.0, "content checksum mismatch"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_every_reader_refuses_a_damaged_file_in_one_line(case, good, tmp_path: Path, capsys) -> None:
    key, index, value, expected = CASES[case]
    h5 = edited(good, tmp_path, key, index, value)
    for command, argv in readers(good, h5, tmp_path).items():
        assert cli_main(argv) != 0, command
        err = capsys.readouterr().err
        assert err.startswith(f"error: {h5}: {expected}") and err.count("\n") == 1, (
            command,
            err,
        )
    assert not (tmp_path / "q.json").exists() and not (tmp_path / "stage1" / "checkpoint.pt").exists()
    assert not (tmp_path / "eval" / "metrics.json").exists()


def test_a_byte_flip_in_the_data_is_caught_by_the_checksum(good, tmp_path: Path) -> None:
    with h5py.File(good["h5"]) as f:
        offset = f["atoms/positions"].id.get_offset()
        assert f.attrs[CHECKSUM_ATTR] == content_sha256(f)  # convert wrote it
    data = bytearray(good["h5"].read_bytes())
    data[offset + 13] ^= 0x10  # one bit of one position: still a valid HDF5 file
    path = tmp_path / "flipped.h5"
    path.write_bytes(bytes(data))
    with pytest.raises(DatasetFileError, match=f"^{path}: content checksum mismatch"):
        StructureFile(path)


def test_random_byte_flips_fail_cleanly_or_change_nothing(good, tmp_path: Path) -> None:
    """Flipped bytes either fail to open with a DatasetFileError or fell on unused bytes, in
    which case every array reads back unchanged (never silently different data)."""
    with StructureFile(good["h5"]) as f:
        reference = f.read_all()
    raw = good["h5"].read_bytes()
    failed = 0
    for seed in range(24):
        rng = np.random.default_rng(seed)
        data = bytearray(raw)
        for pos in rng.integers(0, len(data), 20):
            data[pos] ^= 0xFF
        path = tmp_path / f"flip{seed}.h5"
        path.write_bytes(bytes(data))
        try:
            with StructureFile(path) as f:
                got = f.read_all()
        except DatasetFileError as err:
            assert str(err).startswith(f"{path}: ") and "\n" not in str(err)
            failed += 1
            continue
        for name in (
            "types",
            "positions",
            "forces",
            "energy",
            "cell",
            "weight",
            "offsets",
        ):
            np.testing.assert_array_equal(getattr(got, name), getattr(reference, name))
    assert failed >= 20  # nearly every 20-byte damage is seen


def test_a_file_without_checksum_is_still_read(good, tmp_path: Path) -> None:
    """Files written before the checksum existed: layout-checked only."""
    path = tmp_path / "old.h5"
    shutil.copy(good["h5"], path)
    with h5py.File(path, "r+") as f:
        del f.attrs[CHECKSUM_ATTR]
    with StructureFile(path) as f:
        assert f.n_frames == 12
