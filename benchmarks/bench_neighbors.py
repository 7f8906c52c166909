"""Neighbour-list build time: nepcore.geometry.neighbors vs ASE's primitive_neighbor_list.

fcc Cu (a = 3.615 Å) supercells of 500, 4000 and 32000 atoms at rc = 6 Å (78 neighbours per
atom), both searches in the same run. Prints JSON: seconds (best of --repeats for ours; ASE
once, it takes ~10 s at 32k atoms), pairs per atom, and whether both found the same pairs.

    python benchmarks/bench_neighbors.py [--repeats 5] [--no-ase] [--sizes 5 10 20]
"""

from __future__ import annotations

import argparse
import json
import platform
import time

import numpy as np
from ase.build import bulk
from ase.neighborlist import primitive_neighbor_list

from nepcore.geometry.neighbors import neighbor_pairs

LATTICE = 3.615  # Å, fcc Cu
CUTOFF = 6.0  # Å


def best_time(fn, repeats: int) -> tuple[float, object]:
    """Smallest wall time of ``repeats`` calls (s) and the last result."""
    best, result = float("inf"), None
    for _ in range(repeats):
        start = time.perf_counter()
        result = fn()
        best = min(best, time.perf_counter() - start)
    return best, result


def bench_one(repetitions: int, repeats: int, with_ase: bool) -> dict:
    """Timings for an fcc Cu supercell of 4 * repetitions^3 atoms."""
    atoms = bulk("Cu", "fcc", a=LATTICE, cubic=True).repeat(repetitions)
    positions, cell, pbc = atoms.positions, atoms.cell.array, atoms.pbc
    types, cutoff = np.zeros(len(atoms), dtype=np.int32), np.array([[CUTOFF]])
    neighbor_pairs(positions, cell, pbc, types, cutoff)  # warm-up (imports, allocator)
    ours_s, (pairs, _) = best_time(lambda: neighbor_pairs(positions, cell, pbc, types, cutoff), repeats)
    row = {
        "n_atoms": len(atoms),
        "nepcore_s": round(ours_s, 4),
        "pairs_per_atom": len(pairs) / len(atoms),
    }
    if with_ase:
        ase_s, (i, j, shift) = best_time(lambda: primitive_neighbor_list("ijS", pbc, cell, positions, CUTOFF), 1)
        ours = np.column_stack([pairs.i, pairs.j, pairs.shift]).astype(np.int64)
        theirs = np.column_stack([i, j, shift]).astype(np.int64)
        same = len(ours) == len(theirs) and np.array_equal(
            ours[np.lexsort(ours.T[::-1])], theirs[np.lexsort(theirs.T[::-1])]
        )
        row.update(ase_s=round(ase_s, 4), speedup=round(ase_s / ours_s, 1), same_pairs=bool(same))
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[5, 10, 20], help="supercell repetitions")
    parser.add_argument("--repeats", type=int, default=5, help="timed calls of ours (best is reported)")
    parser.add_argument("--no-ase", action="store_true", help="skip the ASE reference")
    args = parser.parse_args()
    rows = [bench_one(r, args.repeats, not args.no_ase) for r in args.sizes]
    meta = {"cutoff_A": CUTOFF, "lattice_A": LATTICE, "numpy": np.__version__, "machine": platform.machine()}
    print(json.dumps({"meta": meta, "results": rows}, indent=2))


if __name__ == "__main__":
    main()
