"""Read and write GPUMD ``nep.txt`` potential files (docs/model.md#parameter-order).

:func:`read_nep` turns a file into a :class:`NepPotential` (a :class:`~nepcore.spec.ModelSpec`
plus float64 parameter arrays in the layout documented in :mod:`nepcore.spec`);
:func:`write_nep` does the reverse. ``read_nep(write_nep(x))`` reproduces every float64
parameter bit for bit: values are written with Python's shortest round-trip ``repr``.

Supported: ``nep4`` and ``nep4_zbl`` (universal, typewise and flexible ZBL; global or
per-species cutoffs; ``l_max`` with up to six higher-order flags), and the subset of legacy
``nep3``/``nep3_zbl`` files that maps exactly onto NEP4 (the one shared network is copied to
every species). Everything else (NEP5, tensor/charge/vdW/temperature models, two hidden
layers, the legacy 8-token ``cutoff`` line) is refused with a :class:`NepFileError` that
names the file, the 1-based line and what was expected versus found.

Lengths (cutoffs, ZBL radii) are in Å; parameters are dimensionless network weights and
descriptor coefficients, ``q_scaler`` is 1/(descriptor range).
"""

from __future__ import annotations

import functools
import math
import os
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from nepcore._utils import atomic_write_text
from nepcore.elements import SYMBOLS
from nepcore.errors import NepcoreError
from nepcore.spec import FLAG_NAMES, ModelSpec, SpecError, ZBLSpec

__all__ = ["NepFileError", "NepPotential", "read_nep", "write_nep", "format_header", "PARAMETER_ORDER"]

# GPUMD evaluates in float32: larger values become inf, smaller non-zero ones crash its parser.
FLOAT32_MAX = float(np.finfo(np.float32).max)
FLOAT32_TINY = float(np.finfo(np.float32).tiny)

#: Order of the parameter blocks in the body of nep.txt (docs/model.md#parameter-order, items 1-6).
PARAMETER_ORDER: tuple[str, ...] = ("W0", "b0", "w1", "b1", "c_radial", "c_angular", "q_scaler", "zbl_table")

# Strict decimal number (what C++ stod/stof accept, minus hex, inf and nan, which GPUMD rejects
# after parsing anyway). Python's float() alone would also take '1_0', 'infinity', ' 1 '.
_FLOAT_RE = re.compile(r"[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?\Z")
_INT_RE = re.compile(r"[+-]?\d+\Z")
_NONFINITE_RE = re.compile(r"[+-]?(?:nan|inf|infinity)\Z", re.IGNORECASE)

# Header tokens of models that are not plain NEP4 potentials (substring -> what it is).
_REFUSED_TOKEN_PARTS = {
    "dipole": "dipole models",
    "polarizability": "polarizability models",
    "temperature": "temperature-dependent models",
    "charge": "charge (qNEP) models",
    "vdw": "van der Waals models",
    "nep5": "NEP5 models (per-species output bias)",
}


class NepFileError(NepcoreError, ValueError):
    """A nep.txt file that is malformed or holds a model nepcore cannot represent."""


@dataclass
class NepPotential:
    """A NEP4 potential: architecture plus parameters.

    spec: the architecture. params: float64 arrays keyed as in :mod:`nepcore.spec`
    (``W0, b0, w1, b1, c_radial, c_angular, q_scaler`` and, for flexible ZBL, ``zbl_table``),
    shapes = ``spec.parameter_shapes()``. source_format: ``"nep4"``, or ``"nep3"`` when the
    file held a NEP3 model whose shared network was copied to every species.
    """

    spec: ModelSpec
    params: dict[str, np.ndarray]
    source_format: str = "nep4"


@dataclass(frozen=True)
class _Line:
    """One non-blank line of the file: 1-based number and whitespace-split tokens."""

    number: int
    tokens: tuple[str, ...]


class _Reader:
    """Error reporting bound to one file path."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def error(self, line: int, message: str) -> NepFileError:
        return NepFileError(f"{self.path}, line {line}: {message}")

    def expect_key(self, line: _Line, key: str, usage: str) -> None:
        if line.tokens[0] != key:
            raise self.error(line.number, f"expected the '{key}' line ({usage}), found {' '.join(line.tokens)!r}")

    def expect_count(self, line: _Line, counts: Sequence[int], usage: str) -> None:
        if len(line.tokens) not in counts:
            contiguous = len(counts) > 2 and list(counts) == list(range(counts[0], counts[-1] + 1))
            want = f"{counts[0]} to {counts[-1]}" if contiguous else " or ".join(str(c) for c in counts)
            raise self.error(
                line.number,
                f"expected {want} tokens ({usage}), found {len(line.tokens)}: {' '.join(line.tokens)!r}",
            )

    def to_int(self, line: _Line, index: int, what: str) -> int:
        token = line.tokens[index]
        if not _INT_RE.match(token):
            raise self.error(line.number, f"expected an integer for {what}, found {token!r}")
        return int(token)

    def to_float(self, line: _Line, index: int, what: str) -> float:
        token = line.tokens[index]
        if _NONFINITE_RE.match(token):
            raise self.error(line.number, f"{what} must be finite (GPUMD aborts on inf/nan), found {token!r}")
        if not _FLOAT_RE.match(token):
            raise self.error(line.number, f"expected a number for {what}, found {token!r}")
        return float(token)


# ---------------------------------------------------------------------------------------------
# reading
# ---------------------------------------------------------------------------------------------


def read_nep(path: str | os.PathLike) -> NepPotential:
    """Read a GPUMD ``nep.txt`` file (docs/model.md#parameter-order) into a :class:`NepPotential`.

    path: the file. Returns float64 parameters with shapes ``spec.parameter_shapes()``.
    Raises :class:`NepFileError` (a ValueError) naming the file and the 1-based line for any
    malformed or unsupported content; trailing blank lines are tolerated, blank lines inside
    are not (GPUMD reads one value per line and would misread the rest).
    """
    path = Path(path)
    reader = _Reader(path)
    if path.is_dir():
        raise NepFileError(f"{path}: is a folder, not a nep.txt file")
    try:
        text = path.read_text()
    except UnicodeDecodeError as exc:
        raise NepFileError(f"{path}: not a text file ({exc})") from None
    except FileNotFoundError:
        raise NepFileError(f"{path}: no such nep.txt file") from None
    except OSError as exc:
        raise NepFileError(f"{path}: cannot read ({exc.strerror or exc})") from None
    lines = _split_lines(reader, text)
    if not lines:
        raise NepFileError(f"{path}, line 1: empty file, expected a nep.txt header 'nep4 T E_0 ...'")
    token, elements = _parse_first_line(reader, lines[0])
    is_nep3 = token.startswith("nep3")
    has_zbl = token.endswith("_zbl")
    header_size = 7 if has_zbl else 6
    if len(lines) < header_size:
        raise NepFileError(
            f"{path}, line {len(lines) + 1}: file ends inside the header, expected {header_size} header "
            f"lines, found {len(lines)}"
        )
    spec = _parse_header(reader, lines[:header_size], elements, has_zbl, is_nep3)
    n_network = (spec.dim + 2) * spec.neurons + 1 if is_nep3 else spec.n_ann
    n_body = n_network + spec.n_descriptor_params + spec.dim + spec.n_zbl_table
    describe = functools.partial(_describe_value, spec, is_nep3=is_nep3)  # for error messages only
    body = _parse_body(reader, lines[header_size:], n_body, lines[header_size - 1].number, describe)
    params = _split_body(spec, body, is_nep3)
    return NepPotential(spec=spec, params=params, source_format="nep3" if is_nep3 else "nep4")


def _split_lines(reader: _Reader, text: str) -> list[_Line]:
    """Tokenised lines; blank lines are only allowed after the last non-blank one."""
    raw = text.splitlines()
    while raw and not raw[-1].strip():
        raw.pop()
    lines = []
    for number, content in enumerate(raw, start=1):
        tokens = tuple(content.split())
        if not tokens:
            raise reader.error(number, "blank line inside the file (GPUMD reads one item per line; remove it)")
        lines.append(_Line(number, tokens))
    return lines


def _parse_first_line(reader: _Reader, line: _Line) -> tuple[str, tuple[str, ...]]:
    """Model token and element symbols from ``nep4[_zbl] T E_0 ... E_{T-1}``."""
    token = line.tokens[0]
    _check_model_token(reader, line.number, token)
    if len(line.tokens) < 3:
        raise reader.error(line.number, f"expected '{token} T E_0 ... E_(T-1)', found {' '.join(line.tokens)!r}")
    n_types = reader.to_int(line, 1, "the number of types T")
    if n_types < 1:
        raise reader.error(line.number, f"the number of types must be >= 1, found {n_types}")
    if len(line.tokens) != 2 + n_types:
        raise reader.error(
            line.number,
            f"expected {n_types} element symbols after T = {n_types}, found {len(line.tokens) - 2}",
        )
    elements = line.tokens[2:]
    for symbol in elements:
        if symbol not in SYMBOLS:
            raise reader.error(line.number, f"invalid element symbol {symbol!r} (expected one of H ... Pu)")
    if len(set(elements)) != len(elements):
        raise reader.error(line.number, f"element symbols must be unique, found {' '.join(elements)}")
    return token, elements


def _check_model_token(reader: _Reader, number: int, token: str) -> None:
    """Accept nep4[_zbl] and nep3[_zbl]; refuse the rest with the reason."""
    if token in ("nep4", "nep4_zbl", "nep3", "nep3_zbl"):
        return
    refused = [what for part, what in _REFUSED_TOKEN_PARTS.items() if part in token]
    if token in ("nep", "nep_zbl"):
        refused = ["NEP2 models"]
    if token.startswith("nep") and refused:
        raise reader.error(number, f"model token {token!r}: {refused[0]} are not supported, only nep4 and nep4_zbl")
    raise reader.error(number, f"unknown model token {token!r}, expected nep4 or nep4_zbl (or legacy nep3/nep3_zbl)")


def _parse_header(
    reader: _Reader, lines: Sequence[_Line], elements: tuple[str, ...], has_zbl: bool, is_nep3: bool
) -> ModelSpec:
    """ModelSpec from the 6 (7 with ZBL) header lines."""
    rest = list(lines[1:])
    zbl = _parse_zbl_line(reader, rest.pop(0), is_nep3) if has_zbl else None
    cutoff_line = rest.pop(0)
    cutoffs = _parse_cutoff_line(reader, cutoff_line, len(elements), is_nep3)
    n_line, basis_line, l_line, ann_line = rest
    n_max = _parse_int_pair(reader, n_line, "n_max", ("n_max_radial", "n_max_angular"))
    basis = _parse_int_pair(reader, basis_line, "basis_size", ("basis_size_radial", "basis_size_angular"))
    l_max, flags = _parse_l_max_line(reader, l_line, is_nep3)
    kwargs: dict[str, Any] = dict(
        elements=elements,
        **n_max,
        **basis,
        l_max=l_max,
        flags=flags,
        neurons=_parse_ann_line(reader, ann_line),
        zbl=zbl,
        **cutoffs,
    )
    try:
        return ModelSpec(**kwargs)
    except SpecError as exc:
        raise NepFileError(
            f"{reader.path}, lines {lines[0].number}-{lines[-1].number} (header): unsupported model: {exc}"
        ) from None


def _parse_int_pair(reader: _Reader, line: _Line, key: str, names: tuple[str, str]) -> dict[str, int]:
    """``n_max nR nA`` or ``basis_size KR KA``: two integers, returned under ``names``."""
    usage = f"{key} {names[0]} {names[1]}"
    reader.expect_key(line, key, usage)
    reader.expect_count(line, [3], usage)
    return {name: reader.to_int(line, i + 1, name) for i, name in enumerate(names)}


def _parse_zbl_line(reader: _Reader, line: _Line, is_nep3: bool) -> ZBLSpec:
    """``zbl r_in r_out`` (universal), ``zbl r_in r_out f`` (typewise), ``zbl 0 0`` (flexible)."""
    usage = "zbl r_inner r_outer [typewise_factor]"
    reader.expect_key(line, "zbl", usage)
    reader.expect_count(line, [3] if is_nep3 else [3, 4], "zbl r_inner r_outer" if is_nep3 else usage)
    r_in = reader.to_float(line, 1, "the ZBL inner radius")
    r_out = reader.to_float(line, 2, "the ZBL outer radius")
    try:
        if r_in == 0.0 and r_out == 0.0:
            if len(line.tokens) == 4:
                raise reader.error(
                    line.number,
                    f"flexible ZBL ('zbl 0 0') takes no typewise factor, found {' '.join(line.tokens)!r}",
                )
            return ZBLSpec(kind="flexible")
        if len(line.tokens) == 4:
            factor = reader.to_float(line, 3, "the typewise ZBL factor")
            return ZBLSpec(kind="typewise", r_inner=r_in, r_outer=r_out, typewise_factor=factor)
        return ZBLSpec(kind="universal", r_inner=r_in, r_outer=r_out)
    except SpecError as exc:
        raise reader.error(line.number, str(exc)) from None


def _parse_cutoff_line(reader: _Reader, line: _Line, n_types: int, is_nep3: bool) -> dict[str, Any]:
    """Cutoffs (Å) and neighbour counts from the 5-token or per-species (2T+3) cutoff line."""
    reader.expect_key(line, "cutoff", "cutoff rcR rcA MN_R MN_A")
    n_tok = len(line.tokens)
    long_form = 2 * n_types + 3
    if n_tok == 8 and long_form != 8:
        raise reader.error(
            line.number,
            "legacy 8-token 'cutoff rcR rcA MN_R MN_A fR fA f_zbl' line (GPUMD <= v4.6 typewise cutoffs) "
            "is not supported by current GPUMD, calorine or nepcore",
        )
    if is_nep3 and n_tok != 5:
        raise reader.error(
            line.number,
            f"nep3 file: expected 5 tokens 'cutoff rcR rcA MN_R MN_A', found {n_tok}; a nep3 model with "
            "per-species cutoffs cannot be mapped onto NEP4 reliably",
        )
    reader.expect_count(
        line,
        sorted({5, long_form}),
        f"'cutoff rcR rcA MN_R MN_A' or per-species 'cutoff rcR_0 rcA_0 ... "
        f"rcR_{n_types - 1} rcA_{n_types - 1} MN_R MN_A'",
    )
    values = [reader.to_float(line, i, f"cutoff value {i}") for i in range(1, n_tok - 2)]
    per_type = n_tok == long_form and n_types > 1
    radial = tuple(values[0::2]) if per_type else values[0]
    angular = tuple(values[1::2]) if per_type else values[1]
    return dict(
        cutoff_radial=radial,
        cutoff_angular=angular,
        max_neighbors_radial=reader.to_int(line, n_tok - 2, "MN_R (max radial neighbours)"),
        max_neighbors_angular=reader.to_int(line, n_tok - 1, "MN_A (max angular neighbours)"),
        per_type_cutoff=per_type,
    )


def _parse_l_max_line(reader: _Reader, line: _Line, is_nep3: bool) -> tuple[int, tuple[bool, ...]]:
    """L and the six higher-order flags; a flag is on iff its integer is non-zero (GPUMD >= v5.4)."""
    usage = "l_max L q222 q1111 [q112 [q123 [q233 [q134]]]]"
    reader.expect_key(line, "l_max", usage)
    reader.expect_count(line, [4] if is_nep3 else list(range(4, 9)), "l_max L q222 q1111" if is_nep3 else usage)
    numbers = [reader.to_int(line, i, f"l_max entry {i}") for i in range(1, len(line.tokens))]
    if is_nep3:
        _check_nep3_l_max(reader, line, numbers)
    flags = tuple(v != 0 for v in numbers[1:]) + (False,) * (len(FLAG_NAMES) + 1 - len(numbers))
    return numbers[0], flags


def _check_nep3_l_max(reader: _Reader, line: _Line, numbers: list[int]) -> None:
    """Readers of nep3 files (GPUMD <= v5.2) always computed l = 1..4, turned q222 on only for
    the value 2 and q1111 only for 1, and stored q1111 in the q222 slot when q222 was off.
    Only combinations that mean the same thing in NEP4 are accepted."""
    L, q222, q1111 = numbers
    if L != 4 or q222 not in (0, 2) or q1111 not in (0, 1) or (q222 == 0 and q1111 == 1):
        raise reader.error(
            line.number,
            f"nep3 file with 'l_max {L} {q222} {q1111}': GPUMD versions that read nep3 interpret this "
            "differently from NEP4; only 'l_max 4 0 0', '4 2 0' and '4 2 1' can be converted exactly",
        )


def _parse_ann_line(reader: _Reader, line: _Line) -> int:
    """Neurons of the single hidden layer from ``ANN H 0``."""
    reader.expect_key(line, "ANN", "ANN neurons 0")
    reader.expect_count(line, [3], "ANN neurons 0")
    neurons = reader.to_int(line, 1, "the number of neurons")
    second = reader.to_int(line, 2, "the second hidden layer size")
    if second != 0:
        raise reader.error(
            line.number,
            f"'ANN {neurons} {second}': two hidden layers are not supported (expected 'ANN {neurons} 0')",
        )
    return neurons


def _parse_body(
    reader: _Reader, lines: Sequence[_Line], expected: int, last_header: int, describe: Callable[[int], str]
) -> np.ndarray:
    """The parameter values, one finite number per line, exactly ``expected`` of them;
    describe(i) names value i (e.g. ``W0[1, 2, 5] of type C``) in error messages."""
    if len(lines) < expected:
        end = lines[-1].number + 1 if lines else last_header + 1
        raise reader.error(
            end,
            f"file truncated: expected {expected} parameter values after the header (lines "
            f"{last_header + 1}-{last_header + expected}), found {len(lines)}",
        )
    if len(lines) > expected:
        extra = lines[expected]
        raise reader.error(
            extra.number,
            f"extra line after the {expected} parameter values the header calls for: {' '.join(extra.tokens)!r}",
        )
    values = np.empty(expected, dtype=np.float64)
    for i, line in enumerate(lines):
        if len(line.tokens) != 1:
            raise reader.error(
                line.number,
                f"expected one number per line, found {len(line.tokens)} tokens: {' '.join(line.tokens)!r}",
            )
        token = line.tokens[0]
        if _FLOAT_RE.match(token):  # fast path; describe() is only worth its cost for a message
            values[i] = float(token)
        else:
            reader.to_float(line, 0, f"{describe(i)} (parameter {i + 1} of {expected})")  # raises
    return values


def _body_segments(spec: ModelSpec, is_nep3: bool) -> list[tuple[str, int | None, tuple[int, ...]]]:
    """(key, network index or None, shape) of each consecutive block of the body, in file order."""
    H, D = spec.neurons, spec.dim
    n_nets = 1 if is_nep3 else spec.n_types  # NEP3: one network shared by every species
    nets = [(key, t, shape) for t in range(n_nets) for key, shape in (("W0", (H, D)), ("b0", (H,)), ("w1", (H,)))]
    shapes = spec.parameter_shapes()
    return nets + [(key, None, tuple(shapes[key])) for key in PARAMETER_ORDER[3:] if key in shapes]


def _describe_value(spec: ModelSpec, index: int, is_nep3: bool) -> str:
    """Which parameter the ``index``-th body value is, e.g. ``W0[1, 2, 5] of type C``."""
    for key, net, shape in _body_segments(spec, is_nep3):
        if index < math.prod(shape):
            where = [] if net is None or is_nep3 else [net]
            where += [int(i) for i in np.unravel_index(index, shape)] if shape else []
            owner = (
                "" if net is None else " of the shared NEP3 network" if is_nep3 else f" of type {spec.elements[net]}"
            )
            return f"{key}{where if where else ''}{owner}"
        index -= math.prod(shape)
    return "a value beyond the expected ones"


def _split_body(spec: ModelSpec, body: np.ndarray, is_nep3: bool) -> dict[str, np.ndarray]:
    """Cut the flat body into the named arrays (docs/model.md#parameter-order, items 1-6)."""
    parts: dict[str, list[np.ndarray]] = {}
    offset = 0
    for key, _, shape in _body_segments(spec, is_nep3):
        parts.setdefault(key, []).append(body[offset : offset + math.prod(shape)].reshape(shape))
        offset += math.prod(shape)
    assert offset == body.size, (offset, body.size)
    params = {key: np.stack(arrays) if key in ("W0", "b0", "w1") else arrays[0] for key, arrays in parts.items()}
    if is_nep3:  # the shared network, once per species: exactly what NEP3 evaluates
        params.update({key: np.repeat(params[key], spec.n_types, axis=0) for key in ("W0", "b0", "w1")})
    # np.array, not np.ascontiguousarray: the latter turns the 0-d b1 into shape (1,)
    return {key: np.array(value, dtype=np.float64, order="C") for key, value in params.items()}


# ---------------------------------------------------------------------------------------------
# writing
# ---------------------------------------------------------------------------------------------


def write_nep(path: str | os.PathLike, spec: ModelSpec, params: dict[str, Any]) -> Path:
    """Write ``spec`` and ``params`` as a GPUMD ``nep.txt`` (docs/model.md#parameter-order), atomically.

    params: arrays (numpy or torch) keyed as in :mod:`nepcore.spec`, shapes
    ``spec.parameter_shapes()``, all finite and within the float32 range (GPUMD stores them as
    float32). Values are written with the shortest repr that round-trips float64, so
    :func:`read_nep` gives them back bit for bit, except that 0 < |x| < 1.18e-38 is written as
    a signed zero (GPUMD's std::stod/std::stof would throw on it; it is zero in float32). The
    file is written to a temporary file in the same folder and moved into place with
    ``os.replace`` (:func:`nepcore._utils.atomic_write_text`), so readers never see a
    half-written potential. Returns the path.
    """
    path = Path(path)
    arrays = _checked_arrays(spec, params)
    header = format_header(spec)
    body = "\n".join(map(repr, _flat_body(spec, arrays).tolist()))
    atomic_write_text(path, "\n".join(header) + "\n" + body + "\n")
    return path


def format_header(spec: ModelSpec) -> list[str]:
    """The 6 or 7 header lines GPUMD writes for ``spec`` (without newlines)."""
    lines = [f"{'nep4_zbl' if spec.zbl else 'nep4'} {spec.n_types} {' '.join(spec.elements)}"]
    if spec.zbl is not None:
        lines.append(_format_zbl(spec.zbl))
    if spec.per_type_cutoff or not spec.has_uniform_cutoff:
        cut = [v for pair in zip(spec.cutoff_radial, spec.cutoff_angular) for v in pair]
    else:
        cut = [spec.cutoff_radial[0], spec.cutoff_angular[0]]
    mn = f"{int(spec.max_neighbors_radial)} {int(spec.max_neighbors_angular)}"
    lines.append(f"cutoff {' '.join(map(_fmt_header, cut))} {mn}")
    lines.append(f"n_max {spec.n_max_radial} {spec.n_max_angular}")
    lines.append(f"basis_size {spec.basis_size_radial} {spec.basis_size_angular}")
    lines.append(_format_l_max(spec))
    lines.append(f"ANN {spec.neurons} 0")
    return lines


def _format_zbl(zbl: ZBLSpec) -> str:
    if zbl.kind == "flexible":
        return "zbl 0 0"
    line = f"zbl {_fmt_header(zbl.r_inner)} {_fmt_header(zbl.r_outer)}"
    return line + (f" {_fmt_header(zbl.typewise_factor)}" if zbl.kind == "typewise" else "")


def _format_l_max(spec: ModelSpec) -> str:
    """``l_max L 2|0 1|0 [...]``: q222 as 2 (GPUMD <= v5.2 and HEAD prediction mode need the 2),
    extra flags only up to the last one that is on (older readers require exactly 3 numbers)."""
    values = [spec.l_max, 2 if spec.flags[0] else 0] + [int(f) for f in spec.flags[1:]]
    while len(values) > 3 and values[-1] == 0:
        values.pop()
    return "l_max " + " ".join(map(str, values))


def _fmt_header(value: float) -> str:
    """GPUMD's ``%g`` (``6``, ``1.25``) when it is exact, else the shortest round-trip repr."""
    short = f"{value:g}"
    return short if float(short) == value else repr(float(value))


def _to_numpy(value: Any) -> np.ndarray:
    if hasattr(value, "detach"):  # torch tensor, possibly on a GPU or requiring grad
        value = value.detach().cpu().numpy()
    return np.asarray(value, dtype=np.float64)


def _checked_arrays(spec: ModelSpec, params: dict[str, Any]) -> dict[str, np.ndarray]:
    """float64 copies of the parameters, after checking names, shapes and finiteness."""
    shapes = spec.parameter_shapes()
    missing = [k for k in shapes if k not in params]
    unexpected = [k for k in params if k not in shapes]
    if missing or unexpected:
        raise NepFileError(
            f"parameters do not match the model: missing {missing}, unexpected {unexpected} "
            f"(expected exactly {list(shapes)})"
        )
    arrays = {}
    for key, shape in shapes.items():
        array = _to_numpy(params[key])
        if array.shape != tuple(shape):
            raise NepFileError(f"parameter {key}: expected shape {tuple(shape)}, found {array.shape}")
        for mask, why in (
            (~np.isfinite(array), "GPUMD aborts on inf/nan"),
            (np.abs(array) > FLOAT32_MAX, "GPUMD stores parameters as float32, where it would be inf"),
        ):
            bad = np.argwhere(mask)
            if bad.size:
                index = tuple(int(i) for i in bad[0])
                raise NepFileError(
                    f"parameter {key}{list(index)} is {array[index]} ({len(bad)} such value(s) in {key}); "
                    f"{why}, refusing to write"
                )
        arrays[key] = _flush_tiny(array)
    return arrays


def _flush_tiny(array: np.ndarray) -> np.ndarray:
    """Signed zero for 0 < |x| < FLOAT32_TINY: std::stod throws on double subnormals and
    std::stof (older GPUMD) on anything below the float32 normal range, so GPUMD would exit on
    them; as float32 they are zero anyway."""
    tiny = (array != 0) & (np.abs(array) < FLOAT32_TINY)
    return np.where(tiny, np.copysign(0.0, array), array) if tiny.any() else array


def _flat_body(spec: ModelSpec, arrays: dict[str, np.ndarray]) -> np.ndarray:
    """All values in file order: per type (W0, b0, w1), b1, c_radial, c_angular, q_scaler, zbl."""
    T = spec.n_types
    nets = np.concatenate(
        [arrays["W0"].reshape(T, -1), arrays["b0"].reshape(T, -1), arrays["w1"].reshape(T, -1)], axis=1
    )
    rest = [arrays[k].reshape(-1) for k in PARAMETER_ORDER[3:] if k in arrays]
    return np.concatenate([nets.reshape(-1), *rest])
