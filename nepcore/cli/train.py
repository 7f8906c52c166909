"""``nepcore train --stage 1|2``: one training stage of a NEP model.

Argument parsing only; the work is :func:`nepcore.training.stage.train_stage`. The training
flags, their help and their (per-stage) defaults are generated from the fields of
:class:`nepcore.training.config.StageConfig`.
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from nepcore.training.config import StageConfig


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The paths and starting points, then one flag per StageConfig field (its help and default)."""
    from nepcore.training.config import STAGES, settings, stage_defaults

    a = parser.add_argument
    stage = next(f for f in settings() if f.name == "stage")
    a("--stage", type=int, choices=stage.metadata["choices"], required=True, help=stage.metadata["help"])
    a("--data", required=True, help="the HDF5 dataset (structures.h5); its train and valid splits are used")
    a("--qscaler", required=True, help="qscaler.json from nepcore qscaler (fixes the architecture)")
    a("--out-dir", required=True, help="folder for checkpoint.pt, nep.txt, nep_best.txt, loss.out, status.json")
    groups = {"starting point": parser.add_argument_group("starting point")}
    start = groups["starting point"]
    start.add_argument("--init", help="stage-1 checkpoint.pt that stage 2 continues from")
    start.add_argument("--finetune-from", help="nep.txt or checkpoint.pt to fine-tune (may have more elements)")
    start.add_argument("--resume", help="checkpoint to resume (default: OUT_DIR/resume.pt, else OUT_DIR/checkpoint.pt)")
    start.add_argument(
        "--restart-on-mismatch",
        action="store_true",
        help="when OUT_DIR's resume.pt/checkpoint.pt does not match this run (settings, data, "
        "more epochs run than --epochs), move it aside to <name>.stale and start afresh "
        "instead of refusing (the workflow passes this)",
    )
    defaults = {n: stage_defaults(n) for n in STAGES}
    for f in settings():
        if f.name == "stage":
            continue
        group = groups.get(f.metadata["group"]) or groups.setdefault(
            f.metadata["group"], parser.add_argument_group(f.metadata["group"])
        )
        _add_setting(group, f, defaults[1][f.name], defaults[2][f.name])


def auto_value(text: str) -> int | str:
    """The value of a whole-number setting that may be auto (``--batch-size``, ``--epochs``,
    ``--patience``): "auto" or a whole number (an argparse type)."""
    if text == "auto":
        return text
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number or auto: {text!r}") from None


def _add_setting(group: argparse._ActionsContainer, f: dataclasses.Field, default1: Any, default2: Any) -> None:
    """One flag for StageConfig field ``f``; not given, it is absent from the namespace (the
    stage's default applies)."""
    from nepcore.training.setting_fields import flag_of

    meta = f.metadata
    kwargs = {"dest": f.name, "default": argparse.SUPPRESS}
    if isinstance(default1, bool) or default1 is None:
        # a switch: --amsgrad sets True (default False); --no-progress sets False (default None,
        # decided at run time)
        kwargs.update(action="store_const", const=default1 is False, help=meta["help"])
    elif isinstance(default1, tuple):  # a list of numbers (type_weight): zero or more values
        kwargs.update(nargs="*", type=float, metavar="W", help=f"{meta['help']} (default none)")
    else:
        shown = f"{default1}" if default1 == default2 else f"stage 1: {default1}, stage 2: {default2}"
        kwargs.update(type=auto_value if meta["auto"] else type(default1), help=f"{meta['help']} (default {shown})")
        if meta["choices"] is not None:
            kwargs["choices"] = meta["choices"]
    group.add_argument(flag_of(f), **kwargs)


def stage_config(args: argparse.Namespace) -> StageConfig:
    """The stage's settings from the parsed flags.

    Args:
        args: the parsed ``nepcore train`` flags.

    Returns:
        The StageConfig, with the stage's defaults for every setting not given.
    """
    from nepcore.training.config import StageConfig, settings

    return StageConfig(**{f.name: getattr(args, f.name) for f in settings() if hasattr(args, f.name)})


def run(args: argparse.Namespace) -> int:
    from nepcore.training.distributed import setup
    from nepcore.training.qscaler import read_qscaler
    from nepcore.training.stage import open_data, train_stage

    if not logging.getLogger().handlers:
        logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stderr)
    distributed, finished = None, False
    try:
        cfg = stage_config(args)
        distributed = setup(cfg.device)  # joins the process group when launched by torchrun
        stats = read_qscaler(args.qscaler)
        data = open_data(args.data, stats.spec, cfg.dtype)
        status = train_stage(
            cfg,
            data,
            stats,
            args.out_dir,
            init=args.init,
            finetune=args.finetune_from,
            resume=args.resume,
            distributed=distributed,
            restart_on_mismatch=args.restart_on_mismatch,
        )
        finished = True
    finally:
        if distributed is not None:
            distributed.close(finished)
    if not distributed.is_main:
        return 0
    best = status.get("best") or {}
    print(
        f"stage {status['stage']}: {status['reason']} after epoch {status['epoch']}; best epoch "
        f"{status['best_epoch']} (monitored {status['monitor']} loss {best.get('monitored', float('nan')):.4e})"
    )
    return 0
