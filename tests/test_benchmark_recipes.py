"""The learning-curve benchmark's recipes are valid `nepcore train` settings.

benchmarks/accuracy_recipes.py spells out every recipe of issue 10's learning curves as flags of
`nepcore train`; a flag the command does not take, or a value outside a setting's range, would
only show as a failed benchmark run long after it started.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

import pytest

from nepcore.cli import train
from nepcore.training.config import StageConfig

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
from accuracy_recipes import (
    BETA2_BEFORE,
    CHANGED_DEFAULTS,
    FOLLOW_DEFAULTS,
    MOMENTUM_BEFORE,
    RECIPES,
    STAGE2_LENGTH_BEFORE,
    _pin_earlier_defaults,
    recipe_round,
)


def _stage_config(stage: int, flags: list[str]) -> StageConfig:
    parser = argparse.ArgumentParser(exit_on_error=False)
    train.add_arguments(parser)
    required = ["--stage", str(stage), "--data", "d.h5", "--qscaler", "q.json", "--out-dir", "o"]
    args, unknown = parser.parse_known_args([*required, *flags])
    assert not unknown, f"nepcore train does not take {unknown}"
    return train.stage_config(args)


@pytest.mark.parametrize("name", sorted(RECIPES))
def test_every_recipe_is_a_valid_stage_config(name: str) -> None:
    for stage in (1, 2):
        flags = RECIPES[name][f"stage{stage}"]
        if flags is not None:
            _stage_config(stage, flags)


@pytest.mark.parametrize("name", sorted(n for n, r in RECIPES.items() if r.get("stage1_from")))
def test_a_reused_stage_1_is_the_same_stage_1(name: str) -> None:
    """A recipe that copies another's stage 1 must train stage 1 with the same flags, or the copy
    is not the model its stage 2 claims to continue."""
    source = RECIPES[name]["stage1_from"]
    assert source in RECIPES and not RECIPES[source].get("stage1_from")
    assert RECIPES[name]["stage1"] == RECIPES[source]["stage1"]
    assert RECIPES[name]["stage2"] is not None


@pytest.mark.parametrize("name", sorted(RECIPES))
def test_recipes_before_the_36th_round_keep_stage_2s_length(name: str) -> None:
    """Stage 2's epochs and patience became auto in the thirty-sixth round; the recipes named
    before it ran with 300 and 30 (or their own numbers) and must still say so."""
    flags = RECIPES[name]["stage2"]
    if flags is None or recipe_round(name) >= 36:
        return
    assert flags[: len(STAGE2_LENGTH_BEFORE)] == STAGE2_LENGTH_BEFORE
    cfg, own = _stage_config(2, flags), flags[len(STAGE2_LENGTH_BEFORE) :]
    assert cfg.epochs == (int(own[own.index("--epochs") + 1]) if "--epochs" in own else 300)
    assert cfg.patience == (int(own[own.index("--patience") + 1]) if "--patience" in own else 30)


def test_old_settings_keep_stage_2_models_by_loss_alone() -> None:
    """Before issue 10, stage 2 kept its lowest validation loss whatever its forces: the baseline
    pins that, so today's max_force_rise does not move it (old_r12: as run in rounds 12-29)."""
    old = _stage_config(2, RECIPES["old"]["stage2"])
    assert old.max_force_rise >= 1e6 and old.monitor == "loss"
    assert _stage_config(2, RECIPES["old_r12"]["stage2"]).max_force_rise == StageConfig(stage=2).max_force_rise


def test_the_accuracy_benchmark_times_a_command_in_cpu_and_wall_seconds(tmp_path: Path) -> None:
    """`timed` gives a command's exit code, its CPU seconds (children included) and its wall
    seconds: a child that spins ~0.3 s and then sleeps 0.4 s shows both, and they differ."""
    import bench_accuracy

    child = "\n".join(
        [
            "import time",
            "t = time.process_time()",
            "while time.process_time() - t < 0.3: pass",
            "time.sleep(0.4)",
            "raise SystemExit(3)",
        ]
    )
    code, cpu, wall = bench_accuracy.timed([sys.executable, "-c", child], tmp_path / "child.log")
    assert code == 3
    assert 0.3 <= cpu < wall
    assert wall >= 0.7
    assert bench_accuracy.sh([sys.executable, "-c", "pass"], tmp_path / "pass.log")[0] == 0


@pytest.mark.parametrize("name", sorted(RECIPES))
def test_recipes_before_the_41st_round_keep_plain_adam(name: str) -> None:
    """Stage 1's Adam took Nesterov momentum in the forty-first round; the recipes named before
    it ran plain Adam and must still say so (a copied stage 1 follows its source)."""
    flags = RECIPES[name]["stage1"]
    if name in FOLLOW_DEFAULTS or RECIPES[name].get("stage1_from"):
        return
    expected = "nesterov" if recipe_round(name) >= 41 and "plain" not in flags else "plain"
    assert _stage_config(1, flags).adam_momentum == expected


#: the highest round number among the recipes named s<round>_...
NEWEST = max(int(m.group(1)) for m in map(re.compile(r"s(\d+)_").match, RECIPES) if m)


@pytest.mark.parametrize("name", sorted(n for n in RECIPES if n.startswith(f"s{NEWEST}_")))
def test_the_newest_rounds_recipes_pin_no_earlier_defaults(name: str) -> None:
    """A new round's recipes change today's defaults by their own flags only (the forty-eighth
    round's recipe first came out with plain Adam and stage 2's old length, when each pinned
    default had its own list of rounds that follow it and the new prefix was missing from two)."""
    stage1, stage2 = RECIPES[name]["stage1"], RECIPES[name]["stage2"] or []
    assert stage1[-2:] != MOMENTUM_BEFORE and stage1[:2] != BETA2_BEFORE, stage1
    assert stage2[:4] != STAGE2_LENGTH_BEFORE and stage2[:2] != BETA2_BEFORE, stage2


def test_each_changed_default_is_pinned_on_the_recipes_named_before_its_round() -> None:
    """The one table of changed defaults: a recipe of round 18 gets all three earlier values, of
    round 36 only plain Adam, of a round not yet run none; "old"-style names all three; a copied
    stage 1 follows its source, and a recipe without stage 2 gets no stage-2 flags."""
    recipe = {"stage1": ["--seed", "1"], "stage2": ["--lr", "0.01"]}
    assert [c.since for c in CHANGED_DEFAULTS] == sorted(c.since for c in CHANGED_DEFAULTS)
    pinned = _pin_earlier_defaults("s18_x", recipe)
    assert pinned["stage1"] == BETA2_BEFORE + ["--seed", "1"] + MOMENTUM_BEFORE
    assert pinned["stage2"] == STAGE2_LENGTH_BEFORE + BETA2_BEFORE + ["--lr", "0.01"]
    assert _pin_earlier_defaults("baseline", recipe) == pinned
    round_36 = {"stage1": ["--seed", "1"] + MOMENTUM_BEFORE, "stage2": ["--lr", "0.01"]}
    assert _pin_earlier_defaults("s36_x", recipe) == round_36
    assert _pin_earlier_defaults("s99_x", recipe) == recipe
    assert _pin_earlier_defaults(FOLLOW_DEFAULTS[0], recipe) == recipe
    copied = _pin_earlier_defaults("s30_x", {"stage1": [], "stage1_from": "new", "stage2": None})
    assert copied == {"stage1": [], "stage1_from": "new", "stage2": None}
    assert recipe == {"stage1": ["--seed", "1"], "stage2": ["--lr", "0.01"]}  # not modified in place


def test_the_early_stop_replay_counts_epochs_far_outside_the_force_bound_as_today() -> None:
    """`replay_early_stop.replay` drives the real EarlyStop: a stage whose validation energy keeps
    improving while its force leaves the bound runs on under the rule before the forty-fifth
    round (every new best RMSE is progress), stops ``patience`` epochs after its force passed
    five times the bound (25 %) under today's, and ``patience`` epochs after the last keepable
    one under the stricter alternatives; all keep the same epoch, the last within the bound."""
    from replay_early_stop import replay

    start = {"valid_rmse_f": 0.030, "monitored": 0.045}

    def epoch(n: int, force: float, energy: float) -> dict[str, float | None]:
        return {
            "epoch": n,
            "valid_rmse_f": force,
            "valid_rmse_e": energy,
            "valid_rmse_v": None,
            "monitored": force + energy,
        }

    # epochs 1-3 improve inside the bound (0.0315); from epoch 4 the force rises past it while
    # the energy sets a new best every epoch
    history = [epoch(n, 0.0300 - 0.0002 * n, 0.0100 - 0.0005 * n) for n in (1, 2, 3)]
    history += [epoch(n, 0.0300 + 0.001 * n, 0.0085 - 0.0001 * n) for n in range(4, 40)]

    def rule(name: str, epochs: list[dict[str, float | None]]) -> dict[str, int]:
        return replay(epochs, start, patience=5, tolerance=0.05, rule=name, far=0.25)

    assert rule("every_epoch", history) == {"stop": 39, "kept": 3}
    assert rule("keepable_only", history) == rule("after_first_keep", history) == {"stop": 8, "kept": 3}
    # the force passes 25 % above the start's (0.0375) at epoch 8: bad from there
    assert rule("today", history) == rule("far_outside", history) == {"stop": 12, "kept": 3}
    assert replay(history, start, patience=5, tolerance=0.05, rule="far_outside", far=0.45) == {"stop": 18, "kept": 3}
    # today's wider bound is tied to the stage's: a stage without one (max_force_rise 1e9) runs on
    assert replay(history, start, patience=5, tolerance=1e9, rule="today") == {"stop": 39, "kept": 3}

    # the demo's stage 2 (forty-fourth round): two epochs improve inside the bound, then the force
    # sits 10 % above the start's for seven epochs while the energy improves, then comes back
    # below the start's; the rules that count those seven as progress go on to keep epoch 13, the
    # other two stop at epoch 7 with epoch 2
    inside = [epoch(n, 0.0299 - 0.0001 * n, 0.0095 - 0.0001 * n) for n in (1, 2)]
    away = [epoch(n, 0.0330, 0.0090 - 0.0001 * n) for n in range(3, 10)]
    back = inside + away + [epoch(n, 0.0290 - 0.0001 * n, 0.0080) for n in range(10, 14)]
    assert rule("today", back) == rule("every_epoch", back) == rule("far_outside", back) == {"stop": 13, "kept": 13}
    assert rule("keepable_only", back) == rule("after_first_keep", back) == {"stop": 7, "kept": 2}
    # leaving the bound at once, before any epoch was kept: only keepable_only stops
    assert rule("after_first_keep", away) == {"stop": 9, "kept": 0}
    assert rule("keepable_only", away) == {"stop": 7, "kept": 0}


def test_the_monitor_replay_weighs_each_rmse_by_the_starting_models() -> None:
    """`replay_monitors`: ``relative`` sums each validation RMSE over the starting model's (virial
    weighted 0.1, an absent label adds nothing), ``fitness`` is the stage's own; replayed through
    the real EarlyStop, an energy 37.5 % lower for a force 4 % higher is kept by ``relative`` and
    ``energy`` but not by ``fitness`` (in eV units the force rise outweighs the energy gain), and an
    epoch outside the force bound is never kept by any of them."""
    from replay_monitors import MONITORS, remonitored

    start = {"valid_rmse_e": 0.004, "valid_rmse_f": 0.050, "valid_rmse_v": None, "fitness": 0.054}
    row = {"epoch": 1, "valid_rmse_e": 0.0025, "valid_rmse_f": 0.052, "valid_rmse_v": None, "fitness": 0.0545}
    assert MONITORS["relative"](row, start) == pytest.approx(0.0025 / 0.004 + 0.052 / 0.050, rel=1e-15)
    assert MONITORS["relative"](start, start) == 2.0
    with_virial = {**row, "valid_rmse_v": 0.03}
    assert MONITORS["relative"](with_virial, {**start, "valid_rmse_v": 0.01}) == pytest.approx(0.625 + 1.04 + 0.3)
    assert MONITORS["relative_equal"](with_virial, {**start, "valid_rmse_v": 0.01}) == pytest.approx(0.625 + 1.04 + 3)

    from replay_early_stop import replay

    far = {"epoch": 2, "valid_rmse_e": 0.001, "valid_rmse_f": 0.060, "valid_rmse_v": None, "fitness": 0.061}
    history = [row, far]
    kept = {m: replay(*remonitored(history, start, m), 5, 0.05, "today")["kept"] for m in MONITORS}
    assert kept == {"fitness": 0, "relative": 1, "relative_equal": 1, "energy": 1}
