"""The recipes of ``bench_accuracy.py``: flags of ``nepcore train`` (and ``nepcore qscaler``)
added to the current defaults, one entry per recipe, named after the round of issue 10 that ran it.

docs/recipe_measurements.md quotes each recipe by these names; a recipe keeps its meaning when a
default changes because it spells out what it depended on (``OLD``, ``S1``, ``R2``), and because
every default changed since a recipe's round is pinned back on it (``CHANGED_DEFAULTS``, below).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

#: The defaults before issue 10 (stage 1 force-focused, stage 2 energy-focused, plateau x0.5
#: after 3 epochs, early stop after 10), written out so the baseline does not move.
OLD_STAGE = (
    "--batch-size 32 --schedule plateau --lr-decay 0.5 --lr-patience 3 --lr-min 1e-5 --clip 10 "
    "--loss-form mse --ema 0 --warmup-steps 0 --monitor loss --compile off --lr-c-factor 1 --optimizer adam "
    "--init-bias-std 0.1"
).split()
#: Stage 2 as it was until the ninth round (Adam at 0.001 with the weight average, 100 epochs),
#: for the recipes named after earlier rounds.
ADAM_STAGE2 = ["--optimizer", "adam", "--epochs", "100"]
#: The old settings' stage 2 kept its best epoch by the validation loss alone: no bound on how
#: far its validation forces may rise (``max_force_rise``, a default since the twelfth round,
#: which "old" did not pin until the thirtieth; "old_r12" is the old recipe as run in rounds
#: 12-29, its stage 2 bounded by today's 5 %).
UNBOUNDED = ["--max-force-rise", "1e9"]
OLD_R12 = {
    "stage1": OLD_STAGE + "--epochs 100 --patience 10 --lr 0.01 --lambda-e 0.01 --lambda-f 1 --lambda-v 0.01".split(),
    "stage2": OLD_STAGE + "--epochs 50 --patience 10 --lr 0.001 --lambda-e 1 --lambda-f 0.05 --lambda-v 0.1".split(),
}
OLD = {"stage1": OLD_R12["stage1"], "stage2": OLD_R12["stage2"] + UNBOUNDED}
#: Stage-1 variants explored for issue 10 (flags on top of the current defaults).
VARIANT_A = "--epochs 2000 --patience 60 --lr-decay 0.7 --lr-patience 15 --ema 0.99 --monitor fitness".split()
#: The issue's reference trainer's schedule in one 600-epoch stage, on the old stage-1 settings.
REFERENCE_SCHEDULE = OLD["stage1"] + "--lr-decay 0.7 --lr-patience 15 --epochs 600 --patience 60".split()
#: Stage-1 screening runs: compiled steps off, so a cold compilation does not blur the curves,
#: and the energy weight of rounds 2-4 (`lambda_e 1`; 0.1 since round 5), so their recipes keep
#: their meaning.
S1 = ["--compile", "off", "--lambda-e", "1"]
#: ... and the second round's single learning rate (before lr_c_factor), so its recipes keep their meaning.
R2 = S1 + ["--lr-c-factor", "1"]
#: Recipes: stage-1 and stage-2 flags (None: no stage 2) added to the current defaults, and
#: optionally "qscaler": flags of ``nepcore qscaler``, and "stage1_from": the recipe whose
#: finished stage 1 (same data, same work folder, the same stage-1 flags) is copied, not rerun.
RECIPES: dict[str, dict[str, list[str] | str | None]] = {
    "old": OLD,
    "old_seed1": {stage: flags + ["--seed", "1"] for stage, flags in OLD.items()},
    "old_seed2": {stage: flags + ["--seed", "2"] for stage, flags in OLD.items()},
    "old_r12": OLD_R12,
    "old_r12_seed1": {stage: flags + ["--seed", "1"] for stage, flags in OLD_R12.items()},
    "new": {"stage1": [], "stage2": []},
    "new_stage1_only": {"stage1": [], "stage2": None},
    "new_seed1": {"stage1": ["--seed", "1"], "stage2": ["--seed", "1"]},
    "new_seed2": {"stage1": ["--seed", "2"], "stage2": ["--seed", "2"]},
    "new_stage1_only_seed1": {"stage1": ["--seed", "1"], "stage2": None},
    # the thirteenth round's defaults: hidden biases drawn with spread 0.1 (fourteenth round: 1)
    "r13": {"stage1": ["--init-bias-std", "0.1"], "stage2": []},
    "r13_seed1": {"stage1": ["--init-bias-std", "0.1", "--seed", "1"], "stage2": ["--seed", "1"]},
    # the eighth round's defaults (stage 2 with Adam; the ninth round's stage 2 runs L-BFGS)
    "r8": {"stage1": [], "stage2": ADAM_STAGE2},
    "r8_seed1": {"stage1": ["--seed", "1"], "stage2": ADAM_STAGE2 + ["--seed", "1"]},
    # the fourth round's defaults (stage 1 weighted energies 1, as stage 2 does)
    "r4": {"stage1": ["--lambda-e", "1"], "stage2": ADAM_STAGE2},
    # tenth round: stage 2 with each optimiser forced, to pin optimizer auto's limit
    "s10_adam": {"stage1": [], "stage2": ["--optimizer", "adam"]},
    "s10_lbfgs": {"stage1": [], "stage2": ["--optimizer", "lbfgs"]},
    # the reference trainer's schedule in one stage (issue 10: 39 meV/Å on the user's alloy)
    "reference_schedule": {"stage1": REFERENCE_SCHEDULE, "stage2": None},
    "reference_schedule_seed1": {"stage1": REFERENCE_SCHEDULE + ["--seed", "1"], "stage2": None},
    "A_b32": {"stage1": VARIANT_A + ["--batch-size", "32"], "stage2": None},
    "A_b8": {"stage1": VARIANT_A + ["--batch-size", "8"], "stage2": None},
    # the new defaults with GPUMD's loss form (sums of RMSEs: energies weigh more once forces are small)
    "new_rmse": {"stage1": ["--loss-form", "rmse"], "stage2": ["--loss-form", "rmse", "--optimizer", "adam"]},
    "smoke": {"stage1": ["--epochs", "4"], "stage2": ["--epochs", "2"]},  # a quick check of the pipeline
    # issue 10, second round: stage 1 alone, compile off so that only the recipe differs; the
    # batch is spelled out (s1_base: the previous default of 8 frames)
    "s1_base": {"stage1": R2 + ["--batch-size", "8"], "stage2": None},
    "s1_rmse": {"stage1": R2 + "--batch-size 8 --loss-form rmse".split(), "stage2": None},
    "s1_rmse_v": {"stage1": R2 + "--batch-size 8 --loss-form rmse --lambda-v 0.1".split(), "stage2": None},
    "s1_b4": {"stage1": R2 + ["--batch-size", "4"], "stage2": None},
    "s1_b2": {"stage1": R2 + ["--batch-size", "2"], "stage2": None},
    "s1_b4_lr5e-3": {"stage1": R2 + "--batch-size 4 --lr 5e-3".split(), "stage2": None},
    "s1_b4_lr2e-2": {"stage1": R2 + "--batch-size 4 --lr 2e-2".split(), "stage2": None},
    "s1_b4_lr4e-2": {"stage1": R2 + "--batch-size 4 --lr 4e-2".split(), "stage2": None},
    "s1_b2_lr2e-2": {"stage1": R2 + "--batch-size 2 --lr 2e-2".split(), "stage2": None},
    "s1_b4_le10": {"stage1": R2 + "--batch-size 4 --lambda-e 10".split(), "stage2": None},
    # third round: the descriptor coefficients' rate over the networks' (batch auto)
    **{f"s1_c{c}": {"stage1": S1 + ["--lr-c-factor", c], "stage2": None} for c in ("0.5", "1", "2", "4", "8")},
    **{f"s1_c{c}_seed1": {"stage1": S1 + ["--lr-c-factor", c, "--seed", "1"], "stage2": None} for c in ("1", "2", "4")},
    # fourth round: the q-scaler of the initial coefficients, batch size on the largest set,
    # a faster network rate with the coefficients' rate kept, L2 regularisation
    "s1_qsc": {"stage1": S1, "stage2": None, "qscaler": ["--mode", "self-consistent"]},
    "s1_b16": {"stage1": S1 + ["--batch-size", "16"], "stage2": None},
    "s1_b32": {"stage1": S1 + ["--batch-size", "32"], "stage2": None},
    "s1_b32_seed1": {"stage1": S1 + ["--batch-size", "32", "--seed", "1"], "stage2": None},
    # fifth round: the stage-1 energy weight (later flags win: S1's `--lambda-e 1` is replaced)
    **{f"s1_le{v}": {"stage1": S1 + ["--lambda-e", v], "stage2": None} for v in ("0.01", "0.03", "0.1")},
    **{f"s1_le{v}_seed1": {"stage1": S1 + ["--lambda-e", v, "--seed", "1"], "stage2": None} for v in ("0.01", "0.1")},
    "s1_lr2e-2_c1": {"stage1": S1 + ["--lr", "0.02", "--lr-c-factor", "1"], "stage2": None},
    # sixth round: smaller batches on the current defaults (PdCuNi_medium is epoch-limited)
    **{f"s1_b{b}_le0.1": {"stage1": S1 + ["--lambda-e", "0.1", "--batch-size", b], "stage2": None} for b in ("1", "2")},
    # ... and a longer weight average (still capped at about two epochs)
    "s1_ema0.999_le0.1": {"stage1": S1 + ["--lambda-e", "0.1", "--ema", "0.999"], "stage2": None},
    **{f"s1_l2_{v}": {"stage1": S1 + ["--lambda-2", v], "stage2": None} for v in ("0.01", "0.05")},
    # eighth round, on the current defaults: 16-frame batches with a larger rate, longer averages
    "s8_b16_lr2": {"stage1": ["--batch-size", "16", "--lr", "0.02"], "stage2": None},
    "s8_b16_lr2_c1": {"stage1": ["--batch-size", "16", "--lr", "0.02", "--lr-c-factor", "1"], "stage2": None},
    **{f"s8_ema{v}": {"stage1": ["--ema", v], "stage2": None} for v in ("0.999", "0.9975")},
    # the eighteenth round's defaults (Adam's beta2 0.999, pinned by the loop below)
    "r18": {"stage1": [], "stage2": []},
    "r18_stage1_only": {"stage1": [], "stage2": None},
    # nineteenth round: Adam's second-moment decay, stage 1 alone (0.95 became the default)
    **{f"s19_beta2_{v}": {"stage1": ["--adam-beta2", v], "stage2": None} for v in ("0.9", "0.99")},
    "s19_seed1": {"stage1": ["--seed", "1"], "stage2": None},
    # twentieth round: the rate, the coefficients' factor and the batch re-checked at beta2 0.95, stage 1 alone
    **{f"s20_c{v}": {"stage1": ["--lr-c-factor", v], "stage2": None} for v in ("1", "4")},
    **{f"s20_lr{v}": {"stage1": ["--lr", v], "stage2": None} for v in ("0.007", "0.02")},
    **{f"s20_b{v}": {"stage1": ["--batch-size", v], "stage2": None} for v in ("3", "8")},
    # twenty-first round: larger batches on the large sets (PdCuNi_medium, sweep_mix), stage 1 alone
    **{f"s21_b{v}": {"stage1": ["--batch-size", v], "stage2": None} for v in ("5", "10", "16", "32")},
    # twenty-fifth round: stage 1's rate along a cosine over its epochs instead of the plateau
    "s25_cos": {"stage1": ["--schedule", "cosine"], "stage2": []},
    "s25_cos_stage1_only": {"stage1": ["--schedule", "cosine"], "stage2": None},
    # the workflow demo's 90 + 40 epochs (config/config.yaml), plateau and cosine
    "s25_demo90": {"stage1": "--epochs 90 --patience 30".split(), "stage2": "--epochs 40 --patience 20".split()},
    "s25_demo90_cos": {
        "stage1": "--epochs 90 --patience 30 --schedule cosine".split(),
        "stage2": "--epochs 40 --patience 20".split(),
    },
    # twenty-sixth round: the plateau rule also decays when no watched metric gained G over 25 epochs
    **{
        f"s26_w25g{g}{suffix}": {"stage1": ["--lr-window", "25", "--lr-min-gain", f"0.0{g}", *s1], "stage2": s2}
        for g in ("2", "4")
        for suffix, s1, s2 in (
            ("", [], []),
            ("_stage1_only", [], None),
            ("_demo90", "--epochs 90 --patience 30".split(), "--epochs 40 --patience 20".split()),
        )
    },
    # twenty-seventh round: the twenty-sixth's gain-2 % window on a second training seed
    "s27_w25g2_stage1_only_seed1": {
        "stage1": ["--lr-window", "25", "--lr-min-gain", "0.02", "--seed", "1"],
        "stage2": None,
    },
    # thirtieth round: smaller batches early (the first minutes are limited by how far the
    # parameters move, i.e. by optimiser steps per CPU second)
    **{f"s30_b{b}_stage1_only": {"stage1": ["--batch-size", b], "stage2": None} for b in ("2", "3")},
    # ... and stage 1's energy weight, for the energies a user holds at 300 s
    "s30_le0.3_stage1_only": {"stage1": ["--lambda-e", "0.3"], "stage2": None},
    # thirty-first round: more stage-1 epochs where an epoch is few steps (PbTe: 9 steps an
    # epoch, so 600 epochs are 5,400 steps against the sweep sets' ~38,000)
    "s31_e900": {"stage1": ["--epochs", "900"], "stage2": []},
    # thirty-second round: stage 2 weights energies 4 (the defaults' stage 1; max_force_rise
    # still bounds the kept model's validation force)
    "s32_s2_le4": {"stage1": [], "stage2": ["--lambda-e", "4"]},
    "s32_s2_le4_seed1": {"stage1": ["--seed", "1"], "stage2": ["--seed", "1", "--lambda-e", "4"]},
    # thirty-third round: the middle of that trade
    "s33_s2_le2": {"stage1": [], "stage2": ["--lambda-e", "2"]},
    # thirty-fourth round: the coefficients at four times the networks' rate on the sets of one
    # element (silicon's stage 1 gained a fifth at beta2 0.999, sixteenth round), both stages
    "s34_c4": {"stage1": ["--lr-c-factor", "4"], "stage2": ["--lr-c-factor", "4"]},
    "s34_c4_seed1": {"stage1": ["--lr-c-factor", "4", "--seed", "1"], "stage2": ["--lr-c-factor", "4", "--seed", "1"]},
    # ... and stage 1 eager where compile auto compiles it on the CPU (PdCuNi_medium's 2,142-atom
    # batches): what the cold compilation costs the first minutes
    "s34_eager_stage1_only": {"stage1": ["--compile", "off"], "stage2": None},
    # thirty-fifth round: full-batch L-BFGS from the start on the small sets (stage 2 runs it there
    # since the ninth round; stage 1 never did): one deterministic loss per epoch instead of ~10
    # noisy Adam steps where an epoch is that short
    "s35_lbfgs_stage1_only": {"stage1": ["--optimizer", "lbfgs"], "stage2": None},
    "s35_lbfgs": {"stage1": ["--optimizer", "lbfgs"], "stage2": []},
    # ... and with twice the epochs (its stage 1 was still improving at 600, an L-BFGS epoch being
    # cheaper than an Adam epoch)
    "s35_lbfgs_e1200": {"stage1": ["--optimizer", "lbfgs", "--epochs", "1200"], "stage2": []},
    # thirty-sixth round: a longer stage 2 (the thirty-fifth round's lead), which of its two limits
    # is the lever: the 300-epoch cap alone, a patience of 100 and of 200 with room for 1,500 epochs.
    # Stage 1 is the defaults', copied from the run of "new" in the same work folder.
    "s36_s2_e1500": {"stage1": [], "stage1_from": "new", "stage2": ["--epochs", "1500"]},
    "s36_s2_p100": {"stage1": [], "stage1_from": "new", "stage2": ["--patience", "100", "--epochs", "1500"]},
    "s36_s2_p150": {"stage1": [], "stage1_from": "new", "stage2": ["--patience", "150", "--epochs", "1500"]},
    "s36_s2_p200": {"stage1": [], "stage1_from": "new", "stage2": ["--patience", "200", "--epochs", "1500"]},
    # ... and patience 200 with 1,200 epochs: PbTe fold 1's best-so-far model reaches a training force
    # of 33.9 by epoch 1,200 (35.2 at 1,000), and 1,500 epochs took its fit to ~330 CPU s
    "s36_s2_p200_e1200": {"stage1": [], "stage1_from": "new", "stage2": ["--patience", "200", "--epochs", "1200"]},
    # forty-first round: the defaults before stage 1's Adam took Nesterov momentum (NAdam)
    "s41_plain": {"stage1": ["--adam-momentum", "plain"], "stage2": []},
    "s41_plain_stage1_only": {"stage1": ["--adam-momentum", "plain"], "stage2": None},
    # forty-second round: the plain-Adam stage 1 on a second seed (against new_stage1_only_seed1),
    # and stage 2's Adam (training splits over 12,000 atoms) with Nesterov momentum too,
    # continuing the default stage 1
    "s42_plain_stage1_only_seed1": {"stage1": ["--adam-momentum", "plain", "--seed", "1"], "stage2": None},
    "s42_s2_nesterov": {"stage1": [], "stage1_from": "new", "stage2": ["--adam-momentum", "nesterov"]},
    # forty-eighth round: stage 1 hands over to stage 2 after 300 epochs instead of 600 (on the
    # small sets stage 2 is full-batch L-BFGS, whose epoch costs less than an Adam epoch there)
    "s48_s1e300": {"stage1": ["--epochs", "300"], "stage2": []},
    "s48_s1e300_seed1": {"stage1": ["--epochs", "300", "--seed", "1"], "stage2": ["--seed", "1"]},
    # forty-ninth round: stage 1 also ends once its best model's validation fitness gained no more
    # than 1 % over the last 100 epochs (stage 2 starts from that model either way)
    # (from the fiftieth round the rule also waits for the best validation force RMSE, so this
    # recipe runs the fiftieth round's rule; the forty-ninth round's numbers are 01df289's)
    "s49_w100g1": {"stage1": ["--stop-window", "100", "--stop-min-gain", "0.01"], "stage2": []},
    # fiftieth round: the same window, now also waiting for the best validation force RMSE to
    # stall, on two training seeds
    "s50_w100g1f": {"stage1": ["--stop-window", "100", "--stop-min-gain", "0.01"], "stage2": []},
    "s50_w100g1f_seed1": {
        "stage1": ["--stop-window", "100", "--stop-min-gain", "0.01", "--seed", "1"],
        "stage2": ["--seed", "1"],
    },
}
#: The recipes that follow the current defaults, whatever they are.
FOLLOW_DEFAULTS = ("new", "new_stage1_only", "new_seed1", "new_seed2", "new_stage1_only_seed1", "smoke")
#: Adam's beta2 before the nineteenth round made it 0.95 (torch's default, 0.999, before).
BETA2_BEFORE = ["--adam-beta2", "0.999"]
#: Stage 2's length before the thirty-sixth round made it follow the optimiser (``epochs`` and
#: ``patience`` auto: 1,200 and 200 with L-BFGS).
STAGE2_LENGTH_BEFORE = ["--epochs", "300", "--patience", "30"]
#: Adam's momentum in stage 1 before the forty-first round made it Nesterov's (NAdam; stage 2's
#: default is still plain).
MOMENTUM_BEFORE = ["--adam-momentum", "plain"]


@dataclass(frozen=True)
class ChangedDefault:
    """A default that a round of issue 10 changed, and the flags that keep the earlier value.

    Every recipe named before ``since`` (see :func:`recipe_round`) gets ``flags`` on ``stages``,
    so that it keeps its meaning: prepended (a recipe's own flags come later and win), or appended
    where no recipe of those rounds sets the flag itself.
    """

    since: int
    stages: tuple[str, ...]
    flags: list[str]
    append: bool = False
    #: a recipe that copies another's stage 1 (``stage1_from``) follows its source instead
    skip_copied_stage1: bool = False


#: The defaults changed since the recipes were first named, in the order their pins are applied.
#: A new round that changes a default adds one row here; a new round's recipes (named
#: ``s<round>_``) follow every current default without being listed anywhere.
CHANGED_DEFAULTS = (
    ChangedDefault(19, ("stage1", "stage2"), BETA2_BEFORE),
    ChangedDefault(36, ("stage2",), STAGE2_LENGTH_BEFORE),
    ChangedDefault(41, ("stage1",), MOMENTUM_BEFORE, append=True, skip_copied_stage1=True),
)


def recipe_round(name: str) -> float:
    """The round of issue 10 whose defaults a recipe runs on top of.

    Args:
        name: a key of :data:`RECIPES`.
    Returns:
        N for a recipe named ``s<N>_...`` (the early rounds' ``s1_`` stage-1 screens give 1,
        before every change listed); infinity for :data:`FOLLOW_DEFAULTS` (today's defaults,
        whatever they are); 0 for every other name ("old", "r13", "A": none of them was named
        after the eighteenth round).
    """
    if name in FOLLOW_DEFAULTS:
        return math.inf
    match = re.match(r"s(\d+)_", name)
    return int(match.group(1)) if match else 0


def _pin_earlier_defaults(name: str, recipe: dict) -> dict:
    """The recipe with the earlier value of every default changed after its round."""
    recipe = dict(recipe)
    for change in CHANGED_DEFAULTS:
        if recipe_round(name) >= change.since:
            continue
        for stage in change.stages:
            flags = recipe[stage]
            if flags is None or (stage == "stage1" and change.skip_copied_stage1 and recipe.get("stage1_from")):
                continue
            recipe[stage] = flags + change.flags if change.append else change.flags + flags
    return recipe


RECIPES = {name: _pin_earlier_defaults(name, recipe) for name, recipe in RECIPES.items()}
