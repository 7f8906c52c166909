"""nep.txt reading and writing: bit-exact round trips, calorine (NEP_CPU) as the oracle for the
parameter order, the published potentials, and one test per malformed input."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from nepcore.io.nep_txt import NepFileError, NepPotential, format_header, read_nep, write_nep
from nepcore.spec import FLAG_NAMES, ModelSpec, ZBLSpec

calorine_nep = pytest.importorskip("calorine.nep")


# ---- helpers ---------------------------------------------------------------------------------


def random_params(spec: ModelSpec, seed: int = 0) -> dict[str, np.ndarray]:
    """Random float64 parameters of the right shapes, with a few awkward values for round trips."""
    rng = np.random.default_rng(seed)
    params = {key: rng.normal(scale=0.3, size=shape) for key, shape in spec.parameter_shapes().items()}
    params["q_scaler"] = rng.uniform(0.05, 2.0, size=spec.dim)
    params["b1"] = np.array(rng.normal())
    w0 = params["W0"].reshape(-1)
    w0[:4] = [-0.0, 1.1754943508222875e-38, 0.1 + 0.2, -3.4028234663852886e38]  # zero, float32 limits
    if "zbl_table" in params:
        n_pairs = params["zbl_table"].shape[0]
        radii = np.column_stack([rng.uniform(0.5, 1.0, n_pairs), rng.uniform(1.5, 2.0, n_pairs)])
        params["zbl_table"] = np.column_stack([radii, rng.uniform(0.02, 3.0, (n_pairs, 8))])
    return params


def make_spec(**kwargs) -> ModelSpec:
    """A small spec (fast to write and to evaluate); kwargs override."""
    base = dict(
        elements=("Si",),
        cutoff_radial=5.0,
        cutoff_angular=4.0,
        n_max_radial=2,
        n_max_angular=1,
        basis_size_radial=3,
        basis_size_angular=2,
        l_max=4,
        neurons=3,
        max_neighbors_radial=60,
        max_neighbors_angular=20,
    )
    return ModelSpec(**{**base, **kwargs})


def assert_bit_equal(a: NepPotential, b: NepPotential) -> None:
    assert a.spec == b.spec
    assert a.params.keys() == b.params.keys()
    for key in a.params:
        x, y = a.params[key], b.params[key]
        assert x.dtype == y.dtype == np.float64 and x.shape == y.shape, key
        assert np.array_equal(x.view(np.int64), y.view(np.int64)), f"{key} differs bitwise"


def assert_matches_calorine(path: Path, spec: ModelSpec, params: dict[str, np.ndarray]) -> None:
    """calorine reads the file and finds every parameter where our layout says it is."""
    model = calorine_nep.read_model(str(path))
    assert model.n_parameters == spec.n_trainable + spec.dim
    assert list(model.types) == list(spec.elements)
    assert (model.n_max_radial, model.n_max_angular) == (spec.n_max_radial, spec.n_max_angular)
    assert (model.n_basis_radial, model.n_basis_angular) == (spec.basis_size_radial, spec.basis_size_angular)
    assert model.l_max_3b == spec.l_max and model.n_neuron == spec.neurons
    on = [
        bool(model.l_max_4b),
        bool(model.l_max_5b),
        model.has_q_112,
        model.has_q_123,
        model.has_q_233,
        model.has_q_134,
    ]
    assert [bool(f) for f in on] == list(spec.flags)
    for t, symbol in enumerate(spec.elements):
        ann = model.ann_parameters[symbol]
        np.testing.assert_array_equal(ann["w0"], params["W0"][t])
        np.testing.assert_array_equal(ann["b0"].ravel(), params["b0"][t])
        np.testing.assert_array_equal(ann["w1"].ravel(), params["w1"][t])
    assert model.ann_parameters["b1"] == params["b1"]
    for i, si in enumerate(spec.elements):
        for j, sj in enumerate(spec.elements):
            np.testing.assert_array_equal(model.radial_descriptor_weights[(si, sj)], params["c_radial"][:, :, i, j])
            np.testing.assert_array_equal(model.angular_descriptor_weights[(si, sj)], params["c_angular"][:, :, i, j])
    np.testing.assert_array_equal(model.q_scaler, params["q_scaler"])
    if "zbl_table" in params:
        np.testing.assert_array_equal(np.array(list(model.zbl_parameters.values())), params["zbl_table"])


# ---- round trips of synthetic models ----------------------------------------------------------

ALL_FLAGS = (True,) * 6
SPECS = {
    **{f"L{L}": dict(l_max=L, flags=(L >= 2,) + (False,) * 5) for L in range(1, 9)},
    **{f"only_{name}": dict(flags=tuple(i == k for i in range(6))) for k, name in enumerate(FLAG_NAMES)},
    "L8_all_flags": dict(l_max=8, flags=ALL_FLAGS, n_max_angular=1),
    "T2": dict(elements=("Te", "Pb")),
    # a long cutoff line reads back as per_type_cutoff=True (as nep.in's 2T-number form sets it)
    "T3_per_type_cutoff": dict(
        elements=("Cr", "Co", "Ni"),
        cutoff_radial=(6.0, 5.0, 5.5),
        cutoff_angular=(4.0, 3.5, 3.25),
        per_type_cutoff=True,
    ),
    "T2_long_cutoff_line_equal_values": dict(elements=("Cu", "Au"), per_type_cutoff=True),
    "T4_universal_zbl": dict(elements=("Pd", "Cu", "Ni", "P"), zbl=ZBLSpec("universal", 0.9, 1.8)),
    "T3_typewise_zbl": dict(elements=("Cr", "Co", "Ni"), zbl=ZBLSpec("typewise", 1.25, 2.5, 0.7)),
    "T1_flexible_zbl": dict(zbl=ZBLSpec("flexible")),
    "T3_flexible_zbl_per_type": dict(
        elements=("H", "O", "Pu"),
        zbl=ZBLSpec("flexible"),
        cutoff_radial=(4.5, 5.0, 5.0),
        cutoff_angular=4.0,
        per_type_cutoff=True,
    ),
    "odd_header_values": dict(cutoff_radial=4.123456789012345, cutoff_angular=3.1, zbl=ZBLSpec("universal", 0.7, 1.4)),
}


@pytest.mark.parametrize("name", list(SPECS))
def test_round_trip_is_bit_exact_and_calorine_agrees(tmp_path: Path, name: str) -> None:
    spec = make_spec(**SPECS[name])
    params = random_params(spec, seed=len(name))
    path = tmp_path / "nep.txt"
    write_nep(path, spec, params)
    back = read_nep(path)
    assert back.source_format == "nep4"
    assert_bit_equal(NepPotential(spec, {k: np.asarray(v, dtype=float) for k, v in params.items()}), back)
    write_nep(tmp_path / "again.txt", back.spec, back.params)
    assert (tmp_path / "again.txt").read_bytes() == path.read_bytes()
    assert_matches_calorine(path, spec, params)


@pytest.mark.parametrize("name", ["T4_universal_zbl", "T3_typewise_zbl", "T3_flexible_zbl_per_type", "L8_all_flags"])
def test_cpunep_evaluates_written_files(tmp_path: Path, name: str) -> None:
    from ase.build import bulk
    from calorine.calculators import CPUNEP

    spec = make_spec(**SPECS[name])
    path = write_nep(tmp_path / "nep.txt", spec, random_params(spec, seed=1))
    atoms = bulk("Cu", "fcc", a=3.0, cubic=True)  # 4 atoms; 2.1 Å bonds reach the ZBL range
    atoms.set_chemical_symbols([spec.elements[i % spec.n_types] for i in range(len(atoms))])
    atoms.rattle(0.05, seed=2)
    atoms.calc = CPUNEP(str(path))
    assert np.isfinite(atoms.get_potential_energy())
    assert np.isfinite(atoms.get_forces()).all()


def test_header_formatting_matches_gpumd() -> None:
    spec = make_spec(
        elements=("Cr", "Co", "Ni"),
        cutoff_radial=6.0,
        cutoff_angular=4.0,
        n_max_radial=8,
        n_max_angular=8,
        basis_size_radial=12,
        basis_size_angular=12,
        flags=(True, True),
        neurons=80,
        zbl=ZBLSpec("typewise", 1.25, 2.5, 0.7),
        max_neighbors_radial=134,
        max_neighbors_angular=42,
    )
    assert format_header(spec) == [
        "nep4_zbl 3 Cr Co Ni",
        "zbl 1.25 2.5 0.7",
        "cutoff 6 4 134 42",
        "n_max 8 8",
        "basis_size 12 12",
        "l_max 4 2 1",
        "ANN 80 0",
    ]
    assert format_header(spec.replace(flags=(False,) * 6))[5] == "l_max 4 0 0"
    assert format_header(spec.replace(flags=(False, False, False, True)))[5] == "l_max 4 0 0 0 1"
    assert format_header(spec.replace(flags=(True, False, True)))[5] == "l_max 4 2 0 1"
    assert format_header(spec.replace(zbl=ZBLSpec("flexible")))[1] == "zbl 0 0"
    per_type = spec.replace(cutoff_radial=(6, 5, 5.5), cutoff_angular=(4, 3.5, 4), zbl=None)
    assert format_header(per_type)[1] == "cutoff 6 4 5 3.5 5.5 4 134 42"
    assert format_header(make_spec(cutoff_radial=1 / 3, cutoff_angular=0.25))[1] == (
        "cutoff 0.3333333333333333 0.25 60 20"  # %g would lose digits: shortest repr instead
    )


# ---- writing: validation and atomicity -------------------------------------------------------


def test_write_refuses_non_finite_and_keeps_the_old_file(tmp_path: Path) -> None:
    spec = make_spec()
    path = write_nep(tmp_path / "nep.txt", spec, random_params(spec))
    before = path.read_bytes()
    for bad in (np.nan, np.inf, -np.inf):
        params = random_params(spec)
        params["c_angular"][1, 2, 0, 0] = bad
        with pytest.raises(NepFileError, match=r"c_angular\[1, 2, 0, 0\].*GPUMD aborts"):
            write_nep(path, spec, params)
    assert path.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["nep.txt"]  # no temp files left behind


def test_write_flushes_values_gpumd_cannot_parse_and_refuses_float32_overflow(tmp_path: Path) -> None:
    spec = make_spec()
    params = random_params(spec)
    params["w1"][0, :3] = [5e-324, -1e-39, 1e-37]  # std::stod throws on the first, std::stof on both
    back = read_nep(write_nep(tmp_path / "nep.txt", spec, params)).params["w1"][0, :3]
    assert back.tolist() == [0.0, -0.0, 1e-37] and np.signbit(back[1])
    params["b0"][0, 1] = 3.5e38
    with pytest.raises(NepFileError, match=r"b0\[0, 1\] is 3.5e\+38 .* float32, where it would be inf"):
        write_nep(tmp_path / "nep.txt", spec, params)


def test_write_checks_names_and_shapes(tmp_path: Path) -> None:
    spec = make_spec()
    params = random_params(spec)
    with pytest.raises(NepFileError, match=r"W0: expected shape \(1, 3, 13\), found \(1, 3, 12\)"):
        write_nep(tmp_path / "a.txt", spec, {**params, "W0": params["W0"][:, :, :-1]})
    with pytest.raises(NepFileError, match=r"missing \['q_scaler'\]"):
        write_nep(tmp_path / "a.txt", spec, {k: v for k, v in params.items() if k != "q_scaler"})
    with pytest.raises(NepFileError, match=r"unexpected \['zbl_table'\]"):
        write_nep(tmp_path / "a.txt", spec, {**params, "zbl_table": np.zeros((1, 10))})


def test_write_accepts_torch_tensors(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    spec = make_spec()
    params = random_params(spec)
    tensors = {k: torch.tensor(v, requires_grad=True) for k, v in params.items()}
    back = read_nep(write_nep(tmp_path / "nep.txt", spec, tensors))
    assert_bit_equal(NepPotential(spec, params), back)


# ---- published potentials ---------------------------------------------------------------------

PUBLISHED = {
    "potentials/UNEP-v1.txt": dict(
        n_types=16,
        n_max=(4, 4),
        basis=(8, 8),
        l_max=4,
        flags=(True, True),
        neurons=80,
        zbl=ZBLSpec("universal", 1.0, 2.0),
    ),
    "potentials/C_2022_NEP4.txt": dict(
        n_types=1, n_max=(10, 8), basis=(10, 8), l_max=4, flags=(True, True), neurons=100, zbl=None
    ),
    "potentials/Si_2022_NEP4_3body.txt": dict(
        n_types=1, n_max=(10, 10), basis=(10, 10), l_max=4, flags=(), neurons=50, zbl=None
    ),
    "potentials/Si_2022_NEP4_4body.txt": dict(
        n_types=1, n_max=(10, 10), basis=(10, 10), l_max=4, flags=(True,), neurons=50, zbl=None
    ),
    "potentials/Si_2022_NEP4_5body.txt": dict(
        n_types=1, n_max=(10, 10), basis=(10, 10), l_max=4, flags=(True, True), neurons=50, zbl=None
    ),
    "gpumd-reference/nep_CrCoNi.txt": dict(
        n_types=3,
        n_max=(8, 8),
        basis=(12, 12),
        l_max=4,
        flags=(True, True),
        neurons=80,
        zbl=ZBLSpec("typewise", 1.25, 2.5, 0.7),
    ),
    "gpumd-reference/nep_PdCuNiP.txt": dict(
        n_types=4,
        n_max=(8, 8),
        basis=(8, 8),
        l_max=4,
        flags=(True,),
        neurons=50,
        zbl=ZBLSpec("universal", 0.9, 1.8),
    ),
    "PbTe/nep_gpumd_snes.txt": dict(
        n_types=2, n_max=(6, 6), basis=(6, 6), l_max=4, flags=(True,), neurons=30, zbl=None
    ),
}


@pytest.mark.parametrize("relpath", list(PUBLISHED))
def test_published_potentials(shared_data: Path, tmp_path: Path, relpath: str) -> None:
    source = shared_data / relpath
    if not source.is_file():
        pytest.skip(f"{source} is absent")
    want = PUBLISHED[relpath]
    pot = read_nep(source)
    spec = pot.spec
    assert spec.n_types == want["n_types"] and spec.neurons == want["neurons"] and spec.zbl == want["zbl"]
    assert (spec.n_max_radial, spec.n_max_angular) == want["n_max"]
    assert (spec.basis_size_radial, spec.basis_size_angular) == want["basis"]
    assert spec.l_max == want["l_max"] and spec.flags == tuple(want["flags"]) + (False,) * (6 - len(want["flags"]))
    # what GPUMD wrote is what we write (its first line has a trailing space)
    original = source.read_text().splitlines()
    assert format_header(spec) == [line.rstrip() for line in original[: len(format_header(spec))]]
    assert_matches_calorine(source, spec, pot.params)
    back = read_nep(write_nep(tmp_path / "nep.txt", spec, pot.params))
    assert_bit_equal(pot, back)


def test_unep_v1_elements(shared_data: Path) -> None:
    source = shared_data / "potentials" / "UNEP-v1.txt"
    if not source.is_file():
        pytest.skip(f"{source} is absent")
    spec = read_nep(source).spec
    assert " ".join(spec.elements) == "Ag Al Au Cr Cu Mg Mo Ni Pb Pd Pt Ta Ti V W Zr"
    assert spec.cutoff_radial == (6.0,) * 16 and spec.cutoff_angular == (5.0,) * 16
    assert (spec.max_neighbors_radial, spec.max_neighbors_angular) == (200, 134)
    assert spec.n_trainable + spec.dim == 70436


# ---- NEP3 ---------------------------------------------------------------------------------


def nep3_text(
    l_max: str = "l_max 4 2 1", zbl: str | None = None, cutoff: str = "cutoff 5 4 50 20"
) -> tuple[str, ModelSpec, np.ndarray]:
    """A NEP3 file (one shared network) and the NEP4 spec and body it should map to."""
    spec = make_spec(
        elements=("Si", "C"),
        flags=(True, True),
        zbl=ZBLSpec("universal", 1.0, 2.0) if zbl else None,
        max_neighbors_radial=50,
        max_neighbors_angular=20,
    )
    n_body = (spec.dim + 2) * spec.neurons + 1 + spec.n_descriptor_params + spec.dim
    body = np.random.default_rng(3).uniform(0.1, 1.0, n_body)
    header = [
        "nep3_zbl 2 Si C" if zbl else "nep3 2 Si C",
        *([zbl] if zbl else []),
        cutoff,
        "n_max 2 1",
        "basis_size 3 2",
        l_max,
        "ANN 3 0",
    ]
    return "\n".join(header + [repr(v) for v in body.tolist()]) + "\n", spec, body


def test_nep3_shared_network_is_copied_to_every_type(tmp_path: Path) -> None:
    text, spec, body = nep3_text(zbl="zbl 1 2")
    (tmp_path / "nep.txt").write_text(text)
    pot = read_nep(tmp_path / "nep.txt")
    assert pot.source_format == "nep3" and pot.spec == spec
    H, D = spec.neurons, spec.dim
    for t in range(2):
        np.testing.assert_array_equal(pot.params["W0"][t].ravel(), body[: H * D])
        np.testing.assert_array_equal(pot.params["w1"][t], body[H * D + H : H * D + 2 * H])
    assert pot.params["b1"] == body[(D + 2) * H]
    np.testing.assert_array_equal(pot.params["q_scaler"], body[-D:])
    assert_matches_calorine(write_nep(tmp_path / "nep4.txt", pot.spec, pot.params), pot.spec, pot.params)


@pytest.mark.parametrize(
    "change, line, message",
    [
        (dict(l_max="l_max 4 1 0"), 5, "only 'l_max 4 0 0', '4 2 0' and '4 2 1'"),
        (dict(l_max="l_max 4 0 1"), 5, "interpret this differently"),
        (dict(l_max="l_max 6 2 0"), 5, "interpret this differently"),
        (dict(l_max="l_max 4 2 1 1"), 5, "expected 4 tokens"),
        (dict(cutoff="cutoff 5 4 5 4 50 20"), 2, "per-species cutoffs cannot be mapped"),
        (dict(zbl="zbl 1 2 0.7"), 2, "expected 3 tokens"),
    ],
)
def test_nep3_that_cannot_be_mapped_exactly_is_refused(tmp_path: Path, change: dict, line: int, message: str) -> None:
    path = tmp_path / "nep.txt"
    path.write_text(nep3_text(**change)[0])
    with pytest.raises(NepFileError) as info:
        read_nep(path)
    assert f"{path}, line {line}:" in str(info.value) and message in str(info.value)


# ---- malformed files: each error names the file and the line --------------------------------


@pytest.fixture
def good_lines(tmp_path: Path) -> list[str]:
    """Lines of a valid file: nep4_zbl (7 header lines), T=2, 3+... values."""
    spec = make_spec(elements=("Si", "C"), zbl=ZBLSpec("universal", 1.0, 2.0))
    path = write_nep(tmp_path / "good.txt", spec, random_params(spec))
    return path.read_text().splitlines()


def edit(lines: list[str], index: int, new: str | None) -> list[str]:
    """Replace (or, with None, delete) the 0-based line ``index``."""
    out = list(lines)
    if new is None:
        del out[index]
    else:
        out[index] = new
    return out


MALFORMED = {
    "unknown_token": (lambda L: edit(L, 0, "nepX 2 Si C"), 1, "unknown model token 'nepX'"),
    "nep5": (
        lambda L: edit(L, 0, "nep5_zbl 2 Si C"),
        1,
        "NEP5 models (per-species output bias) are not supported",
    ),
    "dipole": (lambda L: edit(L, 0, "nep4_dipole 2 Si C"), 1, "dipole models are not supported"),
    "charge": (lambda L: edit(L, 0, "nep4_zbl_charge1 2 Si C"), 1, "charge (qNEP) models are not supported"),
    "vdw": (lambda L: edit(L, 0, "nep4_vdw 2 Si C"), 1, "van der Waals models"),
    "temperature": (lambda L: edit(L, 0, "nep4_zbl_temperature 2 Si C"), 1, "temperature-dependent"),
    "nep2": (lambda L: edit(L, 0, "nep_zbl 2 Si C"), 1, "NEP2"),
    "invalid_element": (lambda L: edit(L, 0, "nep4_zbl 2 Si Xx"), 1, "invalid element symbol 'Xx'"),
    "element_count": (lambda L: edit(L, 0, "nep4_zbl 3 Si C"), 1, "expected 3 element symbols"),
    "non_integer_T": (
        lambda L: edit(L, 0, "nep4_zbl two Si C"),
        1,
        "expected an integer for the number of types",
    ),
    "missing_zbl_line": (lambda L: edit(L, 1, None), 2, "expected the 'zbl' line"),
    "zbl_tokens": (lambda L: edit(L, 1, "zbl 1 2 0.7 1"), 2, "expected 3 or 4 tokens"),
    "zbl_order": (lambda L: edit(L, 1, "zbl 2 1"), 2, "r_inner < r_outer"),
    "zbl_flexible_with_factor": (lambda L: edit(L, 1, "zbl 0 0 0.7"), 2, "flexible ZBL"),
    "typewise_factor": (lambda L: edit(L, 1, "zbl 1 2 0.3"), 2, "factor must be >= 0.5"),
    "legacy_cutoff": (lambda L: edit(L, 2, "cutoff 5 4 60 20 2.5 2 0.7"), 3, "legacy 8-token"),
    "cutoff_tokens": (lambda L: edit(L, 2, "cutoff 5 4 60"), 3, "expected 5 or 7 tokens"),
    "cutoff_nan": (lambda L: edit(L, 2, "cutoff nan 4 60 20"), 3, "must be finite"),
    "mn_not_int": (lambda L: edit(L, 2, "cutoff 5 4 60.5 20"), 3, "expected an integer for MN_R"),
    "n_max_tokens": (
        lambda L: edit(L, 3, "n_max 2"),
        4,
        "expected 3 tokens (n_max n_max_radial n_max_angular), found 2",
    ),
    "n_max_word": (lambda L: edit(L, 3, "nmax 2 1"), 4, "expected the 'n_max' line"),
    "basis_value": (
        lambda L: edit(L, 4, "basis_size 3 x"),
        5,
        "expected an integer for basis_size_angular, found 'x'",
    ),
    "l_max_too_short": (lambda L: edit(L, 5, "l_max 4 2"), 6, "expected 4 to 8 tokens"),
    "two_layers": (lambda L: edit(L, 6, "ANN 3 5"), 7, "two hidden layers are not supported"),
    "non_numeric": (
        lambda L: edit(L, 9, "0.5abc"),
        10,
        "expected a number for W0[0, 0, 2] of type Si (parameter 3 of 176)",
    ),
    "underscore_number": (lambda L: edit(L, 9, "1_000"), 10, "expected a number"),
    "nan_value": (
        lambda L: edit(L, 11, "nan"),
        12,
        "W0[0, 0, 4] of type Si (parameter 5 of 176) must be finite (GPUMD aborts on inf/nan), found 'nan'",
    ),
    "inf_value": (lambda L: edit(L, 12, "-inf"), 13, "must be finite"),
    "inf_q_scaler": (
        lambda L: edit(L, 182, "inf"),
        183,
        "q_scaler[12] (parameter 176 of 176) must be finite",
    ),
    "two_tokens": (lambda L: edit(L, 20, "0.1 0.2"), 21, "expected one number per line, found 2 tokens"),
    "blank_inside": (lambda L: edit(L, 30, ""), 31, "blank line inside the file"),
    "truncated": (lambda L: L[:-5], None, "file truncated: expected"),
    "extra_line": (lambda L: L + ["0.5"], None, "extra line after the"),
    "header_only_partly": (
        lambda L: L[:3],
        4,
        "file ends inside the header, expected 7 header lines, found 3",
    ),
}


@pytest.mark.parametrize("case", list(MALFORMED))
def test_malformed_file_errors_name_file_and_line(tmp_path: Path, good_lines: list[str], case: str) -> None:
    mutate, line, message = MALFORMED[case]
    lines = mutate(good_lines)
    path = tmp_path / f"{case}.txt"
    path.write_text("\n".join(lines) + "\n")
    if line is None:  # truncated: the line after the last one; extra: the first extra line
        line = len(lines) + 1 if case == "truncated" else len(lines)
    with pytest.raises(NepFileError) as info:
        read_nep(path)
    assert f"{path}, line {line}:" in str(info.value)
    assert message in str(info.value)


def test_truncation_message_counts_values(tmp_path: Path, good_lines: list[str]) -> None:
    expected = len(good_lines) - 7
    path = tmp_path / "short.txt"
    path.write_text("\n".join(good_lines[:-5]) + "\n")
    with pytest.raises(NepFileError, match=f"expected {expected} parameter values .* found {expected - 5}"):
        read_nep(path)


def test_header_limits_and_empty_file(tmp_path: Path, good_lines: list[str]) -> None:
    path = tmp_path / "big_n.txt"
    path.write_text("\n".join(edit(good_lines, 3, "n_max 17 1")) + "\n")
    with pytest.raises(NepFileError, match=rf"{path}, lines 1-7 \(header\): unsupported model: n_max_radial"):
        read_nep(path)
    empty = tmp_path / "empty.txt"
    empty.write_text("\n\n")
    with pytest.raises(NepFileError, match=rf"{empty}, line 1: empty file"):
        read_nep(empty)


def test_trailing_blank_lines_and_spaces_are_tolerated(tmp_path: Path, good_lines: list[str]) -> None:
    path = tmp_path / "blank_tail.txt"
    path.write_text("\n".join(line + "  " for line in good_lines) + "\n\n   \n\n")
    reference = tmp_path / "ref.txt"
    reference.write_text("\n".join(good_lines) + "\n")
    assert_bit_equal(read_nep(path), read_nep(reference))
