"""``epochs: auto`` and ``patience: auto`` (stage 2's defaults): the stage's length follows the
optimiser it runs (an L-BFGS epoch is one step, an Adam epoch many), said in the log, recorded
in status.json and the checkpoint, and a stage resumed with them is bit-identical."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from helpers.tiny_training import tiny_splits

from nepcore.training.checkpoint import load_checkpoint
from nepcore.training.config import AUTO_EPOCHS, AUTO_PATIENCE, StageConfig, StageConfigError, stage_defaults
from nepcore.training.data import resolve_auto
from nepcore.training.stage import train_stage


class _Split:
    """What resolve_auto reads of a training split: its frame count and atoms."""

    def __init__(self, frames: int, n_atoms: int) -> None:
        self.frames, self.n_atoms = frames, n_atoms

    def __len__(self) -> int:
        return self.frames


def test_the_numbers_auto_stands_for() -> None:
    """Adam's are stage 2's numbers of before (the large sets' stage 2 is unchanged); L-BFGS's
    are the thirty-sixth round's (docs/recipe_measurements.md)."""
    assert AUTO_EPOCHS == {"adam": 300, "lbfgs": 1200}
    assert AUTO_PATIENCE == {"adam": 30, "lbfgs": 200}
    one, two = stage_defaults(1), stage_defaults(2)
    assert (one["epochs"], one["patience"]) == (600, 60)  # stage 1 keeps its numbers
    assert (two["epochs"], two["patience"]) == ("auto", "auto")


@pytest.mark.parametrize("train_atoms, optimizer", [(4_000, "lbfgs"), (200_000, "adam")])
def test_stage_2_length_follows_the_optimizer_auto_chose(train_atoms: int, optimizer: str, caplog) -> None:
    data = SimpleNamespace(train=_Split(100, train_atoms))
    with caplog.at_level("INFO"):
        cfg = resolve_auto(StageConfig(stage=2), data, say=True)
    assert (cfg.optimizer, cfg.epochs, cfg.patience) == (optimizer, AUTO_EPOCHS[optimizer], AUTO_PATIENCE[optimizer])
    name = "L-BFGS" if optimizer == "lbfgs" else "Adam"
    shown = f"epochs auto: {AUTO_EPOCHS[optimizer]}, patience auto: {AUTO_PATIENCE[optimizer]} (the numbers for {name})"
    assert shown in caplog.text


def test_numbers_are_kept_and_auto_works_in_stage_1_too() -> None:
    data = SimpleNamespace(train=_Split(100, 4_000))  # small: stage 2's optimizer auto runs L-BFGS
    cfg = resolve_auto(StageConfig(stage=2, epochs=40, patience=20), data, say=False)
    assert (cfg.optimizer, cfg.epochs, cfg.patience) == ("lbfgs", 40, 20)
    cfg = resolve_auto(StageConfig(stage=1, epochs="auto", patience="auto"), data, say=False)
    assert (cfg.optimizer, cfg.epochs, cfg.patience) == ("adam", 300, 30)  # stage 1's optimizer is adam
    cfg = resolve_auto(StageConfig(stage=2, optimizer="adam"), data, say=False)
    assert (cfg.epochs, cfg.patience) == (300, 30)


@pytest.mark.parametrize("field, value", [("epochs", "many"), ("patience", 0), ("patience", True), ("epochs", 2.5)])
def test_a_length_is_a_whole_number_or_auto(field: str, value) -> None:
    with pytest.raises(StageConfigError, match=field):
        StageConfig(stage=2, **{field: value})


@pytest.mark.parametrize("flag", ["--epochs", "--patience"])
def test_the_flags_take_auto_and_refuse_other_words(flag: str, tmp_path: Path, capsys) -> None:
    import argparse

    from nepcore.cli import main as cli_main
    from nepcore.cli.train import add_arguments, stage_config

    parser = argparse.ArgumentParser()
    add_arguments(parser)
    required = ["--stage", "1", "--data", "d.h5", "--qscaler", "q.json", "--out-dir", "o"]
    assert getattr(stage_config(parser.parse_args([*required, flag, "auto"])), flag[2:]) == "auto"
    with pytest.raises(SystemExit) as stop:
        cli_main(["train", *required[:-1], str(tmp_path), flag, "soon"])
    assert stop.value.code == 2
    assert "not a whole number or auto: 'soon'" in capsys.readouterr().err


def test_stage_2_with_its_defaults_resumes_bit_identically(tmp_path: Path, monkeypatch) -> None:
    """float32, as the workflow trains; stage 2's defaults (optimizer, epochs and patience auto:
    L-BFGS on this split), with the L-BFGS length made 6 epochs so that the test is short."""
    monkeypatch.setitem(AUTO_EPOCHS, "lbfgs", 6)
    data, stats = tiny_splits(seed=3, n_frames=20, n_train=14, dtype=torch.float32)
    base = dict(stage=2, precision="float32", device="cpu", progress=False, checkpoint_every=1)
    status = train_stage(StageConfig(**base), data, stats, tmp_path / "ref")
    assert status["settings"]["optimizer"] == "lbfgs"
    assert (status["max_epochs"], status["patience"]) == (6, AUTO_PATIENCE["lbfgs"])
    assert status["reason"] == "max_epochs"
    train_stage(StageConfig(**base, epochs=3), data, stats, tmp_path / "resumed")
    saved = load_checkpoint(tmp_path / "resumed" / "checkpoint.pt")
    assert saved["config"]["optimizer"] == "lbfgs"
    train_stage(StageConfig(**base), data, stats, tmp_path / "resumed")
    for name in ("nep.txt", "nep_best.txt", "loss.out"):
        assert (tmp_path / "resumed" / name).read_bytes() == (tmp_path / "ref" / name).read_bytes(), name
