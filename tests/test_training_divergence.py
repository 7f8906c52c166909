"""Divergence and stalled-training warnings (issue 8, item 9): the rules on synthetic loss
histories, and a real run with a far too large learning rate."""

from __future__ import annotations

import json
import math

import pytest

from nepcore.cli import main as cli_main
from nepcore.training.divergence import (
    EXPLODING_FACTOR,
    FROZEN_EPOCHS,
    NOT_LEARNING_EPOCHS,
    non_finite_message,
    training_warnings,
)


def history(losses, forces=None, virials=None, lr=1e-2) -> list[dict[str, float]]:
    """Epoch dicts as a stage records them (RMSEs in eV/Å and eV/atom)."""
    n = len(losses)
    forces = forces if forces is not None else [0.5 * 0.9**k for k in range(n)]
    virials = virials if virials is not None else [0.1 * 0.9**k for k in range(n)]
    return [{"epoch": k + 1, "train_loss": losses[k], "train_rmse_f": forces[k], "train_rmse_v": virials[k], "lr": lr}
            for k in range(n)]  # fmt: skip


def test_healthy_runs_give_no_warning() -> None:
    decaying = [1.0 * 0.8**k for k in range(60)]
    assert training_warnings(history(decaying)) == []
    # slow late convergence (a stage-2 start): the force RMSE still moves by 1e-4 relative per epoch
    slow = [0.05 * (1 - 1e-4) ** k for k in range(60)]
    forces = [0.03 * (1 - 1e-4) ** k for k in range(60)]
    assert training_warnings(history(slow, forces=forces), fresh_start=False) == []
    # noisy but improving, with a bump well below the exploding factor
    noisy = [1.0, 0.6, 0.9, 0.5, 0.7, 0.4, 3.0, 0.35, 0.3, 0.32, 0.28, 0.25]
    assert training_warnings(history(noisy)) == []


def test_frozen_force_error_is_saturation() -> None:
    """The lr-10 signature: the force RMSE stays put (float32 summation noise only) while the
    loss still moves through the energy term."""
    losses = [2.7e3, 5.0, 1.9, 1.91, 2.58, 1.26, 1.80, 1.90, 1.18]
    forces = [
        51.9,
        1.1189,
        0.8471,
        0.8471000001,
        0.8470999999,
        0.8471,
        0.8471000002,
        0.8471,
        0.8471,
    ]
    found = training_warnings(history(losses, forces=forces, lr=10.0))
    assert len(found) == 1
    assert found[0].startswith(f"the training force RMSE has stayed at 847.1 meV/Å for {FROZEN_EPOCHS} epochs (3-7)")
    assert "saturated" in found[0] and "learning rate 10" in found[0]
    # reported once, at the epoch where it first held: the same list for every longer history
    assert training_warnings(history(losses + [1.1] * 5, forces=forces + [0.8471] * 5, lr=10.0)) == found
    assert training_warnings(history(losses[:6], forces=forces[:6], lr=10.0)) == []


def test_frozen_virial_when_there_are_no_forces() -> None:
    n = 8
    found = training_warnings(
        history(
            [1.0 - 0.01 * k for k in range(n)],
            forces=[0.0] * n,
            virials=[0.2] + [0.1234] * (n - 1),
        )
    )
    assert len(found) == 1 and found[0].startswith("the training virial RMSE has stayed at 123.4 meV/atom")


def test_exploding_loss() -> None:
    losses = [1.0, 0.5, 0.2, 0.2 * EXPLODING_FACTOR * 1.5, 0.1]
    found = training_warnings(history(losses))
    assert found == [
        (
            f"the training loss exploded from 0.2 (epoch 3) to {0.2 * EXPLODING_FACTOR * 1.5:.4g} "
            "(epoch 4); the learning rate 0.01 is likely too large (retrain with a smaller --lr or --clip)"
        )
    ]


def test_not_learning_only_from_a_fresh_start() -> None:
    flat = [1.0, 0.98, 0.97, 0.99, 0.96, 0.97, 0.95, 0.96, 0.95, 0.94, 0.94]
    found = training_warnings(history(flat))
    assert len(found) == 1 and found[0].startswith(f"after {NOT_LEARNING_EPOCHS} epochs the training loss is still")
    assert training_warnings(history(flat), fresh_start=False) == []  # fine-tuning may start near the minimum
    assert training_warnings(history(flat[: NOT_LEARNING_EPOCHS - 1])) == []


def test_non_finite_loss_message_names_the_epoch_and_the_cure() -> None:
    message = non_finite_message(math.nan, 4, 1, 10.0, history([3.0, 2.0, 1.5]))
    assert message == (
        "the loss became nan in epoch 4 of stage 1: training diverged; the last finite training loss "
        "was 1.5 in epoch 3; try a smaller --lr (now 10) or a smaller --clip; the outputs keep the "
        "last saved epoch"
    )


@pytest.mark.slow
def test_a_far_too_large_learning_rate_is_reported(tmp_path, capsys, caplog) -> None:
    """lr 10 saturates the networks: before, the run ended with exit 0 and no word; now it still
    ends (a warning, not an error) but the log and status.json say what happened."""
    xyz, h5, qs = tmp_path / "d.xyz", tmp_path / "s.h5", tmp_path / "q.json"
    assert cli_main(["demo-data", "-o", str(xyz), "--n-frames", "30", "--seed", "0"]) == 0
    assert cli_main(["convert", str(xyz), "-o", str(h5), "--no-progress"]) == 0
    assert (
        cli_main(
            [
                "qscaler",
                str(h5),
                "-o",
                str(qs),
                "--type",
                "Cu",
                "Pd",
                "Ni",
                "--cutoff",
                "4",
                "3",
                "--n-max",
                "4",
                "4",
                "--basis-size",
                "4",
                "4",
                "--l-max",
                "4",
                "--neuron",
                "8",
            ]
        )
        == 0
    )
    capsys.readouterr()
    out = tmp_path / "st"
    code = cli_main(
        [
            "train",
            "--stage",
            "1",
            "--data",
            str(h5),
            "--qscaler",
            str(qs),
            "--out-dir",
            str(out),
            "--epochs",
            "14",
            "--lr",
            "10",
            "--no-progress",
        ]
    )
    assert code == 0
    status = json.loads((out / "status.json").read_text())
    saturated = [w for w in status["warnings"] if "saturated" in w]
    assert len(saturated) == 1 and "learning rate 10" in saturated[0]
    assert f"warning: {saturated[0]}" in caplog.messages  # the log says it too
