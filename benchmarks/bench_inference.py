"""Inference time per energy+forces call: nepcore's ASE calculator vs calorine's CPUNEP (NEP_CPU).

The 500-atom PdCuNiP frame of ``../shared/data/gpumd-reference`` with ``nep_PdCuNiP.txt``
(nep4_zbl, 4 types, cutoffs 6/4 Å, n_max 8 8, l_max 4 2 0, 50 neurons) and its 2x2x2
supercell (4000 atoms). For each size, in the same run and interleaved round by round (so
that load from other processes hits every method alike):

* ``calorine``: ``CPUNEP.get_forces`` (NEP_CPU, double, builds its neighbour list each call);
* ``float64`` / ``float32``: nepcore's analytical path through ``nepcore.calculator.NEP``,
  ``full_ms`` with a fresh neighbour search every call (skin 0), ``reused_list_ms`` with the
  skin list kept (the MD case), and ``core_ms`` for the model call alone on a ready batch;
* with ``--compile``: ``compiled_reused_list_ms``, the reused-list case through
  ``NEP(compile=True)``, and ``compiled_first_call_s`` (the compilation, cold or from the cache).

Every timed call first moves the atoms by a fresh random displacement (< 1e-3 Å) so that
every calculator really recomputes. Times are medians over the rounds (``min_ms`` too);
``speedup_*`` = calorine time / ours (> 1: we are faster). torch uses 2 threads.

OMP_WAIT_POLICY defaults to PASSIVE here (set before torch is imported; override it in the
environment): with libgomp's default active spinning, 2 torch threads on this 2-vCPU machine
took ~2 s per 500-atom call instead of ~50 ms, because every one of the ~500 small parallel
ops waits at a barrier for the other, often descheduled, spinning thread.

    python benchmarks/bench_inference.py [--rounds 10] [--sizes 1 2] [--profile] [--compile]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
import warnings
from collections.abc import Callable
from pathlib import Path

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # before torch loads libgomp; see above

import numpy as np
import torch

DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "gpumd-reference"


def _timed(fn: Callable[[], object]) -> float:
    start = time.perf_counter()
    fn()
    return (time.perf_counter() - start) * 1e3


def _calculators(atoms, model_path: Path, compile: bool = False) -> dict[str, Callable[[np.ndarray], None]]:
    """name -> function(positions) doing one energy+forces evaluation at those positions."""
    from calorine.calculators import CPUNEP

    from nepcore.calculator import NEP
    from nepcore.data.atoms_batch import batch_from_atoms
    from nepcore.model.nep_model import NEPModel

    runners: dict[str, Callable[[np.ndarray], None]] = {}

    def ase_runner(calc) -> Callable[[np.ndarray], None]:
        a = atoms.copy()
        a.calc = calc

        def run(positions: np.ndarray) -> None:
            a.positions = positions
            a.get_forces()  # energy and forces in one calculate() for both calculators

        return run

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        runners["calorine"] = ase_runner(CPUNEP(str(model_path)))
    for precision, dtype in (("float64", torch.float64), ("float32", torch.float32)):
        runners[f"{precision}/full"] = ase_runner(NEP(model_path, precision=precision, skin=0.0))
        runners[f"{precision}/reused_list"] = ase_runner(NEP(model_path, precision=precision, skin=1.0))
        net = NEPModel.from_nep(model_path, contraction="auto").to(dtype)
        batch = batch_from_atoms(atoms, net.spec, dtype=dtype, with_labels=False)

        def core(_positions: np.ndarray, net=net, batch=batch) -> None:
            with torch.no_grad():
                net(batch)

        runners[f"{precision}/core"] = core
        if compile:  # NEP(compile=True): the inductor-compiled core, reused list
            runners[f"{precision}/compiled"] = ase_runner(NEP(model_path, precision=precision, skin=1.0, compile=True))
    return runners


def bench_size(atoms, model_path: Path, rounds: int, seed: int = 0, compile: bool = False) -> dict:
    """Median/min ms per call of every runner on ``atoms``."""
    runners = _calculators(atoms, model_path, compile)
    first: dict[str, float] = {}
    rng = np.random.default_rng(seed)
    base = atoms.get_positions()
    times: dict[str, list[float]] = {name: [] for name in runners}
    for r in range(rounds + 2):  # two warm-up rounds (allocators, first neighbour build)
        for name, run in runners.items():
            positions = base + rng.uniform(-1e-3, 1e-3, base.shape)
            elapsed = _timed(lambda run=run, positions=positions: run(positions))
            if r == 0:
                first[name] = elapsed
            if r >= 2:
                times[name].append(elapsed)
    med = {name: float(np.median(t)) for name, t in times.items()}
    row: dict = {
        "n_atoms": len(atoms),
        "calorine_ms": round(med["calorine"], 2),
        "calorine_min_ms": round(min(times["calorine"]), 2),
    }
    for precision in ("float64", "float32"):
        full, reused, core = (med[f"{precision}/{k}"] for k in ("full", "reused_list", "core"))
        row[precision] = {
            "full_ms": round(full, 2),
            "reused_list_ms": round(reused, 2),
            "core_ms": round(core, 2),
            "min_full_ms": round(min(times[f"{precision}/full"]), 2),
            "min_reused_list_ms": round(min(times[f"{precision}/reused_list"]), 2),
            "speedup_full": round(med["calorine"] / full, 3),
            "speedup_reused_list": round(med["calorine"] / reused, 3),
        }
        if compile:
            compiled = med[f"{precision}/compiled"]
            row[precision].update(
                compiled_reused_list_ms=round(compiled, 2),
                min_compiled_ms=round(min(times[f"{precision}/compiled"]), 2),
                compiled_first_call_s=round(first[f"{precision}/compiled"] / 1e3, 1),
                speedup_compiled=round(med["calorine"] / compiled, 3),
                compiled_over_calorine=round(compiled / med["calorine"], 3),
            )
    return row


def profile(atoms, model_path: Path, precision: str) -> None:
    """torch.profiler table of the model call (reused list) on stderr."""
    from torch.profiler import profile as torch_profile

    from nepcore.calculator import NEP

    a = atoms.copy()
    a.calc = NEP(model_path, precision=precision, skin=1.0)
    a.get_forces()
    with torch_profile() as prof:
        for _ in range(5):
            a.positions = a.positions + 1e-4
            a.get_forces()
    print(f"--- {precision}, {len(atoms)} atoms, 5 calls", file=sys.stderr)
    print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=20), file=sys.stderr)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=10, help="timed calls per method and size")
    parser.add_argument("--sizes", type=int, nargs="+", default=[1, 2], help="supercell repetitions")
    parser.add_argument("--threads", type=int, default=2, help="torch threads (default 2)")
    parser.add_argument("--data", type=Path, default=DATA, help="gpumd-reference folder")
    parser.add_argument("--profile", action="store_true", help="torch.profiler tables on stderr")
    parser.add_argument(
        "--compile",
        action="store_true",
        help="also NEP(compile=True) (the first call compiles; the compile cache applies)",
    )
    args = parser.parse_args(argv)
    import ase.io

    import nepcore

    torch.set_num_threads(args.threads)
    model_path = args.data / "nep_PdCuNiP.txt"
    base = ase.io.read(args.data / "PdCuNiP.xyz")
    load_before = [round(x, 2) for x in os.getloadavg()]
    rows = []
    for k in args.sizes:
        atoms = base * (k, k, k)
        rows.append(
            bench_size(atoms, model_path, args.rounds if k == 1 else max(3, args.rounds // 2), compile=args.compile)
        )
        if args.profile:
            for precision in ("float64", "float32"):
                profile(atoms, model_path, precision)
    print(json.dumps({
        "model": "nep_PdCuNiP.txt (nep4_zbl, 4 types, rc 6/4, n_max 8 8, l_max 4 2 0, 50 neurons)",
        "torch_threads": torch.get_num_threads(),
        "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY"),
        "contraction": "auto",
        "torch": torch.__version__,
        "nepcore": str(Path(nepcore.__file__).parent),
        "cpu": platform.processor() or platform.machine(),
        "cpu_count": os.cpu_count(),
        "load_average_before": load_before,
        "load_average_after": [round(x, 2) for x in os.getloadavg()],
        "cases": rows,
    }, indent=2))  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
