"""Eager vs inductor-compiled training steps on CPU: s/step, s/epoch, compile time cold and
warm, recompilations, aten ops per eager step, generated kernels per compiled step, peak RSS.

Model and data as benchmarks/bench_train.py (PdCuNi_medium, cutoff 6 4, n_max 4 4, basis 8 8,
l_max 4 2 1, 30 neurons, batch 32 (``--batch``), float32) or a sweep_k<K> file (--data, elements from the
file). Each (force path, mode) runs in its own process, so each peak RSS and each compile is
its own: ``eager``; ``cold`` (compiled into an empty cache folder); ``warm`` (a new process on
the cache ``cold`` filled); ``cached`` (eager with the per-frame geometry cache of
nepcore.training.geometry_cache, filled from the frames of epoch 0 before the timed epoch-1 batches,
whose compositions differ). The first step of a compiled process is its compile time; then
``--steps`` steps of epoch 1 are timed (s/epoch = s/step x batches per epoch) under
``fail_on_recompile``, so the count of recompilations after the first batch is 0 or the run
fails; a compiled process times an eager step on a copy of the model before each compiled step,
so ``speedup`` compares the two under the same machine load (a ``cached`` process likewise
times a step without the cache before each step with it; ``grouped`` is ``cached`` with that
reference step also cached but contracting the angular coefficients in the gathered form, so
``speedup`` is the grouped form's gain, nepcore.model.contraction.pair_contraction). Kernels
per compiled step are the calls in the generated wrappers of the step's forward and backward
graphs: ``cpp_fused_*`` (generated), ``extern_kernels.*`` (mm/bmm libraries), aten fallbacks.

``lbfgs`` times what stage 2's L-BFGS pays per evaluation instead of an Adam step: the loss and
gradient of the whole file (all frames form the training split here) in chunks of
``batch: auto``'s L-BFGS size (about 4,096 atoms), eager, with the geometry cache and the batch
parts a stage on ``--threads`` threads gets, stage 2's loss weights, b1 a parameter. Its first
evaluation fills the geometry cache (``first_step_s``); then each of ``--steps`` evaluations runs
at a new point (one parameter nudged, as a line search's trials are), so none is reused. An
L-BFGS epoch is ~1.1 evaluations (docs/recipe_measurements.md, "Where the fit's time goes").
Prints JSON.

    TORCHINDUCTOR_COMPILE_THREADS=1 python benchmarks/bench_step.py [--steps 10] [--threads 2] [--batch 32]
        [--paths analytical autograd] [--modes eager cold warm cached grouped lbfgs] [--data PATH]
        [--work /tmp/nepcore-bench-step]
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import itertools
import json
import math
import os
import re
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "teacher-labelled" / "PdCuNi_medium.xyz"


def spec(elements: tuple[str, ...]):
    from nepcore.spec import ModelSpec

    return ModelSpec(elements, 6.0, 4.0, 4, 4, 8, 8, 4, (True, True), neurons=30)


def elements_of(path: Path) -> tuple[str, ...]:
    from ase.io import iread

    seen: dict[str, None] = {}
    for atoms in itertools.islice(iread(str(path), index=":"), 400):
        seen.update(dict.fromkeys(atoms.get_chemical_symbols()))
    return tuple(seen)


def dataset(data: Path, work: Path, elements: tuple[str, ...]) -> Path:
    from nepcore.data.convert import convert

    h5 = work / f"{data.stem}.h5"
    if not h5.exists():
        work.mkdir(parents=True, exist_ok=True)
        convert([str(data)], h5, types=elements, fractions=(1.0, 0.0, 0.0), progress=False)
    return h5


class OpCounter:
    """Counts aten ops dispatched while active (forward, backward and optimizer)."""

    def __init__(self):
        from torch.utils._python_dispatch import TorchDispatchMode

        counter = self

        class Mode(TorchDispatchMode):
            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                counter.n += 1
                return func(*args, **(kwargs or {}))

        self.n, self.mode = 0, Mode()


def kernels_in(cache: Path) -> dict:
    """Calls in the `call` functions of the generated wrappers under an inductor cache folder."""
    counts = {"generated": 0, "extern": 0, "fallback": 0, "wrappers": 0}
    for path in cache.rglob("*.py"):
        text = path.read_text(errors="ignore")
        if "def call(" not in text:
            continue
        body = text.split("def call(", 1)[1].split("\ndef ", 1)[0]
        counts["wrappers"] += 1
        counts["generated"] += len(re.findall(r"^\s+cpp_fused_\w+\(", body, re.M))
        counts["generated"] += len(re.findall(r"^\s+triton_\w+\.run\(", body, re.M))
        counts["extern"] += len(re.findall(r"^\s+extern_kernels\.\w+\(", body, re.M))
        counts["fallback"] += len(re.findall(r"=\s*torch\.ops\.aten\.\w+", body))
    counts["per_step"] = counts["generated"] + counts["extern"] + counts["fallback"]
    return counts


def worker(args: argparse.Namespace) -> dict:
    import torch

    from nepcore.data.store import StreamDataStore
    from nepcore.model import contraction
    from nepcore.model.compiled import compiled_graphs
    from nepcore.model.nep_model import NEPModel
    from nepcore.training.compiled_step import TrainingLoss
    from nepcore.training.config import StageConfig
    from nepcore.training.epoch import train_step
    from nepcore.training.geometry_cache import GeometryCache
    from nepcore.training.qscaler import compute_q_scaler, initial_parameters

    torch.set_num_threads(args.threads)
    elements = tuple(args.elements.split(","))
    model_spec = spec(elements)
    store = StreamDataStore.from_hdf5(args.h5, model_spec, split="train", dtype=torch.float32, lazy=False)
    stats = compute_q_scaler(model_spec, itertools.islice(store.batches(32), 4), mode="gpumd")
    if args.mode == "lbfgs":
        return lbfgs_worker(args, model_spec, store, initial_parameters(stats, model_spec, 0))
    cfg = StageConfig(stage=1, batch_size=args.batch, precision="float32", force_path=args.path)
    model = NEPModel(model_spec, initial_parameters(stats, model_spec, 0)).to(torch.float32)
    model.b1.requires_grad_(False)
    compiled = args.mode in ("cold", "warm")
    interleaved = args.mode != "eager"  # a process that also times the plain eager step
    # the compiled and cached processes also time plain eager steps, interleaved with their own,
    # so the speed ratio is measured under the same machine load
    model_e = copy.deepcopy(model)
    loss_e = TrainingLoss(model_e, cfg.loss_weights(), args.path)
    optimizer_e = torch.optim.Adam(
        [getattr(model_e, k) for k in ("W0", "b0", "w1", "c_radial", "c_angular")], lr=cfg.lr
    )
    loss = TrainingLoss(model, cfg.loss_weights(), args.path, compiled=compiled, angular_slots=store.max_neighbors()[1])
    params = [getattr(model, k) for k in ("W0", "b0", "w1", "c_radial", "c_angular")]
    optimizer = torch.optim.Adam(params, lr=cfg.lr, fused=True if compiled else None)
    n_batches = math.ceil(len(store) / args.batch)
    result = {"force_path": args.path, "mode": args.mode, "batches_per_epoch": n_batches}
    if args.mode in ("cached", "grouped"):
        cached_losses = (loss, loss_e) if args.mode == "grouped" else (loss,)
        tables = model.tables("cpu", torch.float32)
        t0 = time.perf_counter()
        for cached in cached_losses:
            cached.geometry_cache = GeometryCache()
            for batch in store.batches(args.batch, shuffle=True, seed=0, epoch=0):
                cached.geometry_cache.geometry(tables, batch)
        result["cache_fill_s"] = time.perf_counter() - t0
    # "grouped": the reference step contracts in the gathered form (a padding bound of 0)
    reference_padding = 0.0 if args.mode == "grouped" else contraction.GROUPED_PADDING
    batches = store.batches(args.batch, shuffle=True, seed=0, epoch=1)
    t0 = time.perf_counter()
    train_step(loss, next(batches), optimizer, cfg.clip)
    first_s = time.perf_counter() - t0
    graphs = compiled_graphs()
    result["first_step_s"] = first_s
    if not interleaved:
        counter = OpCounter()
        with counter.mode:
            train_step(loss, next(batches), optimizer, cfg.clip)
        result["aten_ops_per_step"] = counter.n
    timed = list(itertools.islice(batches, args.steps))
    seconds = eager_s = 0.0
    with torch.compiler.set_stance("fail_on_recompile" if compiled else "default"):
        for batch in timed:
            if interleaved:
                default_padding, contraction.GROUPED_PADDING = contraction.GROUPED_PADDING, reference_padding
                t0 = time.perf_counter()
                train_step(loss_e, batch, optimizer_e, cfg.clip)
                eager_s += time.perf_counter() - t0
                contraction.GROUPED_PADDING = default_padding
            t0 = time.perf_counter()
            train_step(loss, batch, optimizer, cfg.clip)
            seconds += time.perf_counter() - t0
    if interleaved:
        reference = "gathered_s_per_step" if args.mode == "grouped" else "eager_s_per_step"
        result.update({reference: eager_s / len(timed), "speedup": eager_s / seconds})
    result.update(
        timed_steps=len(timed),
        s_per_step=seconds / len(timed),
        s_per_epoch=seconds / len(timed) * n_batches,
        atoms_per_step=sum(b.n_atoms for b in timed) / len(timed),
        peak_rss_MB=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    )
    # outside the graph per step: gradient clipping and the Adam step (on the last gradients)
    t0 = time.perf_counter()
    for _ in range(5):
        torch.nn.utils.clip_grad_norm_(params, cfg.clip, foreach=True)
        optimizer.step()
    result["clip_and_adam_s_per_step"] = (time.perf_counter() - t0) / 5
    if compiled:
        result["recompilations"] = compiled_graphs() - graphs
        result["kernels"] = kernels_in(Path(os.environ["NEPCORE_COMPILE_CACHE"]))
    return result


def lbfgs_worker(args: argparse.Namespace, model_spec, store, start) -> dict:
    """Seconds per evaluation of the whole split's loss and gradient, as stage 2's L-BFGS makes them."""
    import torch

    from nepcore.model.nep_model import NEPModel
    from nepcore.training.batch_parts import batch_parts_for
    from nepcore.training.compiled_step import TrainingLoss
    from nepcore.training.config import StageConfig, frames_per_batch
    from nepcore.training.distributed import Distributed
    from nepcore.training.geometry_cache import GeometryCache
    from nepcore.training.optimizers import stage_optimizer

    device = torch.device("cpu")
    chunk = frames_per_batch("auto", store.n_atoms / len(store), "lbfgs")
    cfg = StageConfig(stage=2, batch_size=chunk, precision="float32", force_path=args.path, optimizer="lbfgs")
    model = NEPModel(model_spec, start).to(torch.float32)
    loss = TrainingLoss(model, cfg.loss_weights(), args.path)
    loss.geometry_cache = GeometryCache()
    loss.batch_parts, parts_reason = batch_parts_for(cfg.batch_parts, device, False, 1, chunk)
    # as a stage builds it: b1 becomes a parameter, the objective evaluates chunks of cfg.batch_size
    _, objective = stage_optimizer(cfg, loss, store, device, Distributed(), compiled=False)
    result = {
        "force_path": args.path,
        "mode": "lbfgs",
        "chunk_frames": chunk,
        "chunks": math.ceil(len(store) / chunk),
        "atoms": store.n_atoms,
        "batch_parts": parts_reason,
    }
    with contextlib.ExitStack() as stack:
        if loss.batch_parts is not None:
            stack.enter_context(loss.batch_parts.threads())
        t0 = time.perf_counter()
        objective()
        result["first_step_s"] = time.perf_counter() - t0  # fills the geometry cache
        seconds = []
        for _ in range(args.steps):
            with torch.no_grad():
                model.w1.add_(1e-4)  # a new point, as each trial of a line search is
            t0 = time.perf_counter()
            objective()
            seconds.append(time.perf_counter() - t0)
    result.update(
        timed_steps=len(seconds),
        s_per_evaluation=sum(seconds) / len(seconds),
        min_s_per_evaluation=min(seconds),
        peak_rss_MB=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    )
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=10, help="timed steps after the first")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--batch", type=int, default=32, help="frames per training batch")
    parser.add_argument("--data", type=Path, default=DATA)
    parser.add_argument("--work", type=Path, default=Path("/tmp/nepcore-bench-step"))
    parser.add_argument("--paths", nargs="+", default=["analytical", "autograd"])
    parser.add_argument(
        "--modes",
        nargs="+",
        default=["eager", "cold", "warm"],
        choices=["eager", "cold", "warm", "cached", "grouped", "lbfgs"],
    )
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--path", help=argparse.SUPPRESS)
    parser.add_argument("--mode", help=argparse.SUPPRESS)
    parser.add_argument("--h5", help=argparse.SUPPRESS)
    parser.add_argument("--elements", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        print(json.dumps(worker(args)))
        return
    elements = ("Pd", "Cu", "Ni") if args.data.name == DATA.name else elements_of(args.data)
    h5 = dataset(args.data, args.work, elements)
    result = {
        "data": str(args.data),
        "elements": elements,
        "threads": args.threads,
        "compile_threads": os.environ.get("TORCHINDUCTOR_COMPILE_THREADS"),
        "model": "cutoff 6 4, n_max 4 4, basis 8 8, l_max 4 2 1, 30 neurons, float32, CPU",
        "batch": f"{args.batch} frames (the Adam modes; lbfgs: chunks of about 4,096 atoms)",
        "runs": [],
    }
    for path in args.paths:
        cache = args.work / f"cache-{args.data.stem}-{path}"
        for mode in args.modes:
            if mode == "cold":
                shutil.rmtree(cache, ignore_errors=True)
            env = {**os.environ, "NEPCORE_COMPILE_CACHE": str(cache)}
            cmd = [
                sys.executable,
                __file__,
                "--worker",
                "--path",
                path,
                "--mode",
                mode,
                "--h5",
                str(h5),
                "--steps",
                str(args.steps),
                "--threads",
                str(args.threads),
                "--batch",
                str(args.batch),
                "--elements",
                ",".join(elements),
            ]
            done = subprocess.run(cmd, capture_output=True, text=True, env=env)
            if done.returncode != 0:
                result["runs"].append({"force_path": path, "mode": mode, "error": done.stderr[-2000:]})
                continue
            result["runs"].append(json.loads(done.stdout.strip().splitlines()[-1]))
            print(json.dumps(result["runs"][-1]), file=sys.stderr, flush=True)
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
