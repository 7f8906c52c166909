"""Pure functions the Snakemake rules call (workflow/rules/*.smk).

Config validation against the JSON schema, the cross-checks a schema cannot express, the
warnings about a run's nep.in, glob expansion of the dataset files, the members (seeds) of a
run, and the command-line flags of every ``nepcore`` command a rule runs. Nothing here imports
torch or Snakemake: ``workflow/rules/common.smk`` loads fast and every function is unit-tested
in milliseconds (tests/test_workflow_functions.py).

``config`` below is the workflow config (config/config.yaml); ``run`` one value of
``config["runs"]`` and ``dataset`` one of ``config["datasets"]``, after :func:`validate_config`
filled in the schema's defaults.
"""

from __future__ import annotations

import copy
import os
import shlex
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from nepcore.errors import NepcoreError
from nepcore.io.files import NoFileMatchesError, expand_patterns
from nepcore.training.config import settings
from nepcore.training.setting_fields import config_key, flag_of


class ConfigError(NepcoreError, ValueError):
    """A config that cannot run; the message starts ``invalid config at <key>: ``."""

    def __init__(self, where: str, message: str) -> None:
        super().__init__(f"invalid config at {where or 'top level'}: {message}")


# ---- validation --------------------------------------------------------------------------------


def validate_config(config: dict[str, Any], schema: dict[str, Any]) -> None:
    """Check ``config`` against the JSON schema and fill in the schema's defaults, in place.

    Defaults are filled as Snakemake's ``validate`` fills them (a property's ``default`` is set
    before the property is checked, so an object default such as ``stage2: {}`` is then filled
    from its own schema); each default is a copy, never the schema's own object.

    Args:
        config: the workflow config.
        schema: the parsed config.schema.yaml.

    Raises:
        ConfigError: the first violation, naming its key (``runs.demo.stage1.epochs``).
    """
    from jsonschema import Draft202012Validator, validators

    properties = Draft202012Validator.VALIDATORS["properties"]

    def fill_then_check(validator, props, instance, subschema):
        if isinstance(instance, dict):
            for name, sub in props.items():
                if "default" in sub:
                    instance.setdefault(name, copy.deepcopy(sub["default"]))
        yield from properties(validator, props, instance, subschema)

    validator = validators.extend(Draft202012Validator, {"properties": fill_then_check})(schema)
    for error in validator.iter_errors(config):
        raise ConfigError(error.json_path.removeprefix("$.").removeprefix("$"), error.message)


def check_config(config: dict[str, Any]) -> list[str]:
    """The cross-checks the schema cannot express; returns warnings to show the user.

    Every run names a known dataset and gives exactly one of ``model`` and ``nep_in``; a
    dataset gives both ``valid`` and ``test`` files or neither, and every glob matches; a run's
    nep.in parses (:mod:`nepcore.io.nep_in`) and its training keywords are reported
    (:func:`nep_in_warnings`).

    Raises:
        ConfigError: naming the key at fault.
    """
    warnings: list[str] = []
    for name, run in config["runs"].items():
        if run["dataset"] not in config["datasets"]:
            raise ConfigError(
                f"runs.{name}.dataset", f"unknown dataset {run['dataset']!r}; known: {sorted(config['datasets'])}"
            )
        if ("model" in run) == (run["nep_in"] is not None):
            raise ConfigError(f"runs.{name}", "give exactly one of model and nep_in")
        if run["nep_in"] is not None:
            warnings += nep_in_warnings(name, run["nep_in"])
    for name, dataset in config["datasets"].items():
        if bool(dataset["valid"]) != bool(dataset["test"]):
            raise ConfigError(f"datasets.{name}", "give both valid and test files, or neither")
        for key in ("files", "valid", "test"):
            expand_files(dataset[key], f"datasets.{name}.{key}")
    return warnings


def nep_in_warnings(run_name: str, path: str) -> list[str]:
    """One warning per training keyword the run's nep.in sets (``lambda_e``, ``batch``,
    ``generation``, ...): the workflow takes those from ``runs.<run>.stage1/stage2`` instead.

    A missing file gives no warning (Snakemake reports it as a missing input).

    Raises:
        ConfigError: the file is not a valid nep.in (the message names the line).
    """
    from nepcore.io.nep_in import NepInError, parse_nep_in

    if not Path(path).is_file():
        return []
    try:
        given = parse_nep_in(Path(path)).given
    except NepInError as err:
        raise ConfigError(f"runs.{run_name}.nep_in", str(err)) from None
    replaced = {f.metadata["nep_in"]: config_key(f) for f in settings() if f.metadata["nep_in"]}
    return [f"runs.{run_name}.nep_in: {path} sets '{keyword}', a training setting; the workflow uses "
            f"runs.{run_name}.stage1/stage2.{replaced[keyword]} from the config instead"
            for keyword in sorted(given.keys() & replaced.keys())]  # fmt: skip


def expand_files(patterns: Sequence[str], where: str) -> list[str]:
    """The files a dataset key names (:func:`nepcore.io.files.expand_patterns`, the same rule
    as ``nepcore convert``: sorted within a pattern, each file once).

    Raises:
        ConfigError: at ``where`` when a glob matches no file.
    """
    try:
        return expand_patterns(patterns)
    except NoFileMatchesError as err:
        raise ConfigError(where, str(err)) from None


# ---- runs and their members ------------------------------------------------------------------


def members(run_name: str, run: dict[str, Any]) -> list[str]:
    """The trained models of a run: ``<run>`` for its first seed, ``<run>/seed<N>`` after."""
    return [run_name] + [f"{run_name}/seed{seed}" for seed in run["seeds"][1:]]


def final_model(run_name: str, run: dict[str, Any], member: str | None = None) -> str:
    """The stage-2 model file of ``member`` (default: the run's first seed) that
    ``runs.<run>.final_model`` selects."""
    name = "nep_best.txt" if run["final_model"] == "best" else "nep.txt"
    return f"results/{member or run_name}/stage2/{name}"


def committee_models(run_name: str, run: dict[str, Any]) -> list[str]:
    """Every seed's final model when the run has several seeds (a committee), else nothing."""
    names = members(run_name, run)
    return [final_model(run_name, run, m) for m in names] if len(names) > 1 else []


# ---- command-line flags ------------------------------------------------------------------------


def flags(options: dict[str, Any]) -> str:
    """Command-line flags from {flag: value}.

    None and False are left out, True is a bare switch, a list or tuple gives several values;
    every value is shell-quoted.

    Args:
        options: flag (``--epochs``) -> value, in the order wanted.

    Returns:
        One string, e.g. ``--epochs 100 --amsgrad --committee a.txt b.txt``.
    """
    parts = []
    for flag, value in options.items():
        if value is None or value is False:
            continue
        parts.append(flag)
        if value is True:
            continue
        values = value if isinstance(value, (list, tuple)) else [value]
        parts += [shlex.quote(str(v)) for v in values]
    return " ".join(parts)


def demo_flags(dataset: dict[str, Any]) -> str:
    """Flags of ``nepcore demo-data``: the dataset's ``demo`` settings."""
    return flags({"--seed": dataset["demo"]["seed"], "--n-frames": dataset["demo"]["n_frames"]})


def convert_flags(dataset: dict[str, Any], valid: Sequence[str], test: Sequence[str]) -> str:
    """Flags of ``nepcore convert``: species, label keys and the split.

    Args:
        dataset: the dataset's config.
        valid, test: its expanded held-out files (both empty: a random ``split``).
    """
    options = {
        "--types": dataset["types"] or None,
        "--energy-key": dataset["energy_key"],
        "--forces-key": dataset["forces_key"],
        "--virial-key": dataset["virial_key"],
        "--stress-key": dataset["stress_key"],
        "--weights-key": dataset["weights_key"],
    }
    if valid:
        options.update({"--valid": list(valid), "--test": list(test)})
    else:
        options["--split"] = dataset["split"]
    options["--seed"] = dataset["seed"]
    return flags(options)


#: runs.<run>.model keys -> nepcore qscaler flags (GPUMD's nep.in keywords)
_MODEL_FLAGS = {"type": "--type", "cutoff": "--cutoff", "n_max": "--n-max", "basis_size": "--basis-size",
                "l_max": "--l-max", "neuron": "--neuron", "zbl": "--zbl",
                "use_typewise_cutoff_zbl": "--use-typewise-cutoff-zbl"}  # fmt: skip


def qscaler_flags(run: dict[str, Any]) -> str:
    """Flags of ``nepcore qscaler``: the architecture (``--nep-in`` or the model keys) and the
    scaling settings."""
    options: dict[str, Any] = {}
    if run["nep_in"]:
        options["--nep-in"] = run["nep_in"]
    else:
        options.update({flag: run["model"][key] for key, flag in _MODEL_FLAGS.items()})
    qscaler = run["qscaler"]
    options.update({"--mode": qscaler["mode"], "--seed": qscaler["seed"], "--batch-size": qscaler["batch_size"]})
    return flags(options)


def train_flags(run: dict[str, Any], stage: int, seed: int) -> str:
    """Flags of ``nepcore train --stage <stage>`` for one member (seed) of a run.

    Generated from :class:`nepcore.training.config.StageConfig`: every setting whose home is
    ``runs.<run>.stage<N>`` comes from that section (the schema has filled in its defaults);
    the seed is the member's; where the stage starts from: stage 1 ``--finetune-from`` and
    ``--finetune-qscaler`` when the run fine-tunes, stage 2 ``--init-weights`` (the ``--init``
    path is the rule's input).

    Args:
        run: the run's config.
        stage: 1 or 2.
        seed: the member's training seed.

    Returns:
        The flags, the starting point first, then the settings in StageConfig's order.
    """
    section = run[f"stage{stage}"]
    finetune = stage == 1 and bool(run["finetune_from"])
    options: dict[str, Any] = {"--finetune-from": run["finetune_from"] if finetune else None}
    run_values = {
        "seed": seed,
        "init_weights": run["init_weights"] if stage == 2 else None,
        "finetune_qscaler": run["finetune_qscaler"] if finetune else None,
    }
    for f in settings():
        scope = f.metadata["scope"]
        if scope == "stage":
            options[flag_of(f)] = section[config_key(f)]
        elif scope == "run":
            options[flag_of(f)] = run_values[f.name]
    return flags(options)


def committee_flags(models: Sequence[str]) -> str:
    """``--committee`` with the committee's models for ``nepcore evaluate``, or nothing."""
    return flags({"--committee": list(models) or None})


# ---- after the run -----------------------------------------------------------------------------


def warnings_in_logs(log_dir: str | os.PathLike, since: float) -> list[str]:
    """The ``warning:`` lines of the rule logs under ``log_dir`` written since ``since``.

    Every nepcore command starts its warnings with ``warning:``; the rules send them to their
    per-rule log, where a user would not see them. The workflow prints these lines at its end
    (workflow/rules/summary.smk), so e.g. an empty test split or an unknown nep.in keyword
    reaches the console.

    Args:
        log_dir: the folder of the rule logs (``logs``); absent means no warnings.
        since: POSIX time; only logs modified at or after it (this run's jobs) are read.

    Returns:
        ``"<log path>: <warning line>"`` per warning, logs in sorted order.
    """
    found = []
    for path in sorted(Path(log_dir).rglob("*.log")):
        try:
            if path.stat().st_mtime < since:
                continue
            lines = path.read_text(errors="replace").splitlines()
        except OSError:
            continue
        found += [f"{path}: {line.strip()}" for line in lines if line.lstrip().lower().startswith("warning:")]
    return found
