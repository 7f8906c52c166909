"""Frame-parallel CPU training steps (``batch_parts``): wall and CPU seconds per step against the
unsplit step, in one process, the configurations interleaved so they see the same machine load.

Configurations (``--parts P``, default 2): ``unsplit_1t`` (the default step on one thread),
``unsplit_2t`` (the default step on two of torch's threads: what a user with two cores gets
without parts), ``parts_1t`` (P parts one after the other on one thread: the same cuts, so the
same numbers as on more threads) and ``parts_2t`` (P parts on two threads). Each is a real Adam
step (eager analytical forces, float32, the per-frame geometry cache filled first, as a CPU
stage trains) over shuffled minibatches that the store assembles in its background thread, as
in a stage. CPU seconds are the process's, all threads.
Prints JSON: medians over the rounds of seconds per step, and each configuration's wall and
CPU time relative to ``unsplit_1t``.

``--scan N ...`` times the unsplit one-thread step at each of these batch sizes (frames) instead,
interleaved over the rounds, about ``--steps`` x 5 frames' worth of steps each: milliseconds per
step, microseconds per atom, and a least-squares line ms = fixed + marginal x atoms over the
sizes, whose intercept is the step's fixed cost (Python, dispatch, the optimiser; what a part
pays again). Fit over sizes of a few hundred to about 1,000 atoms: beyond that the cost per atom
rises again (memory traffic), which bends the line.

    python benchmarks/bench_parts.py [--data PATH.xyz] [--batch 5] [--parts 2] [--steps 30] [--rounds 3]
        [--cutoff 6 4] [--n-max 4] [--basis 8] [--neuron 30] [--work /tmp/nepcore-bench-parts]
        [--scan 2 5 10 20 40]

The model: l_max 4 2 0 and the given cutoffs, n_max, basis and neurons (the defaults are
issue 10's alloy model; the workflow demo's is ``--cutoff 5 4 --basis 6 --neuron 20`` on its
``demo.xyz`` with ``--batch 21``; PbTe's ``--cutoff 8 4 --n-max 6 --basis 6 --neuron 30`` on its
``train.xyz`` with ``--batch 2``).
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import statistics
import sys
import time
from pathlib import Path

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # as the nepcore command sets it
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_step import dataset, elements_of

DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "teacher-labelled" / "sweep_k4.xyz"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=DATA, help="extxyz with energies and forces")
    parser.add_argument("--batch", type=int, default=5, help="frames per minibatch (batch auto gives 5 on sweep_k4)")
    parser.add_argument("--parts", type=int, default=2)
    parser.add_argument("--steps", type=int, default=30, help="steps per configuration and round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--work", type=Path, default=Path("/tmp/nepcore-bench-parts"))
    parser.add_argument("--cutoff", type=float, nargs=2, default=(6.0, 4.0), help="radial, angular (Å)")
    parser.add_argument("--basis", type=int, default=8, help="basis size, both channels (the demo: 6)")
    parser.add_argument("--n-max", type=int, default=4, help="n_max, both channels (PbTe's model: 6)")
    parser.add_argument("--neuron", type=int, default=30, help="hidden neurons (the demo: 20)")
    parser.add_argument("--scan", type=int, nargs="+", help="time the unsplit 1-thread step at these batch sizes")
    args = parser.parse_args()
    if not args.data.exists():
        raise SystemExit(f"{args.data} not found (the shared reference data; pass --data)")

    import torch

    from nepcore.data.store import StreamDataStore
    from nepcore.model.nep_model import NEPModel
    from nepcore.spec import ModelSpec
    from nepcore.training.batch_parts import BatchParts
    from nepcore.training.compiled_step import TrainingLoss
    from nepcore.training.epoch import train_step
    from nepcore.training.geometry_cache import GeometryCache
    from nepcore.training.loss import LossWeights
    from nepcore.training.qscaler import compute_q_scaler, initial_parameters
    from nepcore.training.reproducibility import deterministic_kernels

    elements = elements_of(args.data)
    spec = ModelSpec(
        elements, *args.cutoff, args.n_max, args.n_max, args.basis, args.basis, 4, (True, False), neurons=args.neuron
    )
    h5 = dataset(args.data, args.work, elements)
    store = StreamDataStore.from_hdf5(h5, spec, split="train", dtype=torch.float32)
    stats = compute_q_scaler(spec, store.batches(32), mode="gpumd")
    model = NEPModel(spec, initial_parameters(stats, spec, seed=0)).to(dtype=torch.float32)
    loss = TrainingLoss(model, LossWeights(), "analytical")
    loss.geometry_cache = GeometryCache()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    batches = list(store.batches(args.batch, shuffle=True, seed=0, epoch=0))
    with torch.no_grad():
        for batch in batches:  # fill the geometry cache, as a stage's first epoch does
            loss.geometry_cache.geometry(model.tables("cpu", torch.float32), batch)
    if args.scan:
        print(json.dumps(scan(args, store, loss, optimizer), indent=1))
        return
    n_steps = min(args.steps, len(batches))
    configs = {"unsplit_1t": (1, None), "unsplit_2t": (2, None), "parts_1t": (1, 1), "parts_2t": (2, 2)}
    times: dict[str, list[tuple[float, float]]] = {name: [] for name in configs}
    with deterministic_kernels(torch.device("cpu")):
        for _ in range(args.rounds):
            for name, (threads, workers) in configs.items():
                torch.set_num_threads(threads)
                loss.batch_parts = None if workers is None else BatchParts(args.parts, workers)
                if loss.batch_parts is not None:
                    torch.set_num_threads(max(1, threads // workers))  # as BatchParts.threads() in a stage
                train_step(loss, batches[0], optimizer, clip=10.0)  # warm the pool and the allocator
                # batches assembled by the store's background thread, as in a stage
                epoch = store.batches(args.batch, shuffle=True, seed=0, epoch=1 + len(times[name]), prefetch=2)
                wall, cpu = time.perf_counter(), time.process_time()
                for batch in itertools.islice(epoch, n_steps):
                    train_step(loss, batch, optimizer, clip=10.0)
                seconds = (time.perf_counter() - wall, time.process_time() - cpu)
                epoch.close()
                times[name].append((seconds[0] / n_steps, seconds[1] / n_steps))
                if loss.batch_parts is not None:
                    loss.batch_parts.close()
    median = {name: tuple(statistics.median(column) for column in zip(*t)) for name, t in times.items()}
    base_wall, base_cpu = median["unsplit_1t"]
    atoms = sum(b.n_atoms for b in batches) / len(batches)
    print(json.dumps({
        "data": args.data.name, "frames_per_batch": args.batch, "atoms_per_batch": round(atoms, 1),
        "parts": args.parts, "steps": n_steps, "rounds": args.rounds,
        "s_per_step": {name: {"wall": round(w, 4), "cpu": round(c, 4)} for name, (w, c) in median.items()},
        "relative_to_unsplit_1t": {
            name: {"wall": round(w / base_wall, 3), "cpu": round(c / base_cpu, 3)} for name, (w, c) in median.items()
        },
    }, indent=1))  # fmt: skip


def scan(args: argparse.Namespace, store, loss, optimizer) -> dict:
    """``--scan``: the unsplit one-thread step (Adam, as the other configurations) at each batch
    size, the sizes interleaved per round."""
    import torch

    from nepcore.training.epoch import train_step
    from nepcore.training.reproducibility import deterministic_kernels

    torch.set_num_threads(1)
    loss.batch_parts = None
    times: dict[int, list[tuple[float, float]]] = {n: [] for n in args.scan}
    with deterministic_kernels(torch.device("cpu")):
        for round_ in range(args.rounds):
            for n in args.scan:
                epoch = store.batches(n, shuffle=True, seed=0, epoch=1 + round_)
                batches = list(itertools.islice(epoch, max(4, 5 * args.steps // n)))
                train_step(loss, batches[0], optimizer, clip=10.0)  # warm the allocator at this size
                start = time.perf_counter()
                for batch in batches:
                    train_step(loss, batch, optimizer, clip=10.0)
                seconds = time.perf_counter() - start
                times[n].append((seconds / len(batches), sum(b.n_atoms for b in batches) / len(batches)))
    rows = {n: (statistics.median(s for s, _ in t), statistics.mean(a for _, a in t)) for n, t in times.items()}
    atoms = [a for _, a in rows.values()]
    ms = [1e3 * s for s, _ in rows.values()]
    marginal, fixed = statistics.linear_regression(atoms, ms) if len(rows) > 1 else (float("nan"), float("nan"))
    return {
        "data": args.data.name, "rounds": args.rounds,
        "per_batch_size": {
            n: {"atoms_per_step": round(a, 1), "ms_per_step": round(1e3 * s, 2), "us_per_atom": round(1e6 * s / a, 2)}
            for n, (s, a) in rows.items()
        },
        "fit_ms": {"fixed": round(fixed, 2), "marginal_per_atom": round(marginal, 5)},
    }  # fmt: skip


if __name__ == "__main__":
    main()
