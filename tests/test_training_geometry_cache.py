"""The per-frame geometry cache of eager CPU training (nepcore.training.geometry_cache): a
batch's geometry assembled from cached frames has the bits of computing it again, so a stage
trains byte-identically whether the cache keeps it or not; its radial couples give the full
list's energies to the bit and its forces and virials to rounding; where it is not used, the
stage says why."""

from __future__ import annotations

import json
from dataclasses import fields, replace
from pathlib import Path

import pytest
import torch
from helpers.tiny_training import make_dataset, tiny_splits

import nepcore.training.geometry_cache as geometry_cache
from nepcore.data.store import StreamDataStore
from nepcore.model import potential as core
from nepcore.model.nep_model import NEPModel
from nepcore.training.config import StageConfig
from nepcore.training.data import TrainData
from nepcore.training.geometry_cache import GeometryCache, cache_nbytes, geometry_cache_for
from nepcore.training.qscaler import initial_parameters, read_qscaler
from nepcore.training.stage import train_stage


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    return make_dataset(tmp_path_factory.mktemp("geometry"), n_frames=14)


@pytest.fixture(scope="module")
def h5(dataset) -> Path:
    return dataset["h5"]


@pytest.fixture(scope="module")
def splits(dataset):
    """Training and validation splits of a converted dataset (frame indices unique over both),
    float32 as a default stage trains."""
    stats = read_qscaler(dataset["qscaler"])
    store = lambda split: StreamDataStore.from_hdf5(dataset["h5"], stats.spec, split=split, dtype=torch.float32)
    return TrainData(store("train"), store("valid")), stats


def _assert_same_bits(got: core.PairGeometry, want: core.PairGeometry) -> None:
    for name in core.PairGeometry.RADIAL:  # the couples replace the full radial list
        assert getattr(got, name) is None and getattr(want, name) is None, name
    pairs = [(name, getattr(got, name), getattr(want, name)) for name in core.PairGeometry.ANGULAR]
    pairs += [(name, getattr(got.couples, f.name), getattr(want.couples, f.name)) for f in fields(core.RadialCouples)
              for name in [f"couples.{f.name}"]]  # fmt: skip
    for name, a, b in pairs:
        if isinstance(a, bool):
            assert a == b, name
            continue
        assert a.dtype == b.dtype and a.shape == b.shape, name
        assert torch.equal(a, b), name


def _fresh(tables: core.CoreTables, batch) -> core.PairGeometry:
    """The batch's geometry computed from scratch, as the cache hands it over."""
    return GeometryCache(keep=False).geometry(tables, batch)


def test_cached_frames_give_the_bits_of_a_fresh_computation_in_any_batch(splits) -> None:
    """Epoch 0 fills the cache from one batch composition; later epochs (other shuffles, other
    batch sizes, the validation split) assemble theirs from it."""
    data, stats = splits
    tables = NEPModel(stats.spec, initial_parameters(stats, stats.spec, 0)).tables("cpu", torch.float32)
    cache = GeometryCache()
    for epoch, size in ((0, 3), (1, 3), (2, 4), (3, 10)):
        for batch in data.train.batches(size, shuffle=True, seed=0, epoch=epoch):
            _assert_same_bits(cache.geometry(tables, batch), _fresh(tables, batch))
    assert len(cache) == len(data.train)
    for batch in data.valid.batches(2):
        _assert_same_bits(cache.geometry(tables, batch), _fresh(tables, batch))
    assert len(cache) == len(data.train) + len(data.valid)
    # the energies from a cached geometry are the core's own bits; forces and virials add the
    # two directions of a pair in another order (float64 below)
    model = NEPModel(stats.spec, initial_parameters(stats, stats.spec, 0)).to(dtype=torch.float32)
    batch = next(iter(data.train.batches(5, shuffle=True, seed=1, epoch=7)))
    cached = model(batch, geometry=cache.geometry(tables, batch))
    fresh = model(batch)
    assert torch.equal(cached["energy"], fresh["energy"])
    for key in ("forces", "virial"):
        torch.testing.assert_close(cached[key], fresh[key], rtol=1e-5, atol=1e-5 * fresh[key].abs().max().item())


def _drop_pair(batch, p: int):
    """The batch with radial pair p removed: its reverse is then in the list one way only."""
    keep = torch.arange(batch.radial_i.shape[0]) != p
    return replace(batch, radial_i=batch.radial_i[keep], radial_j=batch.radial_j[keep],
                   radial_shift=batch.radial_shift[keep])  # fmt: skip


def test_radial_couples_equal_the_full_list_in_float64(splits, h5) -> None:
    """Energies to the bit, forces and virials to 1e-12 of the full list's, with every pair both
    ways and with pairs held one way only (a list from elsewhere); the cache assembles the
    one-way rows of several frames."""
    data, stats = splits
    model = NEPModel(stats.spec, initial_parameters(stats, stats.spec, 0)).to(dtype=torch.float64)
    tables = model.tables("cpu", torch.float64)
    store = StreamDataStore.from_hdf5(h5, stats.spec, split="train", dtype=torch.float64)
    batch = next(iter(store.batches(4)))
    n = batch.radial_i.shape[0]
    one_way = _drop_pair(_drop_pair(batch, n - 1), 0)  # one pair of the first frame, one of the last
    for b in (batch, one_way):
        geometry = _fresh(tables, b)
        assert geometry.couples.one_way == (b is one_way)
        assert geometry.couples.i.shape[0] == n // 2  # n − 2 pairs: (n − 4) / 2 couples and 2 lone reverses
        got, want = model(b, geometry=geometry), model(b)
        assert torch.equal(got["energy"], want["energy"])
        for key in ("forces", "virial"):
            torch.testing.assert_close(got[key], want[key], rtol=1e-12, atol=1e-12 * want[key].abs().max().item())
    cache = GeometryCache()  # frames kept from one-frame batches, then assembled for a batch of three
    for frame in list(store.batches(1))[:3]:
        cache.geometry(tables, _drop_pair(frame, 0))
    joined = next(iter(store.batches(3)))
    joined = _drop_pair(_drop_pair(_drop_pair(joined, _pair_start(joined, 2)), _pair_start(joined, 1)), 0)
    assembled = cache.geometry(tables, joined)
    assert assembled.couples.one_way
    _assert_same_bits(assembled, _fresh(tables, joined))
    got, want = model(joined, geometry=assembled), model(joined)
    for key in ("forces", "virial"):
        torch.testing.assert_close(got[key], want[key], rtol=1e-12, atol=1e-12 * want[key].abs().max().item())


def _pair_start(batch, frame: int) -> int:
    """Index of the first radial pair of ``frame`` in the batch."""
    return int((batch.atom_frame.index_select(0, batch.radial_i) < frame).sum())


def test_a_geometry_is_refused_where_it_would_be_ignored(splits) -> None:
    data, stats = splits
    model = NEPModel(stats.spec, initial_parameters(stats, stats.spec, 0)).to(dtype=torch.float32)
    batch = next(iter(data.train.batches(2)))
    geometry = core.pair_geometry(model.tables("cpu", torch.float32), batch)
    with pytest.raises(ValueError, match="eager analytical path only"):
        model(batch, force_path="autograd", geometry=geometry)


def test_the_stage_trains_byte_identically_with_and_without_it(splits, tmp_path: Path, monkeypatch) -> None:
    data, stats = splits
    cfg = StageConfig(stage=1, epochs=4, batch_size=3, device="cpu", progress=False, checkpoint_every=1)
    cached = train_stage(cfg, data, stats, tmp_path / "on")
    assert cached["geometry_cache"].startswith("on (")
    monkeypatch.setattr(geometry_cache, "MEMORY_SHARE", 0.0)
    plain = train_stage(cfg, data, stats, tmp_path / "off")
    said = plain["geometry_cache"]
    assert said.startswith("off: it would take") and said.endswith("computed every step")
    assert json.loads((tmp_path / "off" / "status.json").read_text())["geometry_cache"] == plain["geometry_cache"]
    for name in ("loss.out", "nep.txt", "nep_best.txt"):
        assert (tmp_path / "on" / name).read_bytes() == (tmp_path / "off" / name).read_bytes(), name


def test_where_it_is_not_used_the_reason_is_given(splits) -> None:
    data, stats = splits
    stores, spec = [data.train, data.valid], stats.spec
    cases = {
        "not a CPU stage": (torch.device("cuda"), False, "analytical"),
        "compiled step": (torch.device("cpu"), True, "analytical"),
        "autograd force path": (torch.device("cpu"), False, "autograd"),
    }
    for reason, (device, compiled, path) in cases.items():
        cache, said = geometry_cache_for(spec, stores, device, compiled, path, torch.float32)
        assert cache is None and reason in said
    cache, said = geometry_cache_for(spec, stores, torch.device("cpu"), False, "analytical", torch.float32)
    assert isinstance(cache, GeometryCache) and said.startswith("on (")
    # in-memory splits of ase.Atoms number their frames from 0 each: the cache's keys would
    # collide, so the geometry is computed every step (the same numbers)
    shared, stats = tiny_splits(seed=4, n_frames=6, n_train=4, dtype=torch.float32, spec=spec)
    cache, said = geometry_cache_for(spec, [shared.train, shared.valid], torch.device("cpu"), False, "analytical",
                                     torch.float32)  # fmt: skip
    assert isinstance(cache, GeometryCache) and not cache.keep
    assert said == "off: the splits share frame indices; computed every step"


def test_the_size_estimate_counts_every_kept_tensor(splits) -> None:
    """The estimate equals the bytes the cache holds once it has seen every frame."""
    data, stats = splits
    tables = NEPModel(stats.spec, initial_parameters(stats, stats.spec, 0)).tables("cpu", torch.float32)
    cache = GeometryCache()
    for batch in data.train.batches(3):
        cache.geometry(tables, batch)
    nbytes = lambda t: t.numel() * t.element_size()
    kept = lambda frame: [*frame.angular.values(), frame.index, frame.rv, frame.r, frame.df, frame.sums]
    actual = sum(nbytes(t) for frame in cache._frames.values() for t in kept(frame))
    assert cache_nbytes(stats.spec, [data.train], 4) == actual
    radial, angular = data.train.pair_counts()
    assert radial == 2 * sum(frame.index.shape[0] for frame in cache._frames.values())  # every pair both ways
    assert angular == sum(frame.angular["ra"].shape[0] for frame in cache._frames.values())


def test_the_memory_rule_counts_one_cache_per_ddp_process(splits, monkeypatch) -> None:
    data, stats = splits
    stores, cpu = [data.train, data.valid], torch.device("cpu")
    need = cache_nbytes(stats.spec, stores, 4)
    monkeypatch.setattr(geometry_cache, "available_memory_bytes", lambda: int(need / geometry_cache.MEMORY_SHARE * 1.5))
    cache, said = geometry_cache_for(stats.spec, stores, cpu, False, "analytical", torch.float32, processes=1)
    assert cache.keep
    cache, said = geometry_cache_for(stats.spec, stores, cpu, False, "analytical", torch.float32, processes=2)
    assert not cache.keep and "in each of 2 processes" in said


def test_a_frame_without_radial_pairs_keeps_its_place(splits) -> None:
    """A frame whose atoms have no neighbour (a dimer beyond the cutoff) has no couples: alone,
    beside a periodic frame, and kept from one batch and assembled in the other order, the
    couples give the full list's energies to the bit and its forces and virials to 1e-12."""
    from ase import Atoms
    from ase.build import bulk

    from nepcore.data.atoms_batch import batch_from_atoms

    _, stats = splits
    spec = stats.spec
    model = NEPModel(spec, initial_parameters(stats, spec, 0)).to(dtype=torch.float64)
    tables = model.tables("cpu", torch.float64)
    a, b = spec.elements[:2]
    apart = Atoms(f"{a}{b}", positions=[[0, 0, 0], [0, 0, 3 * spec.cutoff_radial[0]]], cell=[40] * 3, pbc=False)
    crystal = bulk("Cu", "fcc", a=3.6, cubic=True).repeat(2)
    crystal.set_chemical_symbols([spec.elements[k % len(spec.elements)] for k in range(len(crystal))])
    crystal.rattle(0.05, seed=1)
    batch = lambda frames, index: replace(batch_from_atoms(frames, spec), frame_index=torch.tensor(index))
    cache = GeometryCache()
    cache.geometry(tables, batch([apart, crystal], [10, 11]))
    for b_ in (batch([apart], [10]), batch([crystal, apart], [11, 10])):
        for geometry in (cache.geometry(tables, b_), _fresh(tables, b_)):
            got, want = model(b_, geometry=geometry), model(b_)
            assert torch.equal(got["energy"], want["energy"])
            for key in ("forces", "virial"):
                torch.testing.assert_close(got[key], want[key], rtol=1e-12, atol=1e-12 * want[key].abs().max().item())
    assert _fresh(tables, batch([apart], [10])).couples.i.shape[0] == 0
