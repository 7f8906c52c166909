"""Pure functions the Snakemake rules call (workflow/rules/*.smk): config -> command-line flags.

Nothing here imports torch or Snakemake, so ``workflow/rules/common.smk`` loads fast and every
function is unit-tested in milliseconds (tests/test_workflow_functions.py).
"""

from __future__ import annotations

import os
import shlex
from pathlib import Path
from typing import Any

from nepcore.training.config import config_key, flag_of, settings


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


def train_flags(run: dict[str, Any], stage: int, seed: int) -> str:
    """Flags of ``nepcore train --stage <stage>`` for one member (seed) of a run.

    Every StageConfig setting whose home is ``runs.<run>.stage<N>`` comes from that section (the
    schema has filled in its defaults); the seed is the member's; where the stage starts from:
    stage 1 ``--finetune-from``/``--finetune-qscaler`` when the run fine-tunes, stage 2
    ``--init-weights`` (the ``--init`` path is the rule's input).

    Args:
        run: the validated ``config["runs"][<run>]``.
        stage: 1 or 2.
        seed: the member's training seed.

    Returns:
        The flags, in StageConfig field order after the starting point.
    """
    section = run[f"stage{stage}"]
    options: dict[str, Any] = {}
    if stage == 1 and run["finetune_from"]:
        options["--finetune-from"] = run["finetune_from"]
    run_values = {
        "seed": seed,
        "init_weights": run["init_weights"] if stage == 2 else None,
        "finetune_qscaler": run["finetune_qscaler"] if stage == 1 and run["finetune_from"] else None,
    }
    for f in settings():
        scope = f.metadata["scope"]
        if scope == "stage":
            options[flag_of(f)] = section[config_key(f)]
        elif scope == "run":
            options[flag_of(f)] = run_values[f.name]
    return flags(options)


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
