"""q_scaler statistics: GPUMD's rule (c = 1), self-consistent mode, streaming, floor, files, CLI."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from helpers import specs
from helpers.reference_batch import collate, frame_from_atoms

from nepcore.cli import main as cli_main
from nepcore.data.demo import make_demo_dataset
from nepcore.data.store import StreamDataStore
from nepcore.model import potential as core
from nepcore.spec import INITIAL_BIAS_STD, ModelSpec
from nepcore.training.qscaler import (
    QScalerError,
    coefficient_parameters,
    compute_q_scaler,
    initial_parameters,
    read_qscaler,
    write_qscaler,
)

SPEC = specs.TINY.replace(neurons=6)


@pytest.fixture(scope="module")
def frames():
    return make_demo_dataset(seed=2, n_frames=10)


@pytest.fixture(scope="module")
def store(frames) -> StreamDataStore:
    return StreamDataStore.from_atoms(frames, SPEC, torch.float64)


def raw_descriptors(spec: ModelSpec, atoms_list, params: dict) -> np.ndarray:
    """Raw descriptors of every atom, frame by frame (an independent path from the store)."""
    tables = core.build_tables(spec)
    p = {k: torch.as_tensor(v) for k, v in params.items()}
    out = []
    for atoms in atoms_list:
        batch = collate([frame_from_atoms(atoms, spec, with_labels=False)])
        out.append(core.evaluate(p, tables, batch, compute_forces=False, return_descriptors=True)["descriptors"])
    return torch.cat(out).numpy()


def test_gpumd_rule_is_one_over_range_with_unit_coefficients(frames, store) -> None:
    stats = compute_q_scaler(SPEC, store.batches(3), mode="gpumd")
    ones = coefficient_parameters(SPEC, "gpumd")
    assert np.all(ones["c_radial"] == 1) and np.all(ones["c_angular"] == 1) and np.all(ones["q_scaler"] == 1)
    q = raw_descriptors(SPEC, frames, ones)
    np.testing.assert_allclose(stats.minimum, q.min(0), rtol=0, atol=1e-13)
    np.testing.assert_allclose(stats.maximum, q.max(0), rtol=0, atol=1e-13)
    np.testing.assert_allclose(stats.q_scaler, 1.0 / (q.max(0) - q.min(0)), rtol=1e-12)
    # with all c = 1 every radial component is the same function, so one shared value (docs/model.md#the-q-scaler)
    radial = stats.q_scaler[: SPEC.radial_dim]
    np.testing.assert_allclose(radial, radial[0], rtol=1e-12)
    assert stats.n_atoms == sum(len(a) for a in frames) and stats.n_frames == len(frames)


def test_result_does_not_depend_on_batching(store) -> None:
    a = compute_q_scaler(SPEC, store.batches(1), mode="gpumd")
    b = compute_q_scaler(SPEC, store.batches(7), mode="gpumd")
    assert np.array_equal(a.q_scaler, b.q_scaler)  # min/max are exact: no rounding from batching


def test_self_consistent_scaled_descriptors_span_unit_ranges(frames, store) -> None:
    stats = compute_q_scaler(SPEC, store.batches(4), mode="self-consistent", seed=5)
    params = initial_parameters(stats, SPEC, seed=123)  # coefficients from the q-scaler's seed
    coefficients = coefficient_parameters(SPEC, "self-consistent", seed=5)
    assert np.array_equal(params["c_radial"], coefficients["c_radial"])
    assert np.array_equal(params["c_angular"], coefficients["c_angular"])
    assert not np.array_equal(params["W0"], initial_parameters(stats, SPEC, seed=124)["W0"])  # nets: own seed
    qh = raw_descriptors(SPEC, frames, {**params, "q_scaler": stats.q_scaler})
    np.testing.assert_allclose(qh.max(0) - qh.min(0), 1.0, rtol=1e-12)
    assert not np.allclose(stats.q_scaler[: SPEC.radial_dim], stats.q_scaler[0])  # c differs per n


def test_gpumd_mode_initialisation_uses_the_training_seed(store) -> None:
    stats = compute_q_scaler(SPEC, store.batches(4), mode="gpumd")
    a, b = initial_parameters(stats, SPEC, seed=1), initial_parameters(stats, SPEC, seed=2)
    assert not np.array_equal(a["W0"], b["W0"])
    assert np.array_equal(a["q_scaler"], stats.q_scaler)


def test_constant_component_is_floored_and_reported(frames) -> None:
    spec = SPEC.replace(cutoff_angular=1.0)  # no angular neighbours: angular descriptors are all 0
    store = StreamDataStore.from_atoms(frames[:3], spec, torch.float64)
    stats = compute_q_scaler(spec, store.batches(2), mode="gpumd", floor=1e-6)
    assert stats.floored == list(range(spec.radial_dim, spec.dim))
    assert np.all(np.isfinite(stats.q_scaler))
    assert np.all(stats.q_scaler[spec.radial_dim :] == 1e6)


def test_empty_data_is_an_error() -> None:
    with pytest.raises(QScalerError, match="no atoms"):
        compute_q_scaler(SPEC, iter([]), mode="gpumd")
    with pytest.raises(QScalerError, match="mode"):
        coefficient_parameters(SPEC, "other")


def test_json_round_trip_and_bad_files(store, tmp_path: Path) -> None:
    stats = compute_q_scaler(SPEC, store.batches(4), mode="self-consistent", seed=3)
    path = write_qscaler(tmp_path / "qscaler.json", stats)
    back = read_qscaler(path)
    assert back.spec == SPEC and back.mode == "self-consistent" and back.seed == 3
    assert np.array_equal(back.q_scaler, stats.q_scaler) and np.array_equal(back.minimum, stats.minimum)
    assert [p.name for p in tmp_path.iterdir()] == ["qscaler.json"]  # no temporary left
    data = json.loads(path.read_text())
    data["q_scaler"] = data["q_scaler"][:-1]
    (tmp_path / "short.json").write_text(json.dumps(data))
    with pytest.raises(QScalerError, match=r"short\.json: q_scaler has"):
        read_qscaler(tmp_path / "short.json")
    (tmp_path / "other.json").write_text("{}")
    with pytest.raises(QScalerError, match="not a nepcore qscaler file"):
        read_qscaler(tmp_path / "other.json")


@pytest.fixture(scope="module")
def dataset(tmp_path_factory) -> Path:
    from ase.io import write

    from nepcore.data.convert import convert

    folder = tmp_path_factory.mktemp("qscaler_cli")
    write(folder / "demo.xyz", make_demo_dataset(seed=4, n_frames=8), format="extxyz")
    convert([str(folder / "demo.xyz")], folder / "structures.h5", fractions=(0.75, 0.25, 0.0), progress=False)
    return folder / "structures.h5"


def test_cli_flags_and_nep_in_agree(dataset: Path, tmp_path: Path, capsys) -> None:
    flags = ["--type", "Cu", "Pd", "Ni", "--cutoff", "4.5", "3.5", "--n-max", "3", "3", "--basis-size", "4", "4",
             "--l-max", "4", "2", "0", "--neuron", "6"]  # fmt: skip
    assert cli_main(["qscaler", str(dataset), "-o", str(tmp_path / "a.json"), *flags]) == 0
    (tmp_path / "nep.in").write_text(
        "type 3 Cu Pd Ni\ncutoff 4.5 3.5\nn_max 3 3\nbasis_size 4 4\nl_max 4 2 0\nneuron 6\ngeneration 10\n"
    )
    nep_in = str(tmp_path / "nep.in")
    assert cli_main(["qscaler", str(dataset), "-o", str(tmp_path / "b.json"), "--nep-in", nep_in]) == 0
    a, b = read_qscaler(tmp_path / "a.json"), read_qscaler(tmp_path / "b.json")
    assert a.spec == b.spec and np.array_equal(a.q_scaler, b.q_scaler)
    # the architecture (with the data's true neighbour counts) is what train will read
    assert a.spec.elements == ("Cu", "Pd", "Ni") and a.spec.neurons == 6 and a.spec.n_max_radial == 3
    assert 0 < a.spec.max_neighbors_angular < a.spec.max_neighbors_radial
    assert a.n_frames == 6  # the training split only

    capsys.readouterr()
    with pytest.raises(SystemExit) as exit_:  # a usage error
        cli_main(["qscaler", str(dataset), "-o", str(tmp_path / "c.json"), "--nep-in", str(tmp_path / "nep.in"),
                  "--neuron", "5"])  # fmt: skip
    assert exit_.value.code == 2
    assert "--nep-in cannot be combined with --neuron" in capsys.readouterr().err
    assert cli_main(["qscaler", str(dataset), "-o", str(tmp_path / "d.json"), "--type", "Cu", "Pd", "Ni",
                     "--n-max", "20", "4"]) == 1  # fmt: skip
    assert "n_max" in capsys.readouterr().err
    assert not (tmp_path / "c.json").exists() and not (tmp_path / "d.json").exists()


def test_gpumd_rule_reproduces_gpumd_pbte(shared_data: Path) -> None:
    """GPUMD's own PbTe model holds the q_scaler GPUMD computed (c = 1) on the same 25 frames."""
    from ase.io import read

    from nepcore.io.nep_txt import read_nep

    gpumd = read_nep(shared_data / "PbTe" / "nep_gpumd_snes.txt")
    frames = read(shared_data / "PbTe" / "train.xyz", ":")
    store = StreamDataStore.from_atoms(frames, gpumd.spec, torch.float64, with_labels=False)
    stats = compute_q_scaler(gpumd.spec, store.batches(25), mode="gpumd")
    # GPUMD computes in float32 and writes 8 significant digits
    np.testing.assert_allclose(stats.q_scaler, gpumd.params["q_scaler"], rtol=2e-5)


def test_hidden_units_start_inside_the_tanh_not_in_its_linear_range(frames, store) -> None:
    """Where the tanh units start is decided by the initial biases, because fan-in weights on
    scaled descriptors give pre-activations of a few tenths (here; ~0.1 on our alloy sets): with
    b0 ~ N(0, 0.1) the mean slope 1 - h² at the first step is 0.85 on these frames (0.99 on the
    alloy sets) and the network starts nearly linear in the descriptors; with spread 1, 0.56."""
    spec = SPEC.replace(neurons=30)
    stats = compute_q_scaler(spec, store.batches(4), mode="gpumd")
    params = initial_parameters(stats, spec, seed=0)
    q = raw_descriptors(spec, frames, params)  # scaled descriptors at the first step, (atoms, D)
    z = np.einsum("thd,ad->ath", params["W0"], q) - params["b0"]  # every network on every atom
    assert (1.0 - np.tanh(z) ** 2).mean() < 0.7


def test_the_bias_spread_changes_no_other_draw(store) -> None:
    """b0's spread scales its draws only: a seed's weights and descriptor coefficients stay."""
    stats = compute_q_scaler(SPEC, store.batches(4), mode="self-consistent", seed=5)
    wide = initial_parameters(stats, SPEC, seed=3)
    narrow = initial_parameters(stats, SPEC, seed=3, bias_std=0.1)
    for name in ("W0", "w1", "c_radial", "c_angular", "q_scaler"):
        assert np.array_equal(wide[name], narrow[name]), name
    assert INITIAL_BIAS_STD == 1.0
    np.testing.assert_allclose(wide["b0"], narrow["b0"] * 10.0, rtol=1e-12)
