"""Kept passes (``StreamDataStore.keep_passes``): the full-batch L-BFGS evaluation and the
validation pass with their batches assembled every pass against kept from the first, in one
process, the two interleaved over the rounds so they see the same machine load.

What a CPU stage 2 on a small split does every epoch: one or two evaluations of the whole
training split's loss and gradient (``FullBatchObjective``, in chunks of ``--chunk`` frames,
each cut into ``batch_parts`` parts on the threads) and one pass over the validation split
(``evaluate_sums``, ``--batch`` frames per batch). Eager analytical forces, float32, the
per-frame geometry cache filled first, as in a stage. Both configurations compute the same
numbers (checked: the loss and the validation sums are compared bit for bit).
Prints JSON: median milliseconds per evaluation and per validation pass, and kept/assembled.

    python benchmarks/bench_kept_passes.py [--data PATH.xyz] [--split 18 2] [--chunk 16] [--batch 2]
        [--evaluations 20] [--rounds 5] [--threads 2] [--work /tmp/nepcore-bench-kept]

The defaults are PbTe's stage 2 (``../shared/data/PbTe/train.xyz``: its first 18 frames train,
the next 2 validate, as a fold of ``bench_accuracy.py``; chunk and batch as ``batch: auto``
gives them) with its model (cutoff 8 4, n_max 6 6, basis 6 6, l_max 4 2 0, 30 neurons).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import sys
import time
from pathlib import Path

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # as the nepcore command sets it
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_step import elements_of

DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "PbTe" / "train.xyz"


def splits(data: Path, work: Path, elements: tuple[str, ...], n_train: int, n_valid: int) -> Path:
    """The first n_train frames as the training split, the next n_valid as validation."""
    from ase.io import read, write

    from nepcore.data.convert import convert

    h5 = work / f"{data.stem}_{n_train}_{n_valid}.h5"
    if not h5.exists():
        work.mkdir(parents=True, exist_ok=True)
        frames = read(str(data), index=f":{n_train + n_valid}")
        write(work / "train.xyz", frames[:n_train])
        write(work / "valid.xyz", frames[n_train:])
        convert([str(work / "train.xyz")], h5, types=elements, valid_files=[str(work / "valid.xyz")], progress=False)
    return h5


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=DATA, help="extxyz with energies and forces")
    parser.add_argument("--split", type=int, nargs=2, default=(18, 2), help="training and validation frames")
    parser.add_argument("--chunk", type=int, default=16, help="frames per chunk of the full-batch objective")
    parser.add_argument("--batch", type=int, default=2, help="frames per validation batch")
    parser.add_argument("--evaluations", type=int, default=20, help="evaluations per configuration and round")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--work", type=Path, default=Path("/tmp/nepcore-bench-kept"))
    args = parser.parse_args()
    if not args.data.exists():
        raise SystemExit(f"{args.data} not found (the shared reference data; pass --data)")

    import torch

    from nepcore.model.nep_model import NEPModel
    from nepcore.spec import ModelSpec
    from nepcore.training.batch_parts import batch_parts_for
    from nepcore.training.compiled_step import TrainingLoss
    from nepcore.training.epoch import evaluate_sums
    from nepcore.training.geometry_cache import GeometryCache
    from nepcore.training.lbfgs import FullBatchObjective
    from nepcore.training.loss import LossWeights
    from nepcore.training.qscaler import compute_q_scaler, initial_parameters
    from nepcore.training.reproducibility import deterministic_kernels
    from nepcore.training.stage import open_data

    torch.set_num_threads(args.threads)
    elements = elements_of(args.data)
    spec = ModelSpec(elements, 8.0, 4.0, 6, 6, 6, 6, 4, (True, False), neurons=30)
    data = open_data(splits(args.data, args.work, elements, *args.split), spec, torch.float32)
    stats = compute_q_scaler(spec, data.train.batches(32), mode="gpumd")
    model = NEPModel(spec, initial_parameters(stats, spec, seed=0)).to(dtype=torch.float32)
    loss = TrainingLoss(model, LossWeights(lambda_e=1.0, lambda_f=1.0, lambda_v=0.1), "analytical")
    loss.geometry_cache = GeometryCache()
    device = torch.device("cpu")
    loss.batch_parts, _ = batch_parts_for("auto", device, False, 1, args.chunk)
    budget = 2**40  # every pass kept (the stage's rule: a share of the available memory)
    results: dict[str, list[tuple[float, float]]] = {"assembled": [], "kept": []}
    numbers: dict[str, tuple] = {}
    threads = loss.batch_parts.threads() if loss.batch_parts else contextlib.nullcontext()
    with deterministic_kernels(device), threads:
        objective = FullBatchObjective(loss, data.train, args.chunk, device)
        for _ in range(args.rounds):
            for name in results:
                for store in (data.train, data.valid):
                    store.keep_passes(budget if name == "kept" else 0)
                objective._evaluate()  # fills the geometry cache, the kept batches, the allocator
                evaluate_sums(model, data.valid, args.batch, device, "analytical", loss=loss)
                start = time.perf_counter()
                for _ in range(args.evaluations):
                    value, _ = objective._evaluate()
                middle = time.perf_counter()
                for _ in range(args.evaluations):
                    sums = evaluate_sums(model, data.valid, args.batch, device, "analytical", loss=loss)
                end = time.perf_counter()
                results[name].append(((middle - start) / args.evaluations, (end - middle) / args.evaluations))
                numbers[name] = (value.item(), [v.item() for v in sums.values()])
    if numbers["kept"] != numbers["assembled"]:
        raise SystemExit(f"kept passes changed the numbers: {numbers}")
    median = {name: [statistics.median(column) for column in zip(*rows)] for name, rows in results.items()}
    print(json.dumps({
        "data": args.data.name, "train_frames": len(data.train), "train_atoms": data.train.n_atoms,
        "valid_frames": len(data.valid), "chunk": args.chunk, "batch": args.batch, "threads": args.threads,
        "evaluations": args.evaluations, "rounds": args.rounds,
        "ms": {
            name: {"evaluation": round(1e3 * e, 2), "validation": round(1e3 * v, 2)} for name, (e, v) in median.items()
        },
        "kept_over_assembled": {
            "evaluation": round(median["kept"][0] / median["assembled"][0], 3),
            "validation": round(median["kept"][1] / median["assembled"][1], 3),
        },
        "same_numbers": True,
    }, indent=1))  # fmt: skip


if __name__ == "__main__":
    main()
