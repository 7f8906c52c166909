"""``torch.compile`` of the core: the persistent compile cache, dynamic batch shapes, the
compiled inference function and the compile counters.

Dynamic shapes. A batch has five sizes that change from batch to batch: atoms N, frames F,
radial pairs P, angular pairs Q and angular slots M. Each tensor's first dimension is marked
dynamic, so one compilation serves every batch. Two shape-environment settings make that hold
in practice (:func:`shape_settings`):

* ``backed_size_oblivious``: a size seen as 1 (a last batch of one frame, the calculator's one
  frame) is not specialised, so the graph compiled for F = 32 also serves F = 1;
* ``use_duck_shape = False``: two sizes that happen to be equal on the first batch (e.g. 32
  frames and 32 angular slots) get separate symbols instead of one, which would otherwise be
  guarded as equal and recompiled on the next batch.

The compile cache. Inductor's FX-graph cache and the AOTAutograd cache hold compiled graphs
on disk, keyed by the graph, the shapes' guards and the torch version. :func:`configure_cache`
points them at a persistent folder (``$NEPCORE_COMPILE_CACHE``, else
``$XDG_CACHE_HOME/nepcore/inductor``, else ``~/.cache/nepcore/inductor``), so a second stage, a
resumed run, the members of a committee and the next workflow run start warm.
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import fields
from pathlib import Path

import torch

from nepcore.model import potential as core
from nepcore.model.batch import Batch

#: Values of the ``compile`` setting: never, always, or when it pays (training: see
#: nepcore.training.compiled_step.resolve_compile).
COMPILE_MODES: tuple[str, ...] = ("off", "on", "auto")
#: Environment variable naming the compile cache folder.
CACHE_ENV = "NEPCORE_COMPILE_CACHE"


def default_cache_dir() -> Path:
    """``$XDG_CACHE_HOME/nepcore/inductor`` (``~/.cache/nepcore/inductor`` without XDG_CACHE_HOME)."""
    root = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(root) / "nepcore" / "inductor"


def configure_cache(path: str | os.PathLike | None = None) -> Path:
    """Put inductor's FX-graph and AOTAutograd caches in a persistent folder and return it;
    generated CPU kernels run single-threaded (see the comment below).

    Args:
        path: the folder; None takes ``$NEPCORE_COMPILE_CACHE``, else :func:`default_cache_dir`.

    Returns:
        The absolute folder (created). Call before the first compilation of the process.
    """
    chosen = path or os.environ.get(CACHE_ENV) or default_cache_dir()
    folder = Path(chosen).expanduser().resolve()
    folder.mkdir(parents=True, exist_ok=True)
    # inductor reads the variable at every cache access, so this also redirects a process
    # that has compiled before; the two switches are on by default in torch 2.13, set anyway
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(folder)
    import torch._functorch.config as functorch_config
    import torch._inductor.config as inductor_config

    inductor_config.fx_graph_cache = True
    functorch_config.enable_autograd_cache = True
    # Generated CPU kernels run on one thread (GEMMs and the other library calls still use
    # torch's threads). With dynamic sizes inductor parallelises small inner reductions inside
    # a serial loop over atoms, i.e. one OpenMP fork/join per atom: the analytical step was
    # 0.93x eager with the default and 1.31x with one thread (PdCuNi_medium, 2 threads,
    # benchmarks/bench_step.py). No effect on CUDA kernels.
    inductor_config.cpp.threads = 1
    return folder


def shape_settings() -> contextlib.AbstractContextManager:
    """The shape-environment settings under which nepcore compiles (see the module docstring)."""
    import torch.fx.experimental._config as fx_config

    return fx_config.patch(backed_size_oblivious=True, use_duck_shape=False)


def batch_tensors(batch: Batch, dynamic: bool = True) -> dict[str, torch.Tensor]:
    """The tensors of ``batch`` by field name, first dimensions marked dynamic for dynamo."""
    tensors = {f.name: getattr(batch, f.name) for f in fields(batch)}
    if dynamic:
        for t in tensors.values():
            if t.dim() > 0:
                torch._dynamo.maybe_mark_dynamic(t, 0)
    return tensors


def compiled_graphs() -> int:
    """Graphs dynamo has compiled in this process so far (a recompilation adds one)."""
    from torch._dynamo.utils import counters

    return int(counters["stats"]["unique_graphs"])


class CompiledCore:
    """:func:`nepcore.model.potential.evaluate` compiled with inductor for inference.

    One compilation (per dtype, device and per-atom-virial choice) serves every structure size
    and neighbour count: the batch sizes are dynamic (see the module docstring), so an MD run
    whose pair counts change every few steps does not recompile. Call under ``torch.no_grad()``.
    """

    def __init__(self, tables: core.CoreTables, cache_dir: str | os.PathLike | None = None) -> None:
        self.tables = tables
        self.cache_dir = configure_cache(cache_dir)
        self._function = torch.compile(self._evaluate, fullgraph=True)

    def _evaluate(
        self,
        params: dict[str, torch.Tensor],
        tensors: dict[str, torch.Tensor],
        compute_forces: bool,
        per_atom_virial: bool,
        return_descriptors: bool,
    ) -> dict[str, torch.Tensor]:
        return core.evaluate(
            params,
            self.tables,
            Batch(**tensors),
            compute_forces=compute_forces,
            per_atom_virial=per_atom_virial,
            return_descriptors=return_descriptors,
        )

    def __call__(
        self,
        params: dict[str, torch.Tensor],
        batch: Batch,
        compute_forces: bool = True,
        per_atom_virial: bool = False,
        return_descriptors: bool = False,
    ) -> dict[str, torch.Tensor]:
        """Same outputs as :func:`nepcore.model.potential.evaluate` (energies eV, forces eV/Å, virials eV).

        Each combination of the three switches is its own graph (compiled on first use).
        """
        with shape_settings():
            return self._function(params, batch_tensors(batch), compute_forces, per_atom_virial, return_descriptors)
