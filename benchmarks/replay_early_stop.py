"""Replay a finished stage's early stop from its checkpoint: when it stopped and which epoch it
kept under today's rule and under alternatives that count other epochs outside the force bound
as bad epochs (issue 10, forty-third to forty-fifth rounds).

Today's rule (``nepcore.training.schedule.EarlyStop`` as ``nepcore.training.stage`` drives it):
any new best of the monitored metric or of a validation force, energy or virial RMSE is
progress, whether or not the epoch could be kept (``max_force_rise``, ``keeps_forces``), except
in an epoch whose validation force is more than ``FAR_FORCE_RISE_FACTOR`` times that bound above
the starting model's (``counts_as_progress``: 25 % at the default 5 %), which is a bad epoch
(forty-fifth round). ``every_epoch``: the rule before it, every epoch can be progress.
``keepable_only``: an epoch that could not be kept is a bad epoch. ``after_first_keep``: so is
it once the stage has kept an epoch of its own. ``far_outside``: an epoch whose validation force
is more than ``--far`` (default 0.25) above the starting model's is a bad epoch (today's rule
with another width). The replay drives the real ``EarlyStop`` over the checkpoint's per-epoch
history with the stage's own patience and bound, so ``today`` reproduces the real stop and kept
epoch of a stage that ran under today's rule (``every_epoch``, of one that ran before the
forty-fifth round). Costs nothing to run (no training); it reads the stage's ``checkpoint.pt``
(history, starting metrics, real stop) and ``status.json`` (patience and ``max_force_rise`` as
the stage ran them).

    python benchmarks/replay_early_stop.py results/demo/stage2 [more stage folders] [--far 0.25]

Prints one JSON object per stage folder: the real stop and kept epoch, and each rule's.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch

from nepcore.training.schedule import EarlyStop, counts_as_progress, keeps_forces, validation_errors

#: The rules :func:`replay` knows, in the order each row prints them.
RULES: tuple[str, ...] = ("today", "every_epoch", "keepable_only", "after_first_keep", "far_outside")


def replay(
    history: list[dict], start: dict | None, patience: int, tolerance: float, rule: str, far: float = 0.25
) -> dict:
    """Run EarlyStop over ``history``; returns the epoch it stops at (or the last) and the kept epoch.

    rule: ``today`` (``EarlyStop`` as a stage drives it: an epoch's RMSEs can be progress unless
    its force is beyond ``counts_as_progress``'s wider bound), ``every_epoch`` (the rule before the
    forty-fifth round: every epoch's can), ``keepable_only`` (an epoch outside the force bound is
    a bad epoch), ``after_first_keep``
    (so is it, once the stage has kept an epoch of its own: its best epoch is no longer the
    starting model's 0) or ``far_outside`` (so is an epoch whose validation force is more than
    ``far`` above the starting model's, a bound well beyond ``tolerance``).
    """
    early = EarlyStop(patience=patience)
    if start is not None:  # as nepcore.training.stage: the starting model is epoch 0's candidate
        early.update(0, start["monitored"], validation_errors(start))
    for h in history:
        errors = validation_errors(h)
        keep = keeps_forces(errors, start, tolerance)
        bad = {
            "every_epoch": False,
            "keepable_only": not keep,
            "after_first_keep": not keep and early.best_epoch > 0,
            "far_outside": not keeps_forces(errors, start, far),
        }
        if rule == "today":  # exactly as nepcore.training.stage
            early.update(int(h["epoch"]), h["monitored"], errors, keep, counts_as_progress(errors, start, tolerance))
        elif bad[rule]:
            early.bad_epochs += 1
        else:
            early.update(int(h["epoch"]), h["monitored"], errors, keep=keep)
        if early.should_stop:
            return {"stop": int(h["epoch"]), "kept": early.best_epoch}
    return {"stop": int(history[-1]["epoch"]) if history else 0, "kept": early.best_epoch}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("stages", type=Path, nargs="+", help="stage folders holding checkpoint.pt")
    parser.add_argument(
        "--far", type=float, default=0.25, help="far_outside: the relative force rise beyond which an epoch is bad"
    )
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
        for rule in RULES:
            row[rule] = replay(history, start, patience, tolerance, rule, args.far)
        print(json.dumps(row))


if __name__ == "__main__":
    main()
