"""Replay a finished stage's early stop from its checkpoint: when it stopped and which epoch it
kept under today's rule, and under the alternative in which an epoch that ``max_force_rise``
keeps from being the best model also counts as a bad epoch (forty-third round of issue 10).

Today's rule (``nepcore.training.schedule.EarlyStop``): any new best of the monitored metric or
of a validation force, energy or virial RMSE is progress, whether or not the epoch could be
kept. The alternative: only epochs that could be kept (``keeps_forces``) can be progress. The
replay drives the real ``EarlyStop`` over the checkpoint's per-epoch history with the stage's
own patience and bound, so its first line reproduces the stage's real stop and kept epoch.
Costs nothing to run (no training); it reads the stage's ``checkpoint.pt`` (history, starting
metrics, real stop) and ``status.json`` (patience and ``max_force_rise`` as the stage ran them).

    python benchmarks/replay_early_stop.py results/demo/stage2 [more stage folders]

Prints one JSON object per stage folder: the real stop and kept epoch, and each rule's.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch

from nepcore.training.schedule import EarlyStop, keeps_forces, validation_errors


def replay(history: list[dict], start: dict | None, patience: int, tolerance: float, keepable_only: bool) -> dict:
    """Run EarlyStop over ``history``; returns the epoch it stops at (or the last) and the kept epoch.

    keepable_only: an epoch outside the force bound is a bad epoch (the alternative rule).
    """
    early = EarlyStop(patience=patience)
    for h in history:
        errors = validation_errors(h)
        keep = keeps_forces(errors, start, tolerance)
        if keepable_only and not keep:
            early.bad_epochs += 1
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
        for name, keepable_only in (("today", False), ("keepable_only", True)):
            row[name] = replay(history, start, patience, tolerance, keepable_only)
        print(json.dumps(row))


if __name__ == "__main__":
    main()
