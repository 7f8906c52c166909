"""Training speed and memory on CPU: seconds per epoch and peak RSS for PdCuNi_medium.

Model: cutoff 6 4, n_max 4 4, basis_size 8 8, l_max 4 2 1, 30 neurons, batch 32, float32;
the analytical and the autograd force paths, each in its own process (so each peak RSS is its
own). The dataset (2000 frames, 268k atoms) is converted once to HDF5 (cached in --work) and
loaded whole into the streaming store, as ``nepcore train`` does. An epoch is 63 batches of 32
shuffled frames; after one warm-up step the other 62 steps of epoch 1 are timed (``--steps N``
times only N of them) and s/epoch = s/step x 63. Prints JSON. Eager only: the compiled step is
benchmarks/bench_step.py.

    python benchmarks/bench_train.py [--steps 0] [--threads 2] [--work /tmp/nepcore-bench-train]
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

# As the nepcore CLI does, before torch is imported (here and in the worker processes):
# idle OpenMP threads sleep instead of spinning. A user's setting wins.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "teacher-labelled" / "PdCuNi_medium.xyz"


def spec():
    from nepcore.spec import ModelSpec

    return ModelSpec(("Pd", "Cu", "Ni"), 6.0, 4.0, 4, 4, 8, 8, 4, (True, True), neurons=30)


def dataset(work: Path) -> Path:
    """structures.h5 of PdCuNi_medium (all frames in the train split), converted once."""
    from nepcore.data.convert import convert

    h5 = work / "PdCuNi_medium.h5"
    if not h5.exists():
        work.mkdir(parents=True, exist_ok=True)
        convert([str(DATA)], h5, types=("Pd", "Cu", "Ni"), fractions=(1.0, 0.0, 0.0), progress=False)
    return h5


def worker(args: argparse.Namespace) -> dict:
    """Time training steps of one force path in this process."""
    import torch

    from nepcore.data.store import StreamDataStore
    from nepcore.model.nep_model import NEPModel
    from nepcore.training.compiled_step import TrainingLoss
    from nepcore.training.config import StageConfig
    from nepcore.training.epoch import train_step
    from nepcore.training.qscaler import compute_q_scaler, initial_parameters

    torch.set_num_threads(args.threads)
    t0 = time.perf_counter()
    store = StreamDataStore.from_hdf5(args.h5, spec(), split="train", dtype=torch.float32, lazy=False)
    build_s = time.perf_counter() - t0
    stats = compute_q_scaler(spec(), itertools.islice(store.batches(32), 4), mode="gpumd")
    cfg = StageConfig(stage=1, batch_size=32, precision="float32", force_path=args.worker)
    model = NEPModel(spec(), initial_parameters(stats, spec(), 0)).to(torch.float32)
    model.b1.requires_grad_(False)
    optimizer = torch.optim.Adam([getattr(model, k) for k in ("W0", "b0", "w1", "c_radial", "c_angular")], lr=cfg.lr)
    n_batches = math.ceil(len(store) / 32)
    steps = n_batches - 1 if args.steps == 0 else min(args.steps, n_batches - 1)
    batches = store.batches(32, shuffle=True, seed=0, epoch=1)
    t0 = time.perf_counter()
    loss = TrainingLoss(model, cfg.loss_weights(), args.worker)
    train_step(loss, next(batches), optimizer, cfg.clip)  # warm-up
    warmup_s = time.perf_counter() - t0
    t0, atoms = time.perf_counter(), 0
    for batch in itertools.islice(batches, steps):
        train_step(loss, batch, optimizer, cfg.clip)
        atoms += batch.n_atoms
    seconds = time.perf_counter() - t0
    return {
        "force_path": args.worker,
        "timed_steps": steps,
        "batches_per_epoch": n_batches,
        "s_per_step": seconds / steps,
        "atoms_per_s": atoms / seconds,
        "s_per_epoch": seconds / steps * n_batches,
        "warmup_step_s": warmup_s,
        "store_build_s": build_s,
        "store_host_MB": store.host_nbytes() / 2**20,
        "peak_rss_MB": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=0, help="timed batches (0 = the rest of epoch 1)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--work", type=Path, default=Path("/tmp/nepcore-bench-train"))
    parser.add_argument("--paths", nargs="+", default=["analytical", "autograd"])
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--h5", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        print(json.dumps(worker(args)))
        return
    t0 = time.perf_counter()
    h5 = dataset(args.work)
    result = {
        "data": str(DATA),
        "frames": 2000,
        "convert_s": time.perf_counter() - t0,
        "model": "cutoff 6 4, n_max 4 4, basis 8 8, l_max 4 2 1, 30 neurons, batch 32, float32, CPU",
        "threads": args.threads,
        "omp_wait_policy": os.environ["OMP_WAIT_POLICY"],
        "runs": [],
    }
    for path in args.paths:
        cmd = [
            sys.executable,
            __file__,
            "--worker",
            path,
            "--h5",
            str(h5),
            "--steps",
            str(args.steps),
            "--threads",
            str(args.threads),
        ]
        out = subprocess.run(cmd, capture_output=True, text=True, check=True)
        result["runs"].append(json.loads(out.stdout.strip().splitlines()[-1]))
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
