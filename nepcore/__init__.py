"""nepcore: train NEP4 machine-learned interatomic potentials with PyTorch gradients.

Writes ``nep.txt`` files that GPUMD, NEP_CPU and calorine load and reproduce. The names a
user calls are importable from here::

    from nepcore import NEP, NEPModel, batch_from_atoms, read_nep

They are loaded on first use (module ``__getattr__``), so ``import nepcore`` stays cheap and
does not import torch; the command line relies on that for a fast ``nepcore --help``.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from nepcore._version import __version__

#: public name -> the module that defines it
_EXPORTS: dict[str, str] = {
    "NEP": "nepcore.calculator",
    "NEPModel": "nepcore.model.nep_model",
    "ModelSpec": "nepcore.spec",
    "NepcoreError": "nepcore.errors",
    "batch_from_atoms": "nepcore.data.atoms_batch",
    "read_nep": "nepcore.io.nep_txt",
    "write_nep": "nepcore.io.nep_txt",
}

__all__ = [
    "NEP",
    "NEPModel",
    "ModelSpec",
    "NepcoreError",
    "__version__",
    "batch_from_atoms",
    "read_nep",
    "write_nep",
]

if TYPE_CHECKING:  # for type checkers and IDEs; never executed
    from nepcore.calculator import NEP
    from nepcore.data.atoms_batch import batch_from_atoms
    from nepcore.errors import NepcoreError
    from nepcore.io.nep_txt import read_nep, write_nep
    from nepcore.model.nep_model import NEPModel
    from nepcore.spec import ModelSpec


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'nepcore' has no attribute {name!r}")
    value = getattr(importlib.import_module(_EXPORTS[name]), name)
    globals()[name] = value  # later look-ups skip this function
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))
