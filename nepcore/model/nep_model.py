"""``NEPModel``: the trainable NEP4 parameters as an ``nn.Module`` around the pure core.

The module owns the parameters (see nepcore.spec for the layout), the q_scaler buffer and
the static tables; ``forward`` calls :func:`nepcore.model.potential.evaluate` (analytical forces) or
:func:`nepcore.model.autograd.evaluate_autograd`. Conversion to and from ``nep.txt`` goes through
:mod:`nepcore.io.nep_txt`.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import torch

from nepcore.errors import SettingError
from nepcore.model import potential as core
from nepcore.model.batch import Batch
from nepcore.spec import INITIAL_BIAS_STD, ModelSpec

#: Ways to compute forces: closed form, autograd, autograd traced by make_fx into one graph.
FORCE_PATHS: tuple[str, ...] = ("analytical", "autograd", "autograd-traced")
#: Parameters that receive gradients (q_scaler and the flexible ZBL table are fixed).
TRAINABLE: tuple[str, ...] = ("W0", "b0", "w1", "b1", "c_radial", "c_angular")


def resolve_device(name: str | torch.device) -> torch.device:
    """ "auto" (CUDA when available, else the CPU), "cpu", "cuda" or "cuda:N" (a torch.device
    is returned as it is)."""
    if isinstance(name, torch.device):
        return name
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise SettingError(f"device {name} was asked for but CUDA is not available")
    return torch.device(name)


def init_parameters(spec: ModelSpec, seed: int = 0, bias_std: float = INITIAL_BIAS_STD) -> dict[str, np.ndarray]:
    """Initial parameters for gradient training (float64 numpy).

    Network weights scaled by fan-in (W0 ~ N(0, 1/D), w1 ~ N(0, 1/H)), b0 ~ N(0, bias_std²)
    (why wide: nepcore.spec.INITIAL_BIAS_STD), b1 = 0; descriptor coefficients ~ U(-1, 1) as
    GPUMD initialises its SNES mean; q_scaler = 1 (replaced by the q-scaler statistics before
    training). The draws come in a fixed order and b0's are scaled, so a seed's weights and
    coefficients do not depend on ``bias_std``.

    Args:
        spec: the architecture.
        seed: seed of numpy's default generator.
        bias_std: standard deviation of b0 (dimensionless, like the scaled descriptors).

    Returns:
        name -> float64 array of the shape ``spec.parameter_shapes()`` gives.
    """
    rng = np.random.default_rng(seed)
    shapes = spec.parameter_shapes()
    T, H, D = spec.n_types, spec.neurons, spec.dim
    params = {
        "W0": rng.normal(0.0, 1.0 / math.sqrt(D), size=shapes["W0"]),
        "b0": rng.normal(0.0, bias_std, size=shapes["b0"]),
        "w1": rng.normal(0.0, 1.0 / math.sqrt(H), size=shapes["w1"]),
        "b1": np.zeros(()),
        "c_radial": rng.uniform(-1.0, 1.0, size=shapes["c_radial"]),
        "c_angular": rng.uniform(-1.0, 1.0, size=shapes["c_angular"]),
        "q_scaler": np.ones(shapes["q_scaler"]),
    }
    if "zbl_table" in shapes:
        raise ValueError("flexible ZBL needs its table: load it from a nep.txt instead of initialising")
    assert T * H * D > 0
    return params


class NEPModel(torch.nn.Module):
    """A NEP4 potential with trainable parameters (float64 unless converted with ``.to``)."""

    def __init__(self, spec: ModelSpec, params: dict | None = None, seed: int = 0, contraction: str = "auto") -> None:
        """contraction: type-pair contraction backend, "auto", "pair", "type" or "dense" (nepcore.model.contraction)."""
        super().__init__()
        self.spec = spec
        params = init_parameters(spec, seed) if params is None else params
        shapes = spec.parameter_shapes()
        for name in TRAINABLE:
            value = torch.as_tensor(np.asarray(params[name]), dtype=torch.float64)
            if value.numel() == math.prod(shapes[name]):
                value = value.reshape(shapes[name])
            else:
                raise ValueError(f"parameter {name}: expected shape {shapes[name]}, found {tuple(value.shape)}")
            self.register_parameter(name, torch.nn.Parameter(value.clone()))
        self.register_buffer("q_scaler", torch.as_tensor(np.asarray(params["q_scaler"]), dtype=torch.float64).clone())
        zbl_table = params.get("zbl_table") if "zbl_table" in shapes else None
        if "zbl_table" in shapes:
            self.register_buffer("zbl_table", torch.as_tensor(np.asarray(zbl_table), dtype=torch.float64).clone())
        zbl = None if zbl_table is None else self.zbl_table
        self._tables_cpu = core.build_tables(spec, zbl, backend=contraction)
        self._tables: dict[tuple, core.CoreTables] = {}
        self._traced: dict[tuple, object] = {}
        self._compiled_cores: dict[tuple, object] | None = None  # see use_compiled_core
        self._compile_cache = None

    # ---- construction / conversion ------------------------------------------------------
    @classmethod
    def from_nep(cls, path: str | Path, contraction: str = "auto") -> NEPModel:
        from nepcore.io.nep_txt import read_nep

        potential = read_nep(path)
        return cls(potential.spec, potential.params, contraction=contraction)

    def parameter_dict(self) -> dict[str, torch.Tensor]:
        """Every parameter and buffer by its nep.txt name (tensors shared, not copied)."""
        params = {name: getattr(self, name) for name in TRAINABLE}
        params["q_scaler"] = self.q_scaler
        if hasattr(self, "zbl_table"):
            params["zbl_table"] = self.zbl_table
        return params

    def numpy_parameters(self) -> dict[str, np.ndarray]:
        return {k: v.detach().cpu().to(torch.float64).numpy().copy() for k, v in self.parameter_dict().items()}

    def write_nep(self, path: str | Path, max_neighbors: tuple[int, int] | None = None) -> None:
        """Write a GPUMD nep.txt; max_neighbors = (radial, angular) counts for the header."""
        from nepcore.io.nep_txt import write_nep

        spec = self.spec
        if max_neighbors is not None:
            spec = spec.replace(max_neighbors_radial=int(max_neighbors[0]), max_neighbors_angular=int(max_neighbors[1]))
        write_nep(path, spec, self.numpy_parameters())

    # ---- evaluation ---------------------------------------------------------------------
    def use_compiled_core(self, cache_dir: str | Path | None = None) -> NEPModel:
        """Evaluate the analytical path through inductor from now on (inference; see
        :class:`nepcore.model.compiled.CompiledCore`): one compilation per device and dtype
        serves every structure and neighbour count. cache_dir: the compile cache
        (nepcore.model.compiled.configure_cache). Returns the model itself.
        """
        from nepcore.model.compiled import configure_cache

        self._compile_cache = configure_cache(cache_dir)
        self._compiled_cores = {}
        return self

    def tables(self, device: torch.device, dtype: torch.dtype) -> core.CoreTables:
        key = (str(device), dtype)
        if key not in self._tables:
            self._tables[key] = self._tables_cpu.to(device, dtype)
        return self._tables[key]

    def forward(
        self,
        batch: Batch,
        compute_forces: bool = True,
        force_path: str = "analytical",
        per_atom_virial: bool = False,
        return_descriptors: bool = False,
        create_graph: bool | None = None,
        geometry: core.PairGeometry | None = None,
    ) -> dict[str, torch.Tensor]:
        """Energies, forces and virials of ``batch`` (see :func:`nepcore.model.potential.evaluate`).

        geometry: the batch's precomputed pair geometry (nepcore.training.geometry_cache), for
        the eager analytical path only.
        """
        params = self.parameter_dict()
        tables = self.tables(batch.positions.device, batch.positions.dtype)
        if geometry is not None and (force_path != "analytical" or self._compiled_cores is not None):
            raise ValueError("a precomputed geometry is for the eager analytical path only")
        if force_path == "autograd-traced" and compute_forces:
            from nepcore.model.autograd import TracedAutogradForces

            key = (str(batch.positions.device), batch.positions.dtype)
            if key not in self._traced:
                self._traced[key] = TracedAutogradForces(tables)
            return self._traced[key](params, batch)
        if force_path == "autograd" and compute_forces:
            from nepcore.model.autograd import evaluate_autograd

            graph = torch.is_grad_enabled() if create_graph is None else create_graph
            return evaluate_autograd(params, tables, batch, create_graph=graph, per_atom_virial=per_atom_virial)
        if force_path not in FORCE_PATHS:
            raise ValueError(f"force_path must be one of {FORCE_PATHS}, found {force_path!r}")
        if self._compiled_cores is not None:
            from nepcore.model.compiled import CompiledCore

            key = (str(batch.positions.device), batch.positions.dtype)
            if key not in self._compiled_cores:
                self._compiled_cores[key] = CompiledCore(tables, self._compile_cache)
            return self._compiled_cores[key](params, batch, compute_forces, per_atom_virial, return_descriptors)
        return core.evaluate(
            params, tables, batch, compute_forces=compute_forces,
            per_atom_virial=per_atom_virial, return_descriptors=return_descriptors, geometry=geometry,
        )  # fmt: skip
