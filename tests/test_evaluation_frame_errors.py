"""Per-frame errors (nepcore.evaluation.frame_errors): worst frames and the warning when a few
frames hold most of a split's squared force or energy error, on hand-made predictions."""

from __future__ import annotations

import numpy as np
import pytest

from nepcore.evaluation.frame_errors import FrameErrors
from nepcore.evaluation.metrics import FrameValues

ATOMS = 2  # atoms per frame


def frame_values(
    force_errors: list[float], frame_index: list[int], has_forces: list[bool], energy_errors: list[float] | None = None
) -> FrameValues:
    """Frames of ATOMS atoms whose predicted forces differ from the reference by ``e`` in every
    component (so each frame's force RMSE is |e|); energies off by ``energy_errors`` (default
    0.001 * frame index) eV/atom."""
    n = len(force_errors)
    ref = np.arange(n * ATOMS * 3, dtype=np.float64).reshape(n * ATOMS, 3)
    pred = ref + np.repeat(np.asarray(force_errors, dtype=np.float64), ATOMS)[:, None]
    ref = np.where(np.repeat(has_forces, ATOMS)[:, None], ref, np.nan)
    energy_ref = np.linspace(-4.0, -3.0, n)
    nan = np.full(n, np.nan)
    return FrameValues(
        n_atoms=np.full(n, ATOMS), atom_frame=np.repeat(np.arange(n), ATOMS), frame_index=np.asarray(frame_index),
        config_type=["md"] * n, volume=nan,
        energy=energy_ref + (1e-3 * np.asarray(frame_index) if energy_errors is None else np.asarray(energy_errors)),
        energy_ref=energy_ref, forces=pred, forces_ref=ref, virial=np.full((n, 6), np.nan),
        virial_ref=np.full((n, 6), np.nan), stress=np.full((n, 6), np.nan), stress_ref=np.full((n, 6), np.nan),
    )  # fmt: skip


def errors_of(
    force_errors: list[float],
    batch: int = 4,
    has_forces: list[bool] | None = None,
    energy_errors: list[float] | None = None,
) -> FrameErrors:
    """A FrameErrors fed in batches; dataset frame i comes from frame 10 + i of a.xyz (i even)
    or frame i of b.xyz (i odd)."""
    n = len(force_errors)
    source = np.arange(n) % 2
    source_frame = np.where(source == 0, 10 + np.arange(n), np.arange(n))
    errors = FrameErrors(["a.xyz", "b.xyz"], source, source_frame)
    has = [True] * n if has_forces is None else has_forces
    for start in range(0, n, batch):
        idx = list(range(start, min(n, start + batch)))
        energy = None if energy_errors is None else [energy_errors[i] for i in idx]
        errors.add(frame_values([force_errors[i] for i in idx], idx, [has[i] for i in idx], energy))
    return errors


def test_worst_frames_are_hand_computed_and_ordered():
    e = [0.1, 0.2, 1.0, 0.05, 0.3, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1]
    worst = errors_of(e).worst("force", 3)
    total = sum(x * x for x in e)
    assert [w["frame_index"] for w in worst] == [2, 4, 1]
    assert [(w["source"], w["source_frame"]) for w in worst] == [("a.xyz", 12), ("a.xyz", 14), ("b.xyz", 1)]
    np.testing.assert_allclose([w["force_rmse"] for w in worst], [1.0, 0.3, 0.2], rtol=1e-12)
    np.testing.assert_allclose([w["share"] for w in worst], [1.0 / total, 0.09 / total, 0.04 / total])
    np.testing.assert_allclose([w["max_force_error"] for w in worst], np.sqrt(3) * np.array([1.0, 0.3, 0.2]))
    np.testing.assert_allclose([w["energy_error"] for w in worst], [0.002, 0.004, 0.001], atol=1e-12)
    assert worst[0]["n_atoms"] == ATOMS and worst[0]["config_type"] == "md"


def test_one_frame_holding_most_of_the_error_is_warned_with_the_rmse_without_it():
    e = [0.1] * 11 + [1.0]  # frame 11: 1.0 / 1.11 = 90 % of the squared error
    warning = errors_of(e).concentration_warning("test")
    assert warning is not None
    assert "test force: 1 of 12 frames (b.xyz frame 11) holds 90 % of the squared force error" in warning
    assert "without it the force RMSE is 100.0 meV/Å" in warning
    assert f"instead of {1e3 * np.sqrt(np.mean(np.square(e))):.1f}" in warning


def test_two_frames_are_named_when_the_split_is_large_enough():
    # 100 frames: 2 % allows two; frames 7 and 40 hold 2 / (2 + 98 * 0.01) = 67 %
    e = [0.1] * 100
    e[7] = e[40] = 1.0
    warning = errors_of(e, batch=16).concentration_warning("valid")
    assert warning is not None
    assert "2 of 100 frames (b.xyz frame 7; a.xyz frame 50) hold 67 %" in warning


@pytest.mark.parametrize(
    "e, why",
    [
        ([0.1] * 8 + [1.0], "9 frames with forces, fewer than 10"),
        ([0.1] * 11 + [0.33], "the worst frame holds 50 %, not more"),
        ([0.1] * 10 + [1.0, 1.0], "two frames needed, one allowed at 12 frames"),
        ([0.0] * 12, "no error at all"),
    ],
)
def test_no_warning(e, why):
    assert errors_of(e).concentration_warning("test") is None, why


def test_frames_without_forces_are_not_counted():
    e = [0.1] * 11 + [1.0]
    has = [True] * 11 + [False]
    errors = errors_of(e, has_forces=has)
    assert errors.concentration_warning("test") is None
    assert 11 not in [w["frame_index"] for w in errors.worst("force", 20)]
    assert len(errors.worst("force", 20)) == 11


def test_nan_predictions_give_no_numbers_and_no_warning():
    errors = errors_of([0.1] * 11 + [np.nan])
    assert errors.concentration_warning("test") is None
    worst = errors.worst("force", 1)[0]
    assert worst["frame_index"] == 11 and worst["force_rmse"] is None and worst["max_force_error"] is None


def test_energy_ranking_and_warning():
    energy = [1e-3] * 11 + [1e-2]  # frame 11: 100 / 111 = 90 % of the squared energy error
    energy[3] = -2e-3
    errors = errors_of([0.1] * 12, energy_errors=energy)
    worst = errors.worst("energy", 2)
    assert [w["frame_index"] for w in worst] == [11, 3]
    total = sum(x * x for x in energy)
    np.testing.assert_allclose([w["share"] for w in worst], [1e-4 / total, 4e-6 / total])
    np.testing.assert_allclose([w["energy_error"] for w in worst], [1e-2, -2e-3], atol=1e-12)
    warning = errors.concentration_warning("test", "energy")
    assert warning is not None
    assert f"test energy: 1 of 12 frames (b.xyz frame 11) holds {100e-4 / total:.0f} % of the squared energy error" in (
        warning
    )
    without = np.sqrt((total - 1e-4) / 11)
    assert f"without it the energy RMSE is {1e3 * without:.1f} meV/atom instead of {1e3 * np.sqrt(total / 12):.1f}" in (
        warning
    )
    assert errors.concentration_warning("test", "force") is None  # equal force errors


def test_frames_beyond_the_training_forces_are_named_largest_first():
    # one batch each: frame i's atoms hold reference rows 2i and 2i + 1 of
    # arange(...).reshape(-1, 3), so its largest reference force is |(6i + 3, 6i + 4, 6i + 5)|
    largest = lambda i: float(np.linalg.norm([6 * i + 3, 6 * i + 4, 6 * i + 5]))
    train = errors_of([0.1] * 4, batch=8)
    assert train.largest_reference_force() == pytest.approx(largest(3), rel=1e-12)
    test = errors_of([0.1] * 6, batch=8)
    for w in test.worst("force", 6):
        assert w["max_force_ref"] == pytest.approx(largest(w["frame_index"]), rel=1e-12)
    warning = test.extrapolation_warning("test", train.largest_reference_force())
    assert warning is not None
    assert warning.startswith(
        f"test: 2 of 6 frames have reference forces beyond the training split's largest ({largest(3):.1f} eV/Å): "
        f"b.xyz frame 5 ({largest(5):.1f} eV/Å), a.xyz frame 14 ({largest(4):.1f} eV/Å); the model extrapolates"
    )
    assert errors_of([0.1] * 4, batch=8).extrapolation_warning("test", train.largest_reference_force()) is None
    assert test.extrapolation_warning("test", None) is None


def test_frames_without_reference_forces_are_never_beyond():
    test = errors_of([0.1] * 6, batch=8, has_forces=[True, True, False, False, False, False])
    assert test.largest_reference_force() == pytest.approx(np.linalg.norm([9, 10, 11]))
    assert test.extrapolation_warning("test", 1e3) is None
    assert test.extrapolation_warning("test", 1.0).startswith("test: 2 of 6 frames")
    assert errors_of([0.1] * 2, has_forces=[False, False]).largest_reference_force() is None
