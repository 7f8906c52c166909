"""Evaluation of a trained model on a ``nepcore convert`` dataset (``nepcore evaluate``).

One pass over each split (train, valid, test: those that have frames), one batch at a time
through :class:`~nepcore.data.store.StreamDataStore`; the predictions of a batch are reduced into
running sums and dropped, so memory for predictions is bounded by the batch (plus a bounded
random sample of points kept for the parity plot and a few numbers per frame of the
evaluated split for the committee table). Outputs in ``out_dir``, each written atomically:

* ``metrics.json`` (schema in :func:`evaluate`): RMSE and MAE of

  - energy per atom, ``(E_pred - E_ref) / N`` (eV/atom; the raw difference -- unlike GPUMD's
    training loss.out there is no mean-residual shift, so a constant offset counts);
  - force components (eV/Å), one sample per atom and Cartesian component;
  - virial per atom, ``(W_pred - W_ref) / N`` (eV/atom), six components xx yy zz xy yz zx;
  - stress, ``W / V * 160.2177`` (GPa, GPUMD's sign: positive = compressive), six components,
    only for frames periodic in all three directions;

  per split and per ``config_type`` inside each split, with sample counts and the mean and
  standard deviation of the reference values (``ref_std`` of the forces is the "force spread"
  an RMSE should be compared with: predicting zero force everywhere gives an RMSE of about
  that size).
* ``energy_test.out``, ``force_test.out``, ``virial_test.out``, ``stress_test.out``: GPUMD's
  formats (:mod:`nepcore.io.gpumd_out`) for the evaluated split (``split``; the suffix stays
  ``test`` whatever the split, since that is the name the workflow and GPUMD users expect),
  rows in dataset order. An empty split gives empty files.
* ``parity.png`` and ``loss.png`` (:mod:`nepcore.evaluation.plots`).
* with a committee: ``committee.csv``, one row per structure of the evaluated split (see
  :data:`COMMITTEE_COLUMNS`), and a summary in metrics.json.

Frames lacking a label (energy, forces, virial) are simply left out of that label's metrics.
"""

from __future__ import annotations

import csv
import io
import json
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
from tqdm import tqdm

from nepcore._utils import atomic_open
from nepcore._version import __version__
from nepcore.data.store import StreamDataStore
from nepcore.data.structures_h5 import SPLIT_NAMES, StructureFile
from nepcore.errors import NepcoreError, writing
from nepcore.evaluation.frame_errors import FrameErrors, max_force_error
from nepcore.evaluation.predict import DEFAULT_BATCH_SIZE, PRECISIONS, load_model
from nepcore.geometry.virial import PRESSURE_UNIT_CONVERSION
from nepcore.io.gpumd_out import GpumdOutputs
from nepcore.model.batch import Batch
from nepcore.model.nep_model import NEPModel, resolve_device
from nepcore.training.config import MAX_FORCE_RISE

#: The quantities compared, with their units in metrics.json.
UNITS: dict[str, str] = {"energy": "eV/atom", "force": "eV/Å", "virial": "eV/atom", "stress": "GPa"}
#: Key under which frames without a config_type label are grouped.
NO_CONFIG_TYPE = "(none)"
#: Points per quantity and split kept for the parity plot (a uniform random sample beyond).
MAX_PARITY_POINTS = 20000
#: Columns of committee.csv. Deviations: eV/Å for forces, eV/atom for the energy.
COMMITTEE_COLUMNS = (
    "frame_index",
    "split",
    "config_type",
    "n_atoms",
    "max_force_deviation",
    "mean_force_deviation",
    "energy_deviation",
    "max_force_error",
)
METRICS_FORMAT = "nepcore-metrics"
METRICS_VERSION = 1


class EvaluationError(NepcoreError, ValueError):
    """Bad input to the evaluation (models, dataset, options); the message says which."""


# ---- streaming statistics ---------------------------------------------------------------------
@dataclass
class ErrorStats:
    """Running RMSE/MAE of ``pred - ref`` and mean/std of ``ref`` over any number of samples.

    The reference mean and spread use Chan et al.'s pairwise update of (mean, M2), which stays
    accurate when the spread is tiny compared with the mean (energies per atom: -4 ± 0.01 eV).
    """

    n: int = 0
    sum_sq: float = 0.0
    sum_abs: float = 0.0
    ref_mean: float = 0.0
    ref_m2: float = 0.0

    def add(self, pred: np.ndarray, ref: np.ndarray) -> None:
        """Add samples (any shape, same for both; NaN-free)."""
        pred = np.asarray(pred, dtype=np.float64).ravel()
        ref = np.asarray(ref, dtype=np.float64).ravel()
        k = ref.size
        if k == 0:
            return
        err = pred - ref
        self.sum_sq += float(err @ err)
        self.sum_abs += float(np.abs(err).sum())
        mean_b = float(ref.mean())
        m2_b = float(((ref - mean_b) ** 2).sum())
        total = self.n + k
        delta = mean_b - self.ref_mean
        self.ref_mean += delta * k / total
        self.ref_m2 += m2_b + delta * delta * self.n * k / total
        self.n = total

    def as_dict(self) -> dict | None:
        """{"n", "rmse", "mae", "ref_mean", "ref_std"} (population std), or None without samples."""
        if self.n == 0:
            return None
        return {
            "n": self.n,
            "rmse": (self.sum_sq / self.n) ** 0.5,
            "mae": self.sum_abs / self.n,
            "ref_mean": self.ref_mean,
            "ref_std": (self.ref_m2 / self.n) ** 0.5,
        }


@dataclass
class GroupStats:
    """Counts and :class:`ErrorStats` of every quantity for one group of frames."""

    n_frames: int = 0
    n_atoms: int = 0
    stats: dict[str, ErrorStats] = field(default_factory=lambda: {q: ErrorStats() for q in UNITS})

    def as_dict(self) -> dict:
        return {"n_frames": self.n_frames, "n_atoms": self.n_atoms, **{q: s.as_dict() for q, s in self.stats.items()}}


@dataclass
class FrameValues:
    """Predictions and references of one batch on the host, float64, NaN where absent.

    n_atoms (F,); atom_frame (N,) frame of each atom; volume (F,) Å³ (NaN unless periodic in
    3D); energy (F,) eV/atom; forces (N, 3) eV/Å; virial (F, 6) eV/atom; stress (F, 6) GPa
    (NaN without a volume).
    ``*_ref`` alike; config_type (F,) labels; frame_index (F,) dataset indices.
    """

    n_atoms: np.ndarray
    atom_frame: np.ndarray
    frame_index: np.ndarray
    config_type: list[str]
    volume: np.ndarray
    energy: np.ndarray
    energy_ref: np.ndarray
    forces: np.ndarray
    forces_ref: np.ndarray
    virial: np.ndarray
    virial_ref: np.ndarray
    stress: np.ndarray
    stress_ref: np.ndarray

    def pairs(self, quantity: str, frames: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """(pred, ref) rows of ``quantity`` whose reference exists, for frames in the boolean
        mask ``frames`` (all when None)."""
        name = "forces" if quantity == "force" else quantity
        pred, ref = getattr(self, name), getattr(self, name + "_ref")
        if frames is not None:
            rows = frames[self.atom_frame] if quantity == "force" else frames
            pred, ref = pred[rows], ref[rows]
        # select by the reference only (a stress reference is NaN without a volume): a NaN
        # prediction must show up as a NaN metric, not silently shrink the sample
        ok = np.isfinite(ref).reshape(len(ref), -1).all(axis=1)
        return pred[ok], ref[ok]


def frame_values(
    batch: Batch, result: dict[str, torch.Tensor], pbc: np.ndarray, config_types: Sequence[str]
) -> FrameValues:
    """:class:`FrameValues` of a batch and the model's output on it.

    pbc: (F,) bool "periodic in all three directions" of the batch's frames (a stress needs a
    volume); config_types: the batch's labels.
    """
    host = lambda t: t.detach().to("cpu", torch.float64).numpy()
    n = host(batch.atoms_per_frame)
    absent = lambda values, has: np.where(has.reshape((-1,) + (1,) * (values.ndim - 1)), values, np.nan)
    has_e, has_f, has_v = (host(m).astype(bool) for m in (batch.has_energy, batch.has_forces, batch.has_virial))
    atom_frame = batch.atom_frame.cpu().numpy()
    volume = np.where(pbc, np.abs(np.linalg.det(host(batch.cells))), np.nan)
    virial, virial_ref = host(result["virial"]), absent(host(batch.virial), has_v)
    to_gpa = PRESSURE_UNIT_CONVERSION / volume[:, None]
    return FrameValues(
        n_atoms=n.astype(np.int64), atom_frame=atom_frame, frame_index=batch.frame_index.cpu().numpy(),
        config_type=[c or NO_CONFIG_TYPE for c in config_types], volume=volume,
        energy=host(result["energy"]) / n, energy_ref=absent(host(batch.energy), has_e) / n,
        forces=host(result["forces"]), forces_ref=absent(host(batch.forces), has_f[atom_frame]),
        virial=virial / n[:, None], virial_ref=virial_ref / n[:, None],
        stress=virial * to_gpa, stress_ref=virial_ref * to_gpa,
    )  # fmt: skip


class SplitAccumulator:
    """Metrics of one split (overall and per config_type) and its parity-plot sample."""

    def __init__(self, n_frames: int, n_atoms: int, max_points: int = MAX_PARITY_POINTS, seed: int = 0):
        self.total = GroupStats()
        self.by_config_type: dict[str, GroupStats] = {}
        # the sample is uniform because the totals are known before streaming
        rows = {"energy": n_frames, "force": n_atoms, "virial": n_frames, "stress": n_frames}
        per_row = {"energy": 1, "force": 3, "virial": 6, "stress": 6}
        self._keep = {q: min(1.0, max_points / max(1, rows[q] * per_row[q])) for q in UNITS}
        self._rng = np.random.default_rng(seed)
        self._sample: dict[str, list[tuple[np.ndarray, np.ndarray]]] = {q: [] for q in UNITS}

    def add(self, values: FrameValues) -> None:
        labels = np.array(values.config_type, dtype=object)
        groups = [(self.total, None)] + [
            (self.by_config_type.setdefault(c, GroupStats()), labels == c) for c in dict.fromkeys(values.config_type)
        ]
        for group, mask in groups:
            group.n_frames += len(values.n_atoms) if mask is None else int(mask.sum())
            group.n_atoms += int(values.n_atoms.sum() if mask is None else values.n_atoms[mask].sum())
            for q, stats in group.stats.items():
                stats.add(*values.pairs(q, mask))
        for q in UNITS:
            pred, ref = (a.ravel() for a in values.pairs(q))
            keep = self._rng.random(pred.size) < self._keep[q]
            self._sample[q].append((pred[keep], ref[keep]))

    def sample(self) -> dict[str, tuple[np.ndarray, np.ndarray]]:
        """Parity-plot points: quantity -> (pred, ref) flat arrays."""
        return {
            q: (
                np.concatenate([p for p, _ in parts] or [np.zeros(0)]),
                np.concatenate([r for _, r in parts] or [np.zeros(0)]),
            )
            for q, parts in self._sample.items()
        }

    def as_dict(self) -> dict:
        return {
            **self.total.as_dict(),
            "by_config_type": {c: g.as_dict() for c, g in sorted(self.by_config_type.items())},
        }


# ---- committee ----------------------------------------------------------------------------
def committee_deviation(members: Sequence[NEPModel], batch: Batch) -> dict[str, np.ndarray]:
    """Disagreement of a committee on one batch, per frame.

    max_force_deviation (F,) eV/Å: max over atoms i of sqrt(mean_m |F_i^m - <F_i>|^2), the
    force model deviation of DP-GEN/active-learning practice (population std over members);
    mean_force_deviation (F,): the same, averaged over the frame's atoms;
    energy_deviation (F,) eV/atom: std over members of E/N.
    """
    outputs = [m(batch) for m in members]
    forces = torch.stack([o["forces"] for o in outputs])  # (M, N, 3)
    energy = torch.stack([o["energy"] for o in outputs]) / batch.atoms_per_frame  # (M, F)
    per_atom = (forces - forces.mean(0)).square().sum(-1).mean(0).sqrt()  # (N,)
    n_frames = batch.n_frames
    max_dev = per_atom.new_zeros(n_frames).scatter_reduce(0, batch.atom_frame, per_atom, "amax")
    mean_dev = per_atom.new_zeros(n_frames).index_add(0, batch.atom_frame, per_atom) / batch.atoms_per_frame
    host = lambda t: t.detach().to("cpu", torch.float64).numpy()
    return {
        "max_force_deviation": host(max_dev),
        "mean_force_deviation": host(mean_dev),
        "energy_deviation": host(energy.std(0, unbiased=False)),
    }


def _spearman(x: np.ndarray, y: np.ndarray) -> float | None:
    """Rank correlation of two samples (ties broken by order), None when undefined."""
    ok = np.isfinite(x) & np.isfinite(y)
    if ok.sum() < 3:
        return None
    rx, ry = (np.argsort(np.argsort(a[ok])).astype(np.float64) for a in (x, y))
    c = np.corrcoef(rx, ry)[0, 1]
    return float(c) if np.isfinite(c) else None


def committee_summary(table: dict[str, list], paths: Sequence[str]) -> dict:
    """The committee block of metrics.json from the per-structure columns."""
    dev = np.asarray(table["max_force_deviation"], dtype=np.float64)
    stats = None
    if dev.size:
        stats = {
            "mean": float(dev.mean()),
            "median": float(np.median(dev)),
            "max": float(dev.max()),
            "p90": float(np.percentile(dev, 90)),
        }
    return {
        "members": [str(p) for p in paths],
        "max_force_deviation": stats,
        "spearman_deviation_vs_max_force_error": _spearman(dev, np.asarray(table["max_force_error"], float)),
        "per_structure": {k: table[k] for k in ("frame_index", "max_force_deviation", "energy_deviation")},
        "csv": "committee.csv",
    }


def _check_committee(main: NEPModel, members: Sequence[NEPModel], paths: Sequence[str]) -> None:
    """Members must share the types and cutoffs: the batches' types and pairs are built for
    the main model."""
    if len(members) == 1:
        raise EvaluationError("a committee needs at least 2 members, found 1")
    for m, path in zip(members, paths):
        same = m.spec.elements == main.spec.elements and all(
            np.array_equal(m.spec.pair_cutoffs(k), main.spec.pair_cutoffs(k)) for k in ("radial", "angular")
        )
        if not same:
            raise EvaluationError(f"{path}: committee member has other types or cutoffs than the model")


# ---- the whole evaluation ---------------------------------------------------------------------
def evaluate(
    model: str | os.PathLike,
    data: str | os.PathLike,
    out_dir: str | os.PathLike,
    split: str = "test",
    loss_files: Sequence[str | os.PathLike] = (),
    committee: Sequence[str | os.PathLike] = (),
    batch_size: int = DEFAULT_BATCH_SIZE,
    precision: str = "float64",
    device: str = "auto",
    plots: bool = True,
    progress: bool | None = None,
    compile: bool = False,
    stage1_status: str | os.PathLike | None = None,
) -> dict:
    """Evaluate ``model`` (nep.txt) on every split of ``data``; write the outputs to ``out_dir``.

    split: the split of the ``*_test.out`` files, the parity plot's highlight and the
    committee table. stage1_status: stage 1's status.json; when the model's
    validation force RMSE is more than MAX_FORCE_RISE above stage 1's best, a
    warning says so (the exported model gave up forces). loss_files: loss.out of each
    training stage, in order (missing or empty ones are noted in the plot). committee: ≥ 2
    nep.txt files with the model's types and cutoffs. compile: evaluate through the
    inductor-compiled model (and members). Returns the metrics.json content::

        {"format": "nepcore-metrics", "version": 1, "nepcore": str, "model": str, "data": str,
         "evaluated_split": str, "precision": str, "units": {quantity: unit},
         "splits": {split: {"n_frames", "n_atoms", "energy", "force", "virial", "stress",
                            "by_config_type": {label: {same without by_config_type}},
                            "worst_frames": {"force" | "energy": [{"frame_index", "source",
                                "source_frame", "config_type", "n_atoms", "share",
                                "force_rmse", "max_force_error", "energy_error"}, ...]}
                                (nepcore.evaluation.frame_errors)}},
         "summary": {"split", "n_frames", "energy_rmse", "energy_mae", "force_rmse",
                     "force_mae", "force_spread", "virial_rmse", "stress_rmse"},
         "warnings": [str, ...] (non-finite predictions; labels the training split lacks; a
                      few frames holding most of the evaluated split's squared force or
                      energy error),
         "committee": null | {"members", "max_force_deviation": {"mean", "median", "p90", "max"},
                              "spearman_deviation_vs_max_force_error",
                              "per_structure": {"frame_index", "max_force_deviation",
                                                "energy_deviation"}, "csv"}}

    where each quantity is null (no reference) or {"n", "rmse", "mae", "ref_mean", "ref_std"}
    in its unit (n counts samples: frames, force components or virial components).
    Raises EvaluationError, NepFileError, DatasetFileError on bad input.
    """
    if split not in SPLIT_NAMES:
        raise EvaluationError(f"split must be one of {', '.join(SPLIT_NAMES)}, found {split!r}")
    if batch_size < 1:
        raise EvaluationError(f"batch size must be at least 1, found {batch_size}")
    if precision not in PRECISIONS:
        raise EvaluationError(f"precision must be one of {sorted(PRECISIONS)}, found {precision!r}")
    dev, dtype = resolve_device(device), PRECISIONS[precision]
    out_dir = Path(out_dir)
    with writing(out_dir):
        out_dir.mkdir(parents=True, exist_ok=True)
    net = load_model(model, precision, str(dev))
    members = [load_model(p, precision, str(dev)) for p in committee]
    if compile:
        for m in [net, *members]:  # one architecture: the members reuse the model's cached graph
            m.use_compiled_core()
    if members:
        _check_committee(net, members, [str(p) for p in committee])
    with StructureFile(data) as h5:
        sizes = {name: len(h5.split(name)) for name in SPLIT_NAMES}
        frame_table = h5.frame_table()
        periodic = frame_table["pbc"].all(axis=1)
        labels = h5.config_types()
        source_paths = h5.provenance().source_paths
    splits = [name for name in SPLIT_NAMES if sizes[name] or name == split]
    results: dict[str, SplitAccumulator] = {}
    frame_errors: dict[str, FrameErrors] = {}
    train_atoms_per_type = np.zeros(net.spec.n_types, dtype=np.int64)
    table: dict[str, list] = {k: [] for k in COMMITTEE_COLUMNS}
    # the *_test.out files are committed together when the block ends without an error
    with GpumdOutputs(out_dir, "test") as outputs, torch.no_grad():
        for name in splits:
            # one split's store at a time: its memory is released before the next is built
            with (
                StreamDataStore.from_hdf5(data, net.spec, split=name, dtype=dtype) as store,
                tqdm(
                    total=len(store),
                    desc=f"evaluate {name}",
                    unit=" frames",
                    leave=False,
                    disable=None if progress is None else not progress,
                ) as bar,
            ):
                acc = results[name] = SplitAccumulator(len(store), store.n_atoms)
                errors = frame_errors[name] = FrameErrors(
                    source_paths, frame_table["source"], frame_table["source_frame"]
                )
                for batch in store.batches(batch_size, device=dev):
                    frames = batch.frame_index.cpu().numpy()
                    values = frame_values(batch, net(batch), periodic[frames], [labels[f] for f in frames])
                    acc.add(values)
                    errors.add(values)
                    if name == "train":
                        train_atoms_per_type += np.bincount(batch.types.cpu().numpy(), minlength=net.spec.n_types)
                    if name == split:
                        _write_rows(outputs, values)
                        if members:
                            _committee_rows(table, name, values, committee_deviation(members, batch))
                    bar.update(len(frames))
    metrics = _metrics(model, data, split, precision, results)
    for name, errors in frame_errors.items():
        metrics["splits"][name]["worst_frames"] = {q: errors.worst(q) for q in ("force", "energy")}
    # warned for the evaluated split only, the one whose RMSE the summary line reports: on the
    # training split of PbTe (18 frames) one frame held 51-61 % of an energy RMSE of 0.4 meV/atom
    metrics["warnings"] += [
        w for q in ("force", "energy") if (w := frame_errors[split].concentration_warning(split, q))
    ]
    if sizes["train"]:
        metrics["warnings"] += untrained_type_warnings(net.spec.elements, train_atoms_per_type)
        if split != "train":
            beyond = frame_errors[split].extrapolation_warning(split, frame_errors["train"].largest_reference_force())
            if beyond:
                metrics["warnings"].append(beyond)
    if stage1_status is not None:
        warning = force_regression(metrics, stage1_status)
        if warning:
            metrics["warnings"].append(warning)
    if members:
        metrics["committee"] = committee_summary(table, [str(p) for p in committee])
        write_csv(out_dir / "committee.csv", table)
    write_json(out_dir / "metrics.json", metrics)
    if plots:
        from nepcore.evaluation.plots import loss_plot, parity_plot

        parity_plot(
            out_dir / "parity.png",
            {name: acc.sample() for name, acc in results.items()},
            metrics["splits"],
            highlight=split,
        )
        loss_plot(out_dir / "loss.png", [str(p) for p in loss_files])
    return metrics


def force_regression(metrics: dict, stage1_status: str | os.PathLike) -> str | None:
    """A warning when the model's validation force RMSE exceeds stage 1's best by more than
    MAX_FORCE_RISE (None otherwise, or when either number is missing).

    The threshold is the bound stage 2 keeps by default (``max_force_rise``), so the warning
    fires only for a model that left it (``final_model: last``, a loosened bound).
    """
    try:
        best = json.loads(Path(stage1_status).read_text()).get("best") or {}
    except (OSError, ValueError):
        return None
    reference = best.get("valid_rmse_f")
    valid = (metrics["splits"].get("valid") or {}).get("force")
    if not reference or valid is None or not np.isfinite(valid["rmse"]):
        return None
    excess = valid["rmse"] / reference - 1.0
    if excess <= MAX_FORCE_RISE:
        return None
    return (
        f"the evaluated model's validation force RMSE ({1e3 * valid['rmse']:.1f} meV/Å) is {100 * excess:.0f} % "
        f"above stage 1's best ({1e3 * reference:.1f} meV/Å, {stage1_status}): stage 2 gave up forces; "
        "consider stage 1's nep_best.txt or a larger stage-2 lambda_f"
    )


def _write_rows(outputs: GpumdOutputs, v: FrameValues) -> None:
    """Append a batch to the *_test.out files (the writer wants totals; NaN = absent)."""
    n = v.n_atoms.astype(np.float64)
    outputs.write(
        n_atoms=n,
        volume=v.volume,
        energy=v.energy * n,
        forces=v.forces,
        virial=v.virial * n[:, None],
        ref_energy=v.energy_ref * n,
        ref_forces=v.forces_ref,
        ref_virial=v.virial_ref * n[:, None],
    )


def _committee_rows(table: dict[str, list], split: str, values: FrameValues, dev: dict[str, np.ndarray]) -> None:
    """Append one batch's rows (see :data:`COMMITTEE_COLUMNS`) to the committee table."""
    table["frame_index"] += values.frame_index.tolist()
    table["split"] += [split] * len(values.n_atoms)
    table["config_type"] += list(values.config_type)
    table["n_atoms"] += values.n_atoms.tolist()
    for key in ("max_force_deviation", "mean_force_deviation", "energy_deviation"):
        table[key] += dev[key].tolist()
    table["max_force_error"] += max_force_error(values).tolist()


def _metrics(model, data, split: str, precision: str, results: dict[str, SplitAccumulator]) -> dict:
    splits = {name: acc.as_dict() for name, acc in results.items()}
    chosen = splits[split]
    pick = lambda q, key: None if chosen[q] is None else chosen[q][key]
    return {
        "format": METRICS_FORMAT, "version": METRICS_VERSION, "nepcore": __version__,
        "model": str(model), "data": str(data), "evaluated_split": split, "precision": precision,
        "units": dict(UNITS), "splits": splits,
        "summary": {
            "split": split, "n_frames": chosen["n_frames"],
            "energy_rmse": pick("energy", "rmse"), "energy_mae": pick("energy", "mae"),
            "force_rmse": pick("force", "rmse"), "force_mae": pick("force", "mae"),
            "force_spread": pick("force", "ref_std"),
            "virial_rmse": pick("virial", "rmse"), "stress_rmse": pick("stress", "rmse"),
        },
        "committee": None,
        "warnings": [f"{name} {q}: non-finite predictions (NaN/inf), RMSE over {block[q]['n']} samples undefined"
                     for name, block in splits.items() for q in UNITS
                     if block[q] is not None and not np.isfinite(block[q]["rmse"])] + _training_warnings(splits),
    }  # fmt: skip


def _training_warnings(splits: dict) -> list[str]:
    """Labels the training split lacks: the model was never fitted to them (a run on a
    dataset whose forces were lost must not look like a normal one)."""
    train = splits.get("train")
    if not train or not train["n_frames"]:
        return []
    return [
        f"train {q}: the training split has no {q} labels: the model was not trained on {q}"
        for q in ("energy", "force")
        if train[q] is None
    ]


def untrained_type_warnings(elements: tuple[str, ...], train_atoms_per_type: np.ndarray) -> list[str]:
    """Model types without a single atom in the training split: their networks were never
    fitted (kept on purpose for a later fine-tuning, or a mistake in the type list)."""
    missing = [symbol for symbol, n in zip(elements, train_atoms_per_type.tolist()) if n == 0]
    if not missing:
        return []
    return [
        f"train: model type(s) {', '.join(missing)} have no atoms in the training split: their networks "
        "are untrained and predictions for them are meaningless"
    ]


def write_json(path: str | os.PathLike, content: dict) -> None:
    """JSON (UTF-8, indented), atomically; non-finite numbers become null (valid JSON)."""
    with writing(path), atomic_open(path) as fh:
        json.dump(_finite(content), fh, indent=1, ensure_ascii=False, allow_nan=False)
        fh.write("\n")


def _finite(value):
    if isinstance(value, float):
        return value if np.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


def write_csv(path: str | os.PathLike, table: dict[str, list]) -> None:
    """A column table as CSV with a header row (floats with repr precision), atomically."""
    text = io.StringIO()
    writer = csv.writer(text, lineterminator="\n")
    writer.writerow(list(table))
    writer.writerows(zip(*table.values()))
    with writing(path), atomic_open(path) as fh:
        fh.write(text.getvalue())
