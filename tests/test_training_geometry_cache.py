"""The per-frame geometry cache of eager CPU training (nepcore.training.geometry_cache): a
batch's geometry assembled from cached frames has the bits of computing it again, so a stage
trains byte-identically with and without it; where it is not used, the stage says why."""

from __future__ import annotations

import json
from dataclasses import fields
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
def splits(tmp_path_factory):
    """Training and validation splits of a converted dataset (frame indices unique over both),
    float32 as a default stage trains."""
    ds = make_dataset(tmp_path_factory.mktemp("geometry"), n_frames=14)
    stats = read_qscaler(ds["qscaler"])
    store = lambda split: StreamDataStore.from_hdf5(ds["h5"], stats.spec, split=split, dtype=torch.float32)
    return TrainData(store("train"), store("valid")), stats


def _assert_same_bits(got: core.PairGeometry, want: core.PairGeometry) -> None:
    for field in fields(core.PairGeometry):
        a, b = getattr(got, field.name), getattr(want, field.name)
        assert a.dtype == b.dtype and a.shape == b.shape, field.name
        assert torch.equal(a, b), field.name


def test_cached_frames_give_the_bits_of_a_fresh_computation_in_any_batch(splits) -> None:
    """Epoch 0 fills the cache from one batch composition; later epochs (other shuffles, other
    batch sizes, the validation split) assemble theirs from it."""
    data, stats = splits
    tables = NEPModel(stats.spec, initial_parameters(stats, stats.spec, 0)).tables("cpu", torch.float32)
    cache = GeometryCache()
    for epoch, size in ((0, 3), (1, 3), (2, 4), (3, 10)):
        for batch in data.train.batches(size, shuffle=True, seed=0, epoch=epoch):
            _assert_same_bits(cache.geometry(tables, batch), core.pair_geometry(tables, batch))
    assert len(cache) == len(data.train)
    for batch in data.valid.batches(2):
        _assert_same_bits(cache.geometry(tables, batch), core.pair_geometry(tables, batch))
    assert len(cache) == len(data.train) + len(data.valid)
    # the energies, forces and virials from a cached geometry are the core's own
    model = NEPModel(stats.spec, initial_parameters(stats, stats.spec, 0)).to(dtype=torch.float32)
    batch = next(iter(data.train.batches(5, shuffle=True, seed=1, epoch=7)))
    cached = model(batch, geometry=cache.geometry(tables, batch))
    fresh = model(batch)
    for key in ("energy", "forces", "virial"):
        assert torch.equal(cached[key], fresh[key]), key


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
    assert plain["geometry_cache"].startswith("off: it would take")
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
    # in-memory splits of ase.Atoms number their frames from 0 each: the cache's keys would collide
    shared, stats = tiny_splits(seed=4, n_frames=6, n_train=4, dtype=torch.float32, spec=spec)
    cache, said = geometry_cache_for(spec, [shared.train, shared.valid], torch.device("cpu"), False, "analytical",
                                     torch.float32)  # fmt: skip
    assert cache is None and said == "off: the splits share frame indices"


def test_the_size_estimate_counts_every_pair(splits) -> None:
    """The estimate equals the bytes of the geometry of every frame, computed."""
    data, stats = splits
    tables = NEPModel(stats.spec, initial_parameters(stats, stats.spec, 0)).tables("cpu", torch.float32)
    geometry = core.pair_geometry(tables, next(iter(data.train.batches(len(data.train)))))
    actual = sum(t.numel() * t.element_size() for t in (getattr(geometry, f.name) for f in fields(core.PairGeometry)))
    assert cache_nbytes(stats.spec, [data.train], 4) == actual
    radial, angular = data.train.pair_counts()
    assert (radial, angular) == (geometry.r.shape[0], geometry.ra.shape[0])


def test_the_memory_rule_counts_one_cache_per_ddp_process(splits, monkeypatch) -> None:
    data, stats = splits
    stores, cpu = [data.train, data.valid], torch.device("cpu")
    need = cache_nbytes(stats.spec, stores, 4)
    monkeypatch.setattr(geometry_cache, "available_memory_bytes", lambda: int(need / geometry_cache.MEMORY_SHARE * 1.5))
    cache, said = geometry_cache_for(stats.spec, stores, cpu, False, "analytical", torch.float32, processes=1)
    assert cache is not None
    cache, said = geometry_cache_for(stats.spec, stores, cpu, False, "analytical", torch.float32, processes=2)
    assert cache is None and "in each of 2 processes" in said
