"""``nepcore predict`` and the GPUMD output writers: formats, labels, streaming, errors."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from ase.io import read
from helpers import specs
from helpers.oracle import model_and_file, ours

import nepcore.evaluation.predict as predict_module
from nepcore.cli import main as cli_main
from nepcore.data.checks import StructureError
from nepcore.data.demo import DEMO_ELEMENTS, write_demo_dataset
from nepcore.evaluation.predict import predict
from nepcore.geometry.virial import PRESSURE_UNIT_CONVERSION
from nepcore.io.gpumd_out import format_descriptor_rows, format_rows

OUT_FILES = ["energy_train.out", "force_train.out", "virial_train.out", "stress_train.out"]
SPEC = specs.SMALL_ZBL.replace(elements=DEMO_ELEMENTS)


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    """A random model file and 7 labelled EMT frames (energy, forces, stress)."""
    root = tmp_path_factory.mktemp("predict")
    model, path = model_and_file(SPEC, root, seed=2)
    data = root / "demo.xyz"
    write_demo_dataset(data, seed=0, n_frames=7)
    return model, path, data


def _load(out: Path) -> dict[str, np.ndarray]:
    return {name: np.loadtxt(out / name, ndmin=2) for name in OUT_FILES}


def test_row_formats_are_gpumds():
    assert format_rows(np.array([[1.0, 2.5e-7, -123456789.0]]), np.array([[np.nan, 0.1]])) == (
        "1 2.5e-07 -1.23457e+08 -1e+06 0.1\n"
    )
    assert format_rows(np.array([1.5, 2.0]), np.array([3.0, 4.0])) == "1.5 3\n2 4\n"
    assert format_descriptor_rows(np.array([[0.1, 2.0], [3.0, -4e-10]])) == "0.1 2 \n3 -4e-10 \n"


def test_predictions_and_references(setup, tmp_path):
    model, path, data = setup
    summary = predict(path, [data], tmp_path, batch_size=3, descriptors=True)
    frames = read(data, ":")
    assert summary.n_frames == len(frames) == 7
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(OUT_FILES + ["descriptor.out"])
    out = _load(tmp_path)
    assert out["energy_train.out"].shape == (7, 2) and out["virial_train.out"].shape == (7, 12)
    forces = np.split(out["force_train.out"], np.cumsum([len(a) for a in frames])[:-1])
    descriptors = np.loadtxt(tmp_path / "descriptor.out")
    assert descriptors.shape == (sum(len(a) for a in frames), SPEC.dim)
    rows = np.split(descriptors, np.cumsum([len(a) for a in frames])[:-1])
    g = lambda x: dict(rtol=1e-5, atol=1e-5 * max(1.0, np.abs(x).max()))
    for f, atoms in enumerate(frames):
        n, volume = len(atoms), atoms.get_volume()
        mine = ours(model, atoms)
        virial = mine["virial"][0]
        e_row, v_row, s_row = out["energy_train.out"][f], out["virial_train.out"][f], out["stress_train.out"][f]
        np.testing.assert_allclose(e_row, [mine["energy"][0] / n, atoms.get_potential_energy() / n], **g(e_row))
        np.testing.assert_allclose(forces[f][:, :3], mine["forces"], **g(mine["forces"]))
        np.testing.assert_allclose(forces[f][:, 3:], atoms.get_forces(), **g(atoms.get_forces()))
        np.testing.assert_allclose(rows[f], mine["descriptors"], **g(mine["descriptors"]))
        # reference virial = -stress V; stress_train.out = W / V in GPa: positive = compressive
        s = atoms.get_stress(voigt=False)
        ref_virial = -np.array([s[0, 0], s[1, 1], s[2, 2], s[1, 0], s[2, 1], s[2, 0]]) * volume
        np.testing.assert_allclose(v_row, np.concatenate([virial, ref_virial]) / n, **g(v_row))
        np.testing.assert_allclose(s_row, np.concatenate([virial, ref_virial]) / volume * PRESSURE_UNIT_CONVERSION,
                                   **g(s_row))  # fmt: skip
        np.testing.assert_allclose(s_row[6:9], -np.diag(s) * PRESSURE_UNIT_CONVERSION, **g(s_row))


def test_gpumd_columns_and_absent_references(setup, tmp_path):
    """GPUMD's ``force`` column and ``virial=`` key; absent labels become -1e+06."""
    model, path, _ = setup
    cell = 'Lattice="6 0 0 0 6 0 0 0 6"'
    text = (
        f"2\n{cell} energy=-7.5 virial=\"1 2 3 4 5 6 7 8 9\" Properties=species:S:1:pos:R:3:force:R:3\n"
        "Cu 0 0 0 0.5 -0.25 1\nNi 1.5 1.6 1.7 -0.5 0.25 -1\n"
        f"2\n{cell} Properties=species:S:1:pos:R:3\n"
        "Pd 0 0 0\nCu 1.6 1.6 1.6\n"
    )  # fmt: skip
    src = tmp_path / "gpumd.xyz"
    src.write_text(text)
    predict(path, [src], tmp_path / "out")
    out = _load(tmp_path / "out")
    e, f, v, s = (out[name] for name in OUT_FILES)
    assert e[0, 1] == -3.75 and e[1, 1] == -1e6
    np.testing.assert_array_equal(f[:2, 3:], [[0.5, -0.25, 1], [-0.5, 0.25, -1]])
    np.testing.assert_array_equal(f[2:, 3:], -1e6)
    # GPUMD reads xx xy xz yx yy yz zx zy zz and keeps the lower triangle: yx, zy, zx = 4, 8, 7
    np.testing.assert_array_equal(v[0, 6:], np.array([1, 5, 9, 4, 8, 7]) / 2)
    np.testing.assert_allclose(s[0, 6:], np.array([1, 5, 9, 4, 8, 7]) / 216 * PRESSURE_UNIT_CONVERSION, rtol=1e-5)
    np.testing.assert_array_equal(v[1, 6:], -1e6)
    np.testing.assert_array_equal(s[1, 6:], -1e6)


def test_streaming_batches_and_precision(setup, tmp_path, monkeypatch):
    """Frames are pulled from the reader one batch at a time; batching does not change output."""
    _, path, data = setup
    pulled, seen = [0], []
    real_iter, real_batch = predict_module.iter_structures, predict_module.batch_from_structures

    def counting_iter(*args, **kwargs):
        for item in real_iter(*args, **kwargs):
            pulled[0] += 1
            yield item

    def recording_batch(chunk, *args):
        seen.append((len(chunk), pulled[0] - sum(n for n, _ in seen)))
        return real_batch(chunk, *args)

    monkeypatch.setattr(predict_module, "iter_structures", counting_iter)
    monkeypatch.setattr(predict_module, "batch_from_structures", recording_batch)
    predict(path, [data, data], tmp_path / "b2", batch_size=2)
    assert seen == [(2, 2)] * 7  # 14 frames, never more than one batch read ahead
    monkeypatch.undo()
    predict(path, [data, data], tmp_path / "b100", batch_size=100)
    for name in OUT_FILES:
        assert (tmp_path / "b2" / name).read_bytes() == (tmp_path / "b100" / name).read_bytes(), name
    predict(path, [data], tmp_path / "f32", precision="float32")
    for name in OUT_FILES:
        f32 = np.loadtxt(tmp_path / "f32" / name)
        f64 = np.loadtxt(tmp_path / "b100" / name)[: len(f32)]
        np.testing.assert_allclose(f32, f64, rtol=1e-4, atol=1e-4, err_msg=name)


def test_bad_input_names_file_and_frame_and_writes_nothing(setup, tmp_path):
    _, path, data = setup
    frames = read(data, ":3")
    frames[2].symbols[1] = "Au"
    bad = tmp_path / "bad.xyz"
    from ase.io import write

    write(bad, frames)
    out = tmp_path / "out"
    out.mkdir()
    (out / "energy_train.out").write_text("previous results\n")
    with pytest.raises(StructureError, match=r"bad\.xyz: frame 2: species: Au not among the types"):
        predict(path, [data, bad], out, batch_size=2)
    assert [p.name for p in out.iterdir()] == ["energy_train.out"]  # no partial files, no temporaries
    assert (out / "energy_train.out").read_text() == "previous results\n"
    with pytest.raises(ValueError, match="precision"):
        predict(path, [data], out, precision="half")


def test_cli(setup, tmp_path, capsys):
    _, path, data = setup
    out = tmp_path / "cli"
    args = ["predict", "--model", str(path), str(data), "-o", str(out), "--descriptors", "--batch-size", "4"]
    assert cli_main(args) == 0
    assert "predicted 7 structures" in capsys.readouterr().out
    assert sorted(p.name for p in out.iterdir()) == sorted(OUT_FILES + ["descriptor.out"])
    assert cli_main(["predict", "--model", str(path), str(tmp_path / "missing.xyz"), "-o", str(out)]) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "missing.xyz" in err and len(err.strip().splitlines()) == 1
    with pytest.raises(SystemExit) as exit_:
        cli_main(["predict", "--model", str(path), str(data), "-o", str(out), "--batch-size", "0"])
    assert exit_.value.code == 2


def test_cli_device_option(setup, tmp_path, capsys, monkeypatch):
    """``nepcore predict --device`` as ``nepcore evaluate``'s: auto (the default) resolves to the
    CPU on a machine without CUDA and writes the same files as --device cpu; --device cuda there
    is a usage error (exit 2) that names the device."""
    _, path, data = setup
    base = ["predict", "--model", str(path), str(data), "--batch-size", "4"]
    assert cli_main([*base, "-o", str(tmp_path / "cpu"), "--device", "cpu"]) == 0
    assert cli_main([*base, "-o", str(tmp_path / "auto")]) == 0
    if not torch.cuda.is_available():
        for name in OUT_FILES:
            assert (tmp_path / "auto" / name).read_bytes() == (tmp_path / "cpu" / name).read_bytes()
        capsys.readouterr()
        with pytest.raises(SystemExit) as exit_:
            cli_main([*base, "-o", str(tmp_path / "cuda"), "--device", "cuda"])
        assert exit_.value.code == 2 and "CUDA is not available" in capsys.readouterr().err
        assert not (tmp_path / "cuda").exists()
    seen = {}
    monkeypatch.setattr(predict_module, "predict", lambda *a, **kw: seen.update(kw) or predict_module.PredictSummary())
    assert cli_main([*base, "-o", str(tmp_path / "spy")]) == 0
    assert seen["device"] == "auto"


def test_gpumd_reference_outputs(shared_data, tmp_path):
    """Predictions of GPUMD's own ``nep`` executable (float32) and a GPUMD-format training file."""
    ref_dir = shared_data / "gpumd-reference"
    predict(ref_dir / "nep_CrCoNi.txt", [ref_dir / "CrCoNi.xyz"], tmp_path, descriptors=True)
    gpumd = np.load(ref_dir / "CrCoNi.gpumd.npz")
    out = _load(tmp_path)
    np.testing.assert_allclose(out["energy_train.out"][:, 0], gpumd["E_per_atom"], rtol=0, atol=2e-5)
    F = gpumd["F"].reshape(-1, 3)
    # docs/model.md#numerical-agreement: 5e-5 float32 vs float64, plus the %g rounding of the file (5e-6 relative)
    assert (np.abs(out["force_train.out"][:, :3] - F) / (np.abs(F) + 1)).max() < 6e-5
    np.testing.assert_allclose(out["virial_train.out"][:, :6], gpumd["V_per_atom"], rtol=1e-5, atol=5e-5)
    np.testing.assert_allclose(np.loadtxt(tmp_path / "descriptor.out"), gpumd["D_per_atom"], rtol=1e-5, atol=2e-5)
    # PbTe train.xyz as GPUMD's examples write it (``force`` column, energy only): two frames
    lines = (shared_data / "PbTe" / "train.xyz").read_text().splitlines(keepends=True)
    two = tmp_path / "pbte.xyz"
    two.write_text("".join(lines[: 2 * 252]))
    predict(shared_data / "PbTe" / "nep_gpumd_snes.txt", [two], tmp_path / "pbte")
    out = _load(tmp_path / "pbte")
    frames = [line.split() for line in lines[: 2 * 252]]
    ref_forces = np.array([row[4:7] for k, row in enumerate(frames) if k % 252 >= 2], dtype=float)
    np.testing.assert_allclose(out["force_train.out"][:, 3:], ref_forces, rtol=1e-5, atol=1e-6)
    assert out["energy_train.out"][0, 1] == pytest.approx(-937.191 / 250, rel=1e-5)
    np.testing.assert_array_equal(out["virial_train.out"][:, 6:], -1e6)
    assert np.abs(out["energy_train.out"][:, 0] - out["energy_train.out"][:, 1]).max() < 0.05  # a trained model
