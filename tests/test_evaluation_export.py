"""``nepcore export``: atomic copy, re-read, calorine cross-check, failures with a message."""

from __future__ import annotations

import sys

import pytest
from helpers import specs
from helpers.oracle import model_and_file

import nepcore.evaluation.export as export_module
from nepcore.cli import main as cli_main
from nepcore.evaluation.export import ExportError, export_model


@pytest.fixture(scope="module")
def setup(tmp_path_factory, labelled_dataset):
    root = tmp_path_factory.mktemp("export")
    return {"h5": labelled_dataset, "model": model_and_file(specs.SMALL_ZBL, root, seed=4)[1]}


def _listing(folder):
    return sorted(p.name for p in folder.iterdir())


def test_export_copies_and_calorine_agrees(setup, tmp_path, capsys):
    pytest.importorskip("calorine")
    out = tmp_path / "results" / "run" / "nep.txt"
    assert cli_main(["export", "--model", str(setup["model"]), "--data", str(setup["h5"]), "-o", str(out)]) == 0
    assert out.read_bytes() == setup["model"].read_bytes()
    assert _listing(out.parent) == ["nep.txt"]  # no temporary left
    text = capsys.readouterr().out
    assert "re-read with nepcore's reader" in text and "calorine" in text and "reproduces" in text
    report = export_model(setup["model"], setup["h5"], tmp_path / "again.txt")
    # three evenly spaced test frames, the open cluster (last test frame) among them
    assert report.skipped is None and len(report.checked_frames) == 3 and report.checked_frames[-1] == 9
    assert report.max_energy_deviation < 1e-10 and report.max_force_deviation < 1e-9


@pytest.mark.parametrize("damage", ["truncate", "garbage"])
def test_corrupted_model_fails_with_message(setup, tmp_path, capsys, damage):
    lines = setup["model"].read_text().splitlines(keepends=True)
    bad = tmp_path / "nep_bad.txt"
    if damage == "truncate":
        bad.write_text("".join(lines[:20]))
    else:
        lines[12] = "zero\n"
        bad.write_text("".join(lines))
    out = tmp_path / "res" / "nep.txt"
    out.parent.mkdir()
    out.write_text("previous export\n")
    assert cli_main(["export", "--model", str(bad), "--data", str(setup["h5"]), "-o", str(out)]) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: cannot read the model: ") and "nep_bad.txt, line " in err, err
    assert err.count("\n") == 1
    assert out.read_text() == "previous export\n" and _listing(out.parent) == ["nep.txt"]
    assert cli_main(["export", "--model", str(tmp_path / "absent.txt"), "--data", str(setup["h5"]),
                     "-o", str(out)]) == 1  # fmt: skip
    assert "absent.txt" in capsys.readouterr().err


def test_disagreement_with_calorine_fails(setup, tmp_path, monkeypatch):
    pytest.importorskip("calorine")
    real = export_module.nepcore_predictions

    def shifted(model, frames):
        energy, forces = real(model, frames)
        return energy, forces + 1e-4  # beyond the 1e-5 eV/Å tolerance

    monkeypatch.setattr(export_module, "nepcore_predictions", shifted)
    out = tmp_path / "nep.txt"
    with pytest.raises(ExportError, match=r"calorine .* and nepcore disagree .* max \|dF\| 0\.0001 eV/Å"):
        export_model(setup["model"], setup["h5"], out)
    assert _listing(tmp_path) == []


def test_without_calorine_or_data_species(setup, tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "calorine", None)  # import calorine -> ImportError
    out = tmp_path / "nep.txt"
    assert cli_main(["export", "--model", str(setup["model"]), "--data", str(setup["h5"]), "-o", str(out)]) == 0
    assert "calorine check skipped: calorine is not installed" in capsys.readouterr().out
    assert out.read_bytes() == setup["model"].read_bytes()
    monkeypatch.undo()
    pytest.importorskip("calorine")
    # a model without Ni cannot be checked on Cu-Pd-Ni frames: refused, with the species named
    spec = specs.SMALL_ZBL.replace(elements=("Pd", "Cu"), cutoff_radial=4.5, cutoff_angular=3.5)
    _, narrow = model_and_file(spec, tmp_path, seed=5)
    with pytest.raises(ExportError, match="species Ni in the data are not types of the model"):
        export_model(narrow, setup["h5"], tmp_path / "narrow_out.txt")
    assert not (tmp_path / "narrow_out.txt").exists()
    assert export_model(setup["model"], setup["h5"], out, n_frames=0).skipped == "calorine check not asked for"
