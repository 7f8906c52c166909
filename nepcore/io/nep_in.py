"""Parse GPUMD ``nep.in`` training inputs (docs/model.md#training-inputs) into nepcore settings.

:func:`parse_nep_in` returns a :class:`NepIn`: the :class:`~nepcore.spec.ModelSpec` keyword
arguments (``type cutoff n_max basis_size l_max neuron zbl use_typewise_cutoff_zbl``, with
GPUMD's defaults for the ones not given), the training settings (``lambda_*``, ``batch``,
``generation``, ...) and the keys it did not recognise, with their line numbers, so the
caller can warn about them instead of dropping them silently. :func:`spec_from_nep_in`
builds the ModelSpec.

Syntax (as GPUMD): one keyword per line followed by its values, ``#`` starts a comment,
blank lines are ignored; keys are matched case-insensitively here (GPUMD is case-sensitive).
``type`` must come before ``cutoff`` and ``type_weight``. Lengths are in Å. Errors are
:class:`NepInError` (a ValueError) naming the file and the 1-based line.
"""

from __future__ import annotations

import dataclasses
import math
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from nepcore.elements import SYMBOLS
from nepcore.errors import NepcoreError
from nepcore.spec import (
    FLAG_NAMES,
    MAX_BASIS_ANGULAR,
    MAX_BASIS_RADIAL,
    MAX_CUTOFF,
    MAX_L,
    MAX_N_ANGULAR,
    MAX_N_RADIAL,
    MAX_NEURONS,
    ModelSpec,
    SpecError,
    ZBLSpec,
)

__all__ = [
    "NepIn",
    "NepInError",
    "parse_nep_in",
    "spec_from_nep_in",
    "DEFAULT_SPEC_KWARGS",
    "DEFAULT_TRAINING",
]

#: GPUMD defaults of the architecture keywords (``Parameters::set_default_parameters``): the
#: defaults of ModelSpec, which are GPUMD's (see its docstring).
DEFAULT_SPEC_KWARGS: dict[str, Any] = {
    f.name: f.default
    for f in dataclasses.fields(ModelSpec)
    if f.name
    in (
        "cutoff_radial",
        "cutoff_angular",
        "n_max_radial",
        "n_max_angular",
        "basis_size_radial",
        "basis_size_angular",
        "l_max",
        "flags",
        "neurons",
        "zbl",
        "per_type_cutoff",
    )
}

#: GPUMD defaults of the training keywords. lambda_1/lambda_2 None = GPUMD's automatic
#: sqrt(N_par / T) / 1000; type_weight None = 1 for every type.
DEFAULT_TRAINING: dict[str, Any] = dict(
    lambda_1=None,
    lambda_2=None,
    lambda_e=1.0,
    lambda_f=1.0,
    lambda_v=0.1,
    lambda_shear=1.0,
    force_delta=0.0,
    type_weight=None,
    batch=1000,
    use_full_batch=0,
    population=50,
    generation=100000,
    output_interval=100,
    save_potential=100000,
    save_potential_format=1,
    save_restart=0,
    prediction=0,
    output_descriptor=0,
    initial_para=1.0,
    sigma0=0.1,
    import_q_scaler=0,
    fine_tune=None,
)

# ZBL limits of the trainer (parse_zbl / parse_use_typewise_cutoff_zbl), Å and dimensionless.
ZBL_R_MIN, ZBL_R_MAX = 1.0, 4.0
TYPEWISE_ZBL_DEFAULT, TYPEWISE_ZBL_MIN = 0.7, 0.5
MIN_ANGULAR_CUTOFF = 3.0  # the trainer refuses rcA < 3 Å


class NepInError(NepcoreError, ValueError):
    """A nep.in that GPUMD would refuse, or that asks for something nepcore does not do."""


@dataclass
class NepIn:
    """Content of a nep.in.

    elements: the ``type`` list. spec_kwargs: ModelSpec keyword arguments (defaults filled in).
    training: training settings (defaults filled in, see DEFAULT_TRAINING). given: keyword ->
    line number of every recognised keyword that was present. unknown: (line number, key) of
    unrecognised keywords, in file order. zbl_table: the flexible-ZBL table read from a
    ``zbl.in`` beside the file, shape (T(T+1)/2, 10), else None. source: the file path, or
    "<nep.in text>" when parsed from a string.
    """

    elements: tuple[str, ...]
    spec_kwargs: dict[str, Any]
    training: dict[str, Any]
    given: dict[str, int] = field(default_factory=dict)
    unknown: list[tuple[int, str]] = field(default_factory=list)
    zbl_table: np.ndarray | None = None
    source: str = "<nep.in text>"


class _State:
    """Mutable parse state for one nep.in."""

    def __init__(self, source: str, line_names: Mapping[int, str] | None = None) -> None:
        self.source = source
        self.line_names = dict(line_names or {})
        self.elements: tuple[str, ...] | None = None
        self.spec: dict[str, Any] = dict(DEFAULT_SPEC_KWARGS)
        self.training: dict[str, Any] = dict(DEFAULT_TRAINING)
        self.given: dict[str, int] = {}
        self.unknown: list[tuple[int, str]] = []
        self.zbl_outer: float | None = None
        self.typewise_factor: float | None = None

    def error(self, line: int, message: str) -> NepInError:
        if line in self.line_names:  # the value came from a flag or config key, not a file line
            return NepInError(f"{self.line_names[line]}: {message}")
        return NepInError(f"{self.source}, line {line}: {message}")


#: A keyword handler: (state, 1-based line number, the values after the keyword).
_Handler = Callable[[_State, int, list[str]], None]


# ---- value helpers ---------------------------------------------------------------------------


def _count(st: _State, line: int, key: str, values: list[str], allowed: range | list[int], usage: str) -> None:
    if len(values) not in allowed:
        want = " or ".join(map(str, allowed)) if isinstance(allowed, list) else f"{allowed.start} to {allowed.stop - 1}"
        raise st.error(line, f"'{key}' takes {want} value(s) ({usage}), found {len(values)}: {' '.join(values)!r}")


def _int(st: _State, line: int, what: str, token: str, lo: int | None = None, hi: int | None = None) -> int:
    try:
        value = int(token)
    except ValueError:
        raise st.error(line, f"expected an integer for {what}, found {token!r}") from None
    _bounds(st, line, what, value, lo, hi)
    return value


def _float(st: _State, line: int, what: str, token: str, lo: float | None = None, hi: float | None = None) -> float:
    try:
        value = float(token)
    except ValueError:
        raise st.error(line, f"expected a number for {what}, found {token!r}") from None
    if not math.isfinite(value):
        raise st.error(line, f"{what} must be finite, found {token!r}")
    _bounds(st, line, what, value, lo, hi)
    return value


def _bounds(st: _State, line: int, what: str, value: float, lo: float | None, hi: float | None) -> None:
    if (lo is not None and value < lo) or (hi is not None and value > hi):
        limit = f">= {lo:g}" if hi is None else f"<= {hi:g}" if lo is None else f"in [{lo:g}, {hi:g}]"
        raise st.error(line, f"{what} must be {limit} (GPUMD's limit), found {value:g}")


def _need_type(st: _State, line: int, key: str) -> tuple[str, ...]:
    if st.elements is None:
        raise st.error(line, f"'{key}' must come after 'type' (as in GPUMD)")
    return st.elements


# ---- architecture keywords -------------------------------------------------------------------


def _kw_type(st: _State, line: int, v: list[str]) -> None:
    if len(v) < 2:
        raise st.error(line, f"'type' takes 'T E_0 ... E_(T-1)', found {' '.join(v)!r}")
    n = _int(st, line, "the number of types", v[0], 1, len(SYMBOLS))
    if len(v) != n + 1:
        raise st.error(line, f"'type {n}' needs {n} element symbols, found {len(v) - 1}")
    for symbol in v[1:]:
        if symbol not in SYMBOLS:
            raise st.error(line, f"invalid element symbol {symbol!r} (expected one of H ... Pu)")
    if len(set(v[1:])) != n:
        raise st.error(line, f"element symbols must be unique, found {' '.join(v[1:])}")
    st.elements = tuple(v[1:])


def _kw_cutoff(st: _State, line: int, v: list[str]) -> None:
    T = len(_need_type(st, line, "cutoff"))
    _count(
        st,
        line,
        "cutoff",
        v,
        sorted({2, 2 * T}),
        f"'cutoff rcR rcA' or {2 * T} per-type values rcR_0 rcA_0 ...",
    )
    values = [_float(st, line, f"cutoff value {i + 1}", tok) for i, tok in enumerate(v)]
    for t in range(len(values) // 2):
        rr, ra = values[2 * t], values[2 * t + 1]
        if not MIN_ANGULAR_CUTOFF <= ra <= rr <= MAX_CUTOFF:
            raise st.error(
                line,
                f"cutoffs must satisfy {MIN_ANGULAR_CUTOFF:g} <= angular <= radial <= {MAX_CUTOFF:g} Å "
                f"(GPUMD's limits), found radial {rr:g}, angular {ra:g}",
            )
    per_type = len(v) == 2 * T and T > 1
    st.spec["cutoff_radial"] = tuple(values[0::2]) if per_type else values[0]
    st.spec["cutoff_angular"] = tuple(values[1::2]) if per_type else values[1]
    st.spec["per_type_cutoff"] = per_type  # GPUMD writes the long nep.txt line whenever 2T numbers were used


def _kw_pair(key: str, names: tuple[str, str], limits: tuple[int, int]) -> _Handler:
    """Handler for 'key radial angular' integer pairs (n_max, basis_size)."""

    def handler(st: _State, line: int, v: list[str]) -> None:
        _count(st, line, key, v, [2], f"{key} radial angular")
        for name, token, hi in zip(names, v, limits):
            st.spec[name] = _int(st, line, name, token, 0, hi)

    return handler


def _kw_l_max(st: _State, line: int, v: list[str]) -> None:
    _count(
        st,
        line,
        "l_max",
        v,
        range(1, 2 + len(FLAG_NAMES)),
        "l_max L [q222 [q1111 [q112 [q123 [q233 [q134]]]]]]",
    )
    st.spec["l_max"] = _int(st, line, "l_max L (3-body)", v[0], 2, MAX_L)
    given = [_int(st, line, f"the {name} flag", tok) != 0 for name, tok in zip(FLAG_NAMES, v[1:])]
    # flags not written keep GPUMD's defaults (q222 on, the others off)
    st.spec["flags"] = tuple(given) + DEFAULT_SPEC_KWARGS["flags"][len(given) :]


def _kw_neuron(st: _State, line: int, v: list[str]) -> None:
    _count(st, line, "neuron", v, [1, 2], "neuron H")
    st.spec["neurons"] = _int(st, line, "neuron", v[0], 1, MAX_NEURONS)
    if len(v) == 2 and _int(st, line, "the second hidden layer", v[1]) != 0:
        raise st.error(line, f"'neuron {v[0]} {v[1]}': two hidden layers are not supported by nepcore")


def _kw_zbl(st: _State, line: int, v: list[str]) -> None:
    _count(st, line, "zbl", v, [1], "zbl R_outer")
    st.zbl_outer = _float(st, line, "the ZBL outer cutoff", v[0], ZBL_R_MIN, ZBL_R_MAX)


def _kw_typewise_zbl(st: _State, line: int, v: list[str]) -> None:
    _count(st, line, "use_typewise_cutoff_zbl", v, [0, 1], "use_typewise_cutoff_zbl [factor]")
    st.typewise_factor = (
        _float(st, line, "the typewise ZBL factor", v[0], TYPEWISE_ZBL_MIN) if v else TYPEWISE_ZBL_DEFAULT
    )


def _kw_version(st: _State, line: int, v: list[str]) -> None:
    _count(st, line, "version", v, [1], "version 4")
    if _int(st, line, "version", v[0]) != 4:
        raise st.error(line, f"'version {v[0]}': only NEP4 is supported (GPUMD >= v5.3 also accepts only 4)")


def _kw_must_be_zero(what: str) -> _Handler:
    """Handler for switches nepcore only supports in their 'off' (0) state."""

    def handler(st: _State, line: int, v: list[str]) -> None:
        _count(st, line, what, v, [1], f"{what} 0")
        if _int(st, line, what, v[0]) != 0:
            raise st.error(line, f"'{what} {v[0]}': only 0 is supported (nepcore trains plain potentials)")

    return handler


def _kw_legacy_typewise_cutoff(st: _State, line: int, v: list[str]) -> None:
    raise st.error(
        line,
        "'use_typewise_cutoff' (GPUMD <= v4.6 typewise NEP cutoffs) is not supported; give "
        "per-type cutoffs with 'cutoff rcR_0 rcA_0 ...' instead",
    )


# ---- training keywords ---------------------------------------------------------------------


def _kw_number(key: str, kind: type, lo: float | None = None, hi: float | None = None) -> _Handler:
    """Handler for 'key value' with one int or float in [lo, hi], stored under training[key]."""

    def handler(st: _State, line: int, v: list[str]) -> None:
        _count(st, line, key, v, [1], f"{key} value")
        conv = _int if kind is int else _float
        st.training[key] = conv(st, line, key, v[0], lo, hi)

    return handler


def _kw_type_weight(st: _State, line: int, v: list[str]) -> None:
    T = len(_need_type(st, line, "type_weight"))
    _count(st, line, "type_weight", v, [T], "one weight per type")
    st.training["type_weight"] = [_float(st, line, f"type weight {i}", tok, 0.0) for i, tok in enumerate(v)]


def _kw_batch(st: _State, line: int, v: list[str]) -> None:
    _count(st, line, "batch", v, [1, 2], "batch size [use_full_batch]")
    st.training["batch"] = _int(st, line, "batch", v[0], 1)
    if len(v) == 2:
        st.training["use_full_batch"] = _int(st, line, "use_full_batch", v[1], 0, 1)


def _kw_save_potential(st: _State, line: int, v: list[str]) -> None:
    _count(st, line, "save_potential", v, [3], "save_potential N format save_restart")
    st.training["save_potential"] = _int(st, line, "save_potential N", v[0], 0)
    st.training["save_potential_format"] = _int(st, line, "save_potential format", v[1], 0, 1)
    st.training["save_restart"] = _int(st, line, "save_potential save_restart", v[2], 0, 1)


def _kw_fine_tune(st: _State, line: int, v: list[str]) -> None:
    _count(st, line, "fine_tune", v, [2, 3], "fine_tune nep.txt nep.restart [fine_tune_descriptor]")
    st.training["fine_tune"] = tuple(v)


_HANDLERS: dict[str, _Handler] = {
    "type": _kw_type,
    "cutoff": _kw_cutoff,
    "n_max": _kw_pair("n_max", ("n_max_radial", "n_max_angular"), (MAX_N_RADIAL, MAX_N_ANGULAR)),
    "basis_size": _kw_pair(
        "basis_size", ("basis_size_radial", "basis_size_angular"), (MAX_BASIS_RADIAL, MAX_BASIS_ANGULAR)
    ),
    "l_max": _kw_l_max,
    "neuron": _kw_neuron,
    "zbl": _kw_zbl,
    "use_typewise_cutoff_zbl": _kw_typewise_zbl,
    "use_typewise_cutoff": _kw_legacy_typewise_cutoff,
    "version": _kw_version,
    "model_type": _kw_must_be_zero("model_type"),
    "mode": _kw_must_be_zero("mode"),
    "charge_mode": _kw_must_be_zero("charge_mode"),
    "vdw": _kw_must_be_zero("vdw"),
    "charge_vdw": _kw_must_be_zero("charge_vdw"),
    "atomic_v": _kw_must_be_zero("atomic_v"),
    "lambda_1": _kw_number("lambda_1", float, 0.0),
    "lambda_2": _kw_number("lambda_2", float, 0.0),
    "lambda_e": _kw_number("lambda_e", float, 0.0),
    "lambda_f": _kw_number("lambda_f", float, 0.0),
    "lambda_v": _kw_number("lambda_v", float, 0.0),
    "lambda_shear": _kw_number("lambda_shear", float, 0.0),
    "force_delta": _kw_number("force_delta", float, 0.0),
    "type_weight": _kw_type_weight,
    "batch": _kw_batch,
    "population": _kw_number("population", int, 10, 200),
    "generation": _kw_number("generation", int, 0, 10_000_000),
    "output_interval": _kw_number("output_interval", int, 1),
    "save_potential": _kw_save_potential,
    "prediction": _kw_number("prediction", int, 0, 1),
    "output_descriptor": _kw_number("output_descriptor", int, 0, 2),
    "initial_para": _kw_number("initial_para", float, 0.1, 1.0),
    "sigma0": _kw_number("sigma0", float, 0.01, 0.1),
    "import_q_scaler": _kw_number("import_q_scaler", int, 0, 1),
    "fine_tune": _kw_fine_tune,
}
_ALIASES = {"mode": "model_type"}  # the same GPUMD setting under two names


# ---- driver ----------------------------------------------------------------------------------


def parse_nep_in(
    path_or_text: str | os.PathLike, source: str | None = None, line_names: Mapping[int, str] | None = None
) -> NepIn:
    """Parse a nep.in given as a path (str or Path to an existing file) or as its text.

    A string containing a newline, or a one-line string that starts with a nep.in keyword and
    is not an existing file, is taken as text; any other string must name an existing file.
    With a path, a ``zbl.in`` in the same folder turns ``zbl`` into flexible ZBL (as in GPUMD)
    and its T(T+1)/2 x 10 table is returned in ``NepIn.zbl_table``.

    source: what errors call text input (default "<nep.in text>"). line_names: 1-based text
    line -> what errors call that line instead of "<source>, line N" (text made from command
    line flags names the flag, e.g. {2: "--cutoff"}).
    """
    path, text = _resolve_input(path_or_text)
    st = _State(str(path) if path is not None else source or "<nep.in text>", line_names)
    first_seen: dict[str, int] = {}
    for number, raw in enumerate(text.splitlines(), start=1):
        tokens = raw.split("#", 1)[0].split()
        if not tokens:
            continue
        key, values = tokens[0].lower(), tokens[1:]
        handler = _HANDLERS.get(key)
        if handler is None:
            st.unknown.append((number, tokens[0]))
            continue
        canonical = _ALIASES.get(key, key)
        if canonical in first_seen:
            raise st.error(number, f"'{key}' is given twice (first on line {first_seen[canonical]})")
        first_seen[canonical] = number
        handler(st, number, values)
    st.given = first_seen
    return _finish(st, path)


def _resolve_input(path_or_text: str | os.PathLike) -> tuple[Path | None, str]:
    if isinstance(path_or_text, os.PathLike):
        return Path(path_or_text), _read_text(Path(path_or_text))
    if "\n" in path_or_text:
        return None, path_or_text
    if Path(path_or_text).exists():
        return Path(path_or_text), _read_text(Path(path_or_text))
    first = path_or_text.split("#", 1)[0].split()
    if first and first[0].lower() in _HANDLERS:  # a one-line nep.in such as "type 1 Cu"
        return None, path_or_text
    raise NepInError(f"{path_or_text}: no such nep.in file (and not nep.in text either)")


def _read_text(path: Path) -> str:
    """The text of a nep.in file; NepInError saying why when it cannot be read."""
    if path.is_dir():
        raise NepInError(f"{path}: is a folder; give the nep.in file inside it")
    try:
        return path.read_text()
    except FileNotFoundError:
        raise NepInError(f"{path}: no such nep.in file") from None
    except (OSError, UnicodeDecodeError) as err:
        raise NepInError(f"{path}: cannot read ({getattr(err, 'strerror', None) or err})") from None


def _finish(st: _State, path: Path | None) -> NepIn:
    """Cross-keyword checks (type present, ZBL kind) and the NepIn."""
    if st.elements is None:
        raise NepInError(f"{st.source}: the mandatory 'type' keyword is missing")
    if st.typewise_factor is not None and st.zbl_outer is None:
        line = st.given["use_typewise_cutoff_zbl"]
        raise st.error(line, "'use_typewise_cutoff_zbl' needs 'zbl R' as well")
    zbl_table = None
    if st.zbl_outer is not None:
        zbl_in = path.parent / "zbl.in" if path is not None else None
        if zbl_in is not None and zbl_in.is_file():
            zbl_table = _read_zbl_in(zbl_in, len(st.elements))
            st.spec["zbl"] = ZBLSpec(kind="flexible")
        elif st.typewise_factor is not None:
            st.spec["zbl"] = ZBLSpec("typewise", st.zbl_outer / 2, st.zbl_outer, st.typewise_factor)
        else:
            st.spec["zbl"] = ZBLSpec("universal", st.zbl_outer / 2, st.zbl_outer)
    return NepIn(
        elements=st.elements,
        spec_kwargs={"elements": st.elements, **st.spec},
        training=st.training,
        given=st.given,
        unknown=st.unknown,
        zbl_table=zbl_table,
        source=st.source,
    )


def _read_zbl_in(path: Path, n_types: int) -> np.ndarray:
    """The flexible-ZBL table: 10 numbers (r_in, r_out, a1..a8) per unordered type pair."""
    n_pairs = n_types * (n_types + 1) // 2
    tokens = [(i, tok) for i, line in enumerate(path.read_text().splitlines(), 1) for tok in line.split()]
    if len(tokens) < 10 * n_pairs:
        raise NepInError(f"{path}: expected {10 * n_pairs} numbers (10 per type pair), found {len(tokens)}")
    values = []
    for number, tok in tokens[: 10 * n_pairs]:
        try:
            values.append(float(tok))
        except ValueError:
            raise NepInError(f"{path}, line {number}: expected a number, found {tok!r}") from None
        if not math.isfinite(values[-1]):
            raise NepInError(f"{path}, line {number}: values must be finite, found {tok!r}")
    return np.array(values, dtype=np.float64).reshape(n_pairs, 10)


def spec_from_nep_in(nep_in: NepIn | str | os.PathLike, **overrides: Any) -> ModelSpec:
    """The ModelSpec of a nep.in (a parsed :class:`NepIn`, a path or the text).

    overrides: ModelSpec fields to set on top (e.g. max_neighbors_radial from the data).
    """
    parsed = nep_in if isinstance(nep_in, NepIn) else parse_nep_in(nep_in)
    try:
        return ModelSpec(**{**parsed.spec_kwargs, **overrides})
    except SpecError as exc:
        raise NepInError(f"{parsed.source}: {exc}") from None
