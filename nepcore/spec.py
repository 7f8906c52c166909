"""Hyper-parameters of a NEP4 potential (:class:`ModelSpec`) and their validation.

The names follow GPUMD's nep.in keywords (``type``, ``cutoff``, ``n_max``, ``basis_size``,
``l_max``, ``neuron``, ``zbl``) so that habits carry over; see docs/model.md for the
meaning of each number. Lengths are in Å.

Parameter layout shared by the whole package (numpy or torch, float64 unless stated),
with ``T`` types, ``H`` neurons, ``D = spec.dim`` descriptor components:

==============  ============================  ==============================================
key             shape                         meaning
==============  ============================  ==============================================
``W0``          (T, H, D)                     hidden-layer weights per type
``b0``          (T, H)                        hidden-layer bias per type (subtracted)
``w1``          (T, H)                        output weights per type
``b1``          ()                            shared output bias (subtracted)
``c_radial``    (nR+1, KR+1, T, T)            radial coefficients c[n][k][I][J]
``c_angular``   (nA+1, KA+1, T, T)            angular coefficients c[n][k][I][J]
``q_scaler``    (D,)                          descriptor scaling (not trainable)
``zbl_table``   (T(T+1)/2, 10)                flexible ZBL only: r_in, r_out, a1..a8
==============  ============================  ==============================================
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Literal

from nepcore.elements import SYMBOLS
from nepcore.errors import NepcoreError

#: Names of the higher-order angular invariants, in the order of the ``l_max`` line.
FLAG_NAMES: tuple[str, ...] = ("q222", "q1111", "q112", "q123", "q233", "q134")
#: Smallest 3-body L each higher-order invariant needs (docs/model.md#descriptor-layout).
FLAG_MIN_L: dict[str, int] = {"q222": 2, "q1111": 1, "q112": 2, "q123": 3, "q233": 3, "q134": 4}

#: Standard deviation of the initial hidden-layer biases b0 of a model trained from random weights
#: (:func:`nepcore.model.nep_model.init_parameters`; the default of the training setting
#: ``init_bias_std``). The q-scaler leaves the scaled descriptors of typical atoms small
#: (standard deviation ~0.05-0.07 on our alloy sets), so fan-in weights give pre-activations of
#: ~0.1, and biases of 0.1 (the value until the fourteenth round of issue 10) start every tanh
#: unit in its linear range: the network starts as a linear function of the descriptors. With a
#: spread of 1 the units start at different points of the tanh (mean slope 1 - h² 0.64 instead of
#: 0.99) and stage 1 lowers the validation force faster (docs/recipe_measurements.md, "Hidden biases start
#: wide"). GPUMD's trained models end with wide biases too (rms of b0 0.4-2).
INITIAL_BIAS_STD = 1.0

# GPUMD trainer limits (docs/model.md#training-inputs): nep.in parsing (nepcore.io.nep_in) checks new models.
MAX_N_RADIAL = 12
MAX_N_ANGULAR = 8
MAX_BASIS_RADIAL = 16
MAX_BASIS_ANGULAR = 12
MAX_L = 8
MAX_NEURONS = 120
MAX_DIM = 103
MAX_ANGULAR_DIM = 90
MAX_CUTOFF = 100.0
# What the evaluators accept (GPUMD MD kernels size their n and k arrays 17, NEP_CPU checks
# 0..16): looser than the trainer for n_max/basis_size. Published potentials use them
# (Si_2022_NEP4_*: n_max 10 10), so ModelSpec validates against these; nep.in parsing
# (nepcore.io.nep_in) enforces the trainer limits above.
MAX_N_EVALUATOR = 16
MAX_BASIS_EVALUATOR = 16


class SpecError(NepcoreError, ValueError):
    """An impossible or unsupported combination of NEP hyper-parameters."""


@dataclass(frozen=True)
class ZBLSpec:
    """Short-range ZBL repulsion settings (docs/model.md#zbl-repulsion).

    kind: ``"universal"`` (``zbl r_in r_out``), ``"typewise"`` (``zbl r_in r_out f``;
    per pair r_out = min(f (Rcov_I + Rcov_J), r_out), r_in = 0) or ``"flexible"``
    (``zbl 0 0``; per-pair r_in, r_out and phi coefficients stored in the parameter
    ``zbl_table``). r_inner, r_outer in Å.
    """

    kind: Literal["universal", "typewise", "flexible"] = "universal"
    r_inner: float = 1.0
    r_outer: float = 2.0
    typewise_factor: float = 0.7

    def __post_init__(self) -> None:
        if self.kind not in ("universal", "typewise", "flexible"):
            raise SpecError(f"zbl kind must be universal, typewise or flexible, found {self.kind!r}")
        if self.kind == "flexible":
            return
        if not (0.0 <= self.r_inner < self.r_outer):
            raise SpecError(f"zbl needs 0 <= r_inner < r_outer, found r_inner={self.r_inner}, r_outer={self.r_outer}")
        if self.kind == "typewise" and self.typewise_factor < 0.5:
            raise SpecError(f"typewise zbl factor must be >= 0.5, found {self.typewise_factor}")


@dataclass(frozen=True)
class ModelSpec:
    """Architecture of a NEP4 potential; validated on construction.

    elements: chemical symbols in type order (type index = position).
    cutoff_radial, cutoff_angular: per-type cutoffs in Å (a single number is broadcast);
        the pair cutoff is the mean of the two types' values.
    n_max_radial, n_max_angular: highest radial index n (n + 1 functions each).
    basis_size_radial, basis_size_angular: highest Chebyshev index k (k + 1 functions).
    l_max: highest 3-body l (L); flags: which of ``FLAG_NAMES`` are on.
    neurons: hidden-layer width. zbl: ZBL settings or None.
    max_neighbors_radial/angular: the neighbour counts written in the ``cutoff`` line.
    per_type_cutoff: write the long ``cutoff`` line even if all cutoffs are equal.

    The architecture defaults are GPUMD's nep.in defaults, the only ones in nepcore (the nep.in
    parser, ``nepcore qscaler``'s flags and the workflow schema take them from here or are
    tested against them): ``cutoff 8 4``, ``n_max 6 6``, ``basis_size 6 6``, ``l_max 4 2 0``
    (q222 on), ``neuron 30``, no ZBL. Source: ``Parameters::set_default_parameters`` in
    GPUMD's src/main_nep/parameters.cu and its docs (doc/nep/input_parameters/n_max.rst,
    basis_size.rst; GPUMD commit d98135de).
    """

    elements: tuple[str, ...]
    cutoff_radial: tuple[float, ...] | float = 8.0
    cutoff_angular: tuple[float, ...] | float = 4.0
    n_max_radial: int = 6
    n_max_angular: int = 6
    basis_size_radial: int = 6
    basis_size_angular: int = 6
    l_max: int = 4
    flags: tuple[bool, ...] = (True, False, False, False, False, False)
    neurons: int = 30
    zbl: ZBLSpec | None = None
    max_neighbors_radial: int = 100
    max_neighbors_angular: int = 100
    per_type_cutoff: bool = False

    def __post_init__(self) -> None:
        set_ = lambda name, value: object.__setattr__(self, name, value)
        set_("elements", tuple(self.elements))
        T = len(self.elements)
        if T == 0:
            raise SpecError("a model needs at least one element type")
        for s in self.elements:
            if s not in SYMBOLS:
                raise SpecError(f"unknown element symbol {s!r}: NEP supports H to Pu")
        if len(set(self.elements)) != T:
            raise SpecError(f"element types must be unique, found {list(self.elements)}")
        for name in ("cutoff_radial", "cutoff_angular"):
            value = getattr(self, name)
            values = (float(value),) * T if isinstance(value, (int, float)) else tuple(map(float, value))
            if len(values) != T:
                raise SpecError(f"{name} needs 1 or {T} values (one per type), found {len(values)}")
            set_(name, values)
        for t, (rr, ra) in enumerate(zip(self.cutoff_radial, self.cutoff_angular)):
            if not (0.0 < ra <= rr <= MAX_CUTOFF):
                raise SpecError(
                    f"cutoffs of {self.elements[t]} must satisfy 0 < angular <= radial <= {MAX_CUTOFF} Å, "
                    f"found radial {rr}, angular {ra}"
                )
        flags = tuple(bool(f) for f in self.flags) + (False,) * (len(FLAG_NAMES) - len(self.flags))
        if len(flags) != len(FLAG_NAMES):
            raise SpecError(f"at most {len(FLAG_NAMES)} higher-order flags, found {len(self.flags)}")
        set_("flags", flags)
        _check_range("n_max_radial", self.n_max_radial, 0, MAX_N_EVALUATOR)
        _check_range("n_max_angular", self.n_max_angular, 0, MAX_N_EVALUATOR)
        _check_range("basis_size_radial", self.basis_size_radial, 0, MAX_BASIS_EVALUATOR)
        _check_range("basis_size_angular", self.basis_size_angular, 0, MAX_BASIS_EVALUATOR)
        _check_range("l_max", self.l_max, 1, MAX_L)
        _check_range("neurons", self.neurons, 1, MAX_NEURONS)
        for name, on in zip(FLAG_NAMES, flags):
            if on and self.l_max < FLAG_MIN_L[name]:
                raise SpecError(
                    f"{name} needs l_max >= {FLAG_MIN_L[name]}, found l_max {self.l_max} "
                    "(the invariant would be identically zero)"
                )
        if self.angular_dim > MAX_ANGULAR_DIM:
            raise SpecError(
                f"angular descriptor size (n_max_angular+1)*num_L = {self.angular_dim} exceeds {MAX_ANGULAR_DIM}"
            )
        if self.dim > MAX_DIM:
            raise SpecError(f"descriptor size {self.dim} exceeds NEP_CPU's limit {MAX_DIM}")
        for name in ("max_neighbors_radial", "max_neighbors_angular"):
            if int(getattr(self, name)) < 0:
                raise SpecError(f"{name} must be >= 0, found {getattr(self, name)}")

    # ---- derived sizes -------------------------------------------------------------------
    @property
    def n_types(self) -> int:
        return len(self.elements)

    @property
    def num_blocks(self) -> int:
        """Number of angular blocks (GPUMD's num_L): L 3-body blocks plus enabled flags."""
        return self.l_max + sum(self.flags)

    @property
    def radial_dim(self) -> int:
        return self.n_max_radial + 1

    @property
    def angular_dim(self) -> int:
        return (self.n_max_angular + 1) * self.num_blocks

    @property
    def dim(self) -> int:
        """Descriptor length D = (nR + 1) + (nA + 1) num_L."""
        return self.radial_dim + self.angular_dim

    @property
    def n_ann(self) -> int:
        """Network parameters: (D + 2) H T + 1 (the shared b1)."""
        return (self.dim + 2) * self.neurons * self.n_types + 1

    @property
    def n_descriptor_params(self) -> int:
        T2 = self.n_types**2
        return T2 * (
            (self.n_max_radial + 1) * (self.basis_size_radial + 1)
            + (self.n_max_angular + 1) * (self.basis_size_angular + 1)
        )

    @property
    def n_trainable(self) -> int:
        """GPUMD's N_par: network plus descriptor coefficients."""
        return self.n_ann + self.n_descriptor_params

    @property
    def n_zbl_table(self) -> int:
        T = self.n_types
        return 10 * T * (T + 1) // 2 if self.zbl is not None and self.zbl.kind == "flexible" else 0

    @property
    def has_uniform_cutoff(self) -> bool:
        return len(set(self.cutoff_radial)) == 1 and len(set(self.cutoff_angular)) == 1

    @property
    def max_cutoff_radial(self) -> float:
        return max(self.cutoff_radial)

    def pair_cutoffs(self, channel: Literal["radial", "angular"]) -> list[list[float]]:
        """T x T matrix of pair cutoffs (Å): the mean of the two types' cutoffs."""
        rc = self.cutoff_radial if channel == "radial" else self.cutoff_angular
        return [[0.5 * (a + b) for b in rc] for a in rc]

    def parameter_shapes(self) -> dict[str, tuple[int, ...]]:
        """Shape of every parameter array (see the module docstring for the layout)."""
        T, H, D = self.n_types, self.neurons, self.dim
        shapes = {
            "W0": (T, H, D),
            "b0": (T, H),
            "w1": (T, H),
            "b1": (),
            "c_radial": (self.n_max_radial + 1, self.basis_size_radial + 1, T, T),
            "c_angular": (self.n_max_angular + 1, self.basis_size_angular + 1, T, T),
            "q_scaler": (D,),
        }
        if self.n_zbl_table:
            shapes["zbl_table"] = (T * (T + 1) // 2, 10)
        return shapes

    def replace(self, **changes) -> ModelSpec:
        """A copy with some fields changed (validated again)."""
        return dataclasses.replace(self, **changes)

    def architecture_dict(self) -> dict:
        """Plain-dict form (JSON-serialisable), used in checkpoints and config hashes."""
        d = dataclasses.asdict(self)
        d["elements"] = list(self.elements)
        d["cutoff_radial"] = list(self.cutoff_radial)
        d["cutoff_angular"] = list(self.cutoff_angular)
        d["flags"] = list(self.flags)
        return d

    @classmethod
    def from_dict(cls, d: dict) -> ModelSpec:
        d = dict(d)
        if d.get("zbl") is not None and not isinstance(d["zbl"], ZBLSpec):
            d["zbl"] = ZBLSpec(**d["zbl"])
        for key in ("elements", "cutoff_radial", "cutoff_angular", "flags"):
            if isinstance(d.get(key), list):
                d[key] = tuple(d[key])
        return cls(**d)


def _check_range(name: str, value: int, lo: int, hi: int) -> None:
    if not isinstance(value, int) or isinstance(value, bool):
        raise SpecError(f"{name} must be an integer, found {value!r}")
    if not lo <= value <= hi:
        raise SpecError(f"{name} must be in [{lo}, {hi}] (GPUMD's limit), found {value}")
