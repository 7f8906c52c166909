"""Starting a stage from an existing model: a stage-1 checkpoint, a nep.txt or a published
potential restricted to a subset of its elements.

Restricting a model to elements ``E ⊆ model.elements`` (any order) keeps each kept type's
network (W0, b0, w1) and the coefficients c[n][k][I][J] whose centre I and neighbour J are
both kept (docs/model.md#per-type-networks, #parameter-order): for structures made only of the
kept elements, the restricted model gives the same energies, forces and descriptors as the
full one. b1 and q_scaler are shared and kept. Per-type cutoffs are sliced with the types;
universal and typewise ZBL depend only on the elements of a pair, so they carry over.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from nepcore.errors import NepcoreError
from nepcore.spec import ModelSpec
from nepcore.training.checkpoint import CheckpointError, load_checkpoint

#: ModelSpec fields that may differ between a starting model and the run: they only change
#: the nep.txt header (neighbour counts) or its cutoff-line layout.
HEADER_ONLY_FIELDS: tuple[str, ...] = ("max_neighbors_radial", "max_neighbors_angular", "per_type_cutoff")


class StartModelError(NepcoreError, ValueError):
    """A starting model that cannot be used for this run (message says why)."""


def load_model_file(path: str | os.PathLike, which: str = "last") -> tuple[ModelSpec, dict[str, np.ndarray]]:
    """(spec, float64 parameters) of a nep.txt, or of a nepcore checkpoint.pt (``which``:
    "last" or "best" weights)."""
    path = Path(path)
    if path.suffix == ".pt":
        try:
            state = load_checkpoint(path)
        except CheckpointError as err:
            raise StartModelError(str(err)) from None
        key = "best_model" if which == "best" else "model"
        params = {k: v.detach().cpu().double().numpy().copy() for k, v in state[key].items()}
        average = state.get("average") if which == "last" else None
        if average is not None:  # a weight-averaging stage's "last" model is its average (its nep.txt)
            params.update({k: v.detach().cpu().double().numpy().copy() for k, v in average["shadow"].items()})
        return ModelSpec.from_dict(state["spec"]), params
    from nepcore.io.nep_txt import NepFileError, read_nep

    try:
        potential = read_nep(path)
    except (NepFileError, OSError) as err:
        raise StartModelError(str(err)) from None
    return potential.spec, {k: np.asarray(v, dtype=np.float64).copy() for k, v in potential.params.items()}


def restrict_elements(
    spec: ModelSpec, params: dict[str, np.ndarray], elements: tuple[str, ...], source: str = "the model"
) -> tuple[ModelSpec, dict[str, np.ndarray]]:
    """The model restricted (and reordered) to ``elements``, a subset of ``spec.elements``."""
    elements = tuple(elements)
    if elements == spec.elements:
        return spec, params
    missing = [e for e in elements if e not in spec.elements]
    if missing:
        raise StartModelError(f"{source} has no type {', '.join(missing)} (its types: {' '.join(spec.elements)})")
    if spec.zbl is not None and spec.zbl.kind == "flexible":
        raise StartModelError(f"{source}: restricting a flexible-ZBL model to other elements is not supported")
    idx = np.array([spec.elements.index(e) for e in elements])
    new = dict(params)
    for name in ("W0", "b0", "w1"):
        new[name] = params[name][idx].copy()
    for name in ("c_radial", "c_angular"):
        new[name] = params[name][:, :, idx][:, :, :, idx].copy()
    sliced = spec.replace(
        elements=elements,
        cutoff_radial=tuple(spec.cutoff_radial[i] for i in idx),
        cutoff_angular=tuple(spec.cutoff_angular[i] for i in idx),
    )
    return sliced, new


def architecture_differences(a: ModelSpec, b: ModelSpec) -> list[str]:
    """Fields (other than header-only ones) in which two architectures differ, as text."""
    da, db = a.architecture_dict(), b.architecture_dict()
    return [f"{key}: {da[key]!r} vs {db[key]!r}" for key in da if key not in HEADER_ONLY_FIELDS and da[key] != db[key]]


def require_same_architecture(start: ModelSpec, run: ModelSpec, source: str, run_source: str) -> None:
    """StartModelError listing the differences when ``start`` cannot be trained as ``run``."""
    diffs = architecture_differences(start, run)
    if diffs:
        raise StartModelError(
            f"{source} does not have the architecture of {run_source} ({'; '.join(diffs)}; first value: {source})"
        )
