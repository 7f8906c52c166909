"""nep.in parsing: GPUMD defaults, ZBL variants, per-type cutoffs, unknown keys, errors."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import yaml

from nepcore.io.nep_in import DEFAULT_TRAINING, NepInError, parse_nep_in, spec_from_nep_in
from nepcore.io.nep_txt import format_header, read_nep
from nepcore.spec import ModelSpec, ZBLSpec


def test_defaults_are_gpumds() -> None:
    parsed = parse_nep_in("type 2 Te Pb\n")
    spec = spec_from_nep_in(parsed)
    assert spec == ModelSpec(
        elements=("Te", "Pb"),
        cutoff_radial=8.0,
        cutoff_angular=4.0,
        n_max_radial=6,
        n_max_angular=6,
        basis_size_radial=6,
        basis_size_angular=6,
        l_max=4,
        flags=(True,),
        neurons=30,
        zbl=None,
    )
    assert spec.dim == 42  # docs/model.md#parameter-order minimal example
    assert parsed.training == DEFAULT_TRAINING
    assert parsed.unknown == [] and parsed.given == {"type": 1}
    assert ModelSpec(elements=("Te", "Pb")) == spec  # ModelSpec's own defaults are GPUMD's


def test_workflow_model_defaults_are_modelspecs() -> None:
    """The config schema's runs.<run>.model defaults (GPUMD's keywords) equal ModelSpec's."""
    schema = yaml.safe_load(
        (Path(__file__).resolve().parents[1] / "workflow" / "schemas" / "config.schema.yaml").read_text()
    )["$defs"]["model"]["properties"]
    d = ModelSpec(elements=("Cu",))
    assert schema["cutoff"]["default"] == [d.cutoff_radial[0], d.cutoff_angular[0]]
    assert schema["n_max"]["default"] == [d.n_max_radial, d.n_max_angular]
    assert schema["basis_size"]["default"] == [d.basis_size_radial, d.basis_size_angular]
    assert schema["l_max"]["default"] == [d.l_max, 2 if d.flags[0] else 0, 1 if d.flags[1] else 0]
    assert schema["neuron"]["default"] == d.neurons and schema["zbl"]["default"] is None is d.zbl


def test_gpumd_example_matches_its_trained_model(shared_data: Path) -> None:
    """The PbTe nep.in of GPUMD's example gives exactly the header GPUMD wrote for it."""
    nep_in, nep_txt = shared_data / "PbTe" / "nep.in", shared_data / "PbTe" / "nep_gpumd_snes.txt"
    if not (nep_in.is_file() and nep_txt.is_file()):
        pytest.skip("PbTe example files are absent")
    parsed = parse_nep_in(nep_in)
    assert parsed.training["generation"] == 20000 and parsed.source == str(nep_in)
    spec = spec_from_nep_in(parsed, max_neighbors_radial=73, max_neighbors_angular=8)
    assert spec == read_nep(nep_txt).spec
    assert format_header(spec) == [line.rstrip() for line in nep_txt.read_text().splitlines()[:6]]


def test_typewise_zbl_file_of_the_spec_matches_crconi_header() -> None:
    """docs/model.md#output-files: the nep.in that matches nep_CrCoNi.txt."""
    text = """
        prediction 1
        type 3 Cr Co Ni
        version 4
        zbl 2.5
        use_typewise_cutoff_zbl 0.7
        cutoff 6 4
        n_max 8 8
        basis_size 12 12
        l_max 4 2 1
        neuron 80
        output_descriptor 2
    """
    parsed = parse_nep_in(text)
    spec = spec_from_nep_in(parsed, max_neighbors_radial=134, max_neighbors_angular=42)
    assert spec.zbl == ZBLSpec("typewise", 1.25, 2.5, 0.7)
    assert format_header(spec) == [
        "nep4_zbl 3 Cr Co Ni",
        "zbl 1.25 2.5 0.7",
        "cutoff 6 4 134 42",
        "n_max 8 8",
        "basis_size 12 12",
        "l_max 4 2 1",
        "ANN 80 0",
    ]
    assert parsed.training["prediction"] == 1 and parsed.training["output_descriptor"] == 2


@pytest.mark.parametrize(
    "lines, zbl",
    [
        (["zbl 2"], ZBLSpec("universal", 1.0, 2.0)),
        (["zbl 1.8"], ZBLSpec("universal", 0.9, 1.8)),
        (["zbl 3", "use_typewise_cutoff_zbl"], ZBLSpec("typewise", 1.5, 3.0, 0.7)),
        (["use_typewise_cutoff_zbl 0.6", "zbl 3"], ZBLSpec("typewise", 1.5, 3.0, 0.6)),
        ([], None),
    ],
)
def test_zbl(lines: list[str], zbl: ZBLSpec | None) -> None:
    assert parse_nep_in("\n".join(["type 1 W", *lines])).spec_kwargs["zbl"] == zbl


def test_flexible_zbl_from_zbl_in_beside_the_file(tmp_path: Path) -> None:
    table = np.arange(30, dtype=float).reshape(3, 10) / 7
    (tmp_path / "nep.in").write_text("type 2 H O\nzbl 2\n")
    (tmp_path / "zbl.in").write_text("\n".join(" ".join(repr(v) for v in row) for row in table.tolist()) + "\n")
    parsed = parse_nep_in(tmp_path / "nep.in")
    assert parsed.spec_kwargs["zbl"] == ZBLSpec("flexible")
    np.testing.assert_array_equal(parsed.zbl_table, table)
    assert spec_from_nep_in(parsed).parameter_shapes()["zbl_table"] == (3, 10)


def test_per_type_cutoffs_take_2T_numbers() -> None:
    parsed = parse_nep_in("type 2 Cu Au\ncutoff 6 4 5 3.5\n")
    kw = parsed.spec_kwargs
    assert kw["cutoff_radial"] == (6.0, 5.0) and kw["cutoff_angular"] == (4.0, 3.5) and kw["per_type_cutoff"]
    spec = spec_from_nep_in(parsed, max_neighbors_radial=90, max_neighbors_angular=30)
    assert format_header(spec)[1] == "cutoff 6 4 5 3.5 90 30"
    assert spec.pair_cutoffs("radial")[0][1] == 5.5
    equal = spec_from_nep_in("type 2 Cu Au\ncutoff 6 4 6 4\n")
    assert equal.per_type_cutoff and format_header(equal)[1] == "cutoff 6 4 6 4 100 100"  # GPUMD keeps the long form


@pytest.mark.parametrize(
    "line, flags",
    [
        ("l_max 4", (True, False)),  # unspecified flags keep the defaults
        ("l_max 4 0", (False, False)),
        ("l_max 4 2 1", (True, True)),
        ("l_max 4 1 1", (True, True)),  # any non-zero value turns a flag on
        ("l_max 4 0 0 0 1", (False, False, False, True)),
        ("l_max 6 2 1 1 1 1 1", (True,) * 6),
    ],
)
def test_l_max_flags(line: str, flags: tuple[bool, ...]) -> None:
    spec = spec_from_nep_in(f"type 1 C\n{line}\n")
    assert spec.flags == flags + (False,) * (6 - len(flags))


def test_training_keys_comments_case_and_unknown_keys() -> None:
    text = """# a comment line
type 2 Pd Ni   # trailing comment
LAMBDA_E 2.5
lambda_v 0
Lambda_1 0.01
batch 100 1
generation 5000
population 60
type_weight 1 0.5
force_delta 2
fine_tune nep89.txt nep89.restart
save_potential 1000 0 1

learning_rate 0.01
my_option a b
"""
    parsed = parse_nep_in(text)
    t = parsed.training
    assert (t["lambda_e"], t["lambda_v"], t["lambda_1"], t["lambda_2"]) == (2.5, 0.0, 0.01, None)
    assert (t["batch"], t["use_full_batch"], t["generation"], t["population"]) == (100, 1, 5000, 60)
    assert t["type_weight"] == [1.0, 0.5] and t["force_delta"] == 2.0
    assert t["fine_tune"] == ("nep89.txt", "nep89.restart")
    assert (t["save_potential"], t["save_potential_format"], t["save_restart"]) == (1000, 0, 1)
    assert parsed.unknown == [(14, "learning_rate"), (15, "my_option")]
    assert parsed.given["lambda_e"] == 3 and parsed.elements == ("Pd", "Ni")


ERRORS = {
    "no_type": ("cutoff 6 4", 1, "'cutoff' must come after 'type'"),
    "type_weight_before_type": ("type_weight 1 1\ntype 2 Cu Au", 1, "'type_weight' must come after 'type'"),
    "bad_element": ("type 2 Cu Xy", 1, "invalid element symbol 'Xy'"),
    "type_count": ("type 3 Cu Au", 1, "'type 3' needs 3 element symbols, found 2"),
    "cutoff_count": ("type 2 Cu Au\ncutoff 6 4 5", 2, "'cutoff' takes 2 or 4 value(s)"),
    "cutoff_order": ("type 1 Cu\n\ncutoff 4 6", 3, "3 <= angular <= radial <= 100"),
    "cutoff_word": ("type 1 Cu\ncutoff six 4", 2, "expected a number for cutoff value 1, found 'six'"),
    "cutoff_nan": ("type 1 Cu\ncutoff nan 4", 2, "must be finite"),
    "n_max_range": ("type 1 Cu\nn_max 13 4", 2, "n_max_radial must be in [0, 12]"),
    "basis_float": (
        "type 1 Cu\nbasis_size 8.5 8",
        2,
        "expected an integer for basis_size_radial, found '8.5'",
    ),
    "l_max_range": ("type 1 Cu\nl_max 1", 2, "l_max L (3-body) must be in [2, 8]"),
    "l_max_count": ("type 1 Cu\nl_max 4 2 1 0 0 0 0 0", 2, "'l_max' takes 1 to 7 value(s)"),
    "neuron_range": ("type 1 Cu\nneuron 121", 2, "neuron must be in [1, 120]"),
    "two_layers": ("type 1 Cu\nneuron 30 10", 2, "two hidden layers are not supported"),
    "zbl_range": ("type 1 Cu\nzbl 5", 2, "the ZBL outer cutoff must be in [1, 4]"),
    "typewise_factor": (
        "type 1 Cu\nzbl 2\nuse_typewise_cutoff_zbl 0.4",
        3,
        "typewise ZBL factor must be >= 0.5",
    ),
    "typewise_without_zbl": ("type 1 Cu\nuse_typewise_cutoff_zbl", 2, "needs 'zbl R' as well"),
    "legacy_typewise_cutoff": ("type 1 Cu\nuse_typewise_cutoff 2.5 2", 2, "GPUMD <= v4.6"),
    "duplicate": ("type 1 Cu\nn_max 4 4\n# again\nn_max 6 6", 4, "'n_max' is given twice (first on line 2)"),
    "mode_alias_duplicate": ("type 1 Cu\nmodel_type 0\nmode 0", 3, "'mode' is given twice"),
    "dipole": ("type 1 Cu\nmodel_type 1", 2, "'model_type 1': only 0 is supported"),
    "charge": ("type 1 Cu\ncharge_mode 2", 2, "'charge_mode 2': only 0 is supported"),
    "version": ("type 1 Cu\nversion 3", 2, "only NEP4 is supported"),
    "lambda_negative": ("type 1 Cu\nlambda_f -1", 2, "lambda_f must be >= 0 (GPUMD's limit), found -1"),
    "batch_words": ("type 1 Cu\nbatch big", 2, "expected an integer for batch, found 'big'"),
    "population_range": ("type 1 Cu\npopulation 5", 2, "population must be in [10, 200]"),
    "save_potential_count": ("type 1 Cu\nsave_potential 1000", 2, "'save_potential' takes 3 value(s)"),
}


@pytest.mark.parametrize("case", list(ERRORS))
def test_errors_name_file_and_line(tmp_path: Path, case: str) -> None:
    text, line, message = ERRORS[case]
    path = tmp_path / "nep.in"
    path.write_text(text + "\n")
    with pytest.raises(NepInError) as info:
        parse_nep_in(path)
    assert f"{path}, line {line}:" in str(info.value)
    assert message in str(info.value)


def test_text_input_errors_and_missing_type() -> None:
    with pytest.raises(NepInError, match=r"<nep.in text>, line 2: 'n_max' takes 2 value"):
        parse_nep_in("type 1 Cu\nn_max 4\n")
    with pytest.raises(NepInError, match=r"<nep.in text>: the mandatory 'type' keyword is missing"):
        parse_nep_in("n_max 4 4\n")
    with pytest.raises(NepInError, match=r"missing/nep.in: no such nep.in file"):
        parse_nep_in("missing/nep.in")
    assert parse_nep_in("type 1 Cu").elements == ("Cu",)


def test_spec_errors_name_the_file(tmp_path: Path) -> None:
    path = tmp_path / "nep.in"
    path.write_text("type 1 Cu\nn_max 4 8\nl_max 8 2 1 1 1 1 1\n")  # 9 x 14 angular components > 90
    with pytest.raises(NepInError, match=rf"{path}: angular descriptor size"):
        spec_from_nep_in(path)
