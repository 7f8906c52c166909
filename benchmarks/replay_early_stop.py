"""Replay a finished stage's early stop from its checkpoint: when it stopped and which epoch it
kept under three rules (issue 10, forty-third and forty-fourth rounds).

``every_epoch``, the rule until the forty-fourth round: any new best of the monitored metric or
of a validation force, energy or virial RMSE is progress, whether or not the epoch could be
kept (``max_force_rise``, ``keeps_forces``). ``today`` (``nepcore.training.schedule.EarlyStop``
as it is): an epoch that could not be kept is a bad epoch. ``after_first_keep``: ``every_epoch``
until the stage has kept an epoch of its own, then ``today``. The replay drives the real
``EarlyStop`` over the checkpoint's per-epoch history with the stage's own patience and bound,
so the rule a stage ran under reproduces its real stop and kept epoch. Costs nothing to run (no
training); it reads the stage's ``checkpoint.pt`` (history, starting metrics, real stop) and
``status.json`` (patience and ``max_force_rise`` as the stage ran them).

    python benchmarks/replay_early_stop.py results/demo/stage2 [more stage folders]

Prints one JSON object per stage folder: the real stop and kept epoch, and each rule's.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch

from nepcore.training.schedule import EarlyStop, improved, keeps_forces, record_epoch, validation_errors


def _update_seeing_every_epoch(early: EarlyStop, epoch: int, monitored: float, errors: dict, keep: bool) -> None:
    """EarlyStop.update as it was before the forty-fourth round: every epoch's RMSEs may be
    progress, and the bound only restricts which epoch is kept."""
    record_epoch(early, monitored, errors)
    if keep and improved(monitored, early.kept):
        early.kept, early.best_epoch = monitored, epoch


def replay(history: list[dict], start: dict | None, patience: int, tolerance: float, rule: str) -> dict:
    """Run EarlyStop over ``history``; returns the epoch it stops at (or the last) and the kept epoch.

    rule: ``every_epoch`` (the rule before the forty-fourth round: every epoch's RMSEs can be
    progress), ``today`` (``EarlyStop`` as it is: an epoch outside the force bound is a bad
    epoch) or ``after_first_keep`` (``every_epoch`` until the stage has kept an epoch of its
    own, its best epoch no longer the starting model's 0, then ``today``).
    """
    early = EarlyStop(patience=patience)
    if start is not None:  # as nepcore.training.stage: the starting model is epoch 0's candidate
        early.update(0, start["monitored"], validation_errors(start))
    for h in history:
        errors = validation_errors(h)
        keep = keeps_forces(errors, start, tolerance)
        if rule == "every_epoch" or (rule == "after_first_keep" and early.best_epoch == 0):
            _update_seeing_every_epoch(early, int(h["epoch"]), h["monitored"], errors, keep)
        else:
            early.update(int(h["epoch"]), h["monitored"], errors, keep=keep)
        if early.should_stop:
            return {"stop": int(h["epoch"]), "kept": early.best_epoch}
    return {"stop": int(history[-1]["epoch"]) if history else 0, "kept": early.best_epoch}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("stages", type=Path, nargs="+", help="stage folders holding checkpoint.pt")
    args = parser.parse_args()
    needed = ("checkpoint.pt", "status.json")
    missing = [str(folder / name) for folder in args.stages for name in needed if not (folder / name).is_file()]
    if missing:
        parser.error(f"missing {', '.join(missing)} (each argument is a stage folder of nepcore train)")
    for folder in args.stages:
        saved = torch.load(folder / "checkpoint.pt", weights_only=True)
        status = json.loads((folder / "status.json").read_text())
        patience, tolerance = status["patience"], status["settings"]["max_force_rise"]
        history, start = saved["history"], saved.get("start_metrics")
        row = {
            "stage": str(folder),
            "real": {"stop": saved["epoch"], "kept": saved["early_stop"]["best_epoch"], "reason": saved["reason"]},
            "patience": patience,
            "max_force_rise": tolerance,
        }
        for rule in ("every_epoch", "today", "after_first_keep"):
            row[rule] = replay(history, start, patience, tolerance, rule)
        print(json.dumps(row))


if __name__ == "__main__":
    main()
