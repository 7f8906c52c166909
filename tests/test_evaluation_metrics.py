"""``nepcore evaluate``: metrics against an independent numpy computation, *_test.out files,
plots, loss.out reading, committee disagreement, streaming and the command line."""

from __future__ import annotations

import importlib
import json
from pathlib import Path

import h5py
import numpy as np
import pytest
from ase import Atoms
from helpers import specs
from helpers.oracle import model_and_file, ours

from nepcore.cli import main as cli_main
from nepcore.evaluation.metrics import COMMITTEE_COLUMNS, ErrorStats, EvaluationError, evaluate
from nepcore.evaluation.plots import read_loss_out
from nepcore.geometry.virial import PRESSURE_UNIT_CONVERSION
from nepcore.model.nep_model import NEPModel

SPEC = specs.SMALL_ZBL
QUANTITIES = ("energy", "force", "virial", "stress")
OUT_FILES = ("energy_test.out", "force_test.out", "virial_test.out", "stress_test.out")
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _train_loss_formatter():
    """nepcore train's own loss.out formatter (so a format change shows here); its module moved
    once (train -> stage_outputs), so look in both."""
    for name in ("nepcore.training.outputs", "nepcore.training.stage"):
        try:
            return importlib.import_module(name).format_loss_out
        except (ImportError, AttributeError):
            continue
    raise AssertionError("nepcore train's format_loss_out not found: update this test")


def write_loss_out(path: Path, epochs: int, with_validation: bool = True) -> None:
    """A loss.out as nepcore train writes it."""
    history = []
    for e in range(1, epochs + 1):
        h = {
            "epoch": e,
            "train_loss": 1 / e,
            "l1": 0.0,
            "l2": 0.0,
            "train_rmse_e": 0.1 / e,
            "train_rmse_f": 0.5 / e,
            "train_rmse_v": 0.05 / e,
        }
        if with_validation:
            h.update(valid_rmse_e=0.12 / e, valid_rmse_f=0.6 / e, valid_rmse_v=0.06 / e)
        history.append(h)
    path.write_text(_train_loss_formatter()(history))


@pytest.fixture(scope="module")
def setup(tmp_path_factory, labelled_dataset):
    """Dataset, three random models, loss files and one evaluation with a committee."""
    root = tmp_path_factory.mktemp("evaluate")
    h5 = labelled_dataset
    paths = [model_and_file(SPEC, root, seed=s)[1] for s in (1, 2, 3)]
    write_loss_out(root / "loss1.out", 12)
    write_loss_out(root / "loss2.out", 5, with_validation=False)
    out = root / "eval"
    metrics = evaluate(
        paths[0],
        h5,
        out,
        loss_files=[root / "loss1.out", root / "loss2.out"],
        committee=paths[1:],
        batch_size=2,
        device="cpu",
        progress=False,
    )
    return {"root": root, "h5": h5, "paths": paths, "out": out, "metrics": metrics}


# ---- the independent computation ---------------------------------------------------------------
def reference_frames(h5_path: Path, split: str) -> list[dict]:
    """Frames of ``split`` read with h5py directly (not nepcore's reader), as dicts of Atoms and
    labels: energy eV, forces eV/Å, virial (6,) eV GPUMD order (lower triangle), config_type."""
    with h5py.File(h5_path, "r") as h5:
        species = [s.decode() if isinstance(s, bytes) else s for s in h5["species"][()]]
        offsets = h5["frames/offsets"][()]
        frames = []
        for f in h5[f"split/{split}"][()]:
            a, b = offsets[f], offsets[f + 1]
            atoms = Atoms(
                [species[t] for t in h5["atoms/types"][a:b]],
                positions=h5["atoms/positions"][a:b],
                cell=h5["frames/cell"][f],
                pbc=h5["frames/pbc"][f],
            )
            v = h5["frames/virial"][f]
            label = h5["frames/config_type"][f]
            frames.append({
                "atoms": atoms, "energy": h5["frames/energy"][f], "forces": h5["atoms/forces"][a:b],
                "virial": np.array([v[0, 0], v[1, 1], v[2, 2], v[1, 0], v[2, 1], v[2, 0]]),
                "has_virial": bool(h5["frames/has_virial"][f]),
                "config_type": (label.decode() if isinstance(label, bytes) else label) or "(none)",
            })  # fmt: skip
    return frames


def numpy_metrics(model: NEPModel, frames: list[dict]) -> dict[str, dict[str, float]]:
    """RMSE, MAE, counts and reference spread of every quantity, computed in plain numpy."""
    errors: dict[str, list] = {q: [] for q in QUANTITIES}
    refs: dict[str, list] = {q: [] for q in QUANTITIES}
    for fr in frames:
        atoms, n = fr["atoms"], len(fr["atoms"])
        pred = ours(model, atoms)
        pairs = [("energy", pred["energy"][0] / n, fr["energy"] / n), ("force", pred["forces"], fr["forces"])]
        if fr["has_virial"]:
            pairs.append(("virial", pred["virial"][0] / n, fr["virial"] / n))
            if atoms.pbc.all():
                gpa = PRESSURE_UNIT_CONVERSION / atoms.get_volume()
                pairs.append(("stress", pred["virial"][0] * gpa, fr["virial"] * gpa))
        for q, p, r in pairs:
            errors[q].append(np.ravel(p - r))
            refs[q].append(np.ravel(r))
    out = {}
    for q in QUANTITIES:
        if not errors[q]:
            out[q] = None
            continue
        e, r = np.concatenate(errors[q]), np.concatenate(refs[q])
        out[q] = {
            "n": e.size,
            "rmse": np.sqrt(np.mean(e**2)),
            "mae": np.mean(np.abs(e)),
            "ref_mean": r.mean(),
            "ref_std": r.std(),
        }
    return out


def _assert_block(got: dict | None, want: dict | None, where: str) -> None:
    if want is None:
        assert got is None, where
        return
    assert got["n"] == want["n"], where
    for key in ("rmse", "mae", "ref_mean", "ref_std"):
        np.testing.assert_allclose(got[key], want[key], rtol=1e-9, atol=1e-12, err_msg=f"{where} {key}")


# ---- tests -----------------------------------------------------------------------------------------
def test_metrics_equal_numpy_per_split_and_config_type(setup):
    model = NEPModel.from_nep(setup["paths"][0])
    metrics = setup["metrics"]
    assert metrics["format"] == "nepcore-metrics" and metrics["evaluated_split"] == "test"
    assert set(metrics["splits"]) == {"train", "valid", "test"}
    for split, block in metrics["splits"].items():
        frames = reference_frames(setup["h5"], split)
        assert block["n_frames"] == len(frames)
        assert block["n_atoms"] == sum(len(f["atoms"]) for f in frames)
        want = numpy_metrics(model, frames)
        for q in QUANTITIES:
            _assert_block(block[q], want[q], f"{split} {q}")
        labels = sorted({f["config_type"] for f in frames})
        assert sorted(block["by_config_type"]) == labels
        for label in labels:
            group = [f for f in frames if f["config_type"] == label]
            assert block["by_config_type"][label]["n_frames"] == len(group)
            want = numpy_metrics(model, group)
            for q in QUANTITIES:
                _assert_block(block["by_config_type"][label][q], want[q], f"{split}/{label} {q}")
    test = metrics["splits"]["test"]
    assert test["stress"]["n"] == 2 * 6 and test["virial"]["n"] == 2 * 6  # the cluster has neither
    assert test["by_config_type"]["cluster"]["virial"] is None
    s = metrics["summary"]
    assert s["force_rmse"] == test["force"]["rmse"] and s["force_spread"] == test["force"]["ref_std"]


def test_worst_frames_equal_numpy_per_split(setup):
    """Each split's worst_frames: the frames of largest squared force and energy error, by an
    independent numpy computation, named by their input file and frame number in it."""
    model = NEPModel.from_nep(setup["paths"][0])
    with h5py.File(setup["h5"], "r") as h5:
        paths = [p.decode() if isinstance(p, bytes) else p for p in h5["sources/path"][()]]
        source, source_frame = h5["frames/source"][()], h5["frames/source_frame"][()]
        indices = {split: h5[f"split/{split}"][()] for split in ("train", "valid", "test")}
    for split, block in setup["metrics"]["splits"].items():
        frames = reference_frames(setup["h5"], split)
        pred = [ours(model, f["atoms"]) for f in frames]
        force_sq = [float(np.sum((p["forces"] - f["forces"]) ** 2)) for p, f in zip(pred, frames)]
        energy_error = [(p["energy"][0] - f["energy"]) / len(f["atoms"]) for p, f in zip(pred, frames)]
        for quantity, sq in (("force", force_sq), ("energy", [e * e for e in energy_error])):
            order = np.argsort(sq, kind="stable")[::-1][:5]
            got = block["worst_frames"][quantity]
            assert [w["frame_index"] for w in got] == [int(indices[split][i]) for i in order], (split, quantity)
            for w, i in zip(got, order):
                f = indices[split][i]
                assert (w["source"], w["source_frame"]) == (paths[source[f]], int(source_frame[f]))
                assert w["n_atoms"] == len(frames[i]["atoms"]) and w["config_type"] == frames[i]["config_type"]
                np.testing.assert_allclose(w["share"], sq[i] / sum(sq), rtol=1e-9)
                np.testing.assert_allclose(w["force_rmse"], np.sqrt(force_sq[i] / (3 * w["n_atoms"])), rtol=1e-9)
                np.testing.assert_allclose(w["energy_error"], energy_error[i], rtol=1e-9, atol=1e-15)
                largest = np.linalg.norm(frames[i]["forces"], axis=1).max()
                np.testing.assert_allclose(w["max_force_ref"], largest, rtol=1e-12)


def test_frames_beyond_the_training_forces_are_warned_as_numpy_finds_them(setup):
    """The evaluated split's frames whose largest reference force exceeds every training
    frame's are counted in one warning (here by numpy from the HDF5 file)."""
    largest = {
        split: [np.linalg.norm(f["forces"], axis=1).max() for f in reference_frames(setup["h5"], split)]
        for split in ("train", "test")
    }
    beyond = sum(x > max(largest["train"]) for x in largest["test"])
    found = [w for w in setup["metrics"]["warnings"] if "beyond the training split's largest" in w]
    if beyond:
        assert found == [found[0]] and found[0].startswith(f"test: {beyond} of {len(largest['test'])} frames")
    else:
        assert found == []


def test_a_test_frame_with_forces_beyond_training_is_named_by_evaluate(setup, tmp_path):
    """The warning's positive case through ``evaluate`` (the shared fixture has no such frame):
    one test frame's reference forces scaled 100x, the file's checksum renewed."""
    import shutil

    from nepcore.data.structures_integrity import CHECKSUM_ATTR, content_sha256

    h5 = tmp_path / "structures.h5"
    shutil.copy(setup["h5"], h5)
    with h5py.File(h5, "r+") as f:
        frame = int(f["split/test"][0])
        a, b = f["frames/offsets"][frame], f["frames/offsets"][frame + 1]
        f["atoms/forces"][a:b] = 100.0 * f["atoms/forces"][a:b]
        f.attrs[CHECKSUM_ATTR] = content_sha256(f)
    largest = np.linalg.norm(reference_frames(h5, "test")[0]["forces"], axis=1).max()
    train_largest = max(np.linalg.norm(fr["forces"], axis=1).max() for fr in reference_frames(h5, "train"))
    assert largest > train_largest  # the frame is beyond the training forces by construction
    metrics = evaluate(setup["paths"][0], h5, tmp_path / "ev", split="test", device="cpu", plots=False)
    found = [w for w in metrics["warnings"] if "beyond the training split's largest" in w]
    assert len(found) == 1
    assert found[0].startswith("test: 1 of 3 frames have reference forces beyond the training split's largest ")
    assert f"({train_largest:.1f} eV/Å)" in found[0] and f"({largest:.1f} eV/Å)" in found[0]


def test_few_frames_warnings_are_for_the_evaluated_split_only(setup, tmp_path, monkeypatch):
    from nepcore.evaluation.frame_errors import FrameErrors

    monkeypatch.setattr(FrameErrors, "concentration_warning", lambda self, split, quantity: f"few {split} {quantity}")
    metrics = evaluate(setup["paths"][0], setup["h5"], tmp_path / "ev", split="valid", device="cpu", plots=False)
    assert [w for w in metrics["warnings"] if w.startswith("few")] == ["few valid force", "few valid energy"]
    assert set(metrics["splits"]["train"]["worst_frames"]) == {"force", "energy"}


def test_metrics_json_on_disk_is_the_returned_dict(setup):
    on_disk = json.loads((setup["out"] / "metrics.json").read_text(encoding="utf-8"))
    assert on_disk["splits"]["test"]["force"]["rmse"] == setup["metrics"]["splits"]["test"]["force"]["rmse"]
    assert on_disk["units"]["force"] == "eV/Å" and on_disk["summary"]["split"] == "test"
    assert not [p.name for p in setup["out"].iterdir() if p.name.startswith(".")]  # no temporaries


def test_test_out_files_parse_and_equal_predictions(setup):
    model = NEPModel.from_nep(setup["paths"][0])
    frames = reference_frames(setup["h5"], "test")
    out = {name: np.loadtxt(setup["out"] / name, ndmin=2) for name in OUT_FILES}
    assert out["energy_test.out"].shape == (3, 2) and out["virial_test.out"].shape == (3, 12)
    assert out["stress_test.out"].shape == (3, 12) and out["force_test.out"].shape == (20, 6)
    starts = np.cumsum([0] + [len(f["atoms"]) for f in frames])
    g = lambda x: dict(rtol=2e-5, atol=2e-5 * max(1.0, np.abs(x).max()))
    for k, fr in enumerate(frames):
        atoms, n = fr["atoms"], len(fr["atoms"])
        pred = ours(model, atoms)
        e_row, v_row, s_row = out["energy_test.out"][k], out["virial_test.out"][k], out["stress_test.out"][k]
        f_rows = out["force_test.out"][starts[k] : starts[k + 1]]
        np.testing.assert_allclose(e_row, [pred["energy"][0] / n, fr["energy"] / n], **g(e_row))
        np.testing.assert_allclose(f_rows, np.hstack([pred["forces"], fr["forces"]]), **g(f_rows))
        np.testing.assert_allclose(v_row[:6], pred["virial"][0] / n, **g(v_row))
        if atoms.pbc.all():
            np.testing.assert_allclose(v_row[6:], fr["virial"] / n, **g(v_row))
            both = np.concatenate([pred["virial"][0], fr["virial"]]) / atoms.get_volume() * PRESSURE_UNIT_CONVERSION
            np.testing.assert_allclose(s_row, both, **g(s_row))
        else:  # GPUMD's sentinel for an absent reference; no volume, no predicted stress
            assert (v_row[6:] == -1e6).all() and (s_row[6:] == -1e6).all() and np.isnan(s_row[:6]).all()


def test_plots_are_valid_pngs(setup, tmp_path):
    from matplotlib.image import imread

    from nepcore.evaluation.plots import loss_plot

    for name in ("parity.png", "loss.png"):
        data = (setup["out"] / name).read_bytes()
        assert data.startswith(PNG_MAGIC) and len(data) > 10_000, name
        image = imread(setup["out"] / name)
        assert image.ndim == 3 and image.shape[0] > 300 and image.shape[1] > 300
        assert image[..., :3].std() > 0.01, f"{name} is blank"
    (tmp_path / "empty.out").write_text("")
    (tmp_path / "bad.out").write_text("1 2 3\n")
    notes = loss_plot(
        tmp_path / "loss.png",
        [setup["root"] / "loss1.out", tmp_path / "missing.out", tmp_path / "empty.out", tmp_path / "bad.out"],
    )
    assert [n.split(":")[0] for n in notes] == ["stage 2", "stage 3", "stage 4"]
    assert "missing" in notes[0] and "empty" in notes[1] and "line 1" in notes[2]
    assert imread(tmp_path / "loss.png").ndim == 3
    loss_plot(tmp_path / "none.png", [])
    assert (tmp_path / "none.png").read_bytes().startswith(PNG_MAGIC)


def test_read_loss_out_formats(setup, tmp_path):
    rows = read_loss_out(setup["root"] / "loss1.out")
    assert rows.shape == (12, 10) and rows[0, 0] == 1 and rows[-1, 0] == 12
    np.testing.assert_allclose(rows[1, 5], 0.5 / 2)
    # GPUMD's own loss.out: no header, %-8d then %-11.5f / %-13.5f columns
    (tmp_path / "gpumd.out").write_text(
        "100     0.12345    0.00100    0.00200    0.01000      0.20000"
        "      0.03000      0.01100      0.21000      0.03100\n"
    )
    assert read_loss_out(tmp_path / "gpumd.out").shape == (1, 10)
    (tmp_path / "bad.out").write_text("# header\n1 2 3 4 5 6 7 8 9 x\n")
    with pytest.raises(ValueError, match=r"bad\.out: line 2: expected 10 numbers"):
        read_loss_out(tmp_path / "bad.out")


def committee_numpy(paths: list[Path], frames: list[dict]) -> np.ndarray:
    """Max over atoms of sqrt(mean over members of |F - <F>|^2), per frame, in numpy."""
    models = [NEPModel.from_nep(p) for p in paths]
    out = []
    for fr in frames:
        forces = np.stack([ours(m, fr["atoms"])["forces"] for m in models])
        out.append(np.sqrt(((forces - forces.mean(0)) ** 2).sum(-1).mean(0)).max())
    return np.array(out)


def test_committee_disagreement(setup, tmp_path):
    import csv

    frames = reference_frames(setup["h5"], "test")
    committee = setup["metrics"]["committee"]
    dev = np.array(committee["per_structure"]["max_force_deviation"])
    np.testing.assert_allclose(dev, committee_numpy(setup["paths"][1:], frames), rtol=1e-9)
    assert (dev > 0).all() and committee["max_force_deviation"]["max"] == dev.max()
    with open(setup["out"] / "committee.csv") as fh:
        rows = list(csv.DictReader(fh))
    assert tuple(rows[0]) == COMMITTEE_COLUMNS and len(rows) == 3
    np.testing.assert_allclose([float(r["max_force_deviation"]) for r in rows], dev, rtol=1e-12)
    assert [r["config_type"] for r in rows] == [f["config_type"] for f in frames]
    assert all(float(r["max_force_error"]) > 0 for r in rows)
    # identical members agree exactly
    same = evaluate(
        setup["paths"][0], setup["h5"], tmp_path, committee=[setup["paths"][0]] * 2, device="cpu", plots=False
    )["committee"]
    assert same["per_structure"]["max_force_deviation"] == [0.0] * 3
    assert same["per_structure"]["energy_deviation"] == [0.0] * 3


def test_batching_does_not_change_results_and_no_committee(setup, tmp_path):
    one = evaluate(setup["paths"][0], setup["h5"], tmp_path / "b1", batch_size=1, device="cpu", plots=False)
    big = evaluate(setup["paths"][0], setup["h5"], tmp_path / "b64", batch_size=64, device="cpu", plots=False)
    assert one["committee"] is None and not (tmp_path / "b1" / "committee.csv").exists()
    for split in one["splits"]:
        for q in QUANTITIES:
            _assert_block(one["splits"][split][q], big["splits"][split][q], f"{split} {q}")
    for name in OUT_FILES:
        assert (tmp_path / "b1" / name).read_bytes() == (setup["out"] / name).read_bytes(), name


def test_error_stats_streaming_equals_numpy():
    rng = np.random.default_rng(0)
    ref = -4.0 + 1e-3 * rng.normal(size=1000)  # tiny spread on a large mean
    pred = ref + 1e-2 * rng.normal(size=1000)
    stats = ErrorStats()
    for chunk in np.array_split(np.arange(1000), [1, 7, 300, 301, 999]):
        stats.add(pred[chunk], ref[chunk])
    d = stats.as_dict()
    assert d["n"] == 1000
    np.testing.assert_allclose(d["rmse"], np.sqrt(np.mean((pred - ref) ** 2)), rtol=1e-12)
    np.testing.assert_allclose(d["mae"], np.mean(np.abs(pred - ref)), rtol=1e-12)
    np.testing.assert_allclose(d["ref_std"], ref.std(), rtol=1e-9)
    assert ErrorStats().as_dict() is None


def test_cli(setup, tmp_path, capsys):
    paths, h5 = setup["paths"], setup["h5"]
    argv = [
        "evaluate",
        "--model",
        str(paths[0]),
        "--data",
        str(h5),
        "--out-dir",
        str(tmp_path / "cli"),
        "--split",
        "valid",
        "--device",
        "cpu",
        "--loss",
        str(setup["root"] / "loss1.out"),
        str(tmp_path / "no.out"),
    ]
    assert cli_main(argv) == 0
    line = capsys.readouterr().out
    assert line.startswith("valid (2 structures): RMSE energy") and "force spread" in line
    for name in OUT_FILES + ("metrics.json", "parity.png", "loss.png"):
        assert (tmp_path / "cli" / name).stat().st_size > 0, name
    assert len(np.loadtxt(tmp_path / "cli" / "energy_test.out", ndmin=2)) == 2  # the valid split's rows
    base = ["evaluate", "--data", str(h5), "--out-dir", str(tmp_path / "bad"), "--device", "cpu"]
    for extra, message in (
        (["--model", str(tmp_path / "none.txt")], "none.txt"),
        (["--model", str(paths[0]), "--committee", str(paths[1])], "at least 2 members"),
    ):
        assert cli_main(base + extra) == 1
        err = capsys.readouterr().err
        assert err.startswith("error: ") and message in err and err.count("\n") == 1, err
    with pytest.raises(SystemExit) as exit_:
        cli_main(base + ["--model", str(paths[0]), "--batch-size", "0"])
    assert exit_.value.code == 2 and "--batch-size: must be >= 1" in capsys.readouterr().err
    with pytest.raises(EvaluationError, match="split"):
        evaluate(paths[0], h5, tmp_path, split="training")


def test_nan_predictions_are_reported_not_dropped(setup, tmp_path, monkeypatch, capsys):
    import nepcore.evaluation.metrics as evaluate_module

    real = evaluate_module.frame_values

    def diverged(*args, **kwargs):
        values = real(*args, **kwargs)
        values.forces[0, 0] = np.nan
        return values

    monkeypatch.setattr(evaluate_module, "frame_values", diverged)
    argv = [
        "evaluate",
        "--model",
        str(setup["paths"][0]),
        "--data",
        str(setup["h5"]),
        "--out-dir",
        str(tmp_path),
        "--device",
        "cpu",
        "--batch-size",
        "64",
    ]
    assert cli_main(argv) == 0
    err = capsys.readouterr().err
    assert "warning: test force: non-finite predictions" in err and "test energy" not in err
    metrics = json.loads((tmp_path / "metrics.json").read_text(encoding="utf-8"))
    assert metrics["splits"]["test"]["force"]["rmse"] is None and metrics["splits"]["test"]["force"]["n"] == 60
    assert metrics["splits"]["test"]["energy"]["rmse"] > 0
    assert (tmp_path / "parity.png").read_bytes().startswith(PNG_MAGIC)
