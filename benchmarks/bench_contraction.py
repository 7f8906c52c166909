"""Time the two type-pair contraction backends ("pair", "type") and the automatic choice.

Prints JSON: ms per energy+forces call of the analytical core (neighbour list prebuilt) for
each backend ("dense" = the size rule for the radial channel, the dense layout for the
angular), precision and architecture, and which backend "auto" picks. Use it to check that the
deterministic size rule in nepcore.model.potential.build_tables picks the faster backend.

``--pairs`` times instead the dense backend's per-pair contraction g_n = Σ_k c[n,k,I,J] f_k
(nepcore.model.contraction.pair_contraction) in its two forms, grouped by type pair and
gathered per pair: g and g' from the basis and its derivative, and the backward to c, for
10,000 angular pairs (n+1 = 5, k+1 = 9, float32), T = 1-16 types of equal shares and with one
type four times as common as each other; the forms alternate, so both see the same load.

    python benchmarks/bench_contraction.py [--repeat 5] [--threads 2] [--pairs]
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # before torch: no spinning on a shared box

import argparse
import json
import time
from pathlib import Path

import numpy as np
import torch
from ase.build import bulk
from ase.io import read

from nepcore.data.atoms_batch import batch_from_atoms
from nepcore.model.nep_model import NEPModel
from nepcore.spec import ModelSpec

DATA = Path(__file__).resolve().parents[2] / "shared" / "data"


def _alloy(symbols: list[str], a: float, repeat: int):
    atoms = bulk("Cu", "fcc", a=a, cubic=True) * (repeat, repeat, repeat)
    rng = np.random.default_rng(0)
    atoms.set_chemical_symbols(list(rng.choice(symbols, len(atoms))))
    atoms.rattle(0.05, seed=1)
    return atoms


def cases():
    """(name, model factory, atoms) triples; the shared-data ones only when present."""
    out = []
    if DATA.is_dir():
        pd = DATA / "gpumd-reference"
        out.append(("PdCuNiP_500", lambda c: NEPModel.from_nep(pd / "nep_PdCuNiP.txt", contraction=c),
                    read(pd / "PdCuNiP.xyz")))  # fmt: skip
        unep = DATA / "potentials" / "UNEP-v1.txt"
        out.append(("UNEP16_alloy_256", lambda c: NEPModel.from_nep(unep, contraction=c),
                    _alloy(["Pd", "Cu", "Ni", "Ag", "Au", "Pt"], 3.9, 4)))  # fmt: skip
    spec = ModelSpec(("Cu", "Pd", "Ni"), 6.0, 4.0, 4, 4, 8, 8, 4, (True, True), 30)
    out.append(("mid_3types_500", lambda c: NEPModel(spec, contraction=c), _alloy(["Cu", "Pd", "Ni"], 3.7, 5)))
    return out


def time_call(model: NEPModel, batch, repeat: int) -> float:
    with torch.no_grad():
        model(batch)  # warm-up (allocations, tables on device)
        start = time.perf_counter()
        for _ in range(repeat):
            model(batch)
    return (time.perf_counter() - start) / repeat * 1e3


def time_pair_forms(n_types: int, dominant: float, repeat: int, pairs: int = 10_000) -> dict:
    """Median ms of g, g' and their backward to c in the grouped and the gathered form."""
    from nepcore.model import contraction

    g = torch.Generator().manual_seed(n_types)
    n1, k1 = 5, 9
    c = torch.randn(n1, k1, n_types, n_types, generator=g, requires_grad=True)
    weights = torch.tensor([dominant] + [1.0] * (n_types - 1))
    types = torch.multinomial(weights, 2 * pairs, replacement=True, generator=g)
    pair_type = types[:pairs] * n_types + types[pairs:]
    f, df = torch.randn(pairs, k1, generator=g), torch.randn(pairs, k1, generator=g)
    grad_g, grad_dg = torch.randn(pairs, n1, generator=g), torch.randn(pairs, n1, generator=g)
    layout = contraction.grouped_layout(pair_type, n_types**2)
    padding = None if layout is None else n_types**2 * layout[1] / pairs
    saved = contraction.GROUPED_PADDING
    times: dict[str, list[float]] = {"grouped": [], "gathered": []}
    try:
        for _ in range(repeat):
            for form, bound in (("grouped", float("inf")), ("gathered", 0.0)):
                contraction.GROUPED_PADDING = bound
                start = time.perf_counter()
                contract = contraction.pair_contraction(c, pair_type)
                torch.autograd.backward([contract(f), contract(df)], [grad_g, grad_dg])
                times[form].append((time.perf_counter() - start) * 1e3)
                c.grad = None
    finally:
        contraction.GROUPED_PADDING = saved
    median = {form: float(np.median(t)) for form, t in times.items()}
    grouped_padding = n_types**2 * int(torch.bincount(pair_type, minlength=n_types**2).max()) / pairs
    return {
        "types": n_types, "dominant_share": dominant, "padding": round(grouped_padding, 2),
        "default_form": "grouped" if padding is not None else "gathered",
        "grouped_ms": round(median["grouped"], 3), "gathered_ms": round(median["gathered"], 3),
        "grouped_over_gathered": round(median["grouped"] / median["gathered"], 2),
    }  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--pairs", action="store_true", help="time the two forms of the per-pair contraction")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    if args.pairs:
        rows = [time_pair_forms(t, d, max(args.repeat, 20)) for t in (1, 2, 3, 4, 8, 16) for d in (1.0, 4.0)]
        print(json.dumps({"threads": args.threads, "results": rows}, indent=1))
        return
    results = []
    for name, factory, atoms in cases():
        auto = factory("auto")
        for dtype in (torch.float64, torch.float32):
            batch = batch_from_atoms(atoms, auto.spec, dtype=dtype, with_labels=False)
            row = {"case": name, "atoms": len(atoms), "dtype": str(dtype).replace("torch.", ""),
                   "auto": [auto._tables_cpu.backend_radial, auto._tables_cpu.backend_angular]}  # fmt: skip
            for backend in ("pair", "type", "dense"):
                row[f"{backend}_ms"] = round(time_call(factory(backend).to(dtype), batch, args.repeat), 2)
            row["auto_ms"] = round(time_call(auto.to(dtype), batch, args.repeat), 2)
            results.append(row)
    print(json.dumps({"threads": args.threads, "repeat": args.repeat, "results": results}, indent=1))


if __name__ == "__main__":
    main()
