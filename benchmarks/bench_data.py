"""Benchmark of the data layer: convert, HDF5 size, pair build, store memory, collate speed.

Prints one JSON object. Default input: ../shared/data/teacher-labelled/PdCuNi_medium.xyz
(2000 frames, 268k atoms), model cutoffs 6/4 Å, float32. Each store mode (in-memory, lazy)
is measured in its own subprocess so that its peak RSS is its own.

    python benchmarks/bench_data.py [--input FILE] [--batch-size 32] [--epochs 1]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_INPUT = ROOT.parent / "shared" / "data" / "teacher-labelled" / "PdCuNi_medium.xyz"


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0  # Linux: KiB


def current_rss_mb() -> float:
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def measure_store(h5: str, mode: str, batch_size: int, epochs: int) -> dict:
    """Build a store in ``mode`` and time batch assembly (run in a fresh subprocess)."""
    import torch

    from nepcore.data.store import StreamDataStore
    from nepcore.spec import ModelSpec

    spec = ModelSpec(elements=("Pd", "Cu", "Ni"), cutoff_radial=6.0, cutoff_angular=4.0)
    rss_before = current_rss_mb()
    start = time.perf_counter()
    store = StreamDataStore.from_hdf5(h5, spec, split="all", dtype=torch.float32, lazy=(mode == "lazy"))
    build_s = time.perf_counter() - start
    result = {
        "mode": mode,
        "frames": len(store),
        "atoms": store.n_atoms,
        "pair_build_s": round(build_s, 3),
        "host_bytes": store.host_nbytes(),
        "host_bytes_per_atom": round(store.host_nbytes() / store.n_atoms, 1),
        "max_neighbors_radial_angular": list(store.max_neighbors()),
        "rss_before_store_mb": round(rss_before, 1),
    }
    for prefetch in (0, 2):
        n_batches, n_pairs = 0, 0
        start = time.perf_counter()
        for epoch in range(epochs):
            for batch in store.batches(batch_size, shuffle=True, seed=0, epoch=epoch, prefetch=prefetch):
                n_batches += 1
                n_pairs += batch.radial_i.numel()
        elapsed = time.perf_counter() - start
        result[f"collate_batches_per_s_prefetch{prefetch}"] = round(n_batches / elapsed, 1)
    result["collate_ms_per_batch"] = round(1000 / result["collate_batches_per_s_prefetch0"], 2)
    result["radial_pairs_per_batch"] = int(n_pairs / max(n_batches, 1))
    result["peak_rss_mb"] = round(peak_rss_mb(), 1)
    store.close()
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--input", default=str(DEFAULT_INPUT))
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--measure-store", nargs=2, metavar=("H5", "MODE"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.measure_store:
        print(json.dumps(measure_store(args.measure_store[0], args.measure_store[1], args.batch_size, args.epochs)))
        return
    if not Path(args.input).exists():
        sys.exit(f"input {args.input} is absent (the team's ../shared/data)")

    from nepcore.data.convert import convert

    with tempfile.TemporaryDirectory() as tmp:
        h5 = os.path.join(tmp, "structures.h5")
        start = time.perf_counter()
        summary = convert([args.input], h5, types=("Pd", "Cu", "Ni"), seed=0, cutoff=6.0, progress=False)
        convert_s = time.perf_counter() - start
        result = {
            "input": args.input,
            "frames": summary.n_frames,
            "atoms": summary.n_atoms,
            "convert_s": round(convert_s, 2),
            "hdf5_bytes": os.path.getsize(h5),
            "hdf5_bytes_per_atom": round(os.path.getsize(h5) / summary.n_atoms, 1),
            "cutoffs": [6.0, 4.0],
            "dtype": "float32",
            "batch_size": args.batch_size,
            "stores": {},
        }
        for mode in ("memory", "lazy"):
            out = subprocess.run(
                [
                    sys.executable,
                    __file__,
                    "--measure-store",
                    h5,
                    mode,
                    "--batch-size",
                    str(args.batch_size),
                    "--epochs",
                    str(args.epochs),
                ],
                check=True,
                capture_output=True,
                text=True,
                cwd=ROOT,
                env={**os.environ, "PYTHONPATH": str(ROOT)},
            )
            result["stores"][mode] = json.loads(out.stdout.strip().splitlines()[-1])
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
