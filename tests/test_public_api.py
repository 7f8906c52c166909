"""``import nepcore`` is cheap (no torch) and re-exports the names users call."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import nepcore

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow  # subprocess
def test_import_nepcore_does_not_import_torch():
    code = (
        "import sys, nepcore; print(nepcore.__version__); "
        "heavy = [m for m in ('torch', 'numpy', 'h5py', 'ase') if m in sys.modules]; "
        "assert not heavy, heavy; import nepcore.cli; assert 'torch' not in sys.modules"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env={"PYTHONPATH": str(ROOT), "PATH": ""},
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == nepcore.__version__


def test_the_public_names_are_the_real_objects():
    from nepcore.calculator import NEP
    from nepcore.data.atoms_batch import batch_from_atoms
    from nepcore.errors import NepcoreError
    from nepcore.io.nep_txt import read_nep, write_nep
    from nepcore.model.nep_model import NEPModel
    from nepcore.spec import ModelSpec

    expected = {
        "NEP": NEP,
        "NEPModel": NEPModel,
        "ModelSpec": ModelSpec,
        "NepcoreError": NepcoreError,
        "batch_from_atoms": batch_from_atoms,
        "read_nep": read_nep,
        "write_nep": write_nep,
    }
    for name, obj in expected.items():
        assert getattr(nepcore, name) is obj, name
        assert name in nepcore.__all__ and name in dir(nepcore)
    from nepcore import NEPModel as imported  # the from-import form works too

    assert imported is NEPModel
    with pytest.raises(AttributeError, match="no attribute 'nothing'"):
        _ = nepcore.nothing
