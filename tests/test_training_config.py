"""StageConfig is the one home of the training settings: the CLI is generated from it, and the
config schema, config/README.md and docs/CLI.md must agree with it (this file checks)."""

from __future__ import annotations

import argparse
import dataclasses
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from nepcore.cli import train as train_cli
from nepcore.training.config import StageConfig, StageConfigError, settings, stage_defaults
from nepcore.training.setting_fields import config_key, flag_of
from nepcore.workflow import train_flags

ROOT = Path(__file__).resolve().parents[1]
SCHEMA = yaml.safe_load((ROOT / "workflow" / "schemas" / "config.schema.yaml").read_text())
STAGE_SCHEMA = SCHEMA["$defs"]["stage"]["properties"]
RUN_SCHEMA = SCHEMA["$defs"]["run"]["properties"]
STAGE2_OVERRIDES = RUN_SCHEMA["stage2"]["properties"]


def scoped(scope: str) -> list[dataclasses.Field]:
    return [f for f in settings() if f.metadata["scope"] == scope]


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser()
    train_cli.add_arguments(p)
    return p


def parse(argv: list[str]) -> StageConfig:
    """The StageConfig that ``nepcore train`` builds from ``argv`` (paths added)."""
    args = parser().parse_args(["--data", "d.h5", "--qscaler", "q.json", "--out-dir", "o", *argv])
    return StageConfig(**{f.name: getattr(args, f.name) for f in settings() if hasattr(args, f.name)})


# ---- defaults ---------------------------------------------------------------------------------


def test_stage_defaults_differ_only_where_declared() -> None:
    one, two = stage_defaults(1), stage_defaults(2)
    assert (one["lambda_e"], one["lambda_f"], one["lambda_v"], one["lr"], one["epochs"]) == (0.1, 1.0, 0.01, 1e-2, 600)
    assert (two["lambda_e"], two["lambda_f"], two["lambda_v"], two["lr"]) == (1.0, 1.0, 0.1, 1e-3)
    assert (two["epochs"], two["patience"]) == ("auto", "auto")  # by the optimiser (test_training_stage_length.py)
    differ = {k for k in one if one[k] != two[k]}
    assert differ == {
        "stage", "epochs", "patience", "optimizer", "lr", "lr_patience", "lambda_e", "lambda_v", "adam_momentum"
    }  # fmt: skip
    assert (one["adam_momentum"], two["adam_momentum"]) == ("nesterov", "plain")
    assert StageConfig(stage=2, lr=0.5).lr == 0.5 and StageConfig(stage=2, lr=None).lr == 1e-3


@pytest.mark.parametrize(
    "change, message",
    [
        ({"stage": 3}, "stage must be 1 or 2, found 3"),
        ({"patience": 0}, "patience must be >= 1, found 0"),
        ({"lr": 0.0}, "lr must be > 0, found 0.0"),
        ({"lr_decay": 1.5}, "lr_decay must be <= 1, found 1.5"),
        ({"lambda_f": -1.0}, "lambda_f must be >= 0, found -1.0"),
        ({"device": "tpu"}, "device must be one of auto, cpu, cuda, found 'tpu'"),
        ({"schedule": "linear"}, "schedule must be one of plateau, step, cosine, found 'linear'"),
        ({"precision": "float16"}, "precision must be one of float32, float64, found 'float16'"),
        ({"epochs": -1}, "epochs must be >= 0, found -1"),
    ],
)
def test_bad_setting_names_itself(change: dict, message: str) -> None:
    with pytest.raises(StageConfigError, match=re.escape(message)):
        StageConfig(**change)


def test_resumable_settings_are_left_out_of_the_trajectory() -> None:
    trajectory = StageConfig(stage=1).trajectory()
    assert set(trajectory) == {f.name for f in settings()} - {
        "epochs",
        "patience",
        "stop_window",
        "stop_min_gain",
        "checkpoint_every",
        "device",
        "progress",
        "compile",
        "batch_parts",
        "snapshot_every",
        "snapshot_models",
    }


# ---- the command line is generated from the fields -------------------------------------------


def test_every_setting_has_a_flag_with_its_help() -> None:
    actions = {a.dest: a for a in parser()._actions}
    for f in settings():
        assert f.name in actions, f"StageConfig.{f.name} has no flag"
        assert flag_of(f) in actions[f.name].option_strings
        assert f.metadata["help"] in actions[f.name].help
        if f.metadata["choices"] is not None:
            assert tuple(actions[f.name].choices) == tuple(f.metadata["choices"])


@pytest.mark.parametrize("stage", [1, 2])
def test_flags_left_out_take_the_stage_defaults(stage: int) -> None:
    assert parse(["--stage", str(stage)]) == StageConfig(stage=stage)


def test_every_flag_reaches_its_field() -> None:
    cfg = parse("--stage 2 --epochs 7 --patience 2 --batch-size 3 --lr 0.2 --lr-c-factor 3 --lr-min 0.01 "
                "--schedule step --lr-decay 0.9 --lr-patience 4 --lr-step 5 --lambda-e 2 --lambda-f 3 --lambda-v 4 "
                "--lambda-1 0.1 --lambda-2 0.2 --loss-form rmse --amsgrad --clip 0 --checkpoint-every 2 --seed 9 "
                "--device cpu --precision float64 --force-path autograd --compile on --init-weights last "
                "--finetune-qscaler recompute --warmup-steps 3 --ema 0.9 --monitor fitness --force-delta 0.5 "
                "--type-weight 1 2 --snapshot-every 4 --snapshot-models epoch --no-progress --optimizer adam "
                "--max-force-rise 0.1 --init-bias-std 0.1 --adam-beta2 0.9 --stop-window 8 --stop-min-gain 0.03 "
                "--lr-window 7 --lr-min-gain 0.05 --batch-parts 3".split())  # fmt: skip
    assert dataclasses.asdict(cfg) == {
        "stage": 2, "epochs": 7, "patience": 2, "batch_size": 3, "lr": 0.2, "lr_c_factor": 3.0, "lr_min": 0.01,
        "schedule": "step",
        "lr_decay": 0.9, "lr_patience": 4, "lr_step": 5, "lr_window": 7, "lr_min_gain": 0.05,
        "lambda_e": 2.0, "lambda_f": 3.0, "lambda_v": 4.0,
        "lambda_1": 0.1, "lambda_2": 0.2, "loss_form": "rmse", "amsgrad": True, "clip": 0.0, "checkpoint_every": 2,
        "seed": 9, "device": "cpu", "precision": "float64", "force_path": "autograd", "compile": "on",
        "batch_parts": 3, "init_weights": "last",
        "finetune_qscaler": "recompute", "progress": False, "warmup_steps": 3, "ema": 0.9,
        "monitor": "fitness", "force_delta": 0.5, "type_weight": (1.0, 2.0), "snapshot_every": 4,
        "snapshot_models": "epoch", "optimizer": "adam", "max_force_rise": 0.1, "init_bias_std": 0.1, "adam_beta2": 0.9,
        "adam_momentum": "plain", "stop_window": 8, "stop_min_gain": 0.03,
    }  # fmt: skip
    # stage 2's default is plain: the flag reaches its field in both directions
    assert parse("--stage 2 --adam-momentum nesterov".split()).adam_momentum == "nesterov"
    assert parse("--stage 1 --adam-momentum plain".split()).adam_momentum == "plain"


def test_workflow_flags_round_trip_through_the_cli() -> None:
    """The workflow's flags for the schema's default config give the stage defaults back."""
    run = {f"stage{n}": {config_key(f): stage_defaults(n)[f.name] for f in scoped("stage")} for n in (1, 2)}
    run.update(finetune_from=None, finetune_qscaler="keep", init_weights="best")
    for stage in (1, 2):
        cfg = parse(["--stage", str(stage), *shlex.split(train_flags(run, stage, seed=0))])
        assert cfg == StageConfig(stage=stage)
    assert "--finetune" not in train_flags(run, 1, 0) and "--init-weights best" in train_flags(run, 2, 0)
    finetune = {**run, "finetune_from": "my nep.txt", "finetune_qscaler": "recompute"}
    assert train_flags(finetune, 1, 3).startswith("--finetune-from 'my nep.txt' ")
    cfg = parse(["--stage", "1", *shlex.split(train_flags(finetune, 1, 3))])
    assert cfg == StageConfig(stage=1, finetune_qscaler="recompute", seed=3)


# ---- the schema and the docs agree with the fields -------------------------------------------


def test_schema_stage_keys_are_the_stage_settings() -> None:
    assert set(STAGE_SCHEMA) == {config_key(f) for f in scoped("stage")}
    assert set(STAGE2_OVERRIDES) <= set(STAGE_SCHEMA)


@pytest.mark.parametrize("f", scoped("stage") + scoped("run"), ids=lambda f: f.name)
def test_schema_default_enum_and_bounds_equal_the_field(f: dataclasses.Field) -> None:
    if f.metadata["scope"] == "run":
        if f.name == "seed":  # the seeds of a committee: runs.<run>.seeds
            assert RUN_SCHEMA["seeds"]["default"] == [stage_defaults(1)["seed"]]
            return
        entry, stage2_default = RUN_SCHEMA[f.name], RUN_SCHEMA[f.name]["default"]
    else:
        entry = STAGE_SCHEMA[config_key(f)]
        stage2_default = STAGE2_OVERRIDES.get(config_key(f), entry).get("default")
    listed = lambda v: tuple(v) if isinstance(v, list) else v
    assert listed(entry["default"]) == stage_defaults(1)[f.name]
    assert listed(stage2_default) == stage_defaults(2)[f.name]
    assert type(listed(entry["default"])) is type(stage_defaults(1)[f.name])
    assert tuple(entry.get("enum", ())) == tuple(f.metadata["choices"] or ())
    assert entry.get("minimum") == f.metadata["minimum"]
    assert entry.get("exclusiveMinimum") == f.metadata["exclusive_minimum"]
    assert entry.get("maximum") == f.metadata["maximum"]


def _cell(text: str):
    """A default as config/README.md writes it (`0.01`, `plateau`, `false`) -> a Python value."""
    text = text.strip().strip("`")
    if text == "[]":
        return ()
    if text in ("true", "false"):
        return text == "true"
    try:
        return float(text)
    except ValueError:
        return text


def test_config_readme_documents_every_stage_setting_with_its_defaults() -> None:
    rows = {}
    for line in (ROOT / "config" / "README.md").read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 4 and cells[0].startswith("`"):
            rows[cells[0].strip("`")] = cells[1:3]
    for f in scoped("stage"):
        key = config_key(f)
        assert key in rows, f"config/README.md has no row for the stage key {key}"
        assert [_cell(c) for c in rows[key]] == [stage_defaults(s)[f.name] for s in (1, 2)], key


def test_cli_doc_names_every_flag() -> None:
    text = (ROOT / "docs" / "CLI.md").read_text()
    for f in settings():
        assert flag_of(f) in text, f"docs/CLI.md does not mention {flag_of(f)}"


@pytest.mark.slow  # subprocess
def test_reading_the_settings_does_not_import_torch() -> None:
    code = "import sys, nepcore.workflow, nepcore.training.config; assert 'torch' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)


def test_train_command_reports_a_bad_setting_as_a_usage_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Checked before any file is read: usage line, the message naming the setting, exit 2."""
    from nepcore.cli import main as cli_main

    argv = ["train", "--stage", "2", "--data", str(tmp_path / "absent.h5"), "--qscaler", str(tmp_path / "q.json"),
            "--out-dir", str(tmp_path / "out"), "--lr-decay", "2"]  # fmt: skip
    with pytest.raises(SystemExit) as exit_info:
        cli_main(argv)
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[0].startswith("usage: nepcore train")
    assert err[-1] == "nepcore train: error: lr_decay must be <= 1, found 2.0"
    assert not (tmp_path / "out").exists()
