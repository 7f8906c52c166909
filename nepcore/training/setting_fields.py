"""How a training setting is declared: a dataclass field carrying everything the command line, the
workflow and the checks need (:func:`setting`), the check of a value against it
(:func:`check_value`), and its command-line flag and workflow-config key.

The settings themselves, with their defaults, are the fields of
:class:`nepcore.training.config.StageConfig`. Like that module, this one does not import torch.
"""

from __future__ import annotations

import dataclasses
from dataclasses import field
from typing import Any

from nepcore.errors import SettingError


class StageConfigError(SettingError):
    """A training setting out of range (the message names the setting and the value; exit 2)."""


#: Where a setting lives in the workflow config: a key of ``runs.<run>.stage1/stage2``
#: ("stage"), a key of ``runs.<run>`` ("run"), or nowhere ("cli": a command-line-only setting).
SCOPES: tuple[str, ...] = ("stage", "run", "cli")


def setting(
    default: Any,
    help: str,
    *,
    group: str,
    stage2: Any = dataclasses.MISSING,
    choices: tuple | None = None,
    minimum: float | None = None,
    exclusive_minimum: float | None = None,
    maximum: float | None = None,
    key: str | None = None,
    scope: str = "stage",
    flag: str | None = None,
    resumable: bool = False,
    nep_in: str | None = None,
    auto: bool = False,
) -> Any:
    """A field of :class:`nepcore.training.config.StageConfig` with everything the CLI, the
    workflow and the checks need.

    Args:
        default: the value (stage 1's value when ``stage2`` is given).
        help: one line for ``nepcore train --help`` (the default is appended).
        group: the ``--help`` section.
        stage2: stage 2's default when it differs from stage 1's.
        choices, minimum, exclusive_minimum, maximum: the allowed values.
        key: the key in the workflow config when it differs from the field name (GPUMD's name).
        scope: where the workflow config holds it (see SCOPES).
        flag: the command-line flag when it is not ``--<name-with-dashes>``.
        resumable: may change when a stage resumes (it does not change the epochs already run).
        nep_in: the GPUMD nep.in keyword this setting replaces (the workflow warns when a run's
            nep.in sets it, since the workflow takes it from the config).
        auto: a whole number that may also be the word "auto" (decided from the data when the
            stage starts; the bounds apply to numbers only).

    Returns:
        A dataclasses.field; a per-stage field's dataclass default is None, filled in from the
        stage by ``StageConfig.__post_init__``.
    """
    per_stage = None if stage2 is dataclasses.MISSING else (default, stage2)
    metadata = {"help": help, "group": group, "choices": choices, "minimum": minimum,
                "exclusive_minimum": exclusive_minimum, "maximum": maximum, "key": key, "scope": scope,
                "flag": flag, "resumable": resumable, "per_stage": per_stage, "nep_in": nep_in,
                "auto": auto}  # fmt: skip
    return field(default=None if per_stage else default, metadata=metadata)


def check_value(f: dataclasses.Field, value: Any) -> None:
    """Raise StageConfigError when ``value`` is not allowed for field ``f``."""
    m, name = f.metadata, f.name
    if value is None:
        if f.default is None and m["per_stage"] is None:
            return  # a setting whose None means "decide at run time" (progress)
        raise StageConfigError(f"{name} must be given, found None")
    if m["auto"] and value == "auto":
        return
    if m["auto"] and (isinstance(value, bool) or not isinstance(value, int)):
        raise StageConfigError(f"{name} must be a whole number or auto, found {value!r}")
    if m["choices"] is not None and value not in m["choices"]:
        raise StageConfigError(f"{name} must be one of {', '.join(map(str, m['choices']))}, found {value!r}")
    if m["minimum"] is not None and not value >= m["minimum"]:
        raise StageConfigError(f"{name} must be >= {m['minimum']}, found {value}")
    if m["exclusive_minimum"] is not None and not value > m["exclusive_minimum"]:
        raise StageConfigError(f"{name} must be > {m['exclusive_minimum']}, found {value}")
    if m["maximum"] is not None and not value <= m["maximum"]:
        raise StageConfigError(f"{name} must be <= {m['maximum']}, found {value}")


def flag_of(f: dataclasses.Field) -> str:
    """The command-line flag of a setting: ``--batch-size`` for ``batch_size``."""
    return f.metadata["flag"] or "--" + f.name.replace("_", "-")


def config_key(f: dataclasses.Field) -> str:
    """The key of a setting in the workflow config (GPUMD's name where it differs)."""
    return f.metadata["key"] or f.name


__all__ = ["SCOPES", "StageConfigError", "check_value", "config_key", "flag_of", "setting"]
