"""Replay which epoch a finished stage keeps under other monitored metrics, and score each kept
model on a held-out split (issue 10, forty-sixth round).

A stage keeps, among the epochs its force bound allows (``max_force_rise``), the one with the
lowest monitored metric, and the monitor also resets early stop. Today's monitor is the fitness
RMSE_E + RMSE_F + 0.1 RMSE_V (eV/atom and eV/Å summed). The alternatives weigh the energies more
in a stage that continues a model:

* ``relative``: each validation RMSE divided by the starting model's, weighted 1, 1, 0.1
  (halving the energy error counts as much as halving the force error);
* ``relative_equal``: the same with the virial weighted 1;
* ``energy``: the validation energy RMSE alone (stage 2 as an energy refinement inside the
  force bound).

The replay drives the real ``EarlyStop`` over the stage's own per-epoch history (its
``checkpoint.pt``: the float32 validation RMSEs the stage judged itself by), with the force bounds
and patience the stage ran with (``--patience`` overrides it: a stage run with a huge patience to
its last epoch replays as if it had run with the default), so ``fitness`` reproduces the real
stop and kept epoch. Only the L-BFGS trajectory is the same under every monitor (its epochs do
not depend on the schedule); an Adam stage's plateau schedule reads the monitor too, so for Adam
the other monitors' replays follow today's trajectory, an approximation.

Scoring needs the kept epoch's model: train the stage with ``--snapshot-every 1
--snapshot-models epoch`` (every epoch's validated model in ``snapshots/``), and give the
starting model with ``--start`` (stage 1's ``nep_best.txt``) for a kept epoch 0. Each kept model
is evaluated in float64 on ``--split`` (default test) of ``--data``.

    python benchmarks/replay_monitors.py results/demo/stage2 --data results/data/demo/structures.h5 \\
        --start results/demo/stage1/nep_best.txt [--patience 20] [--split test]

Prints one JSON object per stage folder: per monitor the stop and kept epoch and the kept
model's validation RMSEs (as the stage saw them) and held-out RMSEs (meV/atom, meV/Å, meV/atom).
"""

from __future__ import annotations

import argparse
import json
import math
from collections.abc import Callable
from pathlib import Path

import torch
from bench_accuracy import TestScorer
from replay_early_stop import replay

from nepcore.training.epoch import FITNESS_LAMBDA_V

#: the validation RMSEs of a history row that the relative monitors weigh (energy, force, virial)
_KEYS = ("valid_rmse_e", "valid_rmse_f", "valid_rmse_v")


def _relative(weights: tuple[float, float, float]) -> Callable[[dict, dict], float]:
    """The monitor sum of weight * RMSE / the starting model's RMSE over ``_KEYS``."""

    def monitor(row: dict, start: dict) -> float:
        total = 0.0
        for key, weight in zip(_KEYS, weights):
            value, ref = row.get(key), start.get(key)
            if value is None or ref is None or not (math.isfinite(value) and math.isfinite(ref)) or ref <= 0:
                continue  # an absent label (or a perfect start) adds nothing
            total += weight * value / ref
        return total

    return monitor


#: monitor name -> the monitored value of a history row given the starting model's row
MONITORS: dict[str, Callable[[dict, dict], float]] = {
    "fitness": lambda row, start: row["fitness"],
    "relative": _relative((1.0, 1.0, FITNESS_LAMBDA_V)),
    "relative_equal": _relative((1.0, 1.0, 1.0)),
    "energy": lambda row, start: row["valid_rmse_e"],
}


def remonitored(history: list[dict], start: dict, monitor: str) -> tuple[list[dict], dict]:
    """Copies of the history and starting row whose ``monitored`` is ``monitor``'s value."""
    value = MONITORS[monitor]
    return [{**h, "monitored": value(h, start)} for h in history], {**start, "monitored": value(start, start)}


def _snapshot(folder: Path, epoch: int, start: Path | None) -> Path | None:
    if epoch == 0:
        return start
    path = folder / f"epoch{epoch:06d}.txt"
    return path if path.is_file() else None


def _milli(row: dict) -> dict:
    key = {"e": "valid_rmse_e", "f": "valid_rmse_f", "v": "valid_rmse_v"}
    return {q: None if row.get(k) is None else 1e3 * row[k] for q, k in key.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("stages", type=Path, nargs="+", help="stage folders holding checkpoint.pt and snapshots/")
    parser.add_argument("--data", type=Path, required=True, help="the stages' structures.h5")
    parser.add_argument("--split", default="test", help="the split the kept models are scored on")
    parser.add_argument("--start", type=Path, help="the starting model (stage 1's nep_best.txt), scored for epoch 0")
    parser.add_argument("--patience", type=int, help="replay with this patience (default: the stage's own)")
    args = parser.parse_args()
    scorer = TestScorer(args.data, args.split)
    for folder in args.stages:
        saved = torch.load(folder / "checkpoint.pt", weights_only=True)
        status = json.loads((folder / "status.json").read_text())
        patience = args.patience or status["patience"]
        tolerance = status["settings"]["max_force_rise"]
        history, start = saved["history"], saved.get("start_metrics")
        if start is None:
            parser.error(f"{folder}: no starting model (a stage started with --init has one)")
        rows = {int(h["epoch"]): h for h in history}
        rows[0] = start
        out = {"stage": str(folder), "patience": patience, "max_force_rise": tolerance, "split": args.split}
        for monitor in MONITORS:
            ends = replay(*remonitored(history, start, monitor), patience, tolerance, "today")
            path = _snapshot(folder / "snapshots", ends["kept"], args.start)
            out[monitor] = {
                **ends,
                "valid": _milli(rows[ends["kept"]]),
                args.split: None if path is None else scorer(path),
            }
        print(json.dumps(out))


if __name__ == "__main__":
    main()
