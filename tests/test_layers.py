"""The layer rule of the package, checked on the source (an AST walk, no imports).

Each module under ``nepcore/`` may import only from its own layer or the layers before it:

    errors, _utils, _version, elements, spec -> geometry, io -> model -> data -> training
        -> evaluation, calculator -> workflow, cli  (-> the package's __init__, __main__)

Imports inside functions count too (a lazy import is still a dependency). A new module must be
given a layer here, so the map in the README and this table stay one picture.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "nepcore"

#: first name under nepcore/ -> its layer (a lower number may not import a higher one)
LAYERS: dict[str, int] = {
    "errors": 0, "_utils": 0, "_version": 0, "elements": 0, "spec": 0,
    "geometry": 1, "io": 1,
    "model": 2,
    "data": 3,
    "training": 4,
    "evaluation": 5, "calculator": 5,
    "workflow": 6, "cli": 6,
    "__init__": 7, "__main__": 7,
}  # fmt: skip


def layer_of(module: str) -> int | None:
    """Layer of a dotted module name inside nepcore (None for the bare package name)."""
    parts = module.split(".")
    assert parts[0] == "nepcore", module
    if len(parts) == 1:
        return LAYERS["__init__"]
    return LAYERS.get(parts[1])


def imported_modules(module: str, source: str, is_package: bool = False) -> list[tuple[int, str]]:
    """(line, dotted name) of every nepcore module ``source`` imports, anywhere in the file."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: resolve against the importing module's package
                package = module.split(".")[: len(module.split(".")) - (node.level - is_package)]
                base = ".".join(package + ([base] if base else []))
            for alias in node.names:
                # "from nepcore.model import potential" imports the submodule when it is one
                candidate = f"{base}.{alias.name}"
                is_module = (PACKAGE.parent / (candidate.replace(".", "/") + ".py")).is_file() or (
                    PACKAGE.parent / candidate.replace(".", "/")
                ).is_dir()
                found.append((node.lineno, candidate if is_module else base))
    return [(line, name) for line, name in found if name == "nepcore" or name.startswith("nepcore.")]


def layer_violations(module: str, source: str, is_package: bool = False) -> list[str]:
    """Each import of ``module`` that points to a later layer, as 'module:line -> target'."""
    own = layer_of(module)
    if own is None:
        return [f"{module}: not in any layer (add it to LAYERS in tests/test_layers.py and the README map)"]
    problems = []
    for line, target in imported_modules(module, source, is_package):
        theirs = layer_of(target)
        if theirs is None or theirs > own:
            problems.append(f"{module}:{line} -> {target} (layer {own} imports layer {theirs})")
    return problems


def package_modules() -> list[tuple[str, Path]]:
    modules = []
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        if parts[-1] == "__init__" and len(parts) > 1 and parts[:-1] != ["nepcore"]:
            parts = parts[:-1]
        modules.append((".".join(parts), path))
    return modules


def test_every_module_imports_only_from_its_layer_or_earlier():
    problems = []
    for module, path in package_modules():
        problems += layer_violations(module, path.read_text(), is_package=path.name == "__init__.py")
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize(
    "module, source",
    [
        ("nepcore.model.fake", "from nepcore.training.loss import LossWeights\n"),
        ("nepcore.geometry.fake", "def f():\n    import nepcore.cli\n"),  # a lazy import counts
        ("nepcore.data.fake", "from nepcore import __version__\n"),  # the package imports everything
        ("nepcore.io.fake", "from nepcore.model import potential\n"),
        ("nepcore.spec", "from .geometry.virial import VIRIAL_INDEX\n"),  # relative
        ("nepcore.training.fake", "from ..evaluation import metrics\n"),
        ("nepcore.newthing", "import numpy\n"),  # a module with no layer
    ],
)
def test_the_check_fails_on_an_upward_import(module, source):
    assert layer_violations(module, source)


@pytest.mark.parametrize(
    "module, source",
    [
        ("nepcore.training.fake", "from nepcore.model.batch import Batch\nfrom nepcore.training import loss\n"),
        (
            "nepcore.io.fake",
            "from nepcore.geometry.virial import VIRIAL_INDEX\nfrom nepcore.errors import NepcoreError\n",
        ),
        ("nepcore.cli.fake", "from nepcore.workflow import x\nfrom .. import calculator\n"),
    ],
)
def test_the_check_accepts_downward_and_sideways_imports(module, source):
    assert layer_violations(module, source) == []
