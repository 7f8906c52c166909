"""nepcore.workflow: the logic of the Snakemake rules, tested without Snakemake (milliseconds)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from helpers.workflow import default_config_with

from nepcore import workflow as wf
from nepcore.data.checks import StructureError
from nepcore.data.convert import expand_inputs

ROOT = Path(__file__).resolve().parents[1]
SCHEMA = yaml.safe_load((ROOT / "workflow" / "schemas" / "config.schema.yaml").read_text())


def checked(config: dict) -> tuple[dict, list[str]]:
    """What common.smk does: validate (filling defaults), then cross-check."""
    wf.validate_config(config, SCHEMA)
    return config, wf.check_config(config)


def minimal() -> dict:
    return {"datasets": {"d": {}}, "runs": {"r": {"dataset": "d", "model": {"type": ["Cu"]}}}}


# ---- validation ----------------------------------------------------------------------------


def test_schema_fills_in_defaults_and_stage2_differs() -> None:
    config, warnings = checked(minimal())
    run = config["runs"]["r"]
    assert warnings == [] and config["datasets"]["d"]["demo"] == {"seed": 0, "n_frames": 60}
    assert (run["stage1"]["epochs"], run["stage1"]["lr"]) == (600, 0.01)
    assert (run["stage2"]["epochs"], run["stage2"]["lr"], run["stage2"]["lambda_e"]) == ("auto", 0.001, 1.0)
    assert (run["stage1"]["patience"], run["stage2"]["patience"]) == (60, "auto")
    assert (run["stage1"]["optimizer"], run["stage2"]["optimizer"]) == ("adam", "auto")
    assert run["seeds"] == [0] and run["qscaler"] == {"mode": "gpumd", "seed": 0, "batch_size": 32}
    assert run["model"]["n_max"] == [6, 6] and run["model"]["basis_size"] == [6, 6]


def test_defaults_are_copies_never_shared() -> None:
    config = minimal()
    config["runs"]["s"] = {"dataset": "d", "model": {"type": ["Cu"]}}
    checked(config)
    config["runs"]["r"]["stage1"]["lr"] = 0.5
    assert config["runs"]["s"]["stage1"]["lr"] == 0.01
    assert "default" in SCHEMA["$defs"]["run"]["properties"]["stage1"]
    assert SCHEMA["$defs"]["run"]["properties"]["stage1"]["default"] == {}


@pytest.mark.parametrize(
    "override, expected",
    [
        ({"runs": {"demo": {"stage2": {"lrr": 0.1}}}}, ["runs.demo.stage2", "'lrr'"]),
        ({"runs": {"demo": {"stage1": {"epochs": "many"}}}}, ["runs.demo.stage1.epochs", "'many' does not match"]),
        ({"runs": {"demo": {"stage2": {"patience": 1.5}}}},
         ["runs.demo.stage2.patience", "1.5 is not of type 'integer', 'string'"]),
        ({"runs": {"demo": {"model": {"neuron": 2.5}}}}, ["runs.demo.model.neuron"]),
        ({"datasets": {"demo": {"file": ["x.xyz"]}}}, ["datasets.demo", "'file'"]),
        ({"runz": {}}, ["top level", "'runz'"]),
        ({"runs": {"demo": {"dataset": "nope"}}}, ["runs.demo.dataset", "unknown dataset 'nope'"]),
        ({"runs": {"demo": {"nep_in": "nep.in"}}}, ["runs.demo", "exactly one of model and nep_in"]),
        ({"datasets": {"demo": {"valid": ["v.xyz"]}}}, ["datasets.demo", "give both valid and test files"]),
        ({"datasets": {"demo": {"files": ["no/such/*.xyz"]}}}, ["datasets.demo.files", "matches no file"]),
        ({"runs": {"demo": {"stage1": {"batch": "many"}}}}, ["runs.demo.stage1.batch", "'many' does not match"]),
        ({"runs": {"demo": {"stage2": {"batch": 0}}}}, ["runs.demo.stage2.batch", "less than the minimum of 1"]),
    ],
)  # fmt: skip
def test_bad_config_names_the_key(override: dict, expected: list) -> None:
    with pytest.raises(wf.ConfigError) as info:
        checked(default_config_with(override))
    text = str(info.value)
    assert text.startswith("invalid config at "), text
    for piece in expected:
        assert piece in text, text


@pytest.mark.parametrize("batch", ["auto", 8])
def test_batch_is_frames_or_auto(batch) -> None:
    config, _ = checked(default_config_with({"runs": {"demo": {"stage1": {"batch": batch}}}}))
    assert f"--batch-size {batch} " in wf.train_flags(config["runs"]["demo"], 1, 0)


# ---- nep.in ------------------------------------------------------------------------------------


def test_nep_in_training_keywords_are_reported(tmp_path: Path) -> None:
    path = tmp_path / "nep.in"
    path.write_text("type 2 Cu Pd\ncutoff 5 4\nlambda_e 1.0\ngeneration 1000\nbatch 10\n")
    warnings = wf.nep_in_warnings("fit", str(path))
    assert len(warnings) == 3
    assert f"runs.fit.nep_in: {path} sets 'batch', a training setting; the workflow uses " \
           "runs.fit.stage1/stage2.batch from the config instead" in warnings  # fmt: skip
    assert any("sets 'generation'" in w and "stage1/stage2.epochs" in w for w in warnings)
    assert any("sets 'lambda_e'" in w and "stage1/stage2.lambda_e" in w for w in warnings)
    assert wf.nep_in_warnings("fit", str(tmp_path / "absent.in")) == []  # Snakemake reports it


def test_invalid_nep_in_fails_at_start_naming_the_line(tmp_path: Path) -> None:
    (tmp_path / "nep.in").write_text("type 1 Cu\nn_max 13 4\n")
    config = default_config_with({"runs": {"demo": {"nep_in": str(tmp_path / "nep.in")}}})
    del config["runs"]["demo"]["model"]
    with pytest.raises(wf.ConfigError, match=r"invalid config at runs\.demo\.nep_in: .*line 2.*n_max_radial"):
        checked(config)


# ---- files ---------------------------------------------------------------------------------------


def test_glob_expansion_is_the_same_rule_as_convert(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    for name in ("b.xyz", "a.xyz", "c.extxyz"):
        (tmp_path / name).write_text("")
    patterns = ["*.xyz", "a.xyz", "c.extxyz", "*.extxyz", "missing.xyz"]
    expected = ["a.xyz", "b.xyz", "c.extxyz", "missing.xyz"]  # sorted per pattern, each once
    assert wf.expand_files(patterns, "datasets.d.files") == expected == expand_inputs(patterns)
    with pytest.raises(wf.ConfigError, match=r"invalid config at datasets\.d\.valid: 'no/\*\.xyz' matches no file"):
        wf.expand_files(["no/*.xyz"], "datasets.d.valid")
    with pytest.raises(StructureError, match="no file matches this pattern"):
        expand_inputs(["no/*.xyz"])


# ---- members and models ------------------------------------------------------------------------


def test_members_and_committee_models() -> None:
    run = {"seeds": [1, 2, 3], "final_model": "best"}
    assert wf.members("c", run) == ["c", "c/seed2", "c/seed3"]
    assert wf.committee_models("c", run) == [
        "results/c/stage2/nep_best.txt",
        "results/c/seed2/stage2/nep_best.txt",
        "results/c/seed3/stage2/nep_best.txt",
    ]
    single = {"seeds": [0], "final_model": "last"}
    assert wf.final_model("s", single) == "results/s/stage2/nep.txt" and wf.committee_models("s", single) == []
    assert wf.committee_flags([]) == ""
    assert wf.committee_flags(["a b.txt", "c.txt"]) == "--committee 'a b.txt' c.txt"


# ---- flags -------------------------------------------------------------------------------------


def test_flags_quote_and_switch() -> None:
    assert wf.flags({"--a": None, "--b": False, "--c": True, "--d": [1, "x y"], "--e": "$(rm -rf)"}) == \
        "--c --d 1 'x y' --e '$(rm -rf)'"  # fmt: skip


def test_flags_of_each_command() -> None:
    config, _ = checked(minimal())
    dataset, run = config["datasets"]["d"], config["runs"]["r"]
    assert wf.demo_flags(dataset) == "--seed 0 --n-frames 60"
    assert wf.convert_flags(dataset, [], []) == (
        "--energy-key energy --virial-key virial --stress-key stress --weights-key weight --split 0.8 0.1 0.1 --seed 0"
    )
    held_out = wf.convert_flags({**dataset, "types": ["Cu", "Ni"]}, ["v.xyz"], ["t 1.xyz"])
    assert "--types Cu Ni " in held_out and "--valid v.xyz --test 't 1.xyz'" in held_out and "--split" not in held_out
    assert wf.qscaler_flags(run) == (
        "--type Cu --cutoff 8.0 4.0 --n-max 6 6 --basis-size 6 6 --l-max 4 2 0 "
        "--neuron 30 --mode gpumd --seed 0 --batch-size 32"
    )
    assert wf.qscaler_flags({**run, "nep_in": "my nep.in"}).startswith("--nep-in 'my nep.in' --mode gpumd")
    stage1, stage2 = wf.train_flags(run, 1, 7), wf.train_flags(run, 2, 7)
    assert stage1.startswith("--epochs 600 --patience 60 --stop-window 0 --stop-min-gain 0.01 --batch-size auto ")
    assert "--seed 7 " in stage1
    assert stage2.startswith("--epochs auto --patience auto --stop-window 0 --stop-min-gain 0.01 --batch-size auto ")
    assert "--optimizer adam --lr 0.01 " in stage1 and "--optimizer auto " in stage2
    assert stage2.endswith("--init-weights best")
