"""StreamDataStore: collate against an independent reference, prefetch, lazy mode, sizes."""

from __future__ import annotations

import dataclasses
import gc
import threading
from pathlib import Path

import ase.io
import numpy as np
import pytest
import torch
from ase import Atoms
from ase.build import bulk
from ase.calculators.singlepoint import SinglePointCalculator
from helpers import specs
from helpers.reference_batch import build_pairs, collate, store_frames
from helpers.structures import mixed_frames

import nepcore.data.store as store_module
from nepcore.data.convert import convert
from nepcore.data.prefetch import prefetched
from nepcore.data.store import StreamDataStore
from nepcore.model.batch import Batch
from nepcore.spec import ModelSpec

SPEC = specs.STORE


@pytest.fixture(scope="module")
def dataset(tmp_path_factory) -> tuple[Path, list[Atoms]]:
    folder = tmp_path_factory.mktemp("store")
    frames = mixed_frames()
    ase.io.write(folder / "in.xyz", frames)
    convert([str(folder / "in.xyz")], folder / "s.h5", fractions=(1, 0, 0), cutoff=0, progress=False)
    return folder / "s.h5", ase.io.read(folder / "in.xyz", ":")


def reference_batch(atoms_list: list[Atoms], spec: ModelSpec, dtype: torch.dtype, frame_index) -> dict:
    """A batch assembled independently of nepcore.model.batch/compact: pair by pair, in plain Python."""
    positions, types, atom_frame, cells, n_atoms, forces, energy, virial = [], [], [], [], [], [], [], []
    has_e, has_f, has_v, weight = [], [], [], []
    pairs = {"radial": ([], [], []), "angular": ([], [], [])}
    offset = 0
    for f, atoms in enumerate(atoms_list):
        t = np.array([spec.elements.index(s) for s in atoms.get_chemical_symbols()], dtype=np.int32)
        cell = atoms.cell.array
        radial, angular = build_pairs(atoms.positions, cell, atoms.pbc, t, spec)
        for name, plist in (("radial", radial), ("angular", angular)):
            for i, j, s in zip(plist.i, plist.j, plist.shift):
                pairs[name][0].append(int(i) + offset)
                pairs[name][1].append(int(j) + offset)
                pairs[name][2].append([float(x) for x in s])
        n = len(atoms)
        positions.extend(atoms.positions.tolist())
        types.extend(t.tolist())
        atom_frame.extend([f] * n)
        cells.append(cell.tolist())
        n_atoms.append(float(n))
        results = atoms.calc.results
        has_f.append("forces" in results)
        forces.extend(results["forces"].tolist() if "forces" in results else [[0.0] * 3] * n)
        has_e.append(True)
        energy.append(float(results["energy"]))
        W = atoms.info.get("virial")
        has_v.append(W is not None)
        # GPUMD order xx yy zz xy yz zx, lower triangle wins; ASE's virial is the transpose
        virial.append([0.0] * 6 if W is None else [W.T[0, 0], W.T[1, 1], W.T[2, 2], W.T[1, 0], W.T[2, 1], W.T[2, 0]])
        weight.append(float(atoms.info["weight"]))
        offset += n
    # slot of each angular pair = how many earlier pairs share its centre atom
    seen: dict[int, int] = {}
    slot = []
    for i in pairs["angular"][0]:
        slot.append(seen.get(i, 0))
        seen[i] = seen.get(i, 0) + 1
    as_float = lambda x: torch.tensor(np.array(x, dtype=np.float64).reshape(np.shape(x))).to(dtype)
    as_long = lambda x: torch.tensor(x, dtype=torch.int64)
    return dict(
        positions=as_float(positions),
        types=as_long(types),
        atom_frame=as_long(atom_frame),
        cells=as_float(cells),
        atoms_per_frame=as_float(n_atoms),
        radial_i=as_long(pairs["radial"][0]),
        radial_j=as_long(pairs["radial"][1]),
        radial_shift=as_float(pairs["radial"][2]).reshape(-1, 3),
        angular_i=as_long(pairs["angular"][0]),
        angular_j=as_long(pairs["angular"][1]),
        angular_shift=as_float(pairs["angular"][2]).reshape(-1, 3),
        angular_slot=as_long(slot),
        angular_slots=torch.zeros(max([1, *seen.values()]), dtype=torch.int8),
        energy=as_float(energy),
        has_energy=torch.tensor(has_e),
        forces=as_float(forces),
        has_forces=torch.tensor(has_f),
        virial=as_float(virial),
        has_virial=torch.tensor(has_v),
        weight=as_float(weight),
        frame_index=as_long(list(frame_index)),
    )


def assert_batches_equal(a: Batch, b: Batch | dict) -> None:
    for field in dataclasses.fields(Batch):
        x = getattr(a, field.name)
        y = b[field.name] if isinstance(b, dict) else getattr(b, field.name)
        assert x.dtype == y.dtype and x.shape == y.shape, (field.name, x.dtype, y.dtype, x.shape, y.shape)
        assert torch.equal(x, y), field.name


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_batch_equals_independent_reference_and_collate(dataset, dtype):
    path, atoms_list = dataset
    store = StreamDataStore.from_hdf5(path, SPEC, split="all", dtype=dtype, lazy=False)
    order = [7, 2, 0, 3, 5, 8]
    batch = store.batch(order)
    assert batch.angular_i.numel() > 0 and (batch.radial_shift != 0).any()
    assert_batches_equal(batch, reference_batch([atoms_list[k] for k in order], SPEC, dtype, order))
    assert_batches_equal(batch, collate(store_frames(store, order), dtype))


def test_max_neighbors_are_the_true_maxima(dataset):
    path, atoms_list = dataset
    store = StreamDataStore.from_hdf5(path, SPEC, split="all", lazy=False)
    best = [0, 0]
    for atoms in atoms_list:
        t = np.array([SPEC.elements.index(s) for s in atoms.get_chemical_symbols()])
        radial, angular = build_pairs(atoms.positions, atoms.cell.array, atoms.pbc, t, SPEC)
        best = [max(best[0], radial.counts(len(t)).max()), max(best[1], angular.counts(len(t)).max())]
    assert store.max_neighbors() == tuple(best)
    assert store.n_atoms == sum(len(a) for a in atoms_list) and len(store) == len(atoms_list)


def test_prefetched_equals_direct_and_shuffle_is_seeded(dataset):
    path, _ = dataset
    store = StreamDataStore.from_hdf5(path, SPEC, split="all", lazy=False)
    for epoch in (0, 1):
        direct = list(store.batches(4, shuffle=True, seed=3, epoch=epoch, prefetch=0))
        ahead = list(store.batches(4, shuffle=True, seed=3, epoch=epoch, prefetch=2))
        assert len(direct) == len(ahead) == 3
        for a, b in zip(direct, ahead):
            assert_batches_equal(a, b)
    order = lambda epoch, seed=3: np.concatenate(store.batch_indices(4, True, seed, epoch)).tolist()
    assert order(0) == order(0) and order(0) != order(1) and order(0) != order(0, seed=4)
    assert sorted(order(1)) == list(range(9))
    plain = list(store.batches(4))
    assert torch.cat([b.frame_index for b in plain]).tolist() == list(range(9))
    assert [b.n_frames for b in store.batches(4, drop_last=True)] == [4, 4]
    # distributed shards: rank r gets batches r, r + world, ... of the same epoch order
    full = list(store.batches(2, shuffle=True, seed=3, epoch=1))
    shards = [list(store.batches(2, shuffle=True, seed=3, epoch=1, shard=(r, 2))) for r in (0, 1)]
    assert [len(s) for s in shards] == [3, 2]
    for k, batch in enumerate(full):
        assert_batches_equal(shards[k % 2][k // 2], batch)


def test_lazy_equals_in_memory_and_cleans_up(dataset, tmp_path):
    path, _ = dataset
    memory = StreamDataStore.from_hdf5(path, SPEC, split="all", dtype=torch.float32, lazy=False)
    lazy = StreamDataStore.from_hdf5(path, SPEC, split="all", dtype=torch.float32, lazy=True, scratch_dir=str(tmp_path))
    assert lazy.lazy and not memory.lazy
    assert lazy.max_neighbors() == memory.max_neighbors() and lazy.n_atoms == memory.n_atoms
    assert lazy.host_nbytes() < memory.host_nbytes() / 5
    for a, b in zip(memory.batches(4, shuffle=True, seed=1), lazy.batches(4, shuffle=True, seed=1)):
        assert_batches_equal(a, b)
    assert_batches_equal(memory.batch([8, 0, 0, 4]), lazy.batch([8, 0, 0, 4]))
    assert len(list(tmp_path.iterdir())) == 1
    lazy.close()
    assert list(tmp_path.iterdir()) == []


def test_auto_mode_follows_available_memory(dataset, monkeypatch, tmp_path):
    path, _ = dataset
    monkeypatch.setattr(store_module, "available_memory_bytes", lambda: 10_000)
    with StreamDataStore.from_hdf5(path, SPEC, split="all", scratch_dir=str(tmp_path)) as small:
        assert small.lazy
    monkeypatch.setattr(store_module, "available_memory_bytes", lambda: 10**12)
    assert not StreamDataStore.from_hdf5(path, SPEC, split="all").lazy


def test_split_selection_and_from_atoms(dataset, tmp_path):
    path, atoms_list = dataset
    src = tmp_path / "in.xyz"
    ase.io.write(src, atoms_list)
    split_file = tmp_path / "split.h5"
    convert([str(src)], split_file, fractions=(0.6, 0.2, 0.2), seed=2, cutoff=0, progress=False)
    train = StreamDataStore.from_hdf5(split_file, SPEC, split="train", dtype=torch.float64)
    test = StreamDataStore.from_hdf5(split_file, SPEC, split="test", dtype=torch.float64)
    assert len(train) + len(test) < len(atoms_list)
    assert not set(train.frame_index.tolist()) & set(test.frame_index.tolist())
    direct = StreamDataStore.from_atoms(atoms_list, SPEC, dtype=torch.float64, source_format="extxyz")
    picked = train.frame_index
    expected = direct.batch(picked)
    assert_batches_equal(train.batch(np.arange(len(train))), expected)


def test_unlabelled_atoms_for_prediction():
    atoms = bulk("Ni", "fcc", a=3.5, cubic=True)
    store = StreamDataStore.from_atoms([atoms, atoms], SPEC, with_labels=False)
    batch = store.batch([0, 1])
    assert not batch.has_energy.any() and not batch.has_forces.any() and not batch.has_virial.any()
    assert batch.types.unique().tolist() == [2]


def test_no_atoms_give_an_empty_store():
    """An empty list (e.g. a split with no frames) is an empty store, not a reshape error."""
    assert len(StreamDataStore.from_atoms([], SPEC, dtype=torch.float64)) == 0


def test_species_outside_the_model_is_an_error(dataset):
    path, _ = dataset
    with pytest.raises(ValueError, match="Pd .*not types of the model"):
        StreamDataStore.from_hdf5(path, ModelSpec(elements=("Cu", "Ni")), split="all")


def test_host_memory_under_1kb_per_atom_at_6_4(tmp_path):
    frames = []
    for k in range(2):
        atoms = bulk("Cu", "fcc", a=3.61, cubic=True).repeat((3, 3, 3))  # 108 atoms, dense
        atoms.rattle(0.05, seed=k)
        atoms.calc = SinglePointCalculator(atoms, energy=-300.0, forces=np.zeros((108, 3)))
        frames.append(atoms)
    spec = ModelSpec(elements=("Cu",), cutoff_radial=6.0, cutoff_angular=4.0)
    store = StreamDataStore.from_atoms(frames, spec, dtype=torch.float32)
    radial, _ = store.max_neighbors()
    assert radial >= 78  # the pairs really are there
    assert store.host_nbytes() / store.n_atoms < 1000


def test_prefetch_propagates_errors_and_stops_on_break():
    def make(x):
        if x == 3:
            raise RuntimeError("boom at 3")
        return x * 2

    with pytest.raises(RuntimeError, match="boom at 3"):
        list(prefetched(make, range(10), ahead=2))
    before = threading.active_count()
    for value in prefetched(lambda x: x, range(1000), ahead=1):
        if value == 2:
            break
    gc.collect()
    assert threading.active_count() == before
    assert list(prefetched(lambda x: x + 1, range(5), ahead=0)) == [1, 2, 3, 4, 5]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device (pinned, non_blocking copies)")
def test_cuda_batches_equal_cpu_batches(dataset):
    path, _ = dataset
    store = StreamDataStore.from_hdf5(path, SPEC, split="all", lazy=False)
    for a, b in zip(store.batches(4, shuffle=True, device="cuda"), store.batches(4, shuffle=True)):
        assert a.positions.device.type == "cuda"
        assert_batches_equal(a.to("cpu"), b)


def test_kept_passes_give_the_same_batches_without_assembling_them_again(dataset, monkeypatch):
    """keep_passes: an unshuffled CPU pass is assembled once and its batches come back on the
    next pass of the same batch size and shard; shuffled passes, a pass cut short and a pass
    over the byte budget are assembled every time; keep_passes(0) drops what was kept."""
    path, _ = dataset
    store = StreamDataStore.from_hdf5(path, SPEC, split="all", lazy=False)
    plain = list(store.batches(4))
    assembled = []
    original = StreamDataStore.batch
    monkeypatch.setattr(StreamDataStore, "batch", lambda self, i: assembled.append(len(i)) or original(self, i))
    store.keep_passes(2**30)
    first, again = list(store.batches(4)), list(store.batches(4))
    assert assembled == [4, 4, 1]  # the second pass assembled nothing
    assert all(a is b for a, b in zip(first, again)) and len(again) == 3
    for a, b in zip(again, plain):
        assert_batches_equal(a, b)
    assert store.kept_nbytes == sum(b.nbytes for b in first) > 0
    assert [len(list(store.batches(2, shard=(r, 2)))) for r in (0, 1, 0, 1)] == [3, 2, 3, 2]
    assert assembled[3:] == [2, 2, 1, 2, 2]  # each shard once (batches 0, 2, 4, then 1, 3)
    assembled.clear()
    for _ in range(2):
        list(store.batches(4, shuffle=True, seed=3, epoch=0))
    assert assembled == [4, 4, 1] * 2  # shuffled: never kept
    assembled.clear()
    for _ in store.batches(3, prefetch=0):  # cut short (one batch assembled): not kept
        break
    list(store.batches(3))
    list(store.batches(3))
    assert assembled == [3] + [3, 3, 3]  # the first whole pass is kept, the next reads it
    kept = store.kept_nbytes
    store.keep_passes(kept)  # a budget that still holds them keeps them
    assert store.kept_nbytes == kept
    store.keep_passes(kept - 1)  # one below: dropped
    assert store.kept_nbytes == 0
    assembled.clear()
    list(store.batches(4))
    assert assembled == [4, 4, 1]
    small = StreamDataStore.from_hdf5(path, SPEC, split="all", lazy=False)
    small.keep_passes(sum(b.nbytes for b in plain) - 1)  # one byte short of the pass
    assembled.clear()
    list(small.batches(4))
    list(small.batches(4))
    assert assembled == [4, 4, 1] * 2 and small.kept_nbytes == 0
