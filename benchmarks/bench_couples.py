"""Radial couples (each pair and its reverse once) against the full radial list in the eager
CPU training step: seconds per step, in one process, interleaved so both see the same load.

Configurations: ``full`` (the full radial list's geometry kept per frame and concatenated per
batch: the geometry cache before the couples), ``couples`` (today's cache:
nepcore.training.geometry_cache.GeometryCache), and with ``--uncached`` also ``couples_computed``
(the cache not kept: the geometry and the couples computed every step, as a stage whose
geometry does not fit in memory does) and ``full_computed`` (the full list computed every step).
Each is a real Adam step (eager analytical forces, float32, one thread by default) over the
same minibatches of epoch 0. Prints JSON: medians over the rounds of ms per step, the ratio of
each to ``full``, and the cache's bytes per frame both ways.

    python benchmarks/bench_couples.py [--data PATH.xyz] [--batch 5] [--steps 30] [--rounds 8]
        [--threads 1] [--uncached] [--work /tmp/nepcore-bench-couples]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from dataclasses import fields
from pathlib import Path

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # as the nepcore command sets it
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_step import dataset, elements_of

DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "teacher-labelled" / "sweep_k4.xyz"


class FullListCache:
    """The geometry cache as it was before the couples: each frame's full-list geometry kept
    and concatenated per batch (keep False: computed every step)."""

    def __init__(self, keep: bool = True) -> None:
        self.keep, self.frames = keep, {}

    def geometry(self, tables, batch):
        import torch

        from nepcore.model import potential as core

        index = batch.frame_index.tolist()
        if self.keep and all(f in self.frames for f in index):
            parts = [self.frames[f] for f in index]
            names = [f.name for f in fields(core.PairGeometry) if f.name != "couples"]
            cat = lambda xs: xs[0] if len(xs) == 1 else torch.cat(xs)
            return core.PairGeometry(**{n: cat([p[n] for p in parts]) for n in names})
        with torch.no_grad():
            geometry = core.pair_geometry(tables, batch, compute_forces=True)
        if self.keep:
            for channel, names in (("radial", core.PairGeometry.RADIAL), ("angular", core.PairGeometry.ANGULAR)):
                pair_i = getattr(batch, f"{channel}_i")
                counts = torch.bincount(batch.atom_frame.index_select(0, pair_i), minlength=len(index)).tolist()
                for name in names:
                    for f, rows in zip(index, getattr(geometry, name).split(counts)):
                        self.frames.setdefault(f, {})[name] = rows
        return geometry


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=DATA, help="extxyz with energies and forces")
    parser.add_argument("--batch", type=int, default=5, help="frames per minibatch (batch auto gives 5 on sweep_k4)")
    parser.add_argument("--steps", type=int, default=30, help="steps per configuration and round")
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--uncached", action="store_true", help="also time the geometry computed every step")
    parser.add_argument("--work", type=Path, default=Path("/tmp/nepcore-bench-couples"))
    args = parser.parse_args()
    if not args.data.exists():
        raise SystemExit(f"{args.data} not found (the shared reference data; pass --data)")

    import torch

    from nepcore.data.store import StreamDataStore
    from nepcore.model.nep_model import NEPModel
    from nepcore.spec import ModelSpec
    from nepcore.training.compiled_step import TrainingLoss
    from nepcore.training.epoch import train_step
    from nepcore.training.geometry_cache import GeometryCache
    from nepcore.training.loss import LossWeights
    from nepcore.training.qscaler import compute_q_scaler, initial_parameters
    from nepcore.training.reproducibility import deterministic_kernels

    torch.set_num_threads(args.threads)
    elements = elements_of(args.data)
    spec = ModelSpec(elements, 6.0, 4.0, 4, 4, 8, 8, 4, (True, False), neurons=30)
    h5 = dataset(args.data, args.work, elements)
    store = StreamDataStore.from_hdf5(h5, spec, split="train", dtype=torch.float32)
    stats = compute_q_scaler(spec, store.batches(32), mode="gpumd")
    model = NEPModel(spec, initial_parameters(stats, spec, seed=0)).to(dtype=torch.float32)
    tables = model.tables("cpu", torch.float32)
    loss = TrainingLoss(model, LossWeights(), "analytical")
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    batches = list(store.batches(args.batch, shuffle=True, seed=0, epoch=0))[: args.steps]
    caches = {"full": FullListCache(), "couples": GeometryCache()}
    if args.uncached:
        caches.update(full_computed=FullListCache(keep=False), couples_computed=GeometryCache(keep=False))
    for cache in caches.values():  # fill the kept caches, as a stage's first epoch does
        for batch in batches:
            cache.geometry(tables, batch)
    times: dict[str, list[float]] = {name: [] for name in caches}
    with deterministic_kernels(torch.device("cpu")):
        for _ in range(args.rounds):
            for name, cache in caches.items():
                loss.geometry_cache = cache
                start = time.perf_counter()
                for batch in batches:
                    train_step(loss, batch, optimizer, clip=10.0)
                times[name].append((time.perf_counter() - start) / len(batches) * 1000)
    nbytes = lambda tensors: sum(t.numel() * t.element_size() for t in tensors if t is not None)
    full_bytes = sum(nbytes(frame.values()) for frame in caches["full"].frames.values())
    couple_bytes = sum(
        nbytes([*f.angular.values(), f.index, f.rv, f.r, f.df, f.sums]) for f in caches["couples"]._frames.values()
    )
    base = times["full"]
    print(json.dumps({
        "data": args.data.name, "frames_per_batch": args.batch, "threads": args.threads,
        "atoms_per_batch": round(sum(b.n_atoms for b in batches) / len(batches), 1),
        "radial_pairs_per_batch": round(sum(b.radial_i.shape[0] for b in batches) / len(batches)),
        "angular_pairs_per_batch": round(sum(b.angular_i.shape[0] for b in batches) / len(batches)),
        "steps": len(batches), "rounds": args.rounds,
        "ms_per_step": {name: round(statistics.median(t), 2) for name, t in times.items()},
        "relative_to_full": {
            name: round(statistics.median([a / b for a, b in zip(t, base)]), 3) for name, t in times.items()
        },
        "cache_bytes_per_frame": {"full": round(full_bytes / len(caches["full"].frames)),
                                  "couples": round(couple_bytes / len(caches["couples"]._frames))},
    }, indent=1))  # fmt: skip


if __name__ == "__main__":
    main()
